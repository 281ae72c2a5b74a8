//! An API server outage longer than the slot lease (docs/safety.md: partitions). A holder that
//! cannot renew keeps serving up to the fence it wrote last, never past it, and then
//! refuses; when the API server is back, every pod serves again, and no ID repeats.
//!
//! Its own test binary: it kills the API server, which must not disturb other tests.

mod operator_support;
mod sidecar_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube::ResourceExt;
use kubeflake_crds::Id;
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;
use sidecar_support::*;

const SEQUENCE: &str = "outage";
/// The shortest lease the API accepts: the outage below outlasts it.
const LEASE_SECONDS: u64 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule2_an_api_outage_longer_than_the_lease_stops_every_holder_at_its_fence_and_no_id_repeats()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("outage").await?;
    let (history, _watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    let spec = json!({"lease": {"durationSeconds": LEASE_SECONDS}});
    let layout = create_sequence(&ns, SEQUENCE, spec)
        .await?
        .spec
        .params()?
        .layout;
    let pods = create_pods(&ns, SEQUENCE, "app", 3).await?;
    let sidecars: Vec<Sidecar> = pods
        .iter()
        .map(|p| Sidecar::start(cluster, &ns.name, p, SEQUENCE, false))
        .collect::<Result<_>>()?;
    let all_ready = || async { Ok(sidecars.iter().all(Sidecar::ready).then_some(())) };
    eventually(Duration::from_secs(60), "3 sidecars serving", all_ready).await?;
    let collectors: Vec<Collector> = sidecars.iter().map(|s| Collector::start(s.port)).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    eprintln!("outage: kill -9 kube-apiserver for longer than the {LEASE_SECONDS} s lease");
    cluster.kill_apiserver();
    let down = Instant::now();
    let result = async {
        // A holder's fence is at most one lease duration ahead of its last renewal.
        eventually(
            Duration::from_secs(LEASE_SECONDS * 3),
            "every holder to stop at its fence",
            || async { Ok(sidecars.iter().all(|s| !s.ready()).then_some(())) },
        )
        .await?;
        let stopped_after = down.elapsed();
        // Refusing, not issuing: no ID is added while the API server stays down (after a
        // moment for answers already on the wire to arrive).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let counts: Vec<usize> = collectors.iter().map(Collector::count).collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let later: Vec<usize> = collectors.iter().map(Collector::count).collect();
        ensure!(
            counts == later,
            "IDs issued past the fence: {counts:?} then {later:?}"
        );
        anyhow::Ok(stopped_after)
    }
    .await;
    // Bring the API server back whatever happened, so that the failure says what it is.
    cluster.start_apiserver().await?;
    let back = Instant::now();
    let stopped_after = result?;
    eprintln!("outage: every holder refused {stopped_after:?} after the API server went down");
    eventually(
        Duration::from_secs(120),
        "3 sidecars serving again",
        all_ready,
    )
    .await
    .with_context(|| {
        sidecars
            .iter()
            .map(|s| {
                let readyz = get(s.port, "/readyz").map(|r| r.1).unwrap_or_default();
                format!("{}: {readyz}\n{}", s.pod, s.process.log_tail(15))
            })
            .chain([format!("operator:\n{}", operator.process.log_tail(40))])
            .collect::<Vec<_>>()
            .join("\n\n")
    })?;
    eprintln!(
        "outage: every pod served again {:?} after the API server was back",
        back.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    let finished: Vec<(String, String, Collected)> = pods
        .iter()
        .zip(collectors)
        .map(|(p, c)| (p.name_any(), p.uid().unwrap_or_default(), c.finish()))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = check(&layout, &finished, &history.slots_held());
    eprintln!(
        "outage: {} IDs, {} duplicates, {} order violations, {} with a worker the pod never held\n{}",
        report.ids,
        report.duplicates,
        report.order_violations,
        report.wrong_worker,
        report.lines.join("\n")
    );
    ensure!(report.ids > 1_000, "too few IDs collected: {}", report.ids);
    ensure!(report.duplicates == 0, "duplicate IDs");
    ensure!(report.order_violations == 0, "IDs out of order");
    ensure!(
        report.wrong_worker == 0,
        "IDs with a worker the pod did not hold"
    );

    // Rule 2, fence before use: no ID's tick lies above the fence of its slot's Lease
    // (fences only go up, and are kept when a slot is released or given to another pod).
    let fences: HashMap<u32, u64> = slot_leases(&ns, SEQUENCE)
        .await?
        .into_iter()
        .map(|l| (l.slot.0, l.fence.0))
        .collect();
    for (pod, _, data) in &finished {
        for &id in data.segments.iter().flatten() {
            let parts = layout.decode(Id::new(id).context("a 63-bit ID")?)?;
            let fence = fences.get(&parts.slot.0).copied().unwrap_or(0);
            ensure!(
                parts.tick.0 <= fence,
                "{pod} issued {id} at tick {} above the fence {fence} of slot {}",
                parts.tick.0,
                parts.slot.0
            );
        }
    }
    Ok(())
}
