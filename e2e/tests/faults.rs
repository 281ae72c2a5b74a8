//! The fault-injection suite (docs/safety.md, "What the tests must show"): sidecars as local
//! processes carrying pod identities, pods as API objects, a real API server. At least six
//! sidecars issue IDs continuously (single and batch requests) while faults are injected;
//! a checker reads every ID collected.
//!
//! Short mode (default, part of `scripts/test.sh`): one pass of the schedule.
//! Full mode: `KUBEFLAKE_FAULTS=full cargo test -p kubeflake-e2e --test faults -- --nocapture`
//! repeats the schedule until at least 5 million IDs were collected.
//!
//! Its own test binary: it restarts the API server, which must not disturb other tests.

mod operator_support;
mod sidecar_support;

use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;
use sidecar_support::*;

const SEQUENCE: &str = "faults";
const SIDECARS: usize = 6;

async fn wait_serving(sidecars: &[Option<Sidecar>], want: usize, limit: Duration) -> Result<()> {
    eventually(limit, &format!("{want} sidecars serving"), || async {
        Ok((sidecars.iter().flatten().filter(|s| s.ready()).count() >= want).then_some(()))
    })
    .await
}

fn holder_index(sidecars: &[Option<Sidecar>], except: &[usize]) -> usize {
    (0..sidecars.len())
        .find(|i| !except.contains(i) && sidecars[*i].as_ref().is_some_and(|s| s.ready()))
        .expect("a serving sidecar")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_suite_issues_no_duplicate_and_no_out_of_order_id() -> Result<()> {
    let full = std::env::var("KUBEFLAKE_FAULTS").is_ok_and(|v| v == "full");
    let target_ids: usize = if full { 5_000_000 } else { 0 };
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("faults").await?;
    let (history, _watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    // Scarce slots (4 for 6 sidecars), short leases so that reclaims happen within the run.
    let spec = json!({"layout": {"timestampBits": 49, "workerBits": 2, "sequenceBits": 12},
                      "lease": {"durationSeconds": 15}, "clock": {"maxDriftMillis": 2000}});
    let seq = create_sequence(&ns, SEQUENCE, spec).await?;
    let layout = seq.spec.params()?.layout;
    let mut pods: Vec<Pod> = create_pods(&ns, SEQUENCE, "app", SIDECARS).await?;
    // The pods are created in one second, so the operator hands slots to app-0..app-3 (by
    // name). app-1 runs under libfaketime so that a slot holder's wall clock can be stepped.
    pods.sort_by_key(|p| p.name_any());
    let faked = 1;
    let mut sidecars: Vec<Option<Sidecar>> = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        sidecars.push(Some(Sidecar::start(
            cluster,
            &ns.name,
            pod,
            SEQUENCE,
            i == faked,
        )?));
    }
    wait_serving(&sidecars, 4, Duration::from_secs(60)).await?;
    let mut collectors: Vec<Option<Collector>> = sidecars
        .iter()
        .map(|s| Some(Collector::start(s.as_ref().unwrap().port)))
        .collect();
    let mut finished: Vec<(String, String, Collected)> = Vec::new();
    let pods_api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let started = Instant::now();
    let mut apiserver_outage_refusals = 0u64;
    let mut second_operator: Option<Operator> = None;
    let mut pass = 0;
    loop {
        pass += 1;
        eprintln!("faults: pass {pass}");
        tokio::time::sleep(Duration::from_secs(3)).await;

        // 1. kill -9 of a serving sidecar, and a restart (same pod: the local fence).
        let victim = holder_index(&sidecars, &[faked]);
        eprintln!("faults: kill -9 sidecar {victim} and restart it");
        sidecars[victim].as_ref().unwrap().process.kill();
        sidecars[victim].as_ref().unwrap().process.restart()?;
        tokio::time::sleep(Duration::from_secs(3)).await;

        // 2. Wall-clock steps on a holder: back 50 ms, back 5 s, forward 1 h and back.
        if pass == 1 {
            let stepped = sidecars[faked].as_ref().unwrap();
            assert!(
                stepped.ready(),
                "the sidecar with the fake clock holds a slot"
            );
            for (offset, pause) in [("-0.05", 2), ("-5", 8), ("+3600", 3), ("+0", 3)] {
                eprintln!("faults: {} clock offset {offset}", stepped.pod);
                stepped.set_clock(offset);
                tokio::time::sleep(Duration::from_secs(pause)).await;
            }
        }

        // 3. A paused holder whose pod is force-deleted; its slot goes to a waiting pod,
        //    whose sidecar serves before the old one is resumed.
        let paused = holder_index(&sidecars, &[faked]);
        let paused_uid = sidecars[paused].as_ref().unwrap().uid.clone();
        let slot_of_paused = slot_leases(&ns, SEQUENCE)
            .await?
            .into_iter()
            .find(|l| l.holder.as_deref() == Some(paused_uid.as_str()))
            .map(|l| l.slot);
        eprintln!(
            "faults: SIGSTOP sidecar {paused} (slot {slot_of_paused:?}), force-delete its pod"
        );
        sidecars[paused].as_ref().unwrap().signal(libc::SIGSTOP);
        pods_api
            .delete(
                &pods[paused].name_any(),
                &DeleteParams::default().grace_period(0),
            )
            .await?;
        let replacement = create_pods(&ns, SEQUENCE, &format!("re{pass}"), 1)
            .await?
            .remove(0);
        let new_index = sidecars.len();
        sidecars.push(Some(Sidecar::start(
            cluster,
            &ns.name,
            &replacement,
            SEQUENCE,
            false,
        )?));
        pods.push(replacement);
        collectors.push(Some(Collector::start(
            sidecars[new_index].as_ref().unwrap().port,
        )));
        if let Some(slot) = slot_of_paused {
            eventually(
                Duration::from_secs(60),
                "the paused holder's slot to serve again from another pod",
                || async {
                    let lease = slot_leases(&ns, SEQUENCE)
                        .await?
                        .into_iter()
                        .find(|l| l.slot == slot);
                    let holder = lease.and_then(|l| l.holder).filter(|h| *h != paused_uid);
                    let serving = holder.is_some_and(|h| {
                        sidecars.iter().flatten().any(|s| s.uid == h && s.ready())
                    });
                    Ok(serving.then_some(()))
                },
            )
            .await?;
        }
        eprintln!("faults: SIGCONT sidecar {paused}");
        sidecars[paused].as_ref().unwrap().signal(libc::SIGCONT);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let c = collectors[paused].take().unwrap().finish();
        finished.push((pods[paused].name_any(), paused_uid.clone(), c));
        if let Some(s) = sidecars[paused].take() {
            s.process.kill();
        }

        // 4. The API server is killed and restarted: sidecars keep serving within fences.
        let before: Vec<u64> = collectors
            .iter()
            .map(|c| {
                c.as_ref()
                    .map(|c| c.data.lock().unwrap().refusals)
                    .unwrap_or(0)
            })
            .collect();
        let serving_before: Vec<bool> = sidecars
            .iter()
            .map(|s| s.as_ref().is_some_and(|s| s.ready()))
            .collect();
        eprintln!("faults: restarting kube-apiserver");
        cluster.restart_apiserver().await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        for (i, c) in collectors.iter().enumerate() {
            if let Some(c) = c {
                let serving_fake_clock = i == faked;
                let delta = c.data.lock().unwrap().refusals - before[i];
                if !serving_fake_clock
                    && serving_before[i]
                    && sidecars[i].as_ref().is_some_and(|s| s.ready())
                {
                    apiserver_outage_refusals += delta;
                }
            }
        }

        // 5. The operator is killed and restarted; then a second one runs beside it.
        eprintln!("faults: kill -9 the operator and restart it; start a second operator");
        operator.process.kill();
        tokio::time::sleep(Duration::from_secs(1)).await;
        operator.process.restart()?;
        if second_operator.is_none() {
            second_operator = Some(Operator::start(cluster, &ns.name, "b")?);
        }

        // 6. A graceful stop: the pod is deleted, its sidecar gets SIGTERM and releases.
        let leaving = holder_index(&sidecars, &[faked]);
        eprintln!("faults: SIGTERM sidecar {leaving} and delete its pod");
        sidecars[leaving].as_ref().unwrap().signal(libc::SIGTERM);
        pods_api
            .delete(&pods[leaving].name_any(), &DeleteParams::default())
            .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let c = collectors[leaving].take().unwrap().finish();
        finished.push((pods[leaving].name_any(), pods[leaving].uid().unwrap(), c));
        sidecars[leaving].take();
        let replacement = create_pods(&ns, SEQUENCE, &format!("gr{pass}"), 1)
            .await?
            .remove(0);
        sidecars.push(Some(Sidecar::start(
            cluster,
            &ns.name,
            &replacement,
            SEQUENCE,
            false,
        )?));
        collectors.push(Some(Collector::start(
            sidecars.last().unwrap().as_ref().unwrap().port,
        )));
        pods.push(replacement);
        tokio::time::sleep(Duration::from_secs(3)).await;

        let collected: usize = collectors
            .iter()
            .flatten()
            .map(Collector::count)
            .sum::<usize>()
            + finished
                .iter()
                .map(|f| f.2.segments.iter().map(Vec::len).sum::<usize>())
                .sum::<usize>();
        eprintln!("faults: {collected} IDs after {:?}", started.elapsed());
        if collected >= target_ids {
            break;
        }
    }

    for (i, c) in collectors.into_iter().enumerate() {
        if let Some(c) = c {
            finished.push((pods[i].name_any(), pods[i].uid().unwrap(), c.finish()));
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let slots_held = history.slots_held();
    eprintln!(
        "faults: {} lease versions recorded, {} re-lists after API server restarts",
        history.len(),
        history.resyncs()
    );
    for (pod, uid, _) in &finished {
        eprintln!("faults: {pod} ({uid}) held slots {:?}", slots_held.get(uid));
    }
    let report = check(&layout, &finished, &slots_held);
    eprintln!(
        "faults: {} IDs from {} sidecars in {:?}: {} duplicates, {} order violations, {} IDs with a worker the pod never held; {} refusals during the API server restart (sidecars with a true clock)\n{}",
        report.ids,
        finished.len(),
        started.elapsed(),
        report.duplicates,
        report.order_violations,
        report.wrong_worker,
        apiserver_outage_refusals,
        report.lines.join("\n")
    );
    assert!(
        report.ids > 10_000,
        "the load generators collected too little: {}",
        report.ids
    );
    assert_eq!(report.duplicates, 0, "duplicate IDs");
    assert_eq!(
        report.order_violations, 0,
        "IDs out of order within a worker"
    );
    assert_eq!(
        report.wrong_worker, 0,
        "IDs carrying a worker slot their pod did not hold"
    );
    assert_eq!(
        apiserver_outage_refusals, 0,
        "a sidecar refused during an API server outage shorter than the lease"
    );
    let problems = history.violations(&pods.iter().filter_map(|p| p.uid()).collect::<Vec<_>>());
    assert!(
        problems.is_empty(),
        "slot handovers: {}",
        problems.join("\n")
    );
    drop(second_operator);
    Ok(())
}
