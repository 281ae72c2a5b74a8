//! The operator's membership task against a real API server (docs/design/2026-11-29-multicluster.md,
//! plan step 2): ONE control plane is both the hub and the member. The hub's objects are
//! the generated ones (crds/idspace.yaml; the hub policy of `kubeflake_crds::id_space::hub_policy`,
//! which crds/idspace-hub-policy.yaml is generated from, bound to the hub namespace only);
//! the member reaches the hub through a ServiceAccount token kubeconfig stored in a Secret,
//! so every registry write passes the hub's RBAC and admission policy as a member's would.
//! An operator (the real binary, `--hub-secret-namespace`) joins an IdSequence through its
//! IdSpaceMembership, claims a block and, with pods holding slots, a spare; a second
//! sequence's membership of the same space is refused by the operator (SpaceJoinedTwice),
//! and the same cluster ID under another name (a second operator that cannot see the first
//! membership, as a cloned cluster) by the hub (JoinRefused), each saying what to fix; a membership whose Secret is missing says which Secret; the dashboard's ID
//! space row returns series on a real Prometheus scraping the operator. Pods are API objects
//! only (no kubelet), as in the other operator tests. The hub and member set-up is
//! e2e/tests/hub_support/ (shared with the three-control-plane suite, id_space_clusters.rs).

mod hub_support;
mod operator_support;
mod policy_support;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hub_support::{Hub, SPACE, condition, held, install_crds, membership, ready_is, secret};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kubeflake_crds::id_space::membership::GrantRecord;
use kubeflake_crds::id_space::{IdSpaceMembership, IdSpaceSpec, RegistryRecord, SpaceSequenceSpec};
use kubeflake_e2e::dashboard;
use kubeflake_e2e::prometheus::{Prometheus, Target};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::{Operator, all_assigned, create_pods, create_sequence, eventually};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(40);

/// Waits until membership `name`'s Ready condition is False with `reason`; returns it.
async fn refused(ns: &TestNamespace, name: &str, reason: &str) -> Result<IdSpaceMembership> {
    ready_is(ns, name, "False", reason, LIMIT).await
}

/// Waits until a Warning Event with `reason` regards membership `name` in `ns`.
async fn warning_event(ns: &TestNamespace, name: &str, reason: &str) -> Result<()> {
    let events = Api::<Event>::namespaced(ns.client.clone(), &ns.name);
    eventually(LIMIT, &format!("a Warning Event {reason}"), || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .then_some(()))
    })
    .await
}

