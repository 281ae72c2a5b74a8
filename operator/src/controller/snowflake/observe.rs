//! What a Snowflake pass sees: the sequence's slot leases and pods from the caches, read
//! through their index by sequence ([`crate::index`]), so a pass costs what its sequence
//! has, not what the cluster has. No API calls. Which held leases are silent is judged in
//! [`crate::controller::silence`].

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kubeflake_crds::IdSequence;
use kubeflake_crds::ownership::{Foreign, LeaseKind};
use kubeflake_crds::slot_lease::{self, SlotLease, SlotLeaseError};

use super::plan::PodInfo;
use crate::index::Index;

/// The sequence's slot leases, from the cache.
pub fn leases(
    cache: &Index<Lease>,
    ns: &str,
    name: &str,
) -> Result<Vec<SlotLease>, SlotLeaseError> {
    cache
        .of(ns, name)
        .into_iter()
        .map(SlotLease::parse_shared)
        .collect()
}

/// The sequence's slot leases from the cache, kubeflake's apart from the foreign ones
/// (docs/safety.md rule 16): labelled for the sequence, but named otherwise than their
/// labels say, or not owned by the sequence (`uid`). Those are never planned with, written
/// or deleted.
pub fn sorted(
    cache: &Index<Lease>,
    seq: &IdSequence,
) -> Result<(Vec<SlotLease>, Vec<Foreign>), SlotLeaseError> {
    let (ns, name) = (seq.namespace().unwrap_or_default(), seq.name_any());
    let mut ours = Vec::new();
    let mut foreign = Vec::new();
    for lease in cache.of(&ns, &name) {
        match crate::controller::foreign::check(seq, &lease, LeaseKind::Slot) {
            Ok(()) => ours.push(SlotLease::parse_shared(lease)?),
            Err(f) => foreign.push(f),
        }
    }
    Ok((ours, foreign))
}

/// The resourceVersion of lease `name` in namespace `ns` as the cache holds it, if it does.
pub fn lease_version(cache: &Index<Lease>, ns: &str, name: &str) -> Option<String> {
    cache
        .get(ns, name)
        .and_then(|lease| lease.metadata.resource_version.clone())
}

/// The sequence's pods, from the cache. With `key_form` (the layout stores IDs in a key
/// form, docs/layouts.md, or the sequence is joined to an ID space, rule 17) pods injected
/// before 0.2.0 count as leaving: their sidecars would issue time-ordered IDs, or ignore the
/// fence cap ([`crate::controller::injected`]), so they get no new slot and wait. A slot
/// such a pod already holds (it was injected before the upgrade, and held it when the
/// sequence joined) stays its own, so its app keeps serving, and a joined sequence's plan
/// caps its Lease like any other held one: the API server's Lease policy refuses the old
/// sidecar's renewals past the cap, which it does not know (docs/safety.md rules 15, 17).
pub fn pods(cache: &Index<Pod>, ns: &str, name: &str, key_form: bool) -> Vec<PodInfo> {
    cache
        .of(ns, name)
        .into_iter()
        .filter_map(|p| {
            let old = key_form && crate::controller::injected::before_0_2(&p);
            if old {
                tracing::warn!(sequence = name, namespace = ns, pod = %p.name_any(), "pod injected before 0.2.0 gets no new slot: this sequence's layout has a key form, or its sequence shares an ID space with a fence cap, that its sidecar does not know; a slot it holds stays its own (capped for an ID space); re-create the pod");
            }
            Some(PodInfo {
                name: p.name_any(),
                uid: p.uid()?,
                created: p
                    .creation_timestamp()
                    .and_then(|t| chrono::DateTime::from_timestamp_millis(t.0.as_millisecond())),
                leaving: old || slot_lease::pod_is_leaving(&p),
            })
        })
        .collect()
}
