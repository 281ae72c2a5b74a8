//! The operator's membership task against a real API server (docs/design/2026-11-29-multicluster.md,
//! plan step 2): ONE control plane is both the hub and the member. The hub's objects are
//! the generated ones (crds/idspace.yaml; the hub policy of `kubeflake_crds::id_space::hub_policy`,
//! which crds/idspace-hub-policy.yaml is generated from, bound to the hub namespace only);
//! the member reaches the hub through a ServiceAccount token kubeconfig stored in a Secret,
//! so every registry write passes the hub's RBAC and admission policy as a member's would.
//! An operator (the real binary, `--hub-secret-namespace`) joins an IdSequence through its
//! IdSpaceMembership, claims a block and, with pods holding slots, a spare; a second
//! membership of the same cluster under another name is refused (JoinRefused, saying what
//! to fix); a membership whose Secret is missing says which Secret. Pods are API objects
//! only (no kubelet), as in the other operator tests.

mod operator_support;
mod policy_support;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeflake_crds::id_space::hub_policy::{self, MEMBER_ACCOUNT_PREFIX};
use kubeflake_crds::id_space::membership::GrantRecord;
use kubeflake_crds::id_space::{
    IdSpace, IdSpaceMembership, IdSpaceSpec, RegistryRecord, SpaceSequenceSpec,
};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::{
    Operator, all_assigned, create_pods, create_sequence, eventually, install_crd,
};
use policy_support::{service_account, token};
use serde_json::json;

const SPACE: &str = "orders";
const LIMIT: Duration = Duration::from_secs(40);

async fn cluster() -> Result<&'static Cluster> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds");
    for (file, name) in [
        ("idspace.yaml", "idspaces.kubeflake.io"),
        ("idspacemembership.yaml", "idspacememberships.kubeflake.io"),
    ] {
        let path = crds.join(file);
        cluster
            .kubectl(&["apply", "--server-side", "-f", &path.to_string_lossy()])
            .await?
            .ok()
            .with_context(|| format!("kubectl apply of crds/{file}"))?;
        cluster.wait_crd_established(name).await?;
    }
    Ok(cluster)
}

/// The hub's namespace with the space, its policy, and member `name`'s account and Role;
/// returns the member's kubeconfig (token and CA inline, as `hub add-member` will print).
async fn hub(cluster: &'static Cluster, member: &str) -> Result<(TestNamespace, String)> {
    let ns = cluster.namespace("hub").await?;
    let n = ns.name.clone();
    let admin = cluster.client()?;
    let policy = format!("{}-{n}", hub_policy::POLICY_NAME);
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &hub_policy::policy(&policy))
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(admin)
        .create(
            &PostParams::default(),
            &hub_policy::binding(&policy, &policy, Some(&n)),
        )
        .await?;
    // The design's Role: the one IdSpace, get and update (compare-and-swap) only.
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "kubeflake-member"},
        "rules": [{"apiGroups": ["kubeflake.io"], "resources": ["idspaces"],
                   "resourceNames": [SPACE], "verbs": ["get", "list", "watch", "update"]}],
    }))?;
    Api::<Role>::namespaced(ns.client.clone(), &n)
        .create(&PostParams::default(), &role)
        .await?;
    let account = format!("{MEMBER_ACCOUNT_PREFIX}{member}");
    service_account(&ns, &account).await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubeflake-member"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeflake-member"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": n}],
    }))?;
    Api::<RoleBinding>::namespaced(ns.client.clone(), &n)
        .create(&PostParams::default(), &binding)
        .await?;
    let space = IdSpace::new(SPACE, IdSpaceSpec::new(SpaceSequenceSpec::default(), 64));
    Api::<IdSpace>::namespaced(ns.client.clone(), &n)
        .create(&PostParams::default(), &space)
        .await?;
    let t = token(cluster, &n, &account, None).await?;
    let ca = std::fs::read(&cluster.pki().ca_cert)?;
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {
            "server": cluster.server(),
            "certificate-authority-data": k8s_openapi::ByteString(ca),
        }}],
        "users": [{"name": account, "user": {"token": t.trim()}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": account}}],
        "current-context": "hub",
    });
    Ok((ns, kubeconfig.to_string()))
}

async fn secret(ns: &TestNamespace, name: &str, kubeconfig: &str) -> Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"kubeconfig": kubeconfig},
    }))?;
    Api::<Secret>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

async fn membership(
    ns: &TestNamespace,
    name: &str,
    sequence: &str,
    member: &str,
    hub_ns: &str,
    hub_secret: &str,
) -> Result<()> {
    let object: IdSpaceMembership = serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
        "metadata": {"name": name},
        "spec": {"sequence": sequence, "memberName": member,
                 "space": {"namespace": hub_ns, "name": SPACE}, "hubSecret": hub_secret},
    }))?;
    Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &object)
        .await?;
    Ok(())
}

/// The membership's condition `type_`: (status, reason, message).
fn condition(m: &IdSpaceMembership, type_: &str) -> Option<(String, String, String)> {
    m.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

/// Waits until membership `name`'s Ready condition is False with `reason`; returns it.
async fn refused(ns: &TestNamespace, name: &str, reason: &str) -> Result<IdSpaceMembership> {
    let api = Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name);
    eventually(LIMIT, &format!("{name}: Ready=False {reason}"), || async {
        let m = api.get(name).await?;
        Ok(match condition(&m, "Ready") {
            Some((s, r, _)) if s == "False" && r == reason => Some(m),
            _ => None,
        })
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

fn held(registry: &RegistryRecord, member: &str) -> usize {
    registry
        .blocks
        .iter()
        .filter(|b| b.owner.as_deref() == Some(member))
        .count()
}

#[tokio::test]
async fn rule17_19_20_a_sequence_joins_its_id_space_and_holds_a_block_and_a_spare_and_a_second_membership_of_the_cluster_is_refused()
-> Result<()> {
    let cluster = cluster().await?;
    let (hub_ns, kubeconfig) = hub(cluster, "prod").await?;
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
    let spaces = Api::<IdSpace>::namespaced(hub_ns.client.clone(), &hub_ns.name);
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

    // Rule 20: the same cluster under another name is refused, saying what to fix, and
    // nothing is written on the hub for it.
    membership(
        &member,
        "orders-copy",
        "orders-copy",
        "prod-copy",
        &hub_ns.name,
        "kubeflake-hub-orders",
    )
    .await?;
    let copy = refused(&member, "orders-copy", "JoinRefused")
        .await
        .with_context(log)?;
    let (_, _, message) = condition(&copy, "Ready").context("Ready")?;
    ensure!(
        message.contains("is already member prod")
            && message.contains("join with that name")
            && message.contains("ClusterProperty"),
        "the refusal says what to fix: {message}"
    );
    let status = copy.status.unwrap_or_default();
    ensure!(
        status.grants.is_empty() && status.member_id.is_none(),
        "a refused membership keeps no copy: {status:?}"
    );
    let registry = spaces.get(SPACE).await?.spec.registry;
    ensure!(
        registry.members.len() == 1 && held(&registry, &this) == 2,
        "nothing was written on the hub for the refused membership: {registry:?}"
    );
    let events = Api::<Event>::namespaced(member.client.clone(), &member.name);
    eventually(LIMIT, "a Warning Event JoinRefused", || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("JoinRefused")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("orders-copy")
            })
            .then_some(()))
    })
    .await
    .with_context(log)?;

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
