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
//!
//! Under the Lease policy (docs/safety.md rule 14) with no exempt group, and with the API
//! server's own tokens: the operators run as a service account (`operator`), each sidecar
//! with a token bound to the pod it stands in for. Nothing runs as cluster admin but the
//! test's own reads and its pod and sequence writes: the admin writes no Lease here, but
//! for one that the policy must refuse after the run.

mod operator_support;
mod policy_support;
mod sidecar_support;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef, Subject};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kubeflake_crds::slot_lease;
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use policy_support::{
    enforce_policy, kubeconfig_client, policy_denials, refused, service_account, token,
    token_kubeconfig,
};
use serde_json::json;
use sidecar_support::*;

const SEQUENCE: &str = "faults";
const SIDECARS: usize = 6;
/// The service accounts: the operators', the pods' (sidecars get tokens bound to their
/// pod), and one that runs no pod (refused by the policy: the check that it is in force).
const OPERATOR_ACCOUNT: &str = "operator";
const POD_ACCOUNT: &str = "app";
const OUTSIDER_ACCOUNT: &str = "bystander";

/// RBAC is not what this suite tests: the operator's account is cluster admin (it reads
/// and writes what the chart's ClusterRole grants, and more), the pods' account and the
/// outsider admins of the namespace (leases, the IdSequence, events). The Lease policy is
/// what limits them.
async fn accounts(ns: &TestNamespace) -> Result<()> {
    for account in [OPERATOR_ACCOUNT, POD_ACCOUNT, OUTSIDER_ACCOUNT] {
        service_account(ns, account).await?;
    }
    let cluster_admin = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: "cluster-admin".into(),
    };
    let subject = |name: &str| Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(ns.name.clone()),
        api_group: None,
    };
    let crbs: Api<ClusterRoleBinding> = Api::all(ns.client.clone());
    crbs.create(
        &PostParams::default(),
        &ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(format!("{}-operator", ns.name)),
                ..Default::default()
            },
            role_ref: cluster_admin.clone(),
            subjects: Some(vec![subject(OPERATOR_ACCOUNT)]),
        },
    )
    .await?;
    let rbs: Api<RoleBinding> = Api::namespaced(ns.client.clone(), &ns.name);
    rbs.create(
        &PostParams::default(),
        &RoleBinding {
            metadata: ObjectMeta {
                name: Some("pods-admin".into()),
                ..Default::default()
            },
            role_ref: cluster_admin,
            subjects: Some(vec![subject(POD_ACCOUNT), subject(OUTSIDER_ACCOUNT)]),
        },
    )
    .await?;
    Ok(())
}

/// A sidecar for `pod` that authenticates with a token bound to `pod`.
async fn start_sidecar(
    cluster: &Cluster,
    ns: &str,
    pod: &Pod,
    fake_clock: bool,
) -> Result<Sidecar> {
    let token = token(cluster, ns, POD_ACCOUNT, Some(pod)).await?;
    let kubeconfig = token_kubeconfig(cluster, &format!("{ns}-{}", pod.name_any()), &token)?;
    Sidecar::start_as(cluster, ns, pod, SEQUENCE, fake_clock, Some(&kubeconfig))
}

