//! One ID space with a member on the real node (docs/design/2026-11-29-multicluster.md,
//! plan step 4, "the real-node test"; issue 55). The member is the node's cluster with the
//! chart installed the way docs/multicluster.md tells a user to (`idSpace.hubSecrets`, the
//! hub Secret in the release namespace, an IdSpaceMembership beside the IdSequence): its
//! operator runs in pods, the webhook injects the sidecar, and the example app's pods
//! serve IDs over `$KUBEFLAKE_URL`. The hub is a second control plane
//! (e2e/tests/hub_support/on_node.rs), reached from the operator pods through a forwarder
//! on the node's bridge address; it is also the other member, as in the
//! three-control-plane suite (e2e/tests/clusters_support/): its own IdSequence, operator
//! process and a cluster-mode sidecar issuing into a Collector the whole time the app's
//! pods issue. The rules named are those of docs/safety.md.

mod chart_support;
mod clusters_support;
mod hub_support;
mod node_support;
mod operator_support;
mod policy_support;
mod sidecar_support;

use std::collections::{BTreeMap, HashSet};

use anyhow::{Context, Result, ensure};
use clusters_support::{Member, SEQUENCE};
use hub_support::on_node::{HUB_SECRET, NodeHub, hub_secrets_value};
use hub_support::{condition, membership, ready_is};
use kube::Api;
use kubeflake_crds::id_space::membership::GrantRecord;
use kubeflake_crds::id_space::{IdSpaceMembership, IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::{Id, Layout};
use kubeflake_e2e::{Cluster, TestNamespace};
use node_support::{
    LIMIT, Ledger, RELEASE, RELEASE_NAMESPACE, app_deployment, apply, helm_install,
    ids_of_every_ready_pod, namespace_state, rollout,
};
use operator_support::{create_sequence, eventually};
use serde_json::json;

/// Blocks of 4 slots: the app's 3 pods leave one free slot in the first block, so the
/// member claims a spare at once (rule 19), and growing to 6 pods takes slots in it.
const BLOCK_SLOTS: i64 = 4;
const APP: &str = "app";

/// Each ID's slot lies in a block the member's copy grants, its tick above that grant's
/// floor and at or below its bound; returns the slots seen, per pod.
fn check_inside_grants(
    layout: &Layout,
    grants: &[GrantRecord],
    ids: impl Iterator<Item = (String, u64)>,
) -> Result<BTreeMap<String, Vec<u32>>> {
    let mut slots: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (pod, id) in ids {
        let parts = layout.decode(Id::new(id)?)?;
        let slot = parts.slot.0;
        let block = i64::from(slot) / BLOCK_SLOTS;
        let grant = grants.iter().find(|g| g.block == block).with_context(|| {
            format!("{pod} issued {id} in slot {slot}, block {block}, not granted: {grants:?}")
        })?;
        let tick = i64::try_from(parts.tick.0)?;
        ensure!(
            tick > grant.floor && tick <= grant.bound,
            "{pod} issued {id} at tick {tick}, outside its grant {grant:?}"
        );
        let seen = slots.entry(pod).or_default();
        if !seen.contains(&slot) {
            seen.push(slot);
        }
    }
    Ok(slots)
}

async fn copy_of(ns: &TestNamespace) -> Result<IdSpaceMembership> {
    Ok(
        Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name)
            .get(SEQUENCE)
            .await?,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule17_19_the_example_app_on_a_member_on_the_node_issues_only_in_its_blocks_without_repeating_another_members_ids_and_starts_pods_with_the_hub_away()
-> Result<()> {
    // The hub's control plane starts beside the node.
    let hub_start = std::thread::spawn(|| {
        hub_support::on_node::hub_cluster()
            .map(drop)
            .map_err(|e| format!("{e:#}"))
    });
    let cluster: &'static Cluster = Cluster::shared_with_node();
    hub_start
        .join()
        .map_err(|_| anyhow::anyhow!("starting the hub panicked"))?
        .map_err(anyhow::Error::msg)?;
    let node_hub =
        NodeHub::start(IdSpaceSpec::new(SpaceSequenceSpec::default(), BLOCK_SLOTS)).await?;

    // The other member: the hub's own cluster, with one pod holding a slot.
    let mut other = Member::join(node_hub.cluster, "central", &node_hub.hub, None).await?;
    let pods = other.pods("central", 1).await?;

    // The member on the node, as docs/multicluster.md's step 3 installs it.
    helm_install(cluster, RELEASE, RELEASE_NAMESPACE, &[&hub_secrets_value()]).await?;
    node_hub
        .add_node_member(cluster, RELEASE_NAMESPACE, "node")
        .await?;
    let ns = cluster.namespace("id-space-node").await?;
    let layout = create_sequence(&ns, SEQUENCE, json!({}))
        .await?
        .spec
        .params()?
        .layout;
    let hub_ns = node_hub.hub.ns.name.clone();
    membership(&ns, SEQUENCE, SEQUENCE, "node", &hub_ns, HUB_SECRET).await?;
    let operator_logs = || async {
        let logs = cluster
            .kubectl(&[
                "logs",
                "-n",
                RELEASE_NAMESPACE,
                "-l",
                "app.kubernetes.io/component=operator",
                "--tail=40",
                "--prefix",
            ])
            .await;
        let logs = logs.map(|o| o.stdout + &o.stderr).unwrap_or_default();
        format!(
            "{logs}\n{}",
            namespace_state(cluster, RELEASE_NAMESPACE).await
        )
    };
    if let Err(e) = ready_is(&ns, SEQUENCE, "True", "Joined", LIMIT).await {
        return Err(e.context(operator_logs().await));
    }

    // The other member's sidecar issues from now until every pod of the app has issued.
    other.serve(&pods).await?;
    // The example app in 3 pods; the member claims a spare beside their block.
    apply(cluster, &ns.name, &app_deployment(APP, SEQUENCE, 3)).await?;
    rollout(cluster, &ns.name, APP).await?;
    let ledger = Ledger::default();
    ids_of_every_ready_pod(&ns, APP, 3, &ledger).await?;
    let held = eventually(
        LIMIT,
        "the node member holds a block and a spare",
        || async {
            let m = copy_of(&ns).await?;
            let joined =
                condition(&m, "Ready").is_some_and(|(s, r, _)| s == "True" && r == "Joined");
            Ok(m.status.filter(|s| joined && s.grants.len() == 2))
        },
    )
    .await?;

    // The hub away (the forwarder off): pods still start, take slots in the spare and
    // issue; nothing waits on the hub.
    node_hub.forwarder.switch(false);
    ready_is(&ns, SEQUENCE, "False", "HubUnreachable", LIMIT).await?;
    cluster
        .kubectl(&["scale", "-n", &ns.name, "deployment/app", "--replicas=6"])
        .await?
        .ok()?;
    rollout(cluster, &ns.name, APP).await?;
    ids_of_every_ready_pod(&ns, APP, 6, &ledger).await?;
    let away = copy_of(&ns).await?;
    ensure!(
        condition(&away, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "HubUnreachable"),
        "the hub stayed away while the pods started: {:?}",
        away.status
    );

    // Every ID of both members once; each member's inside its own blocks.
    other.finish();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut duplicates = ledger.duplicates();
    for pod in ledger.pod_names() {
        seen.extend(ledger.of(&pod));
    }
    let mut other_count = 0;
    for issued in &other.issued {
        for &id in issued.data.segments.iter().flatten() {
            other_count += 1;
            if !seen.insert(id) && duplicates.len() < 10 {
                duplicates.push(format!("{id} from central/{}", issued.pod));
            }
        }
    }
    ensure!(other_count > 0, "the other member issued nothing");
    ensure!(
        duplicates.is_empty(),
        "duplicates across the members (the first 10): {duplicates:?}"
    );
    let grants = away.status.clone().context("a copy")?.grants;
    let node_pods = ledger.pod_names();
    let node_slots = check_inside_grants(
        &layout,
        &grants,
        node_pods
            .iter()
            .flat_map(|p| ledger.of(p).into_iter().map(move |id| (p.clone(), id))),
    )?;
    ensure!(
        node_slots.len() == 6 && node_slots.values().all(|s| s.len() == 1),
        "6 pods, one slot each: {node_slots:?}"
    );
    ensure!(
        grants.len() == 2 && held.grants.len() == 2,
        "a block and the spare, before and after the pods started: {:?} {grants:?}",
        held.grants
    );
    let other_copy = other.status().await?.status.context("a copy")?;
    let other_ids = other.issued.iter().flat_map(|i| {
        let pod = format!("central/{}", i.pod);
        i.data
            .segments
            .iter()
            .flatten()
            .map(move |&id| (pod.clone(), id))
    });
    check_inside_grants(other.layout(), &other_copy.grants, other_ids)?;
    let registry = node_hub.hub.registry().await?;
    for grant in &grants {
        ensure!(
            !other_copy.grants.iter().any(|g| g.block == grant.block),
            "both members hold block {}: {registry:?}",
            grant.block
        );
    }
    println!(
        "{} IDs from the node's pods and {other_count} from the other member's, 0 duplicates; node member's blocks {:?}, pods' slots {node_slots:?}; other member's blocks {:?}",
        ledger.len(),
        grants.iter().map(|g| g.block).collect::<Vec<_>>(),
        other_copy
            .grants
            .iter()
            .map(|g| g.block)
            .collect::<Vec<_>>()
    );
    Ok(())
}
