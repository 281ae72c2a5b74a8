//! Scale: 1,000 pods and 1,000 slots in one sequence, counting the API requests the
//! operator makes. Its own test binary, so its control plane serves nobody else and the
//! API server's request counters are the operator's (plus this test's pod creations).

mod operator_support;

use std::time::{Duration, Instant};

use anyhow::Result;
use kube::ResourceExt;
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pods_get_a_thousand_slots_with_about_one_lease_write_each() -> Result<()> {
    const PODS: usize = 1000;
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("scale").await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "big", json!({})).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = request_counts(&ns.client).await?;
    let started = Instant::now();
    let pods = create_pods(&ns, "big", "p", PODS).await?;
    let uids: Vec<String> = pods.iter().map(|p| p.uid().unwrap()).collect();
    all_assigned(&ns, "big", &uids, Duration::from_secs(300)).await?;
    let elapsed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await; // let trailing status writes land
    let after = request_counts(&ns.client).await?;
    let mut report = String::from("| resource | verb | requests |\n|---|---|---:|\n");
    let mut lease_writes = 0.0;
    for (key, value) in &after {
        let delta = value - before.get(key).copied().unwrap_or(0.0);
        if delta > 0.0 {
            report.push_str(&format!("| {} | {} | {delta} |\n", key.0, key.1));
            if key.0 == "leases" && ["POST", "PUT", "PATCH"].contains(&key.1.as_str()) {
                lease_writes += delta;
            }
        }
    }
    eprintln!(
        "{PODS} pods assigned in {elapsed:?}; reconciles: {}; API requests (all clients, incl. the \
         test's {PODS} pod creations):\n{report}",
        operator
            .metrics()
            .lines()
            .filter(|l| l.starts_with("kubeflake_operator_reconciles_total"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    // One create per slot, plus at most a few retries: no per-pod polling or rewrite loops.
    assert!(
        lease_writes >= PODS as f64,
        "every slot written: {lease_writes}"
    );
    assert!(
        lease_writes <= PODS as f64 * 1.1,
        "lease writes flood: {lease_writes} for {PODS} pods\n{report}"
    );
    Ok(())
}
