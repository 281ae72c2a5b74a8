//! Keeping the sidecars' Roles and RoleBindings: the watches of Roles, bindings and the
//! sidecar ClusterRole, and the writes that make what exists match [`super::plan`]. What a
//! namespace needs, and the plan, are pure and live in `rbac/mod.rs`; change the watches,
//! the retry or a write here.

use kubeflake_runtime::kube_error::{is_conflict, is_not_found};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflake_crds::IdSequence;

use crate::http::Health;
use crate::metrics::Metrics;

use super::*;

fn observed(roles: &Store<Role>, bindings: &Store<RoleBinding>) -> Vec<Observed> {
    fn meta<K: Resource>(k: &K, content: Content) -> Option<Observed> {
        let meta = k.meta();
        if meta.name.as_deref() != Some(BINDING) {
            return None;
        }
        Some(Observed {
            namespace: meta.namespace.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            version: meta.resource_version.clone().unwrap_or_default(),
            owner_uid: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "ClusterRole")
                .map(|o| o.uid.clone()),
            content,
        })
    }
    let roles = roles.state().into_iter().filter_map(|r| {
        meta(
            r.as_ref(),
            Content::Rules(r.rules.clone().unwrap_or_default()),
        )
    });
    let bindings = bindings.state().into_iter().filter_map(|b| {
        let content = Content::Binding {
            subjects: b.subjects.clone().unwrap_or_default(),
            refers_to_role: b.role_ref.kind == "Role" && b.role_ref.name == BINDING,
        };
        meta(b.as_ref(), content)
    });
    roles.chain(bindings).collect()
}

/// Reads the sidecar ClusterRole (`get` on that one name); `None` when it does not exist
/// or cannot be read (logged: the pass then creates nothing).
async fn find_owner(roles: &Api<ClusterRole>, name: &str) -> Option<Owner> {
    match roles.get_opt(name).await {
        Ok(Some(r)) => Some(Owner {
            name: name.to_string(),
            uid: r.uid().unwrap_or_default(),
        }),
        Ok(None) => {
            tracing::warn!(
                cluster_role = name,
                "sidecar ClusterRole not found: no sidecar Role or RoleBinding is created until it exists"
            );
            None
        }
        Err(e) => {
            tracing::warn!(cluster_role = name, error = %e, "cannot read the sidecar ClusterRole (the operator needs get on it): no sidecar Role or RoleBinding is created");
            None
        }
    }
}

/// Keeps the Roles and bindings right until dropped: a pass whenever sequences, Roles or
/// bindings change, every second when the service accounts of the labelled pods in
/// `pods` (the controller's cache) changed, and at least once a minute. Watch errors are
/// reported through `metrics` and `health` (see `report`).
pub async fn keep_sidecar_bindings(
    client: Client,
    namespace: Option<String>,
    cluster_role: String,
    pods: Store<Pod>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) {
    fn scoped<K>(c: &Client, namespace: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(c.clone(), ns),
            None => Api::all(c.clone()),
        }
    }
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    fn reporter<K>(
        name: &'static str,
        metrics: &Arc<Metrics>,
        health: &Arc<Health>,
    ) -> impl FnMut(Result<watcher::Event<K>, watcher::Error>) + use<K> {
        let (metrics, health) = (metrics.clone(), health.clone());
        move |event| {
            health.report_watch(
                name,
                "sidecar RoleBindings are not kept until it works",
                &metrics,
                &event,
            )
        }
    }
    let watch = |name| (name, &metrics, &health);
    let (seq_store, seq_writer) = reflector::store::<IdSequence>();
    let seq_events = watcher(
        scoped::<IdSequence>(&client, &namespace),
        watcher::Config::default(),
    )
    .backoff(kubeflake_runtime::backoff::WatchBackoff::default())
    .reflect(seq_writer)
    .map({
        let (n, m, h) = watch("rbac_idsequences");
        reporter(n, m, h)
    });
    let managed = || watcher::Config::default().labels(MANAGED_LABEL);
    let (role_store, role_writer) = reflector::store::<Role>();
    let role_events = watcher(scoped::<Role>(&client, &namespace), managed())
        .backoff(kubeflake_runtime::backoff::WatchBackoff::default())
        .reflect(role_writer)
        .map({
            let (n, m, h) = watch("rbac_roles");
            reporter(n, m, h)
        });
    let (binding_store, binding_writer) = reflector::store::<RoleBinding>();
    let binding_events = watcher(scoped::<RoleBinding>(&client, &namespace), managed())
        .backoff(kubeflake_runtime::backoff::WatchBackoff::default())
        .reflect(binding_writer)
        .map({
            let (n, m, h) = watch("rbac_rolebindings");
            reporter(n, m, h)
        });
    let mut events = std::pin::pin!(futures::stream::select(
        seq_events,
        futures::stream::select(role_events, binding_events)
    ));
    // The stores fill only while the event stream is polled, so drive it while waiting.
    let mut ready = std::pin::pin!(async {
        tokio::try_join!(
            seq_store.wait_until_ready(),
            role_store.wait_until_ready(),
            binding_store.wait_until_ready(),
            pods.wait_until_ready(),
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
    let mut last_needs = BTreeMap::new();
    loop {
        let now = needs(&seq_store.state(), &pods.state());
        let owner = find_owner(&cluster_roles, &cluster_role).await;
        let changes = plan(&now, &observed(&role_store, &binding_store), owner.as_ref());
        for change in changes {
            apply(&client, owner.as_ref(), &now, &change, &metrics).await;
        }
        for (ns, need) in &now {
            if need.leases.is_none() && last_needs.get(ns) != Some(need) {
                tracing::warn!(namespace = %ns, limit = MAX_NAMED_LEASES, "the sequences of this namespace have more slot Leases than a sidecar Role names: its sidecars may write every Lease of the namespace (use fewer worker bits to narrow it)");
            }
        }
        last_needs = now;
        let last_pass = tokio::time::Instant::now();
        // Wait for a change of the watched objects (then let a burst settle), for the pods'
        // service accounts to change (looked at every second), or a minute.
        loop {
            tokio::select! {
                _ = events.next() => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    break;
                }
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    let now = accounts(&pods.state());
                    let accounts_changed = last_needs.iter().any(|(ns, n): (&String, &Needs)| {
                        now.get(ns).cloned().unwrap_or_default() != n.accounts
                    });
                    if accounts_changed || last_pass.elapsed() >= Duration::from_secs(60) {
                        break;
                    }
                }
            }
        }
        // Drain what arrived meanwhile; the stores already hold it.
        while futures::FutureExt::now_or_never(events.next())
            .flatten()
            .is_some()
        {}
    }
}

