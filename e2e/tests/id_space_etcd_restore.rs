//! Rule 21 with a real etcd restore (docs/design/2026-11-29-multicluster.md, "A member's
//! etcd restored from an older snapshot while its pods run"; issue 55's plan step 4). The
//! shared control plane H is the hub and a member; A is a member on its own control plane.
//! Both run real cluster-mode sidecars issuing IDs at a high rate into Collectors.
//!
//! A's etcd is snapshotted while it runs; then a pod is started in A on a slot no pod had
//! used (its Lease did not exist at the snapshot), A renews its blocks on the hub, and A's
//! etcd is restored from the snapshot while every sidecar and A's operator keep running.
//! The restored A has an older copy of its claims, older slot Leases, and no Lease at all
//! for the slot the late pod issues in. A's operator must find the copy behind the hub's
//! (`LocalBehind`), raise the fences of its blocks' slot Leases (creating the missing one)
//! and say `FencesRaised=True` before any slot is assigned again; a pod created right after
//! the restore gets its slot only then. Every ID of H and A is checked: 0 duplicates.
//!
//! It also checks the harness (`kubeflake_e2e::cluster::snapshot`): a ConfigMap created
//! after the snapshot is gone after the restore.
//!
//! Its own test binary: it stops and restores a control plane's etcd and API server.

mod clusters_support;
mod hub_support;
mod operator_support;
mod policy_support;
mod sidecar_support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use clusters_support::*;
use hub_support::{Hub, condition, install_crds};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_e2e::{Cluster, ClusterOptions};
use operator_support::eventually;
use serde_json::json;

/// Slots per block: a few pods fill a member's blocks.
const BLOCK_SLOTS: i64 = 4;
/// The shortest tolerance the IdSpace accepts, and a renewal every 10 s: a renewal (a
/// member write, which counts the member's generation) comes soon after the snapshot.
const TOLERANCE: i64 = 60;
const RENEW_EVERY: i64 = 10;

fn space() -> IdSpaceSpec {
    let mut spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), BLOCK_SLOTS);
    spec.tolerance_seconds = TOLERANCE;
    spec.renew_every_seconds = RENEW_EVERY;
    spec
}

/// Member A's control plane, started once; stopped by the exit hook, as the shared one is.
fn a_cluster() -> Result<&'static Cluster> {
    static A: OnceLock<Result<Cluster, String>> = OnceLock::new();
    A.get_or_init(|| Cluster::start(ClusterOptions::default()).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow!("member A's control plane could not start: {e}"))
}

/// The membership's `FencesRaised` condition: (status, reason), if present.
async fn fences_raised(m: &Member) -> Result<Option<(String, String)>> {
    let status = m.status().await?;
    Ok(condition(&status, "FencesRaised").map(|(s, r, _)| (s, r)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule21_a_members_etcd_restored_from_an_older_snapshot_while_its_sidecars_issue_raises_its_fences_and_repeats_no_id()
-> Result<()> {
    let started = Instant::now();
    let hub_cluster = Cluster::shared();
    let a_cluster = tokio::task::block_in_place(a_cluster)?;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "hub", space()).await?;
    let mut h = Member::join(hub_cluster, "h", &hub, None).await?;
    let mut a = Member::join(a_cluster, "a", &hub, None).await?;
    for m in [&mut h, &mut a] {
        m.holds(1).await?;
        let pods = m.pods("app", 2).await?;
        m.serve(&pods).await?;
    }
    a.holds(2).await?;
    ensure!(
        fences_raised(&a).await?.is_none(),
        "A's copy never went back yet"
    );
    eprintln!("restore: H and A serving after {:?}", started.elapsed());

    // The snapshot, while everything runs.
    let generation_then = a.status().await?.status.map_or(0, |s| s.generation);
    let snapshot = a_cluster.etcd_snapshot("before").await?;
    let marker: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "written-after-the-snapshot"}
    }))?;
    let config_maps = Api::<ConfigMap>::namespaced(a.ns.client.clone(), &a.ns.name);
    config_maps.create(&PostParams::default(), &marker).await?;

    // After the snapshot: a pod on a slot no pod used before (no Lease in the snapshot),
    // and a renewal on the hub (A's generation there moves past the snapshot's).
    let late = a.pods("late", 1).await?;
    a.serve(&late).await?;
    eventually(LIMIT, "A renewed after the snapshot", || async {
        let now = a.status().await?.status.map_or(0, |s| s.generation);
        Ok((now > generation_then).then_some(now))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = [h.count(), a.count()];

    // The restore, while A's sidecars and operator keep running.
    let restoring = Instant::now();
    a_cluster.restore_etcd(&snapshot).await?;
    eprintln!("restore: A's etcd restored in {:?}", restoring.elapsed());
    ensure!(
        config_maps
            .get_opt("written-after-the-snapshot")
            .await?
            .is_none(),
        "the harness: a ConfigMap written after the snapshot is gone after the restore"
    );
    // A pod created at once waits for the hub check and the raise.
    let after = a.pods("after", 1).await?;
    let raised = fences_raised(&a).await?;
    ensure!(
        raised
            .as_ref()
            .is_some_and(|(s, r)| s == "True" && r == "Raised"),
        "a slot was assigned after the restore before A's fences were raised: FencesRaised \
         {raised:?}\n{}",
        a.log()
    );
    a.serve(&after).await?;
    a.ready_is("True", "Joined", LIMIT).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = [h.count(), a.count()];
    ensure!(
        now[0] > before[0] && now[1] > before[1],
        "H and A issued after the restore: {before:?} then {now:?}\n{}\n{}",
        h.readiness(),
        a.readiness()
    );

    h.finish();
    a.finish();
    let issued: Vec<&Issued> = h.issued.iter().chain(a.issued.iter()).collect();
    let crossed = check_across(h.layout(), &issued)?;
    for line in &crossed.lines {
        eprintln!("restore: {line}");
    }
    eprintln!(
        "restore: {} IDs checked, {} duplicates, in {:?}",
        crossed.ids,
        crossed.duplicates,
        started.elapsed()
    );
    ensure!(crossed.ids > 0, "IDs were collected");
    ensure!(
        crossed.duplicates == 0,
        "{} duplicate IDs across H and A",
        crossed.duplicates
    );
    Ok(())
}
