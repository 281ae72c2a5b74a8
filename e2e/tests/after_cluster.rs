//! docs/safety.md rule 12 in cluster mode: `after` across real sidecars holding real slots
//! (Snowflake) or claiming from the counter Lease (segment, plain and strict), against the
//! real API server. Two sidecars pass each answer back and forth as the next `after`:
//! every answer is greater than what was passed in.

mod operator_support;
mod sidecar_support;

use anyhow::{Context, Result, ensure};
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;
use sidecar_support::{Sidecar, get};

/// One value from `port` for `target`, which must answer 200.
fn value(port: u16, target: &str) -> Result<u64> {
    let (status, body) = get(port, target)?;
    ensure!(status == 200, "{target} on port {port}: {status} {body}");
    body.trim()
        .parse()
        .with_context(|| format!("{target}: not a number: {body}"))
}

/// Two sidecars of `sequence`, ready.
async fn two_sidecars(
    cluster: &Cluster,
    ns: &kubeflake_e2e::TestNamespace,
    sequence: &str,
    spec: serde_json::Value,
) -> Result<Vec<Sidecar>> {
    create_sequence(ns, sequence, spec).await?;
    let pods = create_pods(ns, sequence, sequence, 2).await?;
    Sidecar::start_all_ready(cluster, &ns.name, &pods, sequence).await
}

/// Passes each answer to the other sidecar as `after`, `rounds` times.
fn pass_back_and_forth(sidecars: &[Sidecar], rounds: usize) -> Result<()> {
    let mut last = value(sidecars[0].port, "/id")?;
    for i in 0..rounds {
        let port = sidecars[(i + 1) % 2].port;
        let target = if i % 10 == 0 {
            format!("/ids?count=3&after={last}")
        } else {
            format!("/id?after={last}")
        };
        let (status, body) = get(port, &target)?;
        ensure!(status == 200, "{target}: {status} {body}");
        let got: Vec<u64> = body
            .lines()
            .map(|l| l.trim().parse().context("a value"))
            .collect::<Result<_>>()?;
        ensure!(
            got.first().is_some_and(|v| *v > last),
            "round {i}: {target} answered {got:?}, not above {last}"
        );
        last = *got.last().context("an answer")?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule12_after_holds_across_cluster_sidecars_in_snowflake_segment_and_strict_sequences()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("after").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;

    let snowflake = two_sidecars(cluster, &ns, "flakes", json!({})).await?;
    pass_back_and_forth(&snowflake, 500)?;
    drop(snowflake);

    let segment = two_sidecars(
        cluster,
        &ns,
        "blocks",
        json!({"mode": "Segment", "segment": {"blockSize": 100}}),
    )
    .await?;
    pass_back_and_forth(&segment, 300)?;
    // An `after` far above the counter raises it (one compare-and-set), and the other
    // sidecar's next claim starts above it.
    let far = value(segment[0].port, "/id")? + 1_000_000;
    ensure!(value(segment[1].port, &format!("/id?after={far}"))? > far);
    drop(segment);

    let strict = two_sidecars(
        cluster,
        &ns,
        "tokens",
        json!({"mode": "Segment", "segment": {"strict": true}}),
    )
    .await?;
    pass_back_and_forth(&strict, 200)?;
    let far = value(strict[0].port, "/id")? + 1_000_000;
    let raised = value(strict[1].port, &format!("/id?after={far}"))?;
    ensure!(raised > far, "{raised} not above {far}");
    // Strict: the other sidecar's next value, without `after`, is above it too.
    let next = value(strict[0].port, "/id")?;
    ensure!(next > raised, "strict order: {next} after {raised}");
    Ok(())
}
