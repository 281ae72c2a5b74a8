//! What a Snowflake pass sees: the sequence's slot leases and pods from the reflector
//! caches. No API calls. Which held leases are silent is judged in
//! [`crate::controller::silence`].

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kubeflake_crds::slot_lease::{self, SEQUENCE_LABEL, SlotLease, SlotLeaseError};

use super::plan::PodInfo;

/// The sequence's slot leases, from the cache.
pub fn leases(
    store: &Store<Lease>,
    ns: &str,
    name: &str,
) -> Result<Vec<SlotLease>, SlotLeaseError> {
    let mut leases = Vec::new();
    for lease in store.state() {
        let labelled = lease.labels().get(SEQUENCE_LABEL).map(String::as_str) == Some(name);
        if labelled && lease.namespace().as_deref() == Some(ns) {
            leases.push(SlotLease::parse(&lease)?);
        }
    }
    Ok(leases)
}

/// The resourceVersion of lease `name` in namespace `ns` as the cache holds it, if it does.
pub fn lease_version(store: &Store<Lease>, ns: &str, name: &str) -> Option<String> {
    store
        .get(&ObjectRef::new(name).within(ns))
        .and_then(|lease| lease.metadata.resource_version.clone())
}

/// The sequence's pods, from the cache.
pub fn pods(store: &Store<Pod>, ns: &str, name: &str) -> Vec<PodInfo> {
    store
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| p.labels().get(SEQUENCE_LABEL).map(String::as_str) == Some(name))
        .filter_map(|p| {
            Some(PodInfo {
                name: p.name_any(),
                uid: p.uid()?,
                created: p
                    .creation_timestamp()
                    .and_then(|t| chrono::DateTime::from_timestamp_millis(t.0.as_millisecond())),
                leaving: slot_lease::pod_is_leaving(&p),
            })
        })
        .collect()
}
