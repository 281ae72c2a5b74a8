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
//! | label `kubeflake.io/segment-counter`| the sequence name (never `kubeflake.io/sequence`, so slot code never sees it); a Lease with the name but without this label is not a counter ([`crate::ownership`]) |
//! | annotation `kubeflake.io/next`      | the first value not yet claimed (decimal)      |
//! | annotation `kubeflake.io/claims`    | blocks claimed so far (for the status's rate)  |
//! | annotation `kubeflake.io/format`    | the format the counter is written in ([`LEASE_FORMAT`]; absent = 1): a newer one is refused, see [`crate::slot_lease`] |
//! | annotations `kubeflake.io/limit`, `kubeflake.io/queued-start`, `kubeflake.io/queued-limit` | format 3 only: the range of an ID space's values claims stay in, and the next one ([`range`]) |
//! | annotation `kubeflake.io/claimants` | UIDs of the pods labelled for the sequence, comma-separated: the only pods whose sidecars may claim (written by the operator, enforced by [`crate::lease_policy`]) |
//!
//! A claim of `n` values reads `next = v`, writes `next = v + n` conditional on the version
//! read, and only then hands out `[v, v + n)`.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::slot_lease::{FORMAT_ANNOTATION, FormatProblem, LEASE_FORMAT, lease_format_up_to};

/// The counter's format when a strict sequence's oracle serves it ([`crate::strict_oracle`]):
/// the meaning of `next` is unchanged (the first value never reserved); sidecars of releases
/// without the oracle refuse it.
pub const COUNTER_FORMAT_ORACLE: u64 = 2;
/// The highest counter format this release reads: 1 (claimed in blocks or one value per
/// write), 2 ([`COUNTER_FORMAT_ORACLE`]), 3 ([`COUNTER_FORMAT_RANGED`]: values in ranges
/// from an ID space's hub).
pub const COUNTER_FORMAT: u64 = COUNTER_FORMAT_RANGED;

pub mod range;

pub use range::{
    COUNTER_FORMAT_RANGED, QUEUED_LIMIT_ANNOTATION, QUEUED_START_ANNOTATION, Queued,
    RANGE_LIMIT_ANNOTATION, Ranged, TakeError, Taken, take,
};

pub use crate::ownership::{COUNTER_LABEL, counter_name};
/// Annotation: the first value not yet claimed.
pub const NEXT_ANNOTATION: &str = "kubeflake.io/next";
/// Annotation: how many blocks were claimed.
pub const CLAIMS_ANNOTATION: &str = "kubeflake.io/claims";
/// Annotation: the UIDs of the pods whose sidecars may claim, comma-separated.
pub const CLAIMANTS_ANNOTATION: &str = "kubeflake.io/claimants";
/// One past the largest value: values are positive signed 64-bit integers.
pub const LIMIT: u64 = 1 << 63;

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
    /// Not kubeflake's (docs/safety.md rule 16): never read further, never written.
    #[error(transparent)]
    Foreign(#[from] crate::ownership::Foreign),
    #[error(
        "segment counter Lease {name} was written by a newer kubeflake (format {found} in \
         {FORMAT_ANNOTATION}; this release understands formats up to {understood}): no value is \
         claimed from it and it is not changed. Upgrade this operator and its sidecars to a \
         release that reads format {found}, or roll the newer release back as its upgrade notes \
         say; the Lease was not changed"
    )]
    UnsupportedFormat {
        name: String,
        found: u64,
        understood: u64,
    },
    #[error(
        "segment counter Lease {name} has a {FORMAT_ANNOTATION} annotation that is not a format \
         number: {value:?} (kubeflake writes a whole number from 1 up). No value is claimed from \
         it and it is not changed: put back the value the kubeflake release that wrote it set; \
         the Lease was not changed"
    )]
    BadFormat { name: String, value: String },
    /// The ranges of a format 3 counter (docs/safety.md rule 22) do not read as ranges.
    #[error(
        "segment counter Lease {name}: {problem}. No value is claimed from it and it is not \
         changed: the operator writes these annotations from the ID space's hub; put back what \
         it wrote (the range this cluster's IdSpaceMembership records), never a range another \
         cluster may hold"
    )]
    BadRange { name: String, problem: String },
}

