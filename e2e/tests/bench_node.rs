//! Figures on the real node (measured, never asserted): how long from "pod created" to
//! "the app got its first ID" for 20 pods created at once, and the memory the sidecars and
//! the operator use in their pods. Ignored by default; docs/benchmarks.md has its output:
//!
//!   cargo test -p kubeflake-e2e --test bench_node -- --ignored --nocapture

mod chart_support;
mod node_support;
mod operator_support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_e2e::Cluster;
use kubeflake_e2e::node::EXAMPLE_APP_IMAGE;
use node_support::*;
use operator_support::create_sequence;

const PODS: usize = 20;

#[tokio::test]
#[ignore = "a benchmark: run it by hand (see the top of this file)"]
async fn pod_created_to_first_id_and_memory_on_the_node() -> Result<()> {
    let cluster = Cluster::shared_with_node();
    helm_install(cluster, "bench", "kubeflake-bench", &[]).await?;
    let ns = cluster.namespace("bench-node").await?;
    create_sequence(&ns, "bench", serde_json::json!({})).await?;
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);

    let results = futures::stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            let ns = ns.clone();
            async move {
                let name = format!("bench-{i}");
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {SEQUENCE_LABEL: "bench"}},
                    "spec": {"containers": [{
                        "name": "app", "image": EXAMPLE_APP_IMAGE, "imagePullPolicy": "Never"
                    }]}
                }))?;
                let created = Instant::now();
                pods.create(&PostParams::default(), &pod).await?;
                // Poll the app every 50 ms, for at most 3 minutes.
                for _ in 0..3600 {
                    if ids_from_pod(&ns, &name, 1).await.is_ok() {
                        return anyhow::Ok(created.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                anyhow::bail!("{name} gave no ID within 3 minutes")
            }
        })
        .buffer_unordered(PODS)
        .collect::<Vec<_>>()
        .await;
    let mut times: Vec<Duration> = results.into_iter().collect::<Result<_>>()?;
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];

    let sidecars = rss_of("/kubeflake-sidecar")?;
    let operators = rss_of("/kubeflake-operator")?;
    let median = |v: &[u64]| v.get(v.len() / 2).copied().unwrap_or(0);
    println!("| figure | value |");
    println!("|---|---:|");
    println!("| pods created at once | {PODS} |");
    println!(
        "| pod created -> app's first ID, p50 | {:.2} s |",
        at(0.5).as_secs_f64()
    );
    println!(
        "| pod created -> app's first ID, p99 (max of {PODS}) | {:.2} s |",
        at(0.99).as_secs_f64()
    );
    println!(
        "| sidecar RSS, median of {} | {:.1} MiB |",
        sidecars.len(),
        mib(median(&sidecars))
    );
    println!(
        "| sidecar RSS, max | {:.1} MiB |",
        mib(sidecars.iter().copied().max().unwrap_or(0))
    );
    println!(
        "| operator RSS, per replica ({}) | {} |",
        operators.len(),
        operators
            .iter()
            .map(|r| format!("{:.1} MiB", mib(*r)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// VmRSS of every process on the machine whose command is `binary` (container
/// processes are visible from the host), sorted.
fn rss_of(binary: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read_to_string(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split('\0').next() != Some(binary) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .context("VmRSS")?;
        out.push(kib * 1024);
    }
    out.sort();
    Ok(out)
}
