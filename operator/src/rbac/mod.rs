//! The sidecar's rights, granted without anyone writing RBAC by hand.
//!
//! A sidecar runs as its pod's service account, which the app owner chose. So that it may
//! read its IdSequence, renew its slot Lease and post Events, the operator keeps one
//! RoleBinding named [`BINDING`] in every namespace that has an IdSequence, binding the
//! sidecar ClusterRole (installed by the chart, `--sidecar-cluster-role`) to the group of
//! all service accounts of that namespace. A RoleBinding grants only within its own
//! namespace, so a sidecar can never touch Leases elsewhere. When the last IdSequence of
//! a namespace is gone, the binding goes too.
//!
//! Each binding is owned (`ownerReferences`) by that ClusterRole: a cluster-scoped owner
//! of a namespaced dependent, so when `helm uninstall` deletes the role, the garbage
//! collector deletes every binding with it, in every namespace, even though the operator
//! is gone by then. While the role does not exist no binding is created (it would grant
//! nothing, and nothing would ever remove it).
//!
//! Like the main reconciler, this is an idempotent function of observed state: [`plan`]
//! compares the namespaces that have sequences with the bindings that exist; every write
//! is a create or a delete with a precondition.

use kubeflake_runtime::kube_error::{is_conflict, is_not_found};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflake_crds::IdSequence;

use crate::http::Health;
use crate::metrics::Metrics;

/// Name of the RoleBinding the operator keeps in each namespace with IdSequences.
pub const BINDING: &str = "kubeflake-sidecar";
/// Label that marks bindings the operator owns (and the only ones it watches or deletes).
pub const MANAGED_LABEL: &str = "kubeflake.io/sidecar-binding";

/// One write to make.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    Create {
        namespace: String,
    },
    /// Delete the binding with this uid (it is unneeded, or binds the wrong role or lacks
    /// the role as its owner, and will be created again on the next pass: `roleRef` cannot
    /// be changed in place).
    Delete {
        namespace: String,
        uid: String,
    },
}

/// A binding as observed: its namespace, uid, the ClusterRole it binds, and the uid of
/// the ClusterRole that owns it (if any).
#[derive(Debug, Clone)]
pub struct Observed {
    pub namespace: String,
    pub uid: String,
    pub role: String,
    pub owner_uid: Option<String>,
}

/// The sidecar ClusterRole as found: its name and uid (the bindings' owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub uid: String,
}

/// The writes that make the bindings match the namespaces that have sequences. `role` is
/// `None` while the ClusterRole does not exist: then nothing is created, and bindings are
/// only deleted when unneeded or bound to another role.
pub fn plan(
    with_sequences: &BTreeSet<String>,
    bindings: &[Observed],
    role_name: &str,
    role: Option<&Role>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut good = BTreeSet::new();
    for b in bindings {
        let owner_ok = role.is_none_or(|r| b.owner_uid.as_deref() == Some(r.uid.as_str()));
        if with_sequences.contains(&b.namespace) && b.role == role_name && owner_ok {
            good.insert(b.namespace.clone());
        } else {
            changes.push(Change::Delete {
                namespace: b.namespace.clone(),
                uid: b.uid.clone(),
            });
        }
    }
    if role.is_none() {
        return changes;
    }
    for ns in with_sequences.difference(&good) {
        let being_replaced = changes
            .iter()
            .any(|c| matches!(c, Change::Delete { namespace, .. } if namespace == ns));
        if !being_replaced {
            changes.push(Change::Create {
                namespace: ns.clone(),
            });
        }
    }
    changes
}

/// The binding for `namespace`, owned by `role`. No `blockOwnerDeletion`: deleting the
/// role need not wait for the bindings, and setting it would need more rights.
pub fn binding(namespace: &str, role: &Role) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(BINDING.into()),
            namespace: Some(namespace.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: ClusterRole::api_version(&()).into(),
                kind: ClusterRole::kind(&()).into(),
                name: role.name.clone(),
                uid: role.uid.clone(),
                ..Default::default()
            }]),
            labels: Some(BTreeMap::from([
                (MANAGED_LABEL.to_string(), "true".to_string()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "kubeflake-operator".to_string(),
                ),
            ])),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.name.clone(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: format!("system:serviceaccounts:{namespace}"),
            namespace: None,
        }]),
    }
}

fn observed(store: &Store<RoleBinding>) -> Vec<Observed> {
    store
        .state()
        .iter()
        .filter(|b| b.name_any() == BINDING)
        .map(|b| Observed {
            namespace: b.namespace().unwrap_or_default(),
            uid: b.uid().unwrap_or_default(),
            role: b.role_ref.name.clone(),
            owner_uid: b
                .owner_references()
                .iter()
                .find(|o| o.kind == "ClusterRole" && o.name == b.role_ref.name)
                .map(|o| o.uid.clone()),
        })
        .collect()
}

