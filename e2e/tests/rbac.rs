//! What the chart's RBAC lets the operator and a sidecar do, as `kubectl auth can-i`
//! matrices against the real API server (one named row per right), and the operator
//! doing its job with nothing but those rights: it runs as a local process with the
//! chart's own arguments and a token of the chart's ServiceAccount.

mod chart_support;
mod operator_support;

use std::time::Duration;

use anyhow::{Context, Result, bail};
use chart_support::*;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kubeflake_crds::id_space::IdSpaceMembership;
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::{all_assigned, create_pods, create_sequence, eventually};
use serde_json::json;
use tokio::sync::OnceCell;

const LIMIT: Duration = Duration::from_secs(60);
const RELEASE: &str = "rbac";
/// The hub kubeconfig Secrets the release lists (`idSpace.hubSecrets`): the operator may
/// get these, by name, in its own namespace, and no other Secret.
const HUB_SECRETS: [&str; 2] = ["kubeflake-hub-orders", "kubeflake-hub-payments"];
/// The RoleBinding the operator keeps in every namespace that has an IdSequence.
const SIDECAR_BINDING: &str = "kubeflake-sidecar";

/// The release every test here checks, installed once. The webhook's failure policy is
/// Ignore with a short timeout: nothing serves it here (the API server cannot reach a
/// Service without a node network), and the tests create labelled pods.
async fn release_namespace(cluster: &'static Cluster) -> Result<&'static str> {
    static NS: OnceCell<String> = OnceCell::const_new();
    let ns = NS
        .get_or_try_init(|| async {
            let ns = cluster.namespace("rbac-release").await?;
            install_cluster_property_crd(cluster).await?;
            install(
                cluster,
                RELEASE,
                &ns.name,
                &[
                    "webhook.failurePolicy=Ignore",
                    "webhook.timeoutSeconds=2",
                    &format!("idSpace.hubSecrets={{{}}}", HUB_SECRETS.join(",")),
                ],
            )
            .await?;
            anyhow::Ok(ns.name)
        })
        .await?;
    Ok(ns.as_str())
}

/// A minimal `ClusterProperty` CRD (KEP-2149's `about.k8s.io`, cluster-scoped), so that
/// `kubectl auth can-i` can name the resource: without it kubectl asks about a resource
/// `clusterproperties.about.k8s.io` of the core group, which no rule grants. The operator
/// itself needs no CRD (absent, it falls back to the `kube-system` UID).
async fn install_cluster_property_crd(cluster: &Cluster) -> Result<()> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        // A *.k8s.io group needs this annotation; "unapproved" marks a stand-in.
        "metadata": {"name": "clusterproperties.about.k8s.io", "annotations": {
            "api-approved.kubernetes.io": "unapproved, a stand-in for KEP-2149's CRD in a test",
        }},
        "spec": {
            "group": "about.k8s.io",
            "scope": "Cluster",
            "names": {"plural": "clusterproperties", "singular": "clusterproperty",
                      "kind": "ClusterProperty", "listKind": "ClusterPropertyList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                              "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))?;
    Api::<CustomResourceDefinition>::all(cluster.client()?)
        .create(&PostParams::default(), &crd)
        .await?;
    cluster
        .wait_crd_established("clusterproperties.about.k8s.io")
        .await
}

/// Where a row's request goes.
#[derive(Clone, Copy, Debug)]
enum Scope {
    /// The namespace of the pods and their IdSequence.
    App,
    /// Another namespace that also has an IdSequence (and so its own sidecar binding).
    Other,
    /// The chart's release namespace.
    Release,
    /// Every namespace (`--all-namespaces`).
    All,
    /// A cluster-scoped resource.
    ClusterScoped,
}

/// One right: `can-i <verb> <resource> [--subresource]` in a scope, and the expected answer.
struct Row {
    name: &'static str,
    verb: &'static str,
    resource: String,
    subresource: Option<&'static str>,
    scope: Scope,
    allowed: bool,
}