/// Lines of a process's log that contain `needle`.
fn log_lines(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

fn sidecar_log_lines(sidecar: &Sidecar, needle: &str) -> usize {
    log_lines(&sidecar.process.spec().log, needle)
}

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

/// The suites of this binary run one after another: each restarts the API server.
static ONE_SUITE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_suite_issues_no_duplicate_and_no_out_of_order_id() -> Result<()> {
    let _one = ONE_SUITE_AT_A_TIME.lock().await;
    suite(
        "faults",
        json!({"timestampBits": 49, "workerBits": 2, "sequenceBits": 12}),
    )
    .await
}

/// Issue 25: the key forms (docs/layouts.md) change only how the fields are stored, so the
/// same schedule must find no duplicate; order is checked in the sequence's order (tick,
/// then issue order, from `decode`), since the raw numbers no longer grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_suite_with_shard_bits_and_a_rotating_start_issues_no_duplicate()
-> Result<()> {
    let _one = ONE_SUITE_AT_A_TIME.lock().await;
    suite(
        "faults-sharded",
        json!({"timestampBits": 45, "workerBits": 2, "sequenceBits": 12, "shardBits": 4,
               "sequenceStart": "Rotating"}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_suite_with_bit_reversed_ids_issues_no_duplicate() -> Result<()> {
    let _one = ONE_SUITE_AT_A_TIME.lock().await;
    suite(
        "faults-reversed",
        json!({"timestampBits": 49, "workerBits": 2, "sequenceBits": 12, "bitReversed": true}),
    )
    .await
}

/// One pass of the schedule (or several in full mode) on a sequence with `layout`, in
/// namespace `namespace`.
async fn suite(namespace: &str, layout: serde_json::Value) -> Result<()> {
    let full = std::env::var("KUBEFLAKE_FAULTS").is_ok_and(|v| v == "full");
    let target_ids: usize = if full { 5_000_000 } else { 0 };
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace(namespace).await?;
    accounts(&ns).await?;
    // No exempt group: a cluster admin's write to a slot Lease is refused too.
    enforce_policy(cluster, &ns.name, OPERATOR_ACCOUNT, &[], OUTSIDER_ACCOUNT).await?;
    let admin = cluster.client()?;
    // Requests refused by the policy (the only one in this test binary's cluster), read
    // before each API server restart (which resets the count); the first reading is the
    // baseline (it includes the check that the policy is in force). The protocol's writes
    // under every fault must all pass it.
    let mut denials_read = vec![policy_denials(&admin).await?];
    let (history, _watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let operator_kubeconfig = token_kubeconfig(
        cluster,
        &format!("{}-operator", ns.name),
        &token(cluster, &ns.name, OPERATOR_ACCOUNT, None).await?,
    )?;
    let operator = Operator::start_as(cluster, &ns.name, "a", &operator_kubeconfig)?;
    // Scarce slots (4 for 6 sidecars), short leases so that reclaims happen within the run.
    let spec = json!({"layout": layout,
                      "lease": {"durationSeconds": 15}, "clock": {"maxDriftMillis": 2000}});
    let seq = create_sequence(&ns, SEQUENCE, spec).await?;
    let layout = seq.spec.params()?.layout;
    let mut pods: Vec<Pod> =
        create_pods_as(&ns, SEQUENCE, "app", SIDECARS, Some(POD_ACCOUNT)).await?;
    pods.sort_by_key(|p| p.name_any());
    // One slot holder runs under libfaketime so that a holder's wall clock can be stepped.
    // Which pods get the 4 slots depends on the order the API server took the concurrent
    // creates in, so the holder is picked once the operator has handed them out.
    let faked = first_holder(&ns, &pods, 4).await?;
    let mut sidecars: Vec<Option<Sidecar>> = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        sidecars.push(Some(
            start_sidecar(cluster, &ns.name, pod, i == faked).await?,
        ));
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
    // Log lines of the sidecars whose pod was force-deleted while they were paused saying
    // that their requests after the resume were refused at authentication (the token died
    // with the pod).
    let mut unauthorized_zombie_lines = 0;
    let mut resumed_evicted = 0u32;
    let mut graceful_stops = 0u32;
    let mut graceful_releases = 0usize;
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

        // 3. Two holders paused with SIGSTOP until their slots serve from other pods, then
        //    resumed. One's pod is force-deleted: its slot is reclaimed as the pod is gone,
        //    and its token died with the pod (the API server refuses it at authentication,
        //    401). The other's pod is evicted (phase Failed, the object kept, as the kubelet
        //    leaves an evicted pod): the operator reclaims its lease once silent for a lease
        //    duration. Its token stays valid, so its renewal on resume is authenticated;
        //    it fails on the lease's version (409: the API server compares it before any
        //    validating admission, so a stale write never reaches the Lease policy), and the
        //    sidecar re-reads and learns the slot is lost.
        wait_serving(&sidecars, 4, Duration::from_secs(90)).await?;
        let paused = holder_index(&sidecars, &[faked]);
        let evicted = holder_index(&sidecars, &[faked, paused]);
        let paused_uid = sidecars[paused].as_ref().unwrap().uid.clone();
        let evicted_uid = sidecars[evicted].as_ref().unwrap().uid.clone();
        let leases_now = slot_leases(&ns, SEQUENCE).await?;
        let slot_of = |uid: &str| {
            leases_now
                .iter()
                .find(|l| l.holder.as_deref() == Some(uid))
                .map(|l| l.slot)
        };
        let (slot_of_paused, slot_of_evicted) = (slot_of(&paused_uid), slot_of(&evicted_uid));
        eprintln!(
            "faults: SIGSTOP sidecars {paused} (slot {slot_of_paused:?}; its pod force-deleted) and {evicted} (slot {slot_of_evicted:?}; its pod evicted)"
        );
        let stopped_at = Instant::now();
        sidecars[paused].as_ref().unwrap().signal(libc::SIGSTOP);
        sidecars[evicted].as_ref().unwrap().signal(libc::SIGSTOP);
        let lost_before = sidecar_log_lines(sidecars[evicted].as_ref().unwrap(), "slot lost");
        pods_api
            .delete(
                &pods[paused].name_any(),
                &DeleteParams::default().grace_period(0),
            )
            .await?;
        pods_api
            .patch_status(
                &pods[evicted].name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Failed", "reason": "Evicted",
                    "message": "evicted by the fault-injection suite"}})),
            )
            .await?;
        // Two pods leave, two come: as many wait for a slot in every pass.
        for replacement in
            create_pods_as(&ns, SEQUENCE, &format!("re{pass}"), 2, Some(POD_ACCOUNT)).await?
        {
            sidecars.push(Some(
                start_sidecar(cluster, &ns.name, &replacement, false).await?,
            ));
            pods.push(replacement);
            collectors.push(Some(Collector::start(
                sidecars.last().unwrap().as_ref().unwrap().port,
            )));
        }
        for (slot, old) in [
            (slot_of_paused, &paused_uid),
            (slot_of_evicted, &evicted_uid),
        ] {
            let Some(slot) = slot else { continue };
            eventually(
                Duration::from_secs(90),
                &format!("slot {slot:?} of a paused holder to serve again from another pod"),
                || async {
                    let lease = slot_leases(&ns, SEQUENCE)
                        .await?
                        .into_iter()
                        .find(|l| l.slot == slot);
                    let holder = lease.and_then(|l| l.holder).filter(|h| h != old);
                    let serving = holder.is_some_and(|h| {
                        sidecars.iter().flatten().any(|s| s.uid == h && s.ready())
                    });
                    Ok(serving.then_some(()))
                },
            )
            .await?;
            eprintln!(
                "faults: slot {slot:?} serves from another pod {:?} after the pause",
                stopped_at.elapsed()
            );
        }
        eprintln!("faults: SIGCONT sidecars {paused} and {evicted}");
        sidecars[paused].as_ref().unwrap().signal(libc::SIGCONT);
        sidecars[evicted].as_ref().unwrap().signal(libc::SIGCONT);
        {
            let resumed = sidecars[evicted].as_ref().unwrap();
            eventually(
                Duration::from_secs(30),
                "the resumed sidecar of the evicted pod to learn its slot is lost",
                || async {
                    Ok((sidecar_log_lines(resumed, "slot lost") > lost_before).then_some(()))
                },
            )
            .await?;
        }
        resumed_evicted += 1;
        tokio::time::sleep(Duration::from_secs(3)).await;
        for (i, uid) in [(paused, &paused_uid), (evicted, &evicted_uid)] {
            let c = collectors[i].take().unwrap().finish();
            finished.push((pods[i].name_any(), uid.clone(), c));
            if let Some(s) = sidecars[i].take() {
                s.process.kill();
                if i == paused {
                    unauthorized_zombie_lines += sidecar_log_lines(&s, "Unauthorized");
                }
            }
        }
        pods_api
            .delete(&pods[evicted].name_any(), &DeleteParams::default())
            .await?;

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
        denials_read.push(policy_denials(&admin).await?);
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
            second_operator = Some(Operator::start_as(
                cluster,
                &ns.name,
                "b",
                &operator_kubeconfig,
            )?);
        }

        // 6. A graceful stop: the sidecar gets SIGTERM and releases (a holder's release,
        //    with its pod's token), then its pod is deleted. A real pod is deleted first
        //    and stays Terminating, its token valid, while its containers stop; a pod with
        //    no node is removed at once, so here it goes after its sidecar has stopped.
        let leaving = holder_index(&sidecars, &[faked]);
        eprintln!("faults: SIGTERM sidecar {leaving}, then delete its pod");
        {
            let s = sidecars[leaving].as_ref().unwrap();
            s.signal(libc::SIGTERM);
            eventually(
                Duration::from_secs(20),
                "the stopped sidecar to exit",
                || async { Ok(s.process.exit_status().map(|_| ())) },
            )
            .await?;
            graceful_stops += 1;
            graceful_releases += sidecar_log_lines(s, "released the slot;");
        }
        pods_api
            .delete(&pods[leaving].name_any(), &DeleteParams::default())
            .await?;
        let c = collectors[leaving].take().unwrap().finish();
        finished.push((pods[leaving].name_any(), pods[leaving].uid().unwrap(), c));
        sidecars[leaving].take();
        let replacement = create_pods_as(&ns, SEQUENCE, &format!("gr{pass}"), 1, Some(POD_ACCOUNT))
            .await?
            .remove(0);
        sidecars.push(Some(
            start_sidecar(cluster, &ns.name, &replacement, false).await?,
        ));
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
    denials_read.push(policy_denials(&admin).await?);
    // Every reading but the first ends an API server's lifetime (or the run).
    let schedule_refusals = denials_read[1..].iter().sum::<f64>() - denials_read[0];
    policy_still_in_force(&admin, &ns, &sidecars).await?;
    let probe_refusals = policy_denials(&admin).await? - denials_read.last().unwrap();
    eprintln!(
        "faults: under the Lease policy (readings {denials_read:?}): {schedule_refusals} of the schedule's writes refused, {probe_refusals} refusals of the probe after it; {resumed_evicted} resumed holders of evicted pods learned their slot was lost; {unauthorized_zombie_lines} log lines of resumed holders of force-deleted pods say Unauthorized (token refused); {graceful_releases} of {graceful_stops} SIGTERMed holders released their slot"
    );
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
    assert!(
        probe_refusals >= 2.0,
        "the refusal count sees the policy's refusals (the probe's two): {probe_refusals}"
    );
    assert_eq!(
        schedule_refusals, 0.0,
        "the Lease policy refused writes of the operators or sidecars during the schedule (see kube-apiserver.log and the process logs)"
    );
    assert_eq!(
        graceful_releases, graceful_stops as usize,
        "every SIGTERMed holder releases its slot with its pod's token"
    );
    drop(second_operator);
    let _ = Api::<ClusterRoleBinding>::all(admin)
        .delete(&format!("{}-operator", ns.name), &DeleteParams::default())
        .await;
    Ok(())
}