/// Reads the sidecar ClusterRole (`get` on that one name); `None` when it does not exist
/// or cannot be read (logged: the pass then creates nothing).
async fn find_role(roles: &Api<ClusterRole>, name: &str) -> Option<Role> {
    match roles.get_opt(name).await {
        Ok(Some(r)) => Some(Role {
            name: name.to_string(),
            uid: r.uid().unwrap_or_default(),
        }),
        Ok(None) => {
            tracing::warn!(
                cluster_role = name,
                "sidecar ClusterRole not found: no sidecar RoleBinding is created until it exists"
            );
            None
        }
        Err(e) => {
            tracing::warn!(cluster_role = name, error = %e, "cannot read the sidecar ClusterRole (the operator needs get on it): no sidecar RoleBinding is created");
            None
        }
    }
}

/// What becomes of one watch event: an error is counted
/// (`kubeflake_operator_watch_errors_total{watch}`), shown by `/readyz` and logged at warn
/// when the watch starts failing (then retried with [`crate::backoff::WatchBackoff`]); a
/// success clears it.
fn report<T>(
    watch: &'static str,
    metrics: &Metrics,
    health: &Health,
    event: &Result<T, watcher::Error>,
) {
    match event {
        Ok(_) => {
            if health.watch_recovered(watch) {
                tracing::info!(watch, "watch works again");
            }
        }
        Err(e) => {
            metrics.watch_errors.with_label_values(&[watch]).inc();
            let message = e.to_string();
            if health.watch_failed(watch, message.clone()) {
                tracing::warn!(watch, error = %message, "watch failed: sidecar RoleBindings are not kept until it works (retried with back-off; is the operator allowed to list and watch it?)");
            } else {
                tracing::debug!(watch, error = %message, "watch failed again");
            }
        }
    }
}

/// Keeps the bindings right until dropped: a pass whenever sequences or bindings change,
/// and at least once a minute. Watch errors are reported through `metrics` and `health`
/// (see `report`).
pub async fn keep_sidecar_bindings(
    client: Client,
    namespace: Option<String>,
    role: String,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) {
    let scoped = |c: &Client| -> (Api<PartialObjectMeta<IdSequence>>, Api<RoleBinding>) {
        match &namespace {
            Some(ns) => (
                Api::namespaced(c.clone(), ns),
                Api::namespaced(c.clone(), ns),
            ),
            None => (Api::all(c.clone()), Api::all(c.clone())),
        }
    };
    let (sequences, bindings) = scoped(&client);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let (seq_store, seq_writer) = reflector::store();
    let seq_events = watcher(sequences, watcher::Config::default())
        .backoff(crate::backoff::WatchBackoff::default())
        .reflect(seq_writer)
        .map({
            let (metrics, health) = (metrics.clone(), health.clone());
            move |event| report("rbac_idsequences", &metrics, &health, &event)
        });
    let (binding_store, binding_writer) = reflector::store();
    let binding_events = watcher(bindings, watcher::Config::default().labels(MANAGED_LABEL))
        .backoff(crate::backoff::WatchBackoff::default())
        .reflect(binding_writer)
        .map({
            let (metrics, health) = (metrics.clone(), health.clone());
            move |event| report("rbac_rolebindings", &metrics, &health, &event)
        });
    let mut events = std::pin::pin!(futures::stream::select(seq_events, binding_events));
    // The stores fill only while the event stream is polled, so drive it while waiting.
    let mut ready = std::pin::pin!(async {
        tokio::try_join!(
            seq_store.wait_until_ready(),
            binding_store.wait_until_ready()
        )
    });
    loop {
        tokio::select! {
            r = &mut ready => match r {
                Ok(_) => break,
                Err(_) => return,
            },
            e = events.next() => if e.is_none() { return },
        }
    }
    loop {
        let with_sequences: BTreeSet<String> = seq_store
            .state()
            .iter()
            .filter_map(|s| s.namespace())
            .collect();
        let found = find_role(&roles, &role).await;
        let changes = plan(
            &with_sequences,
            &observed(&binding_store),
            &role,
            found.as_ref(),
        );
        for change in changes {
            apply(&client, found.as_ref(), &change, &metrics).await;
        }
        // Wait for a change (then let a burst settle) or a minute.
        tokio::select! {
            _ = events.next() => tokio::time::sleep(Duration::from_millis(200)).await,
            () = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        // Drain what arrived meanwhile; the stores already hold it.
        while futures::FutureExt::now_or_never(events.next())
            .flatten()
            .is_some()
        {}
    }
}

async fn apply(client: &Client, role: Option<&Role>, change: &Change, metrics: &Metrics) {
    let result = match change {
        Change::Create { namespace } => {
            let Some(role) = role else { return };
            let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
            api.create(&PostParams::default(), &binding(namespace, role))
                .await
                .map(|_| "created")
        }
        Change::Delete { namespace, uid } => {
            let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            api.delete(BINDING, &params).await.map(|_| "deleted")
        }
    };
    match result {
        Ok(action) => {
            metrics.sidecar_bindings.with_label_values(&[action]).inc();
            tracing::info!(?change, "sidecar RoleBinding {action}");
        }
        // Someone else did it first; the next pass sees the result.
        Err(e) if is_conflict(&e) || is_not_found(&e) => {}
        Err(e) => {
            tracing::warn!(?change, error = %e, "sidecar RoleBinding not written; retrying on the next pass")
        }
    }
}

#[cfg(test)]
mod tests;