/// The hub's blocks held by `member`, and whether each of `grants` is one of them with a
/// bound at least the copy's (the hub held it before the copy used it: rule 17).
fn check_copy(registry: &RegistryRecord, member: &str, grants: &[GrantRecord]) -> Result<()> {
    for grant in grants {
        let hub_block = registry
            .blocks
            .iter()
            .find(|b| b.index == grant.block)
            .with_context(|| format!("granted block {} is not on the hub", grant.block))?;
        ensure!(
            hub_block.owner.as_deref() == Some(member) && hub_block.bound >= Some(grant.bound),
            "the copy's grant is not what the hub holds for this member: {grant:?} {hub_block:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn rule17_19_20_a_sequence_joins_its_id_space_and_holds_a_block_and_a_spare_and_a_second_membership_of_the_cluster_is_refused()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crds(cluster).await?;
    let hub = Hub::create(
        cluster,
        "hub",
        IdSpaceSpec::new(SpaceSequenceSpec::default(), 64),
    )
    .await?;
    let hub_ns = &hub.ns;
    let kubeconfig = hub.add_member("prod", None).await?;
    let ops = cluster.namespace("ops").await?;
    secret(&ops, "kubeflake-hub-orders", &kubeconfig).await?;
    let member = cluster.namespace("shop").await?;
    create_sequence(&member, "orders", json!({})).await?;
    create_sequence(&member, "orders-copy", json!({})).await?;
    let operator = Operator::start_with(
        cluster,
        &member.name,
        "hub",
        &["--hub-secret-namespace", &ops.name],
    )?;
    let log = || operator.process.log_tail(60);
    let this = Api::<Namespace>::all(cluster.client()?)
        .get("kube-system")
        .await?
        .metadata
        .uid
        .context("kube-system has a UID")?;
    let spaces = hub.spaces();
    let space_uid = spaces.get(SPACE).await?.metadata.uid.context("a UID")?;
    let memberships = Api::<IdSpaceMembership>::namespaced(member.client.clone(), &member.name);
    membership(
        &member,
        "orders",
        "orders",
        "prod",
        &hub_ns.name,
        "kubeflake-hub-orders",
    )
    .await?;

    // The join and one block; no pod holds a slot, so the contact wants no spare.
    let status = eventually(LIMIT, "the membership joined with one block", || async {
        let m = memberships.get("orders").await?;
        let joined = condition(&m, "Ready").is_some_and(|(s, r, _)| s == "True" && r == "Joined");
        let no_spare = condition(&m, "BlocksLow").is_some_and(|(s, _, _)| s == "False");
        Ok(m.status
            .filter(|s| joined && no_spare && s.grants.len() == 1))
    })
    .await
    .with_context(log)?;
    let registry = spaces.get(SPACE).await?.spec.registry;
    ensure!(
        registry.members.len() == 1
            && registry
                .members
                .iter()
                .any(|m| m.id == this && m.name == "prod" && m.generation >= 1),
        "the hub lists the member by its kube-system UID: {registry:?}"
    );
    ensure!(
        held(&registry, &this) == 1,
        "one block on the hub: {registry:?}"
    );
    ensure!(
        status.member_id.as_deref() == Some(this.as_str())
            && status.id_space_uid.as_deref() == Some(space_uid.as_str())
            && status.generation >= 1
            && status.revision_seen >= 1,
        "the copy names this cluster, the hub's IdSpace and what it saw: {status:?}"
    );
    check_copy(&registry, &this, &status.grants)?;

    // Pods hold slots: fewer than a block's worth left, so a spare is claimed (rule 19).
    let pods = create_pods(&member, "orders", "app", 2).await?;
    let uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    all_assigned(&member, "orders", &uids, LIMIT)
        .await
        .with_context(log)?;
    let status = eventually(LIMIT, "the membership holds a spare", || async {
        Ok(memberships
            .get("orders")
            .await?
            .status
            .filter(|s| s.grants.len() == 2))
    })
    .await
    .with_context(log)?;
    let registry = spaces.get(SPACE).await?.spec.registry;
    ensure!(
        held(&registry, &this) == 2,
        "a block and a spare: {registry:?}"
    );
    check_copy(&registry, &this, &status.grants)?;

    // What the operator exports for the membership (docs/multicluster.md, "Metrics and
    // alerts"): two blocks, one of them spare for two pods, the bound a tolerance and a
    // renewal period ahead at most (so more than half the tolerance: no alert), Joined.
    let of = |m: &str, rest: &str| {
        format!(
            r#"membership="{m}",membership_namespace="{}"{rest}"#,
            member.name
        )
    };
    let metric = |name: &str, rest: &str| operator.metric_with(name, &of("orders", rest));
    let blocks = "kubeflake_operator_id_space_blocks_held";
    eventually(LIMIT, "the metrics show two blocks", || async {
        Ok((metric(blocks, "") == 2.0).then_some(()))
    })
    .await
    .with_context(log)?;
    let bound = metric("kubeflake_operator_id_space_nearest_bound_seconds", "");
    ensure!(
        metric("kubeflake_operator_id_space_spare_blocks", "") == 1.0
            && metric("kubeflake_operator_id_space_tolerance_seconds", "") == 3600.0
            && bound > 1800.0
            && bound <= 3900.0
            && metric(
                "kubeflake_operator_id_space_ready_reason",
                r#",reason="Joined""#
            ) == 1.0
            && metric(
                "kubeflake_operator_id_space_hub_calls_total",
                r#",outcome="ok""#
            ) >= 3.0,
        "the membership's metrics:\n{}",
        operator.metrics()
    );
    // The dashboard's ID space row: every query returns a series with a value on a real
    // Prometheus scraping this operator (e2e prometheus checks the other rows).
    let prom = Prometheus::start(
        &[Target::new("kubeflake-operator", operator.metrics_port)
            .label("namespace", &member.name)],
        None,
    )?;
    let queries = dashboard::queries(|row| row == dashboard::ID_SPACE_ROW)?;
    ensure!(
        queries.len() >= 6,
        "the ID space row's queries: {queries:?}"
    );
    let ns = member.name.clone();
    tokio::task::spawn_blocking(move || {
        dashboard::wait_every_query(&prom, &queries, &ns, Duration::from_secs(90))
    })
    .await??;

    // Rule 20, inside one cluster: a second sequence's membership joining the same space is
    // refused by this cluster's operator, saying what to fix, and never reaches the hub.
    membership(
        &member,
        "orders-copy",
        "orders-copy",
        "prod-copy",
        &hub_ns.name,
        "kubeflake-hub-orders",
    )
    .await?;
    let copy = refused(&member, "orders-copy", "SpaceJoinedTwice")
        .await
        .with_context(log)?;
    let (_, _, message) = condition(&copy, "Ready").context("Ready")?;
    ensure!(
        message.contains("joins the same ID space as")
            && message.contains(&format!("{}/orders", member.name))
            && message.contains("delete one of the two memberships"),
        "the refusal says what to fix: {message}"
    );
    ensure!(
        copy.status
            .as_ref()
            .is_some_and(|s| s.grants.is_empty() && s.member_id.is_none())
            && copy.finalizers().is_empty(),
        "a membership never contacted keeps no copy and no finalizer: {copy:?}"
    );
    let twice = of("orders-copy", r#",reason="SpaceJoinedTwice""#);
    ensure!(
        operator.metric_with("kubeflake_operator_id_space_ready_reason", &twice) == 1.0,
        "the refusal is exported ({twice}):\n{}",
        operator.metrics()
    );
    warning_event(&member, "orders-copy", "SpaceJoinedTwice")
        .await
        .with_context(log)?;

    // Rule 20 at the hub: the same cluster ID under another member name, as a cloned
    // cluster (the same kube-system UID) would join, here through a second operator that
    // watches another namespace only, so it cannot see the first membership. The hub
    // refuses it, saying what to fix, and nothing is written there for it.
    let clone = cluster.namespace("shop-clone").await?;
    create_sequence(&clone, "orders", json!({})).await?;
    let clone_operator = Operator::start_with(
        cluster,
        &clone.name,
        "hub-clone",
        &["--hub-secret-namespace", &ops.name],
    )?;
    let clone_log = || clone_operator.process.log_tail(60);
    membership(
        &clone,
        "orders",
        "orders",
        "prod-copy",
        &hub_ns.name,
        "kubeflake-hub-orders",
    )
    .await?;
    let cloned = refused(&clone, "orders", "JoinRefused")
        .await
        .with_context(clone_log)?;
    let (_, _, message) = condition(&cloned, "Ready").context("Ready")?;
    ensure!(
        message.contains("is already member prod")
            && message.contains("join with that name")
            && message.contains("ClusterProperty"),
        "the refusal says what to fix: {message}"
    );
    let status = cloned.status.unwrap_or_default();
    ensure!(
        status.grants.is_empty() && status.member_id.is_none(),
        "a refused membership keeps no copy: {status:?}"
    );
    let refusal = format!(
        r#"membership="orders",membership_namespace="{}",reason="JoinRefused""#,
        clone.name
    );
    ensure!(
        clone_operator.metric_with("kubeflake_operator_id_space_ready_reason", &refusal) == 1.0,
        "the refusal is exported ({refusal}):\n{}",
        clone_operator.metrics()
    );
    warning_event(&clone, "orders", "JoinRefused")
        .await
        .with_context(clone_log)?;
    let registry = spaces.get(SPACE).await?.spec.registry;
    ensure!(
        registry.members.len() == 1 && held(&registry, &this) == 2,
        "nothing was written on the hub for either refused membership: {registry:?}"
    );
    drop(clone_operator);

    // A missing hub Secret: the condition names it, and nothing is kept or written.
    membership(
        &member,
        "orders-lost",
        "orders",
        "prod",
        &hub_ns.name,
        "kubeflake-hub-missing",
    )
    .await?;
    let lost = refused(&member, "orders-lost", "HubUnreachable")
        .await
        .with_context(log)?;
    let (_, _, message) = condition(&lost, "Ready").context("Ready")?;
    ensure!(
        message.contains(&format!(
            "hub Secret {}/kubeflake-hub-missing does not exist",
            ops.name
        )),
        "the condition names the missing Secret: {message}"
    );
    ensure!(
        lost.status.unwrap_or_default().grants.is_empty(),
        "no copy without a hub"
    );
    let registry = spaces.get(SPACE).await?.spec.registry;
    ensure!(
        registry.members.len() == 1 && held(&registry, &this) == 2,
        "nothing was written on the hub: {registry:?}"
    );
    Ok(())
}
