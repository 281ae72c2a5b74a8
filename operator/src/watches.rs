//! What the controller keeps of the watched pods and slot Leases, and which of their
//! changes wake it. Both matter at size (docs/scale.md):
//!
//! - **Memory**: the caches hold every labelled pod and slot Lease of the cluster. A pod
//!   as the API server returns it (spec, status, managed fields) is several kilobytes, of
//!   which a pass reads a name, a UID, a label, two timestamps and the phase; [`slim_pod`]
//!   keeps those only, [`slim_lease`] drops the Lease's managed fields.
//! - **Passes**: every sidecar renews its lease every third of the lease duration, and
//!   kubelets rewrite pod status as containers start. Neither changes a plan (silence is
//!   measured by the requeue, which looks at each sequence every quarter lease duration),
//!   so [`reflect_triggers`] updates the cache with every event but wakes the controller
//!   only when what a pass reads changed ([`pod_trigger`], [`lease_trigger`]), or the
//!   object was deleted. Without it, N pods with lease duration D woke the operator about
//!   3N/D times a second, each a pass over its caches.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;
use kubeflake_crds::contract::INJECTED_ANNOTATION;
use kubeflake_crds::slot_lease::{self, FENCE_ANNOTATION, SEQUENCE_LABEL};

use crate::index::IndexWriter;

/// The pod as a pass reads it ([`crate::controller::snowflake::observe::pods`]): name,
/// namespace, UID, the sequence label, the release that injected its sidecar
/// ([`INJECTED_ANNOTATION`]: what an older sidecar is kept from,
/// [`crate::controller::injected`]), creation and deletion time, phase, and the
/// resourceVersion the cache needs; and its service account, for the sidecar RoleBindings
/// ([`crate::rbac`]). Everything else is dropped before it is cached.
pub fn slim_pod(pod: &mut Pod) {
    let meta = std::mem::take(&mut pod.metadata);
    let keep = |map: Option<BTreeMap<String, String>>, key: &str| {
        let value = map?.remove(key)?;
        Some(BTreeMap::from([(key.to_string(), value)]))
    };
    pod.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        labels: keep(meta.labels, SEQUENCE_LABEL),
        annotations: keep(meta.annotations, INJECTED_ANNOTATION),
        ..ObjectMeta::default()
    };
    // The service account is all the sidecar RBAC keeper reads of the spec.
    pod.spec = pod.spec.take().map(|s| PodSpec {
        service_account_name: s.service_account_name,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|s| PodStatus {
        phase: s.phase,
        ..PodStatus::default()
    });
}

/// The slot Lease without its managed fields (nearly half of a Lease as served, and never
/// read). The operator's writes start from this cached Lease (`SlotLease::read`), so it
/// must keep every other field; a PUT without managed fields leaves the server's as they are.
pub fn slim_lease(lease: &mut Lease) {
    lease.metadata.managed_fields = None;
}

fn hash_of(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// What a pass reads of a pod: which sequence it is in, which release injected it, and
/// whether it is leaving.
pub fn pod_trigger(pod: &Pod) -> u64 {
    hash_of((
        &pod.metadata.uid,
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SEQUENCE_LABEL)),
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INJECTED_ANNOTATION)),
        slot_lease::pod_is_leaving(pod),
    ))
}

/// What a pass reads of a slot Lease, less what a renewal changes (the renew time and the
/// fence): the holder, labels and other annotations, lease duration and acquisitions.
pub fn lease_trigger(lease: &Lease) -> u64 {
    let annotations: Option<BTreeMap<&String, &String>> =
        lease.metadata.annotations.as_ref().map(|a| {
            a.iter()
                .filter(|(k, _)| k.as_str() != FENCE_ANNOTATION)
                .collect()
        });
    let spec = lease.spec.as_ref();
    hash_of((
        &lease.metadata.uid,
        &lease.metadata.labels,
        annotations,
        spec.and_then(|s| s.holder_identity.as_ref()),
        spec.and_then(|s| s.lease_duration_seconds),
        spec.and_then(|s| s.lease_transitions),
    ))
}

