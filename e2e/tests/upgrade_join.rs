//! An existing install joins an ID space after an upgrade, on the real node (issue 55's
//! acceptance; docs/multicluster.md, "Joining an existing install"): the previous release
//! (`releases.txt`, built from its commit) runs an IdSequence with the default layout and
//! the example app issuing IDs; `helm upgrade` to this tree with the hub Secret listed
//! (`idSpace.hubSecrets`); a hub on a second control plane (`Cluster::start`, loopback)
//! whose IdSpace has the same layout, reached by the operator pod through a forwarder on
//! the node's bridge address (no network rule changed, nothing leaves the machine); the
//! IdSpaceMembership created. Then:
//! - the sequence joined as it is: its spec and generation unchanged, the slots its pods
//!   held inside the member's blocks, every ID decoding with the default layout;
//! - the pods the previous release injected keep the slot they held and keep serving, and
//!   their Leases get the fence cap, which the API server's Lease policy holds their old
//!   sidecars to (they do not know it); they get no new slot (rule 15);
//! - the membership carries the finalizer `kubeflake.io/id-space-blocks`, the IdSequence
//!   the condition `IdSpace=True`, beside the old sidecars;
//! - pods re-created after the upgrade get slots inside the member's blocks, with caps;
//! - no ID repeats, before, during and after (IDs collected all along).

mod chart_support;
mod hub_support;
mod node_support;
mod operator_support;
mod policy_support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::OnceLock;

use anyhow::{Context, Result, ensure};
use hub_support::forwarder::Forwarder;
use hub_support::{Hub, install_crds, membership, ready_is, secret};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::contract::INJECTED_ANNOTATION;
use kubeflake_crds::id_space::{IdSpaceMembership, IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::slot_lease::SlotLease;
use kubeflake_crds::{IdSequence, Layout};
use kubeflake_e2e::release::Release;
use kubeflake_e2e::{Cluster, TestNamespace};
use node_support::{
    LIMIT, Ledger, RELEASE, RELEASE_NAMESPACE, app_deployment, apply, collect_in_background,
    ids_of_every_ready_pod, image_values, one_at_a_time, ready_pods, rollout, slot_of,
};
use operator_support::{create_sequence, eventually, slot_leases};
use serde_json::json;

const ORDERS: &str = "orders";
const WEB: &str = "web";
const HUB_SECRET: &str = "kubeflake-hub-orders";
const MEMBER: &str = "node";
/// 16 blocks of 64 slots with the default layout's 10 worker bits.
const BLOCK_SLOTS: u32 = 64;
/// The finalizer the membership task adds (operator/src/hub/leave.rs).
const BLOCKS_FINALIZER: &str = "kubeflake.io/id-space-blocks";
/// This tree's version: what the new webhook writes in the injected annotation.
const CURRENT: &str = env!("CARGO_PKG_VERSION");

/// The hub's control plane, started once per test binary beside the node's; stopped by
/// the exit hook, as the shared one is.
fn hub_cluster() -> Result<&'static Cluster> {
    static HUB: OnceLock<Result<Cluster, String>> = OnceLock::new();
    Cluster::started_once(&HUB, "the hub")
}

/// `helm <verb> kf <chart> --wait` with `values`, then the operator's rollout.
async fn helm(cluster: &Cluster, verb: &str, chart: &str, values: &[String]) -> Result<()> {
    node_support::helm_wait(cluster, verb, RELEASE, chart, RELEASE_NAMESPACE, values).await?;
    rollout(
        cluster,
        RELEASE_NAMESPACE,
        &chart_support::fullname(RELEASE),
    )
    .await
}

/// `replicas` ready pods of the app, every one injected by `version`.
async fn pods_of(ns: &TestNamespace, replicas: usize, version: &str) -> Result<Vec<Pod>> {
    eventually(
        LIMIT,
        &format!("{replicas} ready pods of {WEB} injected by {version}"),
        || async {
            let pods = ready_pods(ns, WEB).await?;
            let all = pods.len() == replicas
                && pods.iter().all(|p| {
                    p.annotations().get(INJECTED_ANNOTATION).map(String::as_str) == Some(version)
                });
            Ok(all.then_some(pods))
        },
    )
    .await
}

/// The slot each of `pods` holds (exactly one each), from the slot Leases.
async fn slots_of(ns: &TestNamespace, pods: &[Pod]) -> Result<Vec<(String, SlotLease)>> {
    let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
    eventually(LIMIT, "each pod holding one slot", || async {
        let leases = slot_leases(ns, ORDERS).await?;
        let held: Vec<_> = leases
            .into_iter()
            .filter(|l| l.holder.as_ref().is_some_and(|h| uids.contains(h)))
            .collect();
        Ok((held.len() == uids.len()).then(|| {
            held.into_iter()
                .map(|l| (l.holder_pod.clone().unwrap_or_default(), l))
                .collect()
        }))
    })
    .await
}