async fn apply(
    client: &Client,
    owner: Option<&Owner>,
    needs: &BTreeMap<String, Needs>,
    change: &Change,
    metrics: &Metrics,
) {
    let desired = |ns: &str| Some((owner?, needs.get(ns)?));
    let result = match change {
        Change::Create { namespace, object } => {
            let Some((owner, need)) = desired(namespace) else {
                return;
            };
            let params = PostParams::default();
            match object {
                Object::Role => Api::<Role>::namespaced(client.clone(), namespace)
                    .create(&params, &role(namespace, need, owner))
                    .await
                    .map(|_| "created"),
                Object::Binding => Api::<RoleBinding>::namespaced(client.clone(), namespace)
                    .create(&params, &binding(namespace, &need.accounts, owner))
                    .await
                    .map(|_| "created"),
            }
        }
        Change::Update {
            namespace,
            object,
            version,
        } => {
            let Some((owner, need)) = desired(namespace) else {
                return;
            };
            let params = PostParams::default();
            match object {
                Object::Role => {
                    let mut r = role(namespace, need, owner);
                    r.metadata.resource_version = Some(version.clone());
                    Api::<Role>::namespaced(client.clone(), namespace)
                        .replace(BINDING, &params, &r)
                        .await
                        .map(|_| "updated")
                }
                Object::Binding => {
                    let mut b = binding(namespace, &need.accounts, owner);
                    b.metadata.resource_version = Some(version.clone());
                    Api::<RoleBinding>::namespaced(client.clone(), namespace)
                        .replace(BINDING, &params, &b)
                        .await
                        .map(|_| "updated")
                }
            }
        }
        Change::Delete {
            namespace,
            object,
            uid,
        } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match object {
                Object::Role => Api::<Role>::namespaced(client.clone(), namespace)
                    .delete(BINDING, &params)
                    .await
                    .map(|_| "deleted"),
                Object::Binding => Api::<RoleBinding>::namespaced(client.clone(), namespace)
                    .delete(BINDING, &params)
                    .await
                    .map(|_| "deleted"),
            }
        }
    };
    match result {
        Ok(action) => {
            metrics.sidecar_bindings.with_label_values(&[action]).inc();
            tracing::info!(?change, "sidecar {action}");
        }
        // Someone else did it first; the next pass sees the result.
        Err(e) if is_conflict(&e) || is_not_found(&e) => {}
        Err(e) => {
            tracing::warn!(?change, error = %e, "sidecar Role or RoleBinding not written; retrying on the next pass")
        }
    }
}
