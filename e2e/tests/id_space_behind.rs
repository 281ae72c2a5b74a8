//! Rule 21 against a real API server (docs/design/2026-11-29-multicluster.md, "A member's
//! etcd restored from an older snapshot while its pods run"): ONE control plane is both the
//! hub and the member, set up as in `id_space_join.rs`. Restoring etcd is another harness's;
//! here "the copy went back" is the membership's status written as an administrator with a
//! generation behind the hub's. The operator must then keep the hub's view with
//! `FencesRaised=False`, raise the fence of the slot Lease in its block to at least
//! `now + lease duration + 20 s` (never past the block's bound), and set `FencesRaised=True`.
//! The IdSequence's `IdSpace` condition says the sequence is joined.

mod operator_support;
mod policy_support;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::hub_policy::{self, MEMBER_ACCOUNT_PREFIX};
use kubeflake_crds::id_space::{IdSpace, IdSpaceMembership, IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, SlotLease};
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

#[tokio::test]
async fn rule21_a_copy_behind_the_hub_raises_the_slot_fences_of_its_blocks_before_assigning_again()
-> Result<()> {
    let cluster = cluster().await?;
    let (hub_ns, kubeconfig) = hub(cluster, "prod").await?;
    let ops = cluster.namespace("ops").await?;
    secret(&ops, "kubeflake-hub-orders", &kubeconfig).await?;
    let member = cluster.namespace("shop").await?;
    create_sequence(&member, "orders", json!({})).await?;
    let operator = Operator::start_with(
        cluster,
        &member.name,
        "hub",
        &["--hub-secret-namespace", &ops.name],
    )?;
    let log = || operator.process.log_tail(60);
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
    let pods = create_pods(&member, "orders", "app", 1).await?;
    let uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    all_assigned(&member, "orders", &uids, LIMIT)
        .await
        .with_context(log)?;
    let joined = eventually(LIMIT, "the membership joined", || async {
        let m = memberships.get("orders").await?;
        let ready = condition(&m, "Ready").is_some_and(|(s, r, _)| s == "True" && r == "Joined");
        Ok(ready.then_some(m))
    })
    .await
    .with_context(log)?;
    let sequences = Api::<IdSequence>::namespaced(member.client.clone(), &member.name);
    eventually(LIMIT, "the IdSequence's IdSpace condition", || async {
        let seq = sequences.get("orders").await?;
        Ok(condition_of(&seq, "IdSpace").filter(|(s, _)| s == "True"))
    })
    .await
    .with_context(log)?;

    // The copy goes back: its generation behind the hub's, as an etcd restore would leave it.
    let params = sequences.get("orders").await?.spec.params()?;
    let now_tick = || {
        let ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        params.timebase.tick_at(ms).map(|t| t.0).unwrap_or(0)
    };
    let before = now_tick();
    let behind = joined.status.clone().context("a copy")?.generation - 1;
    ensure!(behind >= 0, "the member wrote at least once");
    eventually(LIMIT, "the copy written behind the hub's", || async {
        let mut m = memberships.get("orders").await?;
        if let Some(s) = m.status.as_mut() {
            s.generation = behind;
        }
        let name = m.metadata.name.clone().unwrap_or_default();
        Ok(memberships
            .replace_status(&name, &PostParams::default(), &m)
            .await
            .ok()
            .map(|_| ()))
    })
    .await?;
    let raised = eventually(
        LIMIT,
        "FencesRaised=True after the copy went back",
        || async {
            let m = memberships.get("orders").await?;
            Ok(condition(&m, "FencesRaised")
                .filter(|(s, r, _)| s == "True" && r == "Raised")
                .map(|_| m))
        },
    )
    .await
    .with_context(log)?;
    let status = raised.status.context("a status")?;
    ensure!(
        status.generation > behind,
        "the hub's view is kept: {status:?}"
    );
    let bound = status
        .grants
        .iter()
        .map(|g| g.bound)
        .max()
        .context("a grant")?;
    let leases = Api::<Lease>::namespaced(member.client.clone(), &member.name);
    let list = leases
        .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}=orders")))
        .await?;
    ensure!(!list.items.is_empty(), "the pod's slot Lease");
    for lease in &list.items {
        let slot = SlotLease::parse(lease)?;
        let fence = i64::try_from(slot.fence.0)?;
        let floor = i64::try_from(before + 35_000)?;
        ensure!(
            fence >= floor.min(bound) && fence <= bound,
            "slot Lease {} has fence {fence}: at least now + lease duration + 20 s ({floor}), at \
             most the bound {bound}",
            slot.name
        );
    }
    Ok(())
}

/// The IdSequence's condition `type_`: (status, reason).
fn condition_of(seq: &IdSequence, type_: &str) -> Option<(String, String)> {
    seq.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
    })
}
