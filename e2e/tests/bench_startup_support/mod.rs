//! The "kubeflake, joined" variant of the start-up benchmark (e2e/tests/bench_startup.rs;
//! docs/design/2026-11-29-multicluster.md, plan step 4): the same kubeflake pod, its
//! IdSequence joined to an ID space whose hub is a second control plane, reached by the
//! chart's operator pods through a forwarder on the node's bridge address
//! (e2e/tests/hub_support/on_node.rs). The member is the node's cluster, as in e2e
//! `id_space_node`. With `KUBEFLAKE_BENCH_HUB=away` the forwarder is switched off once the
//! sequence has joined: every joined round then starts its pods with the hub unreachable.

use std::time::Duration;

use anyhow::{Context, Result};
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_e2e::{Cluster, TestNamespace};

use crate::hub_support::on_node::{HUB_SECRET, NodeHub, hub_cluster};
use crate::hub_support::{membership, ready_is};
use crate::operator_support::create_sequence;

/// The joined variant's IdSequence, beside the lone one in the benchmark's namespace.
pub const JOINED_SEQUENCE: &str = "startup-joined";
/// Blocks of 256 slots: the member's first block holds the largest round (100 pods)
/// without a claim while pods start.
const BLOCK_SLOTS: i64 = 256;
const JOIN_LIMIT: Duration = Duration::from_secs(120);
const HUB_ENV: &str = "KUBEFLAKE_BENCH_HUB";

/// Starts the hub's control plane on a thread (beside the node's start).
pub fn start_hub() -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::spawn(|| hub_cluster().map(drop).map_err(|e| format!("{e:#}")))
}

/// Waits for [`start_hub`]'s thread.
pub fn hub_started(start: std::thread::JoinHandle<Result<(), String>>) -> Result<()> {
    start
        .join()
        .map_err(|_| anyhow::anyhow!("starting the hub panicked"))?
        .map_err(anyhow::Error::msg)
}

/// Whether the hub is switched off for the joined rounds (`KUBEFLAKE_BENCH_HUB=away`;
/// anything else but unset or `reachable` is refused).
pub fn hub_away() -> Result<bool> {
    match std::env::var(HUB_ENV).as_deref() {
        Err(_) | Ok("reachable") => Ok(false),
        Ok("away") => Ok(true),
        Ok(other) => anyhow::bail!("{HUB_ENV}: {other:?} is neither `away` nor `reachable`"),
    }
}

/// The hub's space, the member's account and hub Secret in `release_namespace`, and the
/// IdSequence [`JOINED_SEQUENCE`] in `ns` joined to the space (Ready=True Joined). The
/// release must list the Secret (`hub_support::on_node::hub_secrets_value`).
pub async fn join(
    cluster: &Cluster,
    release_namespace: &str,
    ns: &TestNamespace,
) -> Result<NodeHub> {
    let spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), BLOCK_SLOTS);
    let hub = NodeHub::start(spec).await?;
    hub.add_node_member(cluster, release_namespace, "bench")
        .await?;
    create_sequence(ns, JOINED_SEQUENCE, serde_json::json!({})).await?;
    let hub_ns = hub.hub.ns.name.clone();
    membership(
        ns,
        JOINED_SEQUENCE,
        JOINED_SEQUENCE,
        "bench",
        &hub_ns,
        HUB_SECRET,
    )
    .await?;
    ready_is(ns, JOINED_SEQUENCE, "True", "Joined", JOIN_LIMIT)
        .await
        .context("the joined variant's sequence did not join its hub")?;
    if hub_away()? {
        hub.forwarder.switch(false);
        ready_is(ns, JOINED_SEQUENCE, "False", "HubUnreachable", JOIN_LIMIT)
            .await
            .context("the hub switched off for the joined rounds")?;
    }
    Ok(hub)
}
