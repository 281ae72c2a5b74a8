//! Slot leases: how the operator and the sidecars record who holds a worker slot.
//!
//! One `coordination.k8s.io/v1` Lease per slot, named `<sequence>-slot-<n>` in the
//! sequence's namespace and owned by the IdSequence:
//!
//! | field                              | meaning                                             |
//! |------------------------------------|-----------------------------------------------------|
//! | `spec.holderIdentity`              | the holder pod's UID, or empty when free            |
//! | `spec.leaseTransitions`            | counts assignments: identifies one acquisition      |
//! | `spec.leaseDurationSeconds`        | from the sequence's `lease.durationSeconds`         |
//! | `spec.acquireTime`, `renewTime`    | when assigned / last renewed by the holder          |
//! | annotation `kubeflake.io/fence`    | highest tick any holder of the slot may have used   |
//! | annotation `kubeflake.io/holder-pod` | the holder pod's name, for people and for reclaim |
//! | annotation `kubeflake.io/released-at` | when the slot was last freed (least recently used first) |
//! | labels `kubeflake.io/sequence`, `slot`, `holder` | for label-selected watches        |
//!
//! Every write is conditional on the `resourceVersion` read (docs/safety.md rule 1).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use crate::layout::{Slot, Tick};

/// Label on pods that take part in a sequence, and on that sequence's slot leases.
pub const SEQUENCE_LABEL: &str = "kubeflake.io/sequence";
/// Label on a slot lease: the slot number.
pub const SLOT_LABEL: &str = "kubeflake.io/slot";
/// Label on a slot lease: the holder pod's UID (absent when free).
pub const HOLDER_LABEL: &str = "kubeflake.io/holder";
/// Annotation on a slot lease: the fence, in ticks.
pub const FENCE_ANNOTATION: &str = "kubeflake.io/fence";
/// Annotation on a slot lease: the holder pod's name.
pub const HOLDER_POD_ANNOTATION: &str = "kubeflake.io/holder-pod";
/// Annotation on a slot lease: RFC 3339 time the slot was last released.
pub const RELEASED_AT_ANNOTATION: &str = "kubeflake.io/released-at";
/// Finalizer on an IdSequence: its leases are removed before it goes (rule 10).
pub const FINALIZER: &str = "kubeflake.io/slot-leases";

/// The lease name of a slot.
pub fn lease_name(sequence: &str, slot: Slot) -> String {
    format!("{sequence}-slot-{}", slot.0)
}

/// Why a Lease is not a well-formed slot lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotLeaseError {
    #[error("lease {name} has no valid {SLOT_LABEL} label")]
    BadSlot { name: String },
    #[error("lease {name} has a {FENCE_ANNOTATION} annotation that is not a tick count: {value:?}")]
    BadFence { name: String, value: String },
}

/// What one slot lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotLease {
    pub name: String,
    pub slot: Slot,
    /// Pod UID of the holder.
    pub holder: Option<String>,
    pub holder_pod: Option<String>,
    pub fence: Tick,
    pub transitions: i32,
    pub resource_version: Option<String>,
    /// When last released (RFC 3339), if ever.
    pub released_at: Option<String>,
}

impl SlotLease {
    /// Reads a slot lease.
    pub fn parse(lease: &Lease) -> Result<SlotLease, SlotLeaseError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let labels = lease.metadata.labels.as_ref();
        let annotations = lease.metadata.annotations.as_ref();
        let slot = labels
            .and_then(|l| l.get(SLOT_LABEL))
            .and_then(|v| v.parse::<u32>().ok())
            .map(Slot)
            .ok_or_else(|| SlotLeaseError::BadSlot { name: name.clone() })?;
        let fence = match annotations.and_then(|a| a.get(FENCE_ANNOTATION)) {
            None => Tick(0),
            Some(v) => Tick(v.parse::<u64>().map_err(|_| SlotLeaseError::BadFence {
                name: name.clone(),
                value: v.clone(),
            })?),
        };
        let spec = lease.spec.as_ref();
        Ok(SlotLease {
            slot,
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            holder_pod: annotations
                .and_then(|a| a.get(HOLDER_POD_ANNOTATION))
                .cloned(),
            fence,
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            resource_version: lease.metadata.resource_version.clone(),
            released_at: annotations
                .and_then(|a| a.get(RELEASED_AT_ANNOTATION))
                .cloned(),
            name,
        })
    }

    /// The acquisition this holder got: changes with every assignment (rule 6 names it).
    pub fn acquisition(&self) -> String {
        format!("{}#{}", self.name, self.transitions)
    }
}

/// Labels of a slot lease.
pub fn lease_labels(sequence: &str, slot: Slot, holder: Option<&str>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (SEQUENCE_LABEL.to_string(), sequence.to_string()),
        (SLOT_LABEL.to_string(), slot.0.to_string()),
    ]);
    if let Some(uid) = holder {
        labels.insert(HOLDER_LABEL.to_string(), uid.to_string());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lease(labels: BTreeMap<String, String>, fence: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("orders-slot-3".into()),
                labels: Some(labels),
                annotations: fence
                    .map(|f| BTreeMap::from([(FENCE_ANNOTATION.to_string(), f.to_string())])),
                resource_version: Some("42".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("uid-1".into()),
                lease_transitions: Some(4),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn parses_slot_holder_fence_and_acquisition() {
        let l = SlotLease::parse(&lease(
            lease_labels("orders", Slot(3), Some("uid-1")),
            Some("123"),
        ))
        .unwrap();
        assert_eq!(l.slot, Slot(3));
        assert_eq!(l.holder.as_deref(), Some("uid-1"));
        assert_eq!(l.fence, Tick(123));
        assert_eq!(l.acquisition(), "orders-slot-3#4");
        assert_eq!(lease_name("orders", Slot(3)), "orders-slot-3");
    }

    #[test]
    fn a_missing_fence_is_zero_but_a_garbled_one_is_an_error() {
        let labels = lease_labels("orders", Slot(3), None);
        assert_eq!(
            SlotLease::parse(&lease(labels.clone(), None))
                .unwrap()
                .fence,
            Tick(0)
        );
        assert!(matches!(
            SlotLease::parse(&lease(labels, Some("soon"))),
            Err(SlotLeaseError::BadFence { .. })
        ));
        assert!(SlotLease::parse(&lease(BTreeMap::new(), None)).is_err());
    }
}