/// The blocks the membership's copy holds.
async fn blocks_held(ns: &TestNamespace) -> Result<BTreeSet<u32>> {
    let m = Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name)
        .get(ORDERS)
        .await?;
    let status = m.status.context("the membership has no status")?;
    Ok(status.grants.iter().map(|g| g.block as u32).collect())
}

/// Whether the Lease's holder renewed it after `since`.
fn renewed_after(lease: &SlotLease, since: k8s_openapi::jiff::Timestamp) -> bool {
    let renew = lease.read.spec.as_ref().and_then(|s| s.renew_time.as_ref());
    renew.is_some_and(|t| t.0 > since)
}

fn block_of(slot: u32) -> u32 {
    slot / BLOCK_SLOTS
}

#[tokio::test]
async fn rule15_17_an_install_of_the_previous_release_upgraded_and_joined_to_a_hub_keeps_its_layout_and_repeats_no_id()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = Cluster::shared_with_node();
    // The hub's control plane starts while the previous release's images load.
    let hub_started = tokio::task::spawn_blocking(|| hub_cluster().map(|_| ()));
    let previous = tokio::task::spawn_blocking(|| -> Result<Release> {
        let release = Release::previous()?;
        release.load_into_node()?;
        Ok(release)
    })
    .await??;
    ensure!(
        previous.version != CURRENT,
        "releases.txt's newest is this tree"
    );
    eprintln!("upgrade-join: from {} to {CURRENT}", previous.version);

    // 1. The previous release, a sequence with the default layout, its app serving IDs.
    let old_chart = previous.chart().to_string_lossy().into_owned();
    let old_images = image_values(&previous.image("operator"), &previous.image("sidecar"));
    helm(cluster, "install", &old_chart, &old_images).await?;
    let ns = cluster.namespace("upgrade-join").await?;
    create_sequence(&ns, ORDERS, json!({})).await?;
    apply(cluster, &ns.name, &app_deployment(WEB, ORDERS, 2)).await?;
    rollout(cluster, &ns.name, WEB).await?;
    let old_pods = pods_of(&ns, 2, &previous.version).await?;
    let sequences: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let before = sequences.get(ORDERS).await?;
    let ledger = Ledger::default();
    let (stop_collecting, collector) =
        collect_in_background(ns.clone(), WEB.to_owned(), ledger.clone());
    ids_of_every_ready_pod(&ns, WEB, 2, &ledger).await?;
    let old_slots = slots_of(&ns, &old_pods).await?;

    // 2. The hub: a second control plane, its IdSpace with the same (default) layout, a
    //    member account whose kubeconfig names the forwarder on the node's bridge.
    hub_started.await??;
    let hub_cluster = hub_cluster()?;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(
        hub_cluster,
        "space",
        IdSpaceSpec::new(SpaceSequenceSpec::default(), i64::from(BLOCK_SLOTS)),
    )
    .await?;
    let bridge = IpAddr::V4(kubeflake_e2e::addresses::BRIDGE_IP);
    let forwarder = Forwarder::start_on(bridge, hub_cluster.server()).await?;
    let kubeconfig = hub.add_member(MEMBER, Some(&forwarder.server())).await?;
    let release_ns = TestNamespace {
        name: RELEASE_NAMESPACE.to_owned(),
        client: cluster.client()?,
    };
    secret(&release_ns, HUB_SECRET, &kubeconfig).await?;

    // 3. The upgrade: CRDs first (helm never upgrades crds/), the hub Secret listed.
    cluster
        .kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &format!("{}/crds", chart_support::CHART),
        ])
        .await?
        .ok()?;
    let mut new_values = image_values(
        kubeflake_e2e::node::OPERATOR_IMAGE,
        kubeflake_e2e::node::SIDECAR_IMAGE,
    );
    new_values.push(format!("idSpace.hubSecrets={{{HUB_SECRET}}}"));
    helm(cluster, "upgrade", chart_support::CHART, &new_values).await?;
    ids_of_every_ready_pod(&ns, WEB, 2, &ledger).await?;

    // 4. The join.
    membership(&ns, ORDERS, ORDERS, MEMBER, &hub.ns.name, HUB_SECRET).await?;
    let joined = ready_is(&ns, ORDERS, "True", "Joined", LIMIT).await;
    let joined = match joined {
        Ok(m) => m,
        Err(e) => {
            let state = node_support::namespace_state(cluster, RELEASE_NAMESPACE).await;
            let logs = cluster
                .kubectl(&[
                    "logs",
                    "-n",
                    RELEASE_NAMESPACE,
                    "deployment/kf-kubeflake",
                    "--tail=40",
                ])
                .await
                .map(|o| o.stdout)
                .unwrap_or_default();
            return Err(e.context(format!("{state}\noperator log:\n{logs}")));
        }
    };
    let mut problems = Vec::new();
    if !joined.finalizers().iter().any(|f| f == BLOCKS_FINALIZER) {
        problems.push(format!(
            "the membership has no {BLOCKS_FINALIZER}: {:?}",
            joined.finalizers()
        ));
    }
    let held = blocks_held(&ns).await?;
    eprintln!("upgrade-join: joined, blocks held {held:?}");
    let after = eventually(LIMIT, "the IdSequence's IdSpace condition True", || async {
        let seq = sequences.get(ORDERS).await?;
        let in_space = condition(seq.status.as_ref(), ConditionType::IdSpace)
            .is_some_and(|c| c.status == "True");
        Ok(in_space.then_some(seq))
    })
    .await?;
    ensure!(
        serde_json::to_value(&after.spec)? == serde_json::to_value(&before.spec)?
            && after.metadata.generation == before.metadata.generation,
        "the join changed the sequence: {:?} -> {:?}",
        before.spec,
        after.spec
    );
    for (pod, lease) in &old_slots {
        if !held.contains(&block_of(lease.slot.0)) {
            problems.push(format!("{pod}'s slot {} is in no block held", lease.slot.0));
        }
    }

    // 5. The previous release's pods: they keep their slots and serve; their Leases get
    //    the cap the Lease policy holds their sidecars to.
    let capped = eventually(LIMIT, "the old pods' Leases capped", || async {
        let now = slots_of(&ns, &old_pods).await?;
        let same = now
            .iter()
            .zip(&old_slots)
            .all(|(a, b)| a.1.slot == b.1.slot);
        let capped = now.iter().all(|(_, l)| l.fence_cap.is_some());
        Ok((same && capped).then_some(now))
    })
    .await;
    match capped {
        Ok(leases) => {
            eprintln!(
                "upgrade-join: old pods keep slots {:?}, capped at {:?}",
                leases.iter().map(|(_, l)| l.slot.0).collect::<Vec<_>>(),
                leases.iter().map(|(_, l)| l.fence_cap).collect::<Vec<_>>()
            );
            // Their sidecars renew through the cap (a renewal keeps annotations it does
            // not know, and its fence stays below the cap): the Lease policy admits them.
            let since = k8s_openapi::jiff::Timestamp::now();
            let renewed = eventually(LIMIT, "the old sidecars renewing under the cap", || async {
                let now = slots_of(&ns, &old_pods).await?;
                Ok(now
                    .iter()
                    .all(|(_, l)| l.fence_cap.is_some() && renewed_after(l, since))
                    .then_some(()))
            })
            .await;
            if let Err(e) = renewed {
                problems.push(format!("the previous release's sidecars: {e:#}"));
            }
        }
        Err(e) => {
            let now = slot_leases(&ns, ORDERS).await?;
            problems.push(format!(
                "the previous release's pods' Leases: {e:#}; now {:?}",
                now.iter()
                    .map(|l| (l.slot.0, l.holder_pod.clone(), l.fence_cap))
                    .collect::<Vec<_>>()
            ));
        }
    }
    ids_of_every_ready_pod(&ns, WEB, 2, &ledger).await?;

    // 6. The pods re-created: this tree's sidecar, slots inside the member's blocks.
    cluster
        .kubectl(&["rollout", "restart", "deployment", WEB, "-n", &ns.name])
        .await?
        .ok()?;
    rollout(cluster, &ns.name, WEB).await?;
    let new_pods = pods_of(&ns, 2, CURRENT).await?;
    let new_slots = slots_of(&ns, &new_pods).await?;
    let held = blocks_held(&ns).await?;
    for (pod, lease) in &new_slots {
        if !held.contains(&block_of(lease.slot.0)) || lease.fence_cap.is_none() {
            problems.push(format!(
                "{pod} holds slot {} (cap {:?}) outside blocks {held:?}",
                lease.slot.0, lease.fence_cap
            ));
        }
    }
    ids_of_every_ready_pod(&ns, WEB, 2, &ledger).await?;
    let layout = Layout::default();
    for pod in &new_pods {
        let name = pod.name_any();
        let slot = new_slots
            .iter()
            .find(|(p, _)| *p == name)
            .map(|(_, l)| l.slot.0);
        for id in ledger.of(&name) {
            let decoded = slot_of(&layout, id)?;
            if Some(decoded) != slot {
                problems.push(format!(
                    "{name}'s ID {id} decodes to slot {decoded}, it holds {slot:?}"
                ));
                break;
            }
        }
    }

    let _ = stop_collecting.send(());
    let (answered, failed) = collector.await?;
    eprintln!(
        "upgrade-join: {} IDs from {} pods ({answered} answers, {failed} failed), {} duplicates",
        ledger.len(),
        ledger.pods(),
        ledger.duplicates().len()
    );
    problems.extend(
        ledger
            .duplicates()
            .into_iter()
            .map(|d| format!("duplicate {d}")),
    );

    // The blocks go back to the hub with the membership (the finalizer's work).
    Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name)
        .delete(ORDERS, &DeleteParams::default())
        .await?;
    node_support::delete_namespace(cluster, &ns).await;
    drop(forwarder);
    ensure!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}