/// Applies every watch event to the cache behind `writer` (as `reflect` does) and passes
/// on the objects whose `trigger` differs from the cached version, every deleted object,
/// and the objects a relist found gone. The first list passes everything (the cache is
/// empty); a re-list after a lost watch compares with the cache as it was.
pub fn reflect_triggers<K, S>(
    events: S,
    mut writer: IndexWriter<K>,
    trigger: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let cache = writer.as_reader();
    events
        .map(move |event| {
            let event = event?;
            let mut wakes = match &event {
                watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                    let meta = obj.meta();
                    let cached = cache.get(
                        meta.namespace.as_deref().unwrap_or_default(),
                        meta.name.as_deref().unwrap_or_default(),
                    );
                    let changed = cached.is_none_or(|c| trigger(&c) != trigger(obj));
                    changed.then(|| obj.clone()).into_iter().collect()
                }
                watcher::Event::Delete(obj) => vec![obj.clone()],
                watcher::Event::Init | watcher::Event::InitDone => Vec::new(),
            };
            // A relist's end: what it no longer lists was deleted while the watch was down.
            let vanished = writer.apply_watcher_event(&event);
            wakes.extend(vanished.iter().map(|obj| K::clone(obj)));
            Ok(futures::stream::iter(
                wakes.into_iter().map(Ok::<K, watcher::Error>),
            ))
        })
        .try_flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::snowflake::observe;
    use crate::index;
    use futures::stream;
    use serde_json::json;

    /// A pod as the API server serves it once a kubelet runs it.
    fn full_pod(phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "uid-web-0",
                "resourceVersion": "41", "creationTimestamp": "2026-11-23T08:00:00Z",
                "generateName": "web-", "labels": {
                    SEQUENCE_LABEL: "orders", "app": "web", "pod-template-hash": "5d8f7c",
                },
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-23T07:00:00Z",
                    INJECTED_ANNOTATION: "0.1.0"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-5d8f7c", "uid": "rs", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {
                    "f:labels": {"f:app": {}, "f:pod-template-hash": {}}}, "f:spec": {
                    "f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}, "f:env": {}}}}}},
                    {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "subresource": "status", "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {},
                    "f:podIP": {}, "f:startTime": {}}}}],
            },
            "spec": {"nodeName": "node-1", "serviceAccountName": "default", "containers": [{
                "name": "app", "image": "registry.invalid/web:1.2.3",
                "env": [{"name": "KUBEFLAKE_URL", "value": "http://127.0.0.1:7070"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets/token"}],
            }], "volumes": [{"name": "token", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}]},
            "status": {"phase": phase, "podIP": "10.0.0.7", "startTime": "2026-11-23T08:00:01Z",
                "conditions": [{"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"}],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                    "image": "registry.invalid/web:1.2.3", "imageID": "sha256:abc",
                    "state": {"running": {"startedAt": "2026-11-23T08:00:02Z"}}}]},
        }))
        .unwrap()
    }

    fn observed(
        pods: Vec<Pod>,
        key_form: bool,
    ) -> Vec<crate::controller::snowflake::plan::PodInfo> {
        let (store, mut writer) = index::index::<Pod>();
        for pod in pods {
            writer.apply_watcher_event(&watcher::Event::Apply(pod));
        }
        observe::pods(&store, "shop", "orders", key_form)
    }

    #[test]
    fn a_slim_pod_reads_the_same_to_a_pass_and_is_a_fraction_of_the_size() {
        for phase in ["Running", "Succeeded"] {
            let full = full_pod(phase);
            let mut slim = full.clone();
            slim_pod(&mut slim);
            for key_form in [false, true] {
                assert_eq!(
                    observed(vec![slim.clone()], key_form),
                    observed(vec![full.clone()], key_form)
                );
            }
            assert_eq!(
                slot_lease::pod_is_leaving(&slim),
                slot_lease::pod_is_leaving(&full)
            );
            let (full_len, slim_len) = (
                serde_json::to_vec(&full).unwrap().len(),
                serde_json::to_vec(&slim).unwrap().len(),
            );
            assert!(slim_len * 5 < full_len, "{slim_len} of {full_len} bytes");
        }
        let mut deleted = full_pod("Running");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-23T09:00:00Z".parse().unwrap(),
            ));
        slim_pod(&mut deleted);
        assert!(slot_lease::pod_is_leaving(&deleted), "deletion is kept");
    }

    /// The cache must still tell which release injected a pod: the operator keeps a strict
    /// sequence's counter from 0.1.0 sidecars (rule 13: they would write one value above
    /// the oracle's window) and a key form's slots from them (rule 3). Found by
    /// e2e/tests/upgrade.rs, when the slim pod had lost the annotation and 0.1.0 pods
    /// were listed as claimants beside the oracle.
    #[test]
    fn rule13_and_rule3_a_slim_pod_still_says_which_release_injected_its_sidecar() {
        let full = full_pod("Running");
        let mut slim = full.clone();
        slim_pod(&mut slim);
        assert!(crate::controller::injected::before_0_2(&full));
        assert!(
            crate::controller::injected::before_0_2(&slim),
            "slimmed: {:?}",
            slim.metadata.annotations
        );
        assert_eq!(
            slim.metadata.annotations.map(|a| a.len()),
            Some(1),
            "only the injected annotation is kept"
        );
        let mut current = full.clone();
        current
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(INJECTED_ANNOTATION.into(), "0.2.0".into());
        assert_ne!(pod_trigger(&current), pod_trigger(&full), "a pass reads it");
    }

    fn lease(version: &str, holder: Option<&str>, fence: &str, renewed: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "orders-slot-3", "namespace": "shop", "uid": "lease-uid",
                "resourceVersion": version,
                "labels": {SEQUENCE_LABEL: "orders", "kubeflake.io/slot": "3"},
                "annotations": {FENCE_ANNOTATION: fence},
                "managedFields": [{"manager": "kubeflake-sidecar", "operation": "Update"}]},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 120,
                "leaseTransitions": 1, "renewTime": renewed},
        }))
        .unwrap()
    }

    fn names<K: Resource>(woken: &[K]) -> Vec<String> {
        woken
            .iter()
            .map(|o| o.meta().resource_version.clone().unwrap_or_default())
            .collect()
    }

    #[tokio::test]
    async fn renewals_and_status_updates_fill_the_cache_without_waking_the_controller() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (leases, writer) = index::index::<Lease>();
        let events = vec![
            Init,
            InitApply(lease("1", Some("a"), "100", "2026-11-23T08:00:00.000000Z")),
            InitDone,
            // Renewals: the fence and the renew time move.
            Apply(lease("2", Some("a"), "200", "2026-11-23T08:00:40.000000Z")),
            Apply(lease("3", Some("a"), "300", "2026-11-23T08:01:20.000000Z")),
            // Released: the holder changes.
            Apply(lease("4", None, "300", "2026-11-23T08:01:20.000000Z")),
            Delete(lease("4", None, "300", "2026-11-23T08:01:20.000000Z")),
        ];
        let woken: Vec<Lease> =
            reflect_triggers(stream::iter(events.into_iter().map(Ok)), writer, |l| {
                lease_trigger(l)
            })
            .try_collect()
            .await
            .unwrap();
        assert_eq!(names(&woken), ["1", "4", "4"]);
        assert!(leases.store().is_empty(), "the delete reached the cache");

        // The cache holds every version, woken or not.
        let (leases, writer) = index::index::<Lease>();
        let events = [
            Apply(lease("1", Some("a"), "100", "2026-11-23T08:00:00.000000Z")),
            Apply(lease("2", Some("a"), "200", "2026-11-23T08:00:40.000000Z")),
        ];
        let woken: Vec<Lease> = reflect_triggers(
            stream::iter(events.into_iter().map(Ok)),
            writer,
            lease_trigger,
        )
        .try_collect()
        .await
        .unwrap();
        assert_eq!(names(&woken), ["1"]);
        let cached = leases.store().state();
        assert_eq!(cached[0].metadata.resource_version.as_deref(), Some("2"));

        // Pods: a kubelet's status updates do not wake it; finishing does.
        let (_pods, writer) = index::index::<Pod>();
        let mut pending = full_pod("Pending");
        pending.metadata.resource_version = Some("1".into());
        let mut running = full_pod("Running");
        running.metadata.resource_version = Some("2".into());
        let mut done = full_pod("Succeeded");
        done.metadata.resource_version = Some("3".into());
        let events = [Apply(pending), Apply(running), Apply(done)];
        let woken: Vec<Pod> = reflect_triggers(
            stream::iter(events.into_iter().map(Ok)),
            writer,
            pod_trigger,
        )
        .try_collect()
        .await
        .unwrap();
        assert_eq!(names(&woken), ["1", "3"]);
    }

    #[test]
    fn a_slim_lease_parses_the_same() {
        let full = lease("7", Some("a"), "100", "2026-11-23T08:00:00.000000Z");
        let mut slim = full.clone();
        slim_lease(&mut slim);
        assert!(slim.metadata.managed_fields.is_none());
        assert_eq!(
            slot_lease::SlotLease::parse(&slim).unwrap(),
            slot_lease::SlotLease::parse(&full).unwrap()
        );
        assert_eq!(lease_trigger(&slim), lease_trigger(&full));
    }
}
