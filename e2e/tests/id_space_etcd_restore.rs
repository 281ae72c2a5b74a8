//! Rule 21 with a real etcd restore (docs/design/2026-11-29-multicluster.md, "A member's
//! etcd restored from an older snapshot while its pods run"; issue 55's plan step 4). The
//! shared control plane H is the hub and a member; A is a member on its own control plane.
//! Both run real cluster-mode sidecars issuing IDs at a high rate into Collectors.
//!
//! A's etcd is snapshotted while it runs, holding a known copy (its generation read before
//! and after the snapshot, equal); then a pod is started in A on a slot no pod had used (its
//! Lease did not exist at the snapshot), A renews its blocks on the hub (so the restored
//! copy is surely behind), and A's etcd is restored from the snapshot while every sidecar
//! and A's operator keep running, A cut off from the hub (its operator reaches it through
//! a loopback forwarder the test switches off).
//! The restored A has an older copy of its claims, older slot Leases, and no Lease at all
//! for the slot the late pod issues in. A's operator must find the copy behind the hub's
//! (`LocalBehind`), raise the fences of its blocks' slot Leases (creating the missing one)
//! and say `FencesRaised=True` before any slot is assigned again: a pod created right after
//! the restore gets no slot while A is cut off (10 s: every watch has listed the restored
//! store), and with the hub back, its slot only after the raise. Every ID of H and A is checked: 0 duplicates.
//!
//! Its first runs failed: the operator voided its hub check only when its membership watch
//! listed again, which came seconds after the pods' watch had listed the restored store
//! and shown the new pod, and the pod got a slot from the cached copy of before the restore
//! (`FencesRaised` `None`, or `False`: the contact came just after). Now each pass of a
//! joined sequence reads its membership from the API server, which shows the restored
//! copy at once (`IdSpaces::fresh`, operator/src/controller/id_spaces.rs).
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

use anyhow::{Context, Result, anyhow, ensure};
use clusters_support::*;
use hub_support::forwarder::Forwarder;
use hub_support::{Hub, condition, install_crds};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::ResourceExt;
use kube::api::PostParams;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_e2e::Cluster;
use operator_support::{all_assigned, create_pods, eventually, slot_leases};
use serde_json::json;

/// Slots per block: a few pods fill a member's blocks.
const BLOCK_SLOTS: i64 = 4;
/// The shortest tolerance the IdSpace accepts, and a renewal every 10 s: a renewal (a
/// member write, which counts the member's generation) comes soon after the snapshot.
const TOLERANCE: i64 = 60;
const RENEW_EVERY: i64 = 10;
/// How long A stays cut off from the hub once the restore is done, a new pod waiting: past
/// every watch's backoff (4 s at most) and a controller pass, well inside the bounds A
/// holds (at least the tolerance, 60 s, ahead at its last renewal).
const CUT_AFTER_THE_RESTORE: Duration = Duration::from_secs(10);

fn space() -> IdSpaceSpec {
    let mut spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), BLOCK_SLOTS);
    spec.tolerance_seconds = TOLERANCE;
    spec.renew_every_seconds = RENEW_EVERY;
    spec
}

/// Member A's control plane, started once; stopped by the exit hook, as the shared one is.
fn a_cluster() -> Result<&'static Cluster> {
    static A: OnceLock<Result<Cluster, String>> = OnceLock::new();
    Cluster::started_once(&A, "member A")
}

/// A's copy's generation on the hub (0 before the first contact).
async fn generation(m: &Member) -> Result<i64> {
    Ok(m.status().await?.status.map_or(0, |s| s.generation))
}

/// A snapshot of A's etcd holding a copy whose generation is known: read before and after
/// the snapshot, and equal (generations only grow). Tried again when a renewal came
/// between the two reads, so the copy the restore brings back is surely behind the hub's
/// once A renewed after it.
async fn snapshot_of_a_known_copy(
    cluster: &Cluster,
    a: &Member,
) -> Result<(kubeflake_e2e::cluster::snapshot::EtcdSnapshot, i64)> {
    for attempt in 0..5 {
        let before = generation(a).await?;
        let snapshot = cluster.etcd_snapshot(&format!("before-{attempt}")).await?;
        let after = generation(a).await?;
        if before == after {
            return Ok((snapshot, before));
        }
        eprintln!("restore: A renewed during snapshot {attempt} ({before} -> {after}): again");
    }
    Err(anyhow!(
        "A's copy changed during each of 5 snapshots: no snapshot of a known copy"
    ))
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
    // A reaches the hub through a forwarder the test switches off across the restore.
    let forwarder = Forwarder::start(hub_cluster.server()).await?;
    let mut a = Member::join(a_cluster, "a", &hub, Some(&forwarder.server())).await?;
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

    // The snapshot, while everything runs, of a known copy: the copy's generation read
    // before and after it is the same, so the snapshot holds that one (a renewal between
    // the two reads: taken again).
    let (snapshot, generation_then) = snapshot_of_a_known_copy(a_cluster, &a).await?;
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

    // The restore, while A's sidecars and operator keep running, with A cut off from the
    // hub: no contact can compare the restored copy until it is back.
    forwarder.switch(false);
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
    // A pod created at once waits for the hub check: no slot while the hub is cut off
    // (long enough for every watch to list the restored store and the controller to pass
    // the pod), then, with the hub back, a slot only after the raise.
    let pending = create_pods(&a.ns, SEQUENCE, "after", 1).await?;
    let uids: Vec<String> = pending.iter().filter_map(|p| p.uid()).collect();
    tokio::time::sleep(CUT_AFTER_THE_RESTORE).await;
    let held = slot_leases(&a.ns, SEQUENCE).await?;
    let given: Vec<u32> = held
        .iter()
        .filter(|l| l.holder.as_ref().is_some_and(|h| uids.contains(h)))
        .map(|l| l.slot.0)
        .collect();
    ensure!(
        given.is_empty(),
        "a slot ({given:?}) was assigned after the restore while A was cut off from the hub, \
         before any comparison of its copy: FencesRaised {:?}\n{}",
        fences_raised(&a).await?,
        a.log()
    );
    forwarder.switch(true);
    let slots = all_assigned(&a.ns, SEQUENCE, &uids, LIMIT)
        .await
        .with_context(|| a.log())?;
    let after: Vec<(k8s_openapi::api::core::v1::Pod, u32)> = pending
        .into_iter()
        .filter_map(|p| {
            let slot = slots.get(&p.uid().unwrap_or_default()).copied()?;
            Some((p, slot))
        })
        .collect();
    let raised = fences_raised(&a).await?;
    eprintln!(
        "restore: the new pod got slot {:?} {:?} after the restore began; FencesRaised {raised:?}",
        after.iter().map(|(_, slot)| slot).collect::<Vec<_>>(),
        restoring.elapsed()
    );
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
