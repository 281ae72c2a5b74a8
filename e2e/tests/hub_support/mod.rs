//! The hub and member set-up of the ID-space tests (docs/design/2026-11-29-multicluster.md):
//! the CRDs a hub and a member need, the hub's namespace with its IdSpace, the generated
//! admission policy bound to that namespace only and the design's member Role; per member
//! a ServiceAccount `member-<name>` and a kubeconfig with its token (as `hub add-member`
//! will print), stored in a member cluster as the hub Secret; and the IdSpaceMembership.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::hub_policy::{self, MEMBER_ACCOUNT_PREFIX};
use kubeflake_crds::id_space::{IdSpace, IdSpaceMembership, IdSpaceSpec, RegistryRecord};
use kubeflake_e2e::{Cluster, TestNamespace};
use serde_json::json;

pub mod forwarder;
pub mod on_node;

use crate::operator_support::{Operator, create_sequence, eventually};
use crate::policy_support::{service_account, token};

/// The IdSpace's name in every hub namespace.
pub const SPACE: &str = "orders";
/// The member's IdSequence and IdSpaceMembership made by [`join_member`].
pub const SEQUENCE: &str = "orders";
/// The hub Secret [`join_member`] stores in the member's namespace.
pub const HUB_SECRET: &str = "kubeflake-hub-orders";

/// A member's side of a join, made by [`join_member`].
pub struct Joined {
    pub ns: TestNamespace,
    pub sequence: IdSequence,
    pub operator: Operator,
}

/// Member `name` joining `hub` from `cluster`: the CRDs, a namespace named after
/// `ns_prefix`, the hub Secret [`HUB_SECRET`] holding the member's kubeconfig (through
/// `server` when given: a forwarder the test can switch off), the IdSequence [`SEQUENCE`]
/// with `spec`, its own operator (the real binary, reading hub Secrets from that
/// namespace) and the IdSpaceMembership [`SEQUENCE`] joining the hub's space.
pub async fn join_member(
    cluster: &'static Cluster,
    ns_prefix: &str,
    name: &str,
    hub: &Hub,
    server: Option<&str>,
    spec: serde_json::Value,
) -> Result<Joined> {
    install_crds(cluster).await?;
    let ns = cluster.namespace(ns_prefix).await?;
    let kubeconfig = hub.add_member(name, server).await?;
    secret(&ns, HUB_SECRET, &kubeconfig).await?;
    let sequence = create_sequence(&ns, SEQUENCE, spec).await?;
    let operator = Operator::start_as_with(
        cluster,
        &ns.name,
        name,
        cluster.kubeconfig(),
        &["--hub-secret-namespace", &ns.name],
    )?;
    membership(&ns, SEQUENCE, SEQUENCE, name, &hub.ns.name, HUB_SECRET).await?;
    Ok(Joined {
        ns,
        sequence,
        operator,
    })
}

/// Applies the IdSequence, IdSpace and IdSpaceMembership CRDs to `cluster` and waits until
/// they are served (a member needs the first and the last; a hub the IdSpace).
pub async fn install_crds(cluster: &Cluster) -> Result<()> {
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds");
    for (file, name) in [
        ("idsequence.yaml", "idsequences.kubeflake.io"),
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
    Ok(())
}

/// A hub namespace holding the IdSpace [`SPACE`], its policy and the member Role.
pub struct Hub {
    pub ns: TestNamespace,
    cluster: &'static Cluster,
}

impl Hub {
    /// The hub's namespace (named after `prefix`) with the space `spec`, the generated
    /// policy bound to this namespace only, and the design's Role for members.
    pub async fn create(cluster: &'static Cluster, prefix: &str, spec: IdSpaceSpec) -> Result<Hub> {
        let ns = cluster.namespace(prefix).await?;
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
        Api::<IdSpace>::namespaced(ns.client.clone(), &n)
            .create(&PostParams::default(), &IdSpace::new(SPACE, spec))
            .await?;
        Ok(Hub { ns, cluster })
    }

    /// The control plane the hub's namespace is on.
    pub fn cluster(&self) -> &'static Cluster {
        self.cluster
    }

    /// The hub's IdSpace, read by the hub's administrator.
    pub fn spaces(&self) -> Api<IdSpace> {
        Api::<IdSpace>::namespaced(self.ns.client.clone(), &self.ns.name)
    }

    pub async fn registry(&self) -> Result<RegistryRecord> {
        Ok(self.spaces().get(SPACE).await?.spec.registry)
    }

    /// Member `member`'s account, bound to the Role; returns its kubeconfig (token and CA
    /// inline). `server` replaces the hub's address (a forwarder the test can switch off).
    pub async fn add_member(&self, member: &str, server: Option<&str>) -> Result<String> {
        let n = &self.ns.name;
        let account = format!("{MEMBER_ACCOUNT_PREFIX}{member}");
        service_account(&self.ns, &account).await?;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("kubeflake-member-{member}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeflake-member"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": n}],
        }))?;
        Api::<RoleBinding>::namespaced(self.ns.client.clone(), n)
            .create(&PostParams::default(), &binding)
            .await?;
        let t = token(self.cluster, n, &account, None).await?;
        let ca = std::fs::read(&self.cluster.pki().ca_cert)?;
        let kubeconfig = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "hub", "cluster": {
                "server": server.unwrap_or(self.cluster.server()),
                "certificate-authority-data": k8s_openapi::ByteString(ca),
            }}],
            "users": [{"name": account, "user": {"token": t.trim()}}],
            "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": account}}],
            "current-context": "hub",
        });
        Ok(kubeconfig.to_string())
    }
}

/// The hub Secret `name` (key `kubeconfig`) in a member's namespace.
pub async fn secret(ns: &TestNamespace, name: &str, kubeconfig: &str) -> Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"kubeconfig": kubeconfig},
    }))?;
    Api::<Secret>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// The IdSpaceMembership `name` joining `sequence` to the space [`SPACE`] of `hub_ns`
/// as member `member`, through the hub Secret `hub_secret`.
pub async fn membership(
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
pub fn condition(m: &IdSpaceMembership, type_: &str) -> Option<(String, String, String)> {
    m.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

/// Waits up to `limit` until membership `name`'s Ready condition is `status` with
/// `reason`; returns the membership.
pub async fn ready_is(
    ns: &TestNamespace,
    name: &str,
    status: &str,
    reason: &str,
    limit: Duration,
) -> Result<IdSpaceMembership> {
    let api = Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name);
    eventually(
        limit,
        &format!("{name}: Ready={status} {reason}"),
        || async {
            let m = api.get(name).await?;
            Ok(match condition(&m, "Ready") {
                Some((s, r, _)) if s == status && r == reason => Some(m),
                _ => None,
            })
        },
    )
    .await
}

/// How many blocks the hub lists as held by `member`.
pub fn held(registry: &RegistryRecord, member: &str) -> usize {
    registry
        .blocks
        .iter()
        .filter(|b| b.owner.as_deref() == Some(member))
        .count()
}
