//! The segment counter: one `coordination.k8s.io/v1` Lease per Segment-mode sequence.
//!
//! A Lease because sidecars may already read and update Leases in their namespace (no new
//! RBAC), every update is a compare-and-swap on `resourceVersion` in etcd, and the object
//! lives on its own, so it survives operator restarts and even the deletion of its
//! sequence (it has no owner reference: a re-created sequence continues above it).
//!
//! | field                               | meaning                                        |
//! |-------------------------------------|------------------------------------------------|
//! | name `<sequence>-segment-counter`   | one per sequence                               |
//! | label `kubeflake.io/segment-counter`| the sequence name (never `kubeflake.io/sequence`, so slot code never sees it) |
//! | annotation `kubeflake.io/next`      | the first value not yet claimed (decimal)      |
//! | annotation `kubeflake.io/claims`    | blocks claimed so far (for the status's rate)  |
//! | annotation `kubeflake.io/claimants` | UIDs of the pods labelled for the sequence, comma-separated: the only pods whose sidecars may claim (written by the operator, enforced by [`crate::lease_policy`]) |
//!
//! A claim of `n` values reads `next = v`, writes `next = v + n` conditional on the version
//! read, and only then hands out `[v, v + n)`.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Label on the counter Lease: the sequence's name.
pub const COUNTER_LABEL: &str = "kubeflake.io/segment-counter";
/// Annotation: the first value not yet claimed.
pub const NEXT_ANNOTATION: &str = "kubeflake.io/next";
/// Annotation: how many blocks were claimed.
pub const CLAIMS_ANNOTATION: &str = "kubeflake.io/claims";
/// Annotation: the UIDs of the pods whose sidecars may claim, comma-separated.
pub const CLAIMANTS_ANNOTATION: &str = "kubeflake.io/claimants";
/// One past the largest value: values are positive signed 64-bit integers.
pub const LIMIT: u64 = 1 << 63;

/// The counter Lease's name for a sequence.
pub fn counter_name(sequence: &str) -> String {
    format!("{sequence}-segment-counter")
}

/// Why a Lease is not a well-formed counter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error(
        "lease {name}: annotation {annotation} is {value:?}, not a whole number up to 2^63; \
         fix it by hand to at least the highest value ever issued, never lower"
    )]
    BadAnnotation {
        name: String,
        annotation: &'static str,
        value: String,
    },
    #[error("lease {name} has no {NEXT_ANNOTATION} annotation: it is not a segment counter")]
    Missing { name: String },
}

/// What one counter Lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The first value not yet claimed (at most [`LIMIT`]).
    pub next: u64,
    /// Blocks claimed so far.
    pub claims: u64,
    /// The version read: the precondition of the next write.
    pub resource_version: Option<String>,
}

impl Counter {
    /// Reads a counter Lease.
    pub fn parse(lease: &Lease) -> Result<Counter, CounterError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let annotations = lease.metadata.annotations.as_ref();
        let read = |annotation: &'static str| -> Result<Option<u64>, CounterError> {
            match annotations.and_then(|a| a.get(annotation)) {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= LIMIT)
                    .map(Some)
                    .ok_or_else(|| CounterError::BadAnnotation {
                        name: name.clone(),
                        annotation,
                        value: v.clone(),
                    }),
            }
        };
        let next =
            read(NEXT_ANNOTATION)?.ok_or_else(|| CounterError::Missing { name: name.clone() })?;
        Ok(Counter {
            next,
            claims: read(CLAIMS_ANNOTATION)?.unwrap_or(0),
            resource_version: lease.metadata.resource_version.clone(),
        })
    }

    /// The Lease with this counter written into `lease`'s metadata (other fields kept),
    /// carrying the version read, so that a replace is a compare-and-swap.
    pub fn write_into(&self, mut lease: Lease) -> Lease {
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(NEXT_ANNOTATION.to_string(), self.next.to_string());
        annotations.insert(CLAIMS_ANNOTATION.to_string(), self.claims.to_string());
        lease.metadata.resource_version = self.resource_version.clone();
        lease
    }
}

/// The pods whose sidecars may claim from `lease` (UIDs), as the operator last wrote them.
pub fn claimants(lease: &Lease) -> Vec<String> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLAIMANTS_ANNOTATION))
        .map(|v| {
            v.split(',')
                .filter(|uid| !uid.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The [`CLAIMANTS_ANNOTATION`] value for these pod UIDs: sorted, without repeats, so
/// that the same pods always read the same and an unchanged set is never rewritten.
pub fn claimants_value<'a>(uids: impl IntoIterator<Item = &'a str>) -> String {
    let set: std::collections::BTreeSet<&str> =
        uids.into_iter().filter(|u| !u.is_empty()).collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// A new counter Lease for `sequence` in `namespace`, starting at `start`.
pub fn new_counter(sequence: &str, namespace: &str, start: u64) -> Lease {
    let counter = Counter {
        next: start.min(LIMIT),
        claims: 0,
        resource_version: None,
    };
    counter.write_into(Lease {
        metadata: ObjectMeta {
            name: Some(counter_name(sequence)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                COUNTER_LABEL.to_string(),
                sequence.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot_lease::SEQUENCE_LABEL;

    #[test]
    fn a_new_counter_round_trips_and_is_not_labelled_as_a_slot_lease() {
        let lease = new_counter("orders", "ns", 7);
        assert_eq!(
            lease.metadata.name.as_deref(),
            Some("orders-segment-counter")
        );
        let labels = lease.metadata.labels.clone().unwrap();
        assert!(
            !labels.contains_key(SEQUENCE_LABEL),
            "slot code selects on that label"
        );
        assert_eq!(
            labels.get(COUNTER_LABEL).map(String::as_str),
            Some("orders")
        );
        let c = Counter::parse(&lease).unwrap();
        assert_eq!((c.next, c.claims), (7, 0));
    }

    #[test]
    fn claimants_are_written_sorted_without_repeats_and_read_back() {
        let value = claimants_value(["uid-b", "uid-a", "uid-b", ""]);
        assert_eq!(value, "uid-a,uid-b");
        let mut lease = new_counter("orders", "ns", 7);
        assert!(claimants(&lease).is_empty(), "a new counter lists nobody");
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CLAIMANTS_ANNOTATION.into(), value);
        assert_eq!(claimants(&lease), ["uid-a", "uid-b"]);
    }

    #[test]
    fn garbled_or_out_of_range_counters_are_errors_not_zero() {
        for bad in ["soon", "-1", "9223372036854775809"] {
            let mut lease = new_counter("orders", "ns", 7);
            lease
                .metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(NEXT_ANNOTATION.into(), bad.into());
            let err = Counter::parse(&lease).unwrap_err();
            assert!(err.to_string().contains("never lower"), "{bad}: {err}");
        }
        let mut lease = new_counter("orders", "ns", 7);
        lease.metadata.annotations = None;
        assert!(matches!(
            Counter::parse(&lease),
            Err(CounterError::Missing { .. })
        ));
    }
}