fn row(
    name: &'static str,
    verb: &'static str,
    resource: impl Into<String>,
    scope: Scope,
    allowed: bool,
) -> Row {
    Row {
        name,
        verb,
        resource: resource.into(),
        subresource: None,
        scope,
        allowed,
    }
}

struct Namespaces<'a> {
    app: &'a str,
    other: &'a str,
    release: &'a str,
}

/// `kubectl auth can-i` as `user`: true for "yes", false for "no", an error otherwise.
async fn can_i(cluster: &Cluster, user: &str, row: &Row, ns: &Namespaces<'_>) -> Result<bool> {
    let mut args = vec![
        "auth",
        "can-i",
        row.verb,
        row.resource.as_str(),
        "--as",
        user,
    ];
    let namespace = match row.scope {
        Scope::App => Some(ns.app),
        Scope::Other => Some(ns.other),
        Scope::Release => Some(ns.release),
        Scope::All => {
            args.push("--all-namespaces");
            None
        }
        Scope::ClusterScoped => None,
    };
    if let Some(namespace) = namespace {
        args.extend(["--namespace", namespace]);
    }
    if let Some(sub) = row.subresource {
        args.extend(["--subresource", sub]);
    }
    let out = cluster.kubectl(&args).await?;
    match out.stdout.trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl {} answered neither yes nor no:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        ),
    }
}