/// After the run (and its API server restarts), the policy still refuses what it must:
/// a live pod's sidecar token renewing another pod's slot, and the cluster admin doing
/// the same (no group is exempt here).
async fn policy_still_in_force(
    admin: &kube::Client,
    ns: &TestNamespace,
    sidecars: &[Option<Sidecar>],
) -> Result<()> {
    let slot = slot_leases(ns, SEQUENCE)
        .await?
        .into_iter()
        .find(|l| l.holder.is_some())
        .context("a held slot lease after the run")?;
    let holder = slot.holder.clone().unwrap_or_default();
    let other = sidecars
        .iter()
        .flatten()
        .find(|s| s.uid != holder && s.kubeconfig.is_some())
        .context("a sidecar of another pod")?;
    let leases = |client: &kube::Client| Api::<Lease>::namespaced(client.clone(), &ns.name);
    let other_client = kubeconfig_client(other.kubeconfig.as_deref().unwrap())?;
    for (who, client, says) in [
        (other.pod.as_str(), &other_client, "it is held by pod"),
        ("the cluster admin", admin, "no pod-bound token"),
    ] {
        // The holder renews meanwhile: a forgery of an older version is refused for that
        // (409) before the policy looks at it, so it is made again from a fresh read.
        let mut tries = 0;
        let result = loop {
            tries += 1;
            let lease = leases(admin).get(&slot.name).await?;
            let forged = slot_lease::renew(&lease, &holder, slot.fence, Utc::now())?;
            let result = leases(client)
                .replace(&slot.name, &PostParams::default(), &forged)
                .await;
            match &result {
                Err(kube::Error::Api(e)) if e.code == 409 && tries < 5 => continue,
                _ => break result,
            }
        };
        refused(
            result,
            &format!("{who} renews the slot of pod {holder}"),
            says,
        )?;
    }
    eprintln!(
        "faults: after the run the policy still refuses pod {}'s token and the cluster admin renewing {}",
        other.pod, slot.name
    );
    Ok(())
}

/// The index in `pods` of the first pod (by position) that holds a slot, once `slots`
/// slots are held; the operator hands them out from the pod objects alone, before any
/// sidecar runs.
async fn first_holder(ns: &TestNamespace, pods: &[Pod], slots: usize) -> Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holders: Vec<String> = slot_leases(ns, SEQUENCE)
            .await?
            .into_iter()
            .filter_map(|l| l.holder)
            .collect();
        if holders.len() >= slots {
            return pods
                .iter()
                .position(|p| p.uid().is_some_and(|uid| holders.contains(&uid)))
                .context("no pod of the test holds a slot");
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the operator handed out {} of {slots} slots in 60 s",
                holders.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
