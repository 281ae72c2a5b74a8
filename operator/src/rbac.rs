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
//! Like the main reconciler, this is an idempotent function of observed state: [`plan`]
//! compares the namespaces that have sequences with the bindings that exist; every write
//! is a create or a delete with a precondition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::IdSequence;

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
    /// Delete the binding with this uid (it is unneeded, or binds the wrong role and will be
    /// created again on the next pass: `roleRef` cannot be changed in place).
    Delete {
        namespace: String,
        uid: String,
    },
}

/// A binding as observed: its namespace, uid and the ClusterRole it binds.
#[derive(Debug, Clone)]
pub struct Observed {
    pub namespace: String,
    pub uid: String,
    pub role: String,
}

/// The writes that make the bindings match the namespaces that have sequences.
pub fn plan(with_sequences: &BTreeSet<String>, bindings: &[Observed], role: &str) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut good = BTreeSet::new();
    for b in bindings {
        if with_sequences.contains(&b.namespace) && b.role == role {
            good.insert(b.namespace.clone());
        } else {
            changes.push(Change::Delete {
                namespace: b.namespace.clone(),
                uid: b.uid.clone(),
            });
        }
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

/// The binding for `namespace`.
pub fn binding(namespace: &str, role: &str) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(BINDING.into()),
            namespace: Some(namespace.into()),
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
            name: role.into(),
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
        })
        .collect()
}

/// Keeps the bindings right until dropped: a pass whenever sequences or bindings change,
/// and at least once a minute.
pub async fn keep_sidecar_bindings(
    client: Client,
    namespace: Option<String>,
    role: String,
    metrics: Arc<Metrics>,
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
    let (seq_store, seq_writer) = reflector::store();
    let seq_events = watcher(sequences, watcher::Config::default())
        .default_backoff()
        .reflect(seq_writer)
        .map(|_| ());
    let (binding_store, binding_writer) = reflector::store();
    let binding_events = watcher(bindings, watcher::Config::default().labels(MANAGED_LABEL))
        .default_backoff()
        .reflect(binding_writer)
        .map(|_| ());
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
        for change in plan(&with_sequences, &observed(&binding_store), &role) {
            apply(&client, &role, &change, &metrics).await;
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

async fn apply(client: &Client, role: &str, change: &Change, metrics: &Metrics) {
    let result = match change {
        Change::Create { namespace } => {
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
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        Err(e) => {
            tracing::warn!(?change, error = %e, "sidecar RoleBinding not written; retrying on the next pass")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn bound(ns: &str, role: &str) -> Observed {
        Observed {
            namespace: ns.into(),
            uid: format!("uid-{ns}"),
            role: role.into(),
        }
    }

    #[test]
    fn every_namespace_with_a_sequence_gets_one_binding() {
        let changes = plan(&set(&["a", "b"]), &[bound("a", "sidecar")], "sidecar");
        assert_eq!(
            changes,
            vec![Change::Create {
                namespace: "b".into()
            }]
        );
    }

    #[test]
    fn a_namespace_whose_last_sequence_is_gone_loses_its_binding() {
        let changes = plan(&set(&[]), &[bound("a", "sidecar")], "sidecar");
        assert_eq!(
            changes,
            vec![Change::Delete {
                namespace: "a".into(),
                uid: "uid-a".into()
            }]
        );
    }

    #[test]
    fn a_binding_to_another_role_is_deleted_first_and_recreated_on_the_next_pass() {
        let changes = plan(&set(&["a"]), &[bound("a", "old-role")], "sidecar");
        assert_eq!(
            changes,
            vec![Change::Delete {
                namespace: "a".into(),
                uid: "uid-a".into()
            }]
        );
        assert_eq!(
            plan(&set(&["a"]), &[], "sidecar"),
            vec![Change::Create {
                namespace: "a".into()
            }]
        );
    }

    #[test]
    fn when_all_is_in_place_nothing_is_written() {
        assert!(plan(&set(&["a"]), &[bound("a", "sidecar")], "sidecar").is_empty());
    }

    #[test]
    fn the_binding_grants_only_the_namespace_s_own_service_accounts() {
        let b = binding("shop", "kubeflake-sidecar");
        let subjects = b.subjects.expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "Group");
        assert_eq!(subjects[0].name, "system:serviceaccounts:shop");
        assert_eq!(b.role_ref.kind, "ClusterRole");
        assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
    }
}