impl CounterError {
    /// Whether the counter is in a format this release does not understand (newer, or not
    /// a format number): refused as a whole, never read field by field.
    pub fn is_format(&self) -> bool {
        matches!(
            self,
            CounterError::UnsupportedFormat { .. } | CounterError::BadFormat { .. }
        )
    }
}

/// What one counter Lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The first value not yet claimed (at most [`LIMIT`]).
    pub next: u64,
    /// Blocks claimed so far.
    pub claims: u64,
    /// The format read (1 when the Lease does not say; never above [`COUNTER_FORMAT`]).
    /// Written back as read: only the operator changes it.
    pub format: u64,
    /// The version read: the precondition of the next write.
    pub resource_version: Option<String>,
    /// Format 3 only: the range claims stay in, and the one queued after it
    /// ([`range`], docs/safety.md rule 22). `None`: claims go up to 2^63, as before.
    pub range: Option<Ranged>,
}

impl Counter {
    /// Reads a counter Lease.
    pub fn parse(lease: &Lease) -> Result<Counter, CounterError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        // Kubeflake's at all (its label, and the name the label gives it; rule 16)? A
        // foreign Lease was never guarded by the Lease policy: its `next` means nothing.
        crate::ownership::check_named(lease, crate::ownership::LeaseKind::SegmentCounter)?;
        // The format next: in a format this release does not know, no field is read.
        let format =
            lease_format_up_to(lease, COUNTER_FORMAT).map_err(|problem| match problem {
                FormatProblem::Newer(found) => CounterError::UnsupportedFormat {
                    name: name.clone(),
                    found,
                    understood: COUNTER_FORMAT,
                },
                FormatProblem::Unreadable(value) => CounterError::BadFormat {
                    name: name.clone(),
                    value,
                },
            })?;
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
            format,
            resource_version: lease.metadata.resource_version.clone(),
            range: range::read(&name, annotations, format, next)?,
        })
    }

    /// The Lease with this counter written into `lease`'s metadata (other fields kept, the
    /// format annotation included; the range written when there is one), carrying the
    /// version read, so that a replace is a compare-and-swap.
    pub fn write_into(&self, mut lease: Lease) -> Lease {
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(NEXT_ANNOTATION.to_string(), self.next.to_string());
        annotations.insert(CLAIMS_ANNOTATION.to_string(), self.claims.to_string());
        range::write(annotations, self.range.as_ref());
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

/// Whether `lease` lists the pod `uid` among its claimants ([`claimants`], without
/// allocating: the strict oracle asks it for every forwarded group).
pub fn lists_claimant(lease: &Lease, uid: &str) -> bool {
    !uid.is_empty()
        && lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLAIMANTS_ANNOTATION))
            .is_some_and(|listed| listed.split(',').any(|u| u == uid))
}

/// The [`CLAIMANTS_ANNOTATION`] value for these pod UIDs: sorted, without repeats, so
/// that the same pods always read the same and an unchanged set is never rewritten.
pub fn claimants_value<'a>(uids: impl IntoIterator<Item = &'a str>) -> String {
    let set: std::collections::BTreeSet<&str> =
        uids.into_iter().filter(|u| !u.is_empty()).collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// A new counter Lease for `sequence` in `namespace`, starting at `start`, in this
/// release's format ([`LEASE_FORMAT`], written out).
pub fn new_counter(sequence: &str, namespace: &str, start: u64) -> Lease {
    let counter = Counter {
        next: start.min(LIMIT),
        claims: 0,
        format: LEASE_FORMAT,
        resource_version: None,
        range: None,
    };
    counter.write_into(Lease {
        metadata: ObjectMeta {
            name: Some(counter_name(sequence)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                COUNTER_LABEL.to_string(),
                sequence.to_string(),
            )])),
            // An empty claimants list: nobody may claim until the operator lists the
            // sequence's pods (crds::lease_policy; without it, any pod might).
            annotations: Some(BTreeMap::from([
                (FORMAT_ANNOTATION.to_string(), LEASE_FORMAT.to_string()),
                (CLAIMANTS_ANNOTATION.to_string(), String::new()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    })
}

#[cfg(test)]
mod tests;
