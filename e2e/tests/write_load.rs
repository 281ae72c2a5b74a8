//! Benchmark (not part of `scripts/test.sh`): lease writes per second that N cluster-mode
//! sidecars add to the API server, against the formula `N * 3 / lease.durationSeconds`.
//!
//! Run: `cargo test -p kubeflake-e2e --test write_load -- --ignored --nocapture`
//! (`KUBEFLAKE_SIDECARS=N` to change N; default 100).

mod operator_support;
mod sidecar_support;

use std::time::{Duration, Instant};

use anyhow::Result;
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;
use sidecar_support::Sidecar;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: about 3 minutes; run it by name"]
async fn lease_writes_per_second_for_n_sidecars() -> Result<()> {
    let n: usize = std::env::var("KUBEFLAKE_SIDECARS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    const DURATION_S: u64 = 30;
    const WINDOW: Duration = Duration::from_secs(60);
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("writes").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(
        &ns,
        "load",
        json!({"lease": {"durationSeconds": DURATION_S}}),
    )
    .await?;
    let pods = create_pods(&ns, "load", "p", n).await?;
    let mut sidecars = Vec::new();
    for pod in &pods {
        sidecars.push(Sidecar::start(cluster, &ns.name, pod, "load", false)?);
    }
    eventually(Duration::from_secs(180), "every sidecar ready", || async {
        Ok(sidecars.iter().all(Sidecar::ready).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(DURATION_S / 3 + 2)).await; // past the first renewals
    let before = request_counts(&ns.client).await?;
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let after = request_counts(&ns.client).await?;
    let secs = started.elapsed().as_secs_f64();
    let delta = |resource: &str, verb: &str| {
        let key = (resource.to_string(), verb.to_string());
        after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
    };
    let lease_writes = delta("leases", "PUT");
    let per_second = lease_writes / secs;
    let formula = n as f64 * 3.0 / DURATION_S as f64;
    eprintln!(
        "{n} sidecars, lease.durationSeconds {DURATION_S}: {lease_writes} lease writes in {secs:.0} s = {per_second:.2}/s \
         (formula N*3/duration = {formula:.2}/s); other requests in the window: {:?}",
        after
            .iter()
            .filter(|(k, _)| k.0 != "leases" || k.1 != "PUT")
            .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, d)| *d > 0.0)
            .collect::<Vec<_>>()
    );
    assert!(
        per_second <= formula * 1.3 && per_second >= formula * 0.7,
        "{per_second}/s is far from the formula's {formula}/s"
    );
    Ok(())
}