/// Checks every row and reports all mismatches at once.
async fn check_matrix(
    cluster: &Cluster,
    who: &str,
    user: &str,
    rows: &[Row],
    ns: &Namespaces<'_>,
) -> Result<()> {
    let mut wrong = Vec::new();
    for row in rows {
        let answer = can_i(cluster, user, row, ns).await?;
        if answer != row.allowed {
            wrong.push(format!(
                "{who} {}: expected {}, got {} ({} {}{} in {:?})",
                row.name,
                if row.allowed { "yes" } else { "no" },
                if answer { "yes" } else { "no" },
                row.verb,
                row.resource,
                row.subresource.map(|s| format!("/{s}")).unwrap_or_default(),
                row.scope,
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC matrix mismatches:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

fn operator_rows() -> Vec<Row> {
    use Scope::*;
    let full = fullname(RELEASE);
    let sidecar_role = format!("clusterroles.rbac.authorization.k8s.io/{full}-sidecar");
    let webhook_secret = format!("secrets/{full}-webhook-tls");
    let webhook_config =
        format!("mutatingwebhookconfigurations.admissionregistration.k8s.io/{full}");
    let lease_policy =
        format!("validatingadmissionpolicies.admissionregistration.k8s.io/{full}-leases");
    let lease_policy_binding =
        format!("validatingadmissionpolicybindings.admissionregistration.k8s.io/{full}-leases");
    let mut status = row(
        "may patch IdSequence status",
        "patch",
        "idsequences.kubeflake.io",
        App,
        true,
    );
    status.subresource = Some("status");
    let mut status_update = row(
        "may not update IdSequence status (it patches)",
        "update",
        "idsequences.kubeflake.io",
        App,
        false,
    );
    status_update.subresource = Some("status");
    let mut status_get = row(
        "may not get IdSequence status (it reads the object)",
        "get",
        "idsequences.kubeflake.io",
        App,
        false,
    );
    status_get.subresource = Some("status");
    let mut finalizers = row(
        "may update IdSequence finalizers",
        "update",
        "idsequences.kubeflake.io",
        App,
        true,
    );
    finalizers.subresource = Some("finalizers");
    let mut rows = vec![
        row(
            "may watch IdSequences everywhere",
            "watch",
            "idsequences.kubeflake.io",
            All,
            true,
        ),
        row(
            "may patch IdSequences (its finalizer)",
            "patch",
            "idsequences.kubeflake.io",
            App,
            true,
        ),
        status,
        status_update,
        status_get,
        finalizers,
        row(
            "may not update IdSequences (it patches)",
            "update",
            "idsequences.kubeflake.io",
            App,
            false,
        ),
        row(
            "may create slot leases in any namespace",
            "create",
            "leases.coordination.k8s.io",
            App,
            true,
        ),
        row(
            "may delete slot leases (reclaim)",
            "delete",
            "leases.coordination.k8s.io",
            Other,
            true,
        ),
        row(
            "may update its leader-election lease",
            "update",
            "leases.coordination.k8s.io",
            Release,
            true,
        ),
        row("may watch pods everywhere", "watch", "pods", All, true),
        row(
            "may create Events",
            "create",
            "events.events.k8s.io",
            App,
            true,
        ),
        row(
            "may not create core Events (the Recorder writes events.k8s.io)",
            "create",
            "events",
            App,
            false,
        ),
        row(
            "may create RoleBindings",
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            App,
            true,
        ),
        row(
            "may delete the kubeflake-sidecar RoleBinding",
            "delete",
            "rolebindings.rbac.authorization.k8s.io/kubeflake-sidecar",
            App,
            true,
        ),
        row(
            "may not delete other RoleBindings",
            "delete",
            "rolebindings.rbac.authorization.k8s.io/app-admins",
            App,
            false,
        ),
        row(
            "may not get RoleBindings (it reads them from its watch)",
            "get",
            "rolebindings.rbac.authorization.k8s.io",
            App,
            false,
        ),
        row(
            "may not update other RoleBindings",
            "update",
            "rolebindings.rbac.authorization.k8s.io/app-admins",
            App,
            false,
        ),
        row(
            "may not patch RoleBindings",
            "patch",
            "rolebindings.rbac.authorization.k8s.io",
            App,
            false,
        ),
        row(
            "may not bind the sidecar ClusterRole (it keeps its own Roles)",
            "bind",
            sidecar_role.clone(),
            ClusterScoped,
            false,
        ),
        row(
            "may create Roles",
            "create",
            "roles.rbac.authorization.k8s.io",
            App,
            true,
        ),
        row(
            "may update the kubeflake-sidecar Role",
            "update",
            "roles.rbac.authorization.k8s.io/kubeflake-sidecar",
            App,
            true,
        ),
        row(
            "may not update other Roles",
            "update",
            "roles.rbac.authorization.k8s.io/app-admins",
            App,
            false,
        ),
        row(
            "may delete the kubeflake-sidecar Role",
            "delete",
            "roles.rbac.authorization.k8s.io/kubeflake-sidecar",
            App,
            true,
        ),
        row(
            "may not delete other Roles",
            "delete",
            "roles.rbac.authorization.k8s.io/app-admins",
            App,
            false,
        ),
        row(
            "may update the kubeflake-sidecar RoleBinding (its subjects)",
            "update",
            "rolebindings.rbac.authorization.k8s.io/kubeflake-sidecar",
            App,
            true,
        ),
        row(
            "may get the sidecar ClusterRole (its uid owns the bindings)",
            "get",
            sidecar_role,
            ClusterScoped,
            true,
        ),
        row(
            "may not get other ClusterRoles",
            "get",
            "clusterroles.rbac.authorization.k8s.io/cluster-admin",
            ClusterScoped,
            false,
        ),
        row(
            "may update its webhook configuration (caBundle)",
            "update",
            webhook_config.clone(),
            ClusterScoped,
            true,
        ),
        row(
            "may not patch its webhook configuration (it updates)",
            "patch",
            webhook_config,
            ClusterScoped,
            false,
        ),
        // Rule 14: no slot or claim while the Lease policy is not in force; read by name only.
        row(
            "may get its Lease policy",
            "get",
            lease_policy.clone(),
            ClusterScoped,
            true,
        ),
        row(
            "may get its Lease policy binding",
            "get",
            lease_policy_binding.clone(),
            ClusterScoped,
            true,
        ),
        row(
            "may not change its Lease policy",
            "update",
            lease_policy.clone(),
            ClusterScoped,
            false,
        ),
        row(
            "may not delete its Lease policy",
            "delete",
            lease_policy,
            ClusterScoped,
            false,
        ),
        row(
            "may not delete its Lease policy binding",
            "delete",
            lease_policy_binding,
            ClusterScoped,
            false,
        ),
        row(
            "may not read other admission policies",
            "get",
            "validatingadmissionpolicies.admissionregistration.k8s.io/other",
            ClusterScoped,
            false,
        ),
        row(
            "may not list admission policy bindings",
            "list",
            "validatingadmissionpolicybindings.admissionregistration.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may create Secrets in its own namespace",
            "create",
            "secrets",
            Release,
            true,
        ),
        row(
            "may update its webhook Secret",
            "update",
            webhook_secret.clone(),
            Release,
            true,
        ),
        row(
            "may read its webhook Secret",
            "get",
            webhook_secret.clone(),
            Release,
            true,
        ),
        row(
            "may not patch its webhook Secret (it updates)",
            "patch",
            webhook_secret.clone(),
            Release,
            false,
        ),
        row(
            "may not watch its webhook Secret",
            "watch",
            webhook_secret.clone(),
            Release,
            false,
        ),
        row(
            "may not list its webhook Secret",
            "list",
            webhook_secret,
            Release,
            false,
        ),
        row(
            "may not read Secrets in other namespaces",
            "get",
            "secrets",
            App,
            false,
        ),
        row(
            "may not list Secrets in other namespaces",
            "list",
            "secrets",
            App,
            false,
        ),
        row(
            "may not read other Secrets in its own namespace",
            "get",
            "secrets/other",
            Release,
            false,
        ),
        row(
            "may not list all Secrets of its own namespace",
            "list",
            "secrets",
            Release,
            false,
        ),
        row("may not delete pods", "delete", "pods", App, false),
        row("may not create pods", "create", "pods", App, false),
        row("may not update pods", "update", "pods", App, false),
        row(
            "may not create IdSequences",
            "create",
            "idsequences.kubeflake.io",
            App,
            false,
        ),
        row(
            "may not delete IdSequences",
            "delete",
            "idsequences.kubeflake.io",
            App,
            false,
        ),
        row(
            "may not create ClusterRoles",
            "create",
            "clusterroles.rbac.authorization.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may not escalate ClusterRoles",
            "escalate",
            "clusterroles.rbac.authorization.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may not bind cluster-admin",
            "bind",
            "clusterroles.rbac.authorization.k8s.io/cluster-admin",
            ClusterScoped,
            false,
        ),
        row(
            "may not bind Roles of other apps",
            "bind",
            "roles.rbac.authorization.k8s.io",
            App,
            false,
        ),
        row(
            "may not create ClusterRoleBindings",
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may not patch other webhook configurations",
            "patch",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other",
            ClusterScoped,
            false,
        ),
        row(
            "may not create webhook configurations",
            "create",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may not touch CRDs",
            "update",
            "customresourcedefinitions.apiextensions.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may not impersonate",
            "impersonate",
            "users",
            ClusterScoped,
            false,
        ),
        row("may not read ConfigMaps", "get", "configmaps", App, false),
    ];
    rows.extend(membership_rows());
    rows
}

/// The membership task's rights (issue 55): read IdSpaceMemberships everywhere, replace
/// them (their finalizer) and their status; read this cluster's ID by name; read the listed hub Secrets by name in its
/// own namespace. Nothing else of these: the hub's registry is written with the member's
/// hub credentials, never with the operator's own.
fn membership_rows() -> Vec<Row> {
    use Scope::*;
    let memberships = "idspacememberships.kubeflake.io";
    let sub = |mut r: Row, s: &'static str| {
        r.subresource = Some(s);
        r
    };
    let [orders, payments] = HUB_SECRETS.map(|s| format!("secrets/{s}"));
    vec![
        row(
            "may list IdSpaceMemberships everywhere",
            "list",
            memberships,
            All,
            true,
        ),
        row(
            "may watch IdSpaceMemberships everywhere",
            "watch",
            memberships,
            All,
            true,
        ),
        row(
            "may get an IdSpaceMembership",
            "get",
            memberships,
            App,
            true,
        ),
        sub(
            row(
                "may update IdSpaceMembership status (the copy)",
                "update",
                memberships,
                App,
                true,
            ),
            "status",
        ),
        sub(
            row(
                "may not patch IdSpaceMembership status (it replaces)",
                "patch",
                memberships,
                App,
                false,
            ),
            "status",
        ),
        row(
            "may update IdSpaceMemberships (their finalizer, kubeflake.io/id-space-blocks)",
            "update",
            memberships,
            App,
            true,
        ),
        row(
            "may not patch IdSpaceMemberships",
            "patch",
            memberships,
            App,
            false,
        ),
        row(
            "may not create IdSpaceMemberships",
            "create",
            memberships,
            App,
            false,
        ),
        row(
            "may not delete IdSpaceMemberships",
            "delete",
            memberships,
            App,
            false,
        ),
        row(
            "may not touch IdSpaces (the hub is written with the member's hub credentials)",
            "update",
            "idspaces.kubeflake.io",
            App,
            false,
        ),
        row(
            "may not read IdSpaces",
            "get",
            "idspaces.kubeflake.io",
            App,
            false,
        ),
        row(
            "may get the cluster.clusterset.k8s.io ClusterProperty",
            "get",
            "clusterproperties.about.k8s.io/cluster.clusterset.k8s.io",
            ClusterScoped,
            true,
        ),
        row(
            "may not get other ClusterProperties",
            "get",
            "clusterproperties.about.k8s.io/id.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may not list ClusterProperties",
            "list",
            "clusterproperties.about.k8s.io",
            ClusterScoped,
            false,
        ),
        row(
            "may get the kube-system namespace",
            "get",
            "namespaces/kube-system",
            ClusterScoped,
            true,
        ),
        row(
            "may not get other namespaces",
            "get",
            "namespaces/default",
            ClusterScoped,
            false,
        ),
        row(
            "may not list namespaces",
            "list",
            "namespaces",
            ClusterScoped,
            false,
        ),
        row(
            "may not update the kube-system namespace",
            "update",
            "namespaces/kube-system",
            ClusterScoped,
            false,
        ),
        row(
            "may get a listed hub Secret",
            "get",
            orders.clone(),
            Release,
            true,
        ),
        row(
            "may get every listed hub Secret",
            "get",
            payments,
            Release,
            true,
        ),
        row(
            "may not get a listed hub Secret's name in another namespace",
            "get",
            orders.clone(),
            App,
            false,
        ),
        row(
            "may not get a listed hub Secret's name in every namespace",
            "get",
            orders.clone(),
            All,
            false,
        ),
        row(
            "may not update a hub Secret",
            "update",
            orders.clone(),
            Release,
            false,
        ),
        row(
            "may not delete a hub Secret",
            "delete",
            orders.clone(),
            Release,
            false,
        ),
        row(
            "may not watch a hub Secret",
            "watch",
            orders,
            Release,
            false,
        ),
        row(
            "may not get an unlisted Secret",
            "get",
            "secrets/kubeflake-hub-other",
            Release,
            false,
        ),
    ]
}

fn sidecar_rows() -> Vec<Row> {
    use Scope::*;
    let mut status = row(
        "may not write IdSequence status",
        "patch",
        "idsequences.kubeflake.io",
        App,
        false,
    );
    status.subresource = Some("status");
    vec![
        row(
            "may read its IdSequence",
            "get",
            "idsequences.kubeflake.io/orders",
            App,
            true,
        ),
        row(
            "may not read other IdSequences of its namespace",
            "get",
            "idsequences.kubeflake.io/payments",
            App,
            false,
        ),
        row(
            "may not list IdSequences (it reads its own by name)",
            "list",
            "idsequences.kubeflake.io",
            App,
            false,
        ),
        row(
            "may not watch IdSequences",
            "watch",
            "idsequences.kubeflake.io",
            App,
            false,
        ),
        row(
            "may watch leases in its namespace",
            "watch",
            "leases.coordination.k8s.io",
            App,
            true,
        ),
        row(
            "may update its sequence's slot leases (renew, fence)",
            "update",
            "leases.coordination.k8s.io/orders-slot-0",
            App,
            true,
        ),
        row(
            "may patch its sequence's slot leases",
            "patch",
            "leases.coordination.k8s.io/orders-slot-1",
            App,
            true,
        ),
        row(
            "may not update an app's own leader Lease",
            "update",
            "leases.coordination.k8s.io/app-leader",
            App,
            false,
        ),
        row(
            "may not patch an app's own leader Lease",
            "patch",
            "leases.coordination.k8s.io/app-leader",
            App,
            false,
        ),
        row(
            "may create Events in its namespace",
            "create",
            "events.events.k8s.io",
            App,
            true,
        ),
        row("may not create core Events", "create", "events", App, false),
        row(
            "may not update leases in another namespace",
            "update",
            "leases.coordination.k8s.io/orders-slot-0",
            Other,
            false,
        ),
        row(
            "may not patch leases in another namespace",
            "patch",
            "leases.coordination.k8s.io/orders-slot-0",
            Other,
            false,
        ),
        row(
            "may not read leases in another namespace",
            "get",
            "leases.coordination.k8s.io",
            Other,
            false,
        ),
        row(
            "may not write leases in the release namespace",
            "update",
            "leases.coordination.k8s.io",
            Release,
            false,
        ),
        row(
            "may not create leases (the operator assigns slots)",
            "create",
            "leases.coordination.k8s.io",
            App,
            false,
        ),
        row(
            "may not delete leases",
            "delete",
            "leases.coordination.k8s.io",
            App,
            false,
        ),
        row("may not read Secrets", "get", "secrets", App, false),
        row("may not list Secrets", "list", "secrets", App, false),
        row("may not read pods", "get", "pods", App, false),
        row("may not delete pods", "delete", "pods", App, false),
        row(
            "may not change IdSequences",
            "update",
            "idsequences.kubeflake.io",
            App,
            false,
        ),
        status,
        row(
            "may not read IdSequences of other namespaces",
            "get",
            "idsequences.kubeflake.io",
            Other,
            false,
        ),
        row(
            "may not create RoleBindings",
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            App,
            false,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_service_account_may_do_what_the_operator_does_and_nothing_more() -> Result<()> {
    let cluster = Cluster::shared();
    let release = release_namespace(cluster).await?;
    let app = cluster.namespace("rbac-op-app").await?;
    let other = cluster.namespace("rbac-op-other").await?;
    let user = format!("system:serviceaccount:{release}:{}", fullname(RELEASE));
    let ns = Namespaces {
        app: &app.name,
        other: &other.name,
        release,
    };
    check_matrix(cluster, "operator", &user, &operator_rows(), &ns).await?;

    // The RoleBinding rights cannot grant more than the operator holds or may bind: the
    // sidecar role is accepted, cluster-admin refused by the API server's escalation check.
    let group = format!("--group=system:serviceaccounts:{}", app.name);
    let sidecar_role = format!("--clusterrole={}-sidecar", fullname(RELEASE));
    let bind = |name: &'static str, role: String| {
        let (group, user, ns) = (group.clone(), user.clone(), app.name.clone());
        async move {
            cluster
                .kubectl(&[
                    "create",
                    "rolebinding",
                    name,
                    "-n",
                    &ns,
                    &role,
                    &group,
                    "--as",
                    &user,
                ])
                .await
        }
    };
    let allowed = bind("sidecar-by-operator", sidecar_role).await?;
    assert!(
        allowed.success(),
        "the operator binds the sidecar role: {}",
        allowed.stderr
    );
    let refused = bind(
        "admin-by-operator",
        "--clusterrole=cluster-admin".to_owned(),
    )
    .await?;
    assert!(
        !refused.success()
            && refused
                .stderr
                .contains("attempting to grant RBAC permissions not currently held"),
        "binding cluster-admin must be refused as an escalation: {}{}",
        refused.stdout,
        refused.stderr
    );
    Ok(())
}

#[tokio::test]
async fn impersonating_a_service_account_adds_its_namespace_groups() -> Result<()> {
    // The sidecar rows rely on this: the operator binds the group of a namespace's
    // service accounts, and `can-i --as=system:serviceaccount:...` must carry that group.
    let cluster = Cluster::shared();
    let out = cluster
        .kubectl(&[
            "auth",
            "whoami",
            "--as",
            "system:serviceaccount:shop:orders",
            "-o",
            "json",
        ])
        .await?
        .ok()?;
    let review: serde_json::Value = serde_json::from_str(&out)?;
    let groups = &review["status"]["userInfo"]["groups"];
    for group in [
        "system:serviceaccounts",
        "system:serviceaccounts:shop",
        "system:authenticated",
    ] {
        assert!(
            groups
                .as_array()
                .is_some_and(|g| g.iter().any(|x| x == group)),
            "impersonated groups {groups} lack {group}"
        );
    }
    Ok(())
}

async fn binding_exists(ns: &TestNamespace) -> Result<bool> {
    let api: Api<RoleBinding> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(api.get_opt(SIDECAR_BINDING).await?.is_some())
}

/// The default service account of `namespace` may not update Leases there.
async fn assert_cannot_write_leases(
    cluster: &Cluster,
    what: &str,
    namespace: &str,
    release: &str,
) -> Result<()> {
    let user = format!("system:serviceaccount:{namespace}:default");
    let ns = Namespaces {
        app: namespace,
        other: namespace,
        release,
    };
    let rows = [row(
        "may not update leases",
        "update",
        "leases.coordination.k8s.io/orders-slot-0",
        Scope::App,
        false,
    )];
    check_matrix(
        cluster,
        &format!("service account of {what}"),
        &user,
        &rows,
        &ns,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_get_exactly_their_rights_from_the_binding_the_operator_keeps_under_chart_rbac()
-> Result<()> {
    let cluster = Cluster::shared();
    let release = release_namespace(cluster).await?;
    let app = cluster.namespace("rbac-sc-app").await?;
    let other = cluster.namespace("rbac-sc-other").await?;
    let bare = cluster.namespace("rbac-sc-bare").await?;
    let operator = ChartOperator::start(cluster, release, RELEASE).await?;

    create_sequence(&app, "orders", json!({})).await?;
    create_sequence(&other, "orders", json!({})).await?;
    // Labelled pods run as the namespace's default service account; "orders-app" runs none.
    let pods = create_pods(&app, "orders", "app", 3).await?;
    for ns in [&app, &other] {
        eventually(
            LIMIT,
            "the operator to keep the sidecar Role and binding",
            || async {
                operator.process.check_running()?;
                Ok(binding_exists(ns).await?.then_some(()))
            },
        )
        .await
        .with_context(|| format!("namespace {}; operator log:\n{}", ns.name, operator.log()))?;
    }
    let bindings: Api<RoleBinding> = Api::namespaced(app.client.clone(), &app.name);
    let binding = eventually(
        LIMIT,
        "the binding to name the labelled pods' account",
        || async {
            let b = bindings.get(SIDECAR_BINDING).await?;
            Ok((!b.subjects.clone().unwrap_or_default().is_empty()).then_some(b))
        },
    )
    .await?;
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("Role", SIDECAR_BINDING)
    );
    let subjects = binding.subjects.unwrap_or_default();
    assert!(
        subjects.len() == 1
            && subjects[0].kind == "ServiceAccount"
            && subjects[0].name == "default"
            && subjects[0].namespace.as_deref() == Some(app.name.as_str()),
        "the binding names only the account the labelled pods run as: {subjects:?}"
    );

    let ns = Namespaces {
        app: &app.name,
        other: &other.name,
        release,
    };
    let user = format!("system:serviceaccount:{}:default", app.name);
    check_matrix(cluster, "sidecar (default)", &user, &sidecar_rows(), &ns).await?;
    // An account that runs no labelled pod gets nothing, in the same namespace.
    let idle = format!("system:serviceaccount:{}:orders-app", app.name);
    let rows = [row(
        "a service account without labelled pods may not update slot leases",
        "update",
        "leases.coordination.k8s.io/orders-slot-0",
        Scope::App,
        false,
    )];
    check_matrix(cluster, "idle account", &idle, &rows, &ns).await?;
    // A namespace without an IdSequence has no binding, so its service accounts hold nothing.
    assert_cannot_write_leases(
        cluster,
        "a namespace without IdSequence",
        &bare.name,
        release,
    )
    .await?;

    // The operator really works with nothing but the chart's RBAC.
    let uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    all_assigned(&app, "orders", &uids, LIMIT)
        .await
        .with_context(|| format!("operator log:\n{}", operator.log()))?;

    // The last IdSequence of a namespace gone: its binding goes too.
    let sequences: Api<kubeflake_crds::IdSequence> =
        Api::namespaced(other.client.clone(), &other.name);
    sequences.delete("orders", &DeleteParams::default()).await?;
    eventually(
        LIMIT,
        "the sidecar binding to be removed with the last IdSequence",
        || async { Ok((!binding_exists(&other).await?).then_some(())) },
    )
    .await
    .with_context(|| format!("operator log:\n{}", operator.log()))?;
    assert_cannot_write_leases(
        cluster,
        "a namespace whose last IdSequence was deleted",
        &other.name,
        release,
    )
    .await?;

    memberships_are_kept_with_the_chart_rbac(&app, release, &operator).await?;

    let forbidden = operator.forbidden_lines();
    assert!(
        forbidden.is_empty(),
        "the operator was refused by RBAC:\n{}",
        forbidden.join("\n")
    );
    Ok(())
}

/// The membership task with nothing but the chart's RBAC (the chart's operator, a real
/// token): it lists the IdSpaceMemberships, reads this cluster's ID (else it contacts none),
/// gets a Secret listed in `idSpace.hubSecrets` (absent here, so the verdict is "does not
/// exist", not "cannot read"), is refused one not listed, and writes each verdict into the
/// membership's status.
async fn memberships_are_kept_with_the_chart_rbac(
    app: &TestNamespace,
    release: &str,
    operator: &ChartOperator,
) -> Result<()> {
    let api: Api<IdSpaceMembership> = Api::namespaced(app.client.clone(), &app.name);
    let cases = [
        (
            "orders-listed",
            HUB_SECRETS[0],
            vec![format!(
                "hub Secret {release}/{} does not exist",
                HUB_SECRETS[0]
            )],
        ),
        (
            "orders-unlisted",
            "kubeflake-hub-other",
            vec![
                format!("cannot read hub Secret {release}/kubeflake-hub-other"),
                "forbidden".into(),
                "list it in idSpace.hubSecrets".into(),
            ],
        ),
    ];
    for (name, secret, _) in &cases {
        let membership: IdSpaceMembership = serde_json::from_value(json!({
            "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
            "metadata": {"name": name},
            "spec": {"sequence": "orders", "memberName": "prod",
                     "space": {"namespace": "hub", "name": "orders"}, "hubSecret": secret},
        }))?;
        api.create(&PostParams::default(), &membership).await?;
    }
    for (name, _, says) in &cases {
        eventually(
            LIMIT,
            &format!("{name}: Ready=False saying {says:?}"),
            || async {
                let m = api.get(name).await?;
                let ready = m
                    .status
                    .iter()
                    .flat_map(|s| &s.conditions)
                    .find(|c| c.type_ == "Ready");
                Ok(ready
                    .is_some_and(|c| {
                        c.status == "False"
                            && c.reason == "HubUnreachable"
                            && says.iter().all(|text| c.message.contains(text.as_str()))
                    })
                    .then_some(()))
            },
        )
        .await
        .with_context(|| format!("operator log:\n{}", operator.log()))?;
    }
    Ok(())
}
