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
//! | annotation `kubeflake.io/format`   | the format all of the above is written in ([`LEASE_FORMAT`]; absent = 1) |
//! | labels `kubeflake.io/sequence`, `slot`, `holder` | for label-selected watches        |
//!
//! Every write is conditional on the `resourceVersion` read (docs/safety.md rule 1).
//!
//! **Formats.** What the fields above mean is format 1 (kubeflake 0.1.0 wrote it without
//! saying so: an absent [`FORMAT_ANNOTATION`] is format 1). A release that changes a meaning
//! (say, the fence's unit) writes a higher format, and a release that does not understand a
//! Lease's format refuses it: [`SlotLease::parse`] (and the segment counter's parse) fails
//! with [`SlotLeaseError::UnsupportedFormat`] or [`SlotLeaseError::BadFormat`], so nothing
//! built on the parse (assign, renew, release, serving) uses or rewrites that Lease.
//! Every transition keeps the annotation as read; new Leases are written with
//! [`LEASE_FORMAT`].

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::IdSequence;
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
/// Annotation on a slot lease and on a segment counter Lease: the format the Lease is
/// written in, a whole number. Absent means format 1, what kubeflake 0.1.0 wrote.
pub const FORMAT_ANNOTATION: &str = "kubeflake.io/format";
/// The highest Lease format this release understands, and the one it writes.
pub const LEASE_FORMAT: u64 = 1;
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
    #[error(
        "slot lease {name} was written by a newer kubeflake (format {found} in {FORMAT_ANNOTATION}; \
         this release understands formats up to {understood}): it is neither used nor changed. \
         Upgrade this operator and its sidecars to a release that reads format {found}, or roll \
         the newer release back as its upgrade notes say; the Lease was not changed"
    )]
    UnsupportedFormat {
        name: String,
        found: u64,
        understood: u64,
    },
    #[error(
        "slot lease {name} has a {FORMAT_ANNOTATION} annotation that is not a format number: \
         {value:?} (kubeflake writes a whole number from 1 up). It is neither used nor changed: \
         put back the value the kubeflake release that wrote the Lease set; the Lease was not \
         changed"
    )]
    BadFormat { name: String, value: String },
}

impl SlotLeaseError {
    /// Whether the Lease is in a format this release does not understand (newer, or not a
    /// format number): refused as a whole, never read field by field.
    pub fn is_format(&self) -> bool {
        matches!(
            self,
            SlotLeaseError::UnsupportedFormat { .. } | SlotLeaseError::BadFormat { .. }
        )
    }
}

/// Why a Lease's [`FORMAT_ANNOTATION`] is not one this release may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatProblem {
    /// A format above [`LEASE_FORMAT`]: written by a newer release.
    Newer(u64),
    /// Not a format number at all (0, a sign, letters, too large).
    Unreadable(String),
}

/// The format `lease` is written in (1 when it does not say), if this release understands
/// it. Shared by slot leases and the segment counter.
pub fn lease_format(lease: &Lease) -> Result<u64, FormatProblem> {
    let Some(value) = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FORMAT_ANNOTATION))
    else {
        return Ok(1);
    };
    let format = value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<u64>().ok())
        .flatten()
        .filter(|f| *f >= 1)
        .ok_or_else(|| FormatProblem::Unreadable(value.clone()))?;
    if format > LEASE_FORMAT {
        return Err(FormatProblem::Newer(format));
    }
    Ok(format)
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
    /// The format the Lease is written in (never above [`LEASE_FORMAT`]: others do not parse).
    pub format: u64,
}

impl SlotLease {
    /// Reads a slot lease.
    pub fn parse(lease: &Lease) -> Result<SlotLease, SlotLeaseError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        // The format first: in a format this release does not know, no field is read.
        let format = lease_format(lease).map_err(|problem| match problem {
            FormatProblem::Newer(found) => SlotLeaseError::UnsupportedFormat {
                name: name.clone(),
                found,
                understood: LEASE_FORMAT,
            },
            FormatProblem::Unreadable(value) => SlotLeaseError::BadFormat {
                name: name.clone(),
                value,
            },
        })?;
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
            format,
            name,
        })
    }

    /// The Lease this record describes, owned by `sequence`: what the operator writes back
    /// through [`assign`] and [`release`] (fields it does not model, such as the renew
    /// time, are not carried over; the write is conditional on [`Self::resource_version`]).
    pub fn to_lease(&self, sequence: &IdSequence) -> Lease {
        let mut lease = vacant(sequence, self.slot);
        lease.metadata.name = Some(self.name.clone());
        lease.metadata.resource_version = self.resource_version.clone();
        lease.metadata.labels = Some(lease_labels(
            &sequence.name_any(),
            self.slot,
            self.holder.as_deref(),
        ));
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(FENCE_ANNOTATION.to_string(), self.fence.0.to_string());
        if let Some(pod) = &self.holder_pod {
            annotations.insert(HOLDER_POD_ANNOTATION.to_string(), pod.clone());
        }
        if let Some(at) = &self.released_at {
            annotations.insert(RELEASED_AT_ANNOTATION.to_string(), at.clone());
        }
        annotations.insert(FORMAT_ANNOTATION.to_string(), self.format.to_string());
        lease.spec = Some(LeaseSpec {
            holder_identity: self.holder.clone(),
            lease_transitions: Some(self.transitions),
            ..Default::default()
        });
        lease
    }

    /// When the slot was last released, parsed: compare these, not the texts.
    pub fn released_time(&self) -> Option<DateTime<Utc>> {
        self.released_at.as_deref().and_then(parse_lease_time)
    }

    /// The acquisition this holder got: changes with every assignment (rule 6 names it).
    pub fn acquisition(&self) -> String {
        format!("{}#{}", self.name, self.transitions)
    }
}

/// Whether a pod is on its way out (deleted, or its containers ended for good): it keeps
/// the slot it holds until it is gone, but is given no new one.
pub fn pod_is_leaving(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Succeeded" | "Failed"))
}

/// The one format of every time a slot lease's annotations carry: RFC 3339 in UTC with
/// microseconds, e.g. `2026-11-23T08:00:00.123456Z`.
pub fn lease_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Reads a time from a slot lease annotation. Any RFC 3339 form is accepted, because
/// earlier versions wrote seconds (operator) or nanoseconds (sidecar); compare the
/// parsed times, never the texts.
pub fn parse_lease_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn micro_time(t: DateTime<Utc>) -> MicroTime {
    // chrono and jiff agree on every instant between year 1 and 9999.
    let at = Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    MicroTime(at)
}

/// Who a slot is given to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    /// The pod's UID: the lease's holder identity.
    pub uid: &'a str,
    /// The pod's name, for people and for reclaim.
    pub pod: &'a str,
}

/// Who frees a slot, which decides what happens to its fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Releaser {
    /// The operator reclaims a slot whose holder is gone or leaving: the fence stays
    /// where it is (docs/safety.md rule 9), since the holder may have issued up to it.
    Operator,
    /// The holder itself, after it stopped issuing for good: the fence comes down to the
    /// exact highest tick it issued (the one exception in rule 5).
    Holder { high_water: Tick },
}

/// Why a holder may not write a slot lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("the slot was given to another pod (or freed)")]
    NotHolder,
    #[error(transparent)]
    BadLease(#[from] SlotLeaseError),
}

/// A slot lease no pod ever held: fence 0, in this release's format ([`LEASE_FORMAT`],
/// written out), owned by the sequence (deleted with it).
pub fn vacant(sequence: &IdSequence, slot: Slot) -> Lease {
    let name = sequence.name_any();
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(&name, slot)),
            namespace: sequence.namespace(),
            labels: Some(lease_labels(&name, slot, None)),
            annotations: Some(BTreeMap::from([
                (FENCE_ANNOTATION.to_string(), "0".to_string()),
                (FORMAT_ANNOTATION.to_string(), LEASE_FORMAT.to_string()),
            ])),
            owner_references: sequence.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    }
}

/// The slot lease given to `holder` (written by the operator). The fence is kept (rule
/// 9) and so is when the slot was last released; the acquisition count goes up by one.
pub fn assign(
    current: &Lease,
    holder: Holder<'_>,
    lease_duration_secs: i32,
    now: DateTime<Utc>,
) -> Result<Lease, SlotLeaseError> {
    let parsed = SlotLease::parse(current)?;
    let sequence = sequence_of(current);
    let mut next = current.clone();
    next.metadata.labels = Some(lease_labels(&sequence, parsed.slot, Some(holder.uid)));
    let annotations = next.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(FENCE_ANNOTATION.to_string(), parsed.fence.0.to_string());
    annotations.insert(HOLDER_POD_ANNOTATION.to_string(), holder.pod.to_string());
    let spec = next.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(holder.uid.to_string());
    spec.lease_duration_seconds = Some(lease_duration_secs);
    spec.acquire_time = Some(micro_time(now));
    spec.renew_time = Some(micro_time(now));
    spec.lease_transitions = Some(parsed.transitions + 1);
    Ok(next)
}

/// The slot lease renewed by its holder `uid`, with the fence raised to `fence` if that
/// is higher: the fence never goes down here (rule 5).
pub fn renew(
    current: &Lease,
    uid: &str,
    fence: Tick,
    now: DateTime<Utc>,
) -> Result<Lease, TransitionError> {
    let parsed = SlotLease::parse(current)?;
    if parsed.holder.as_deref() != Some(uid) {
        return Err(TransitionError::NotHolder);
    }
    let mut next = current.clone();
    next.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            FENCE_ANNOTATION.to_string(),
            fence.max(parsed.fence).0.to_string(),
        );
    next.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(micro_time(now));
    Ok(next)
}

/// The slot lease freed by `by`: no holder, `released-at` now, the fence as [`Releaser`]
/// says. The acquisition count and the lease duration stay.
pub fn release(current: &Lease, by: Releaser, now: DateTime<Utc>) -> Result<Lease, SlotLeaseError> {
    let parsed = SlotLease::parse(current)?;
    let fence = match by {
        Releaser::Operator => parsed.fence,
        Releaser::Holder { high_water } => high_water,
    };
    let mut next = current.clone();
    if let Some(labels) = next.metadata.labels.as_mut() {
        labels.remove(HOLDER_LABEL);
    }
    let annotations = next.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.remove(HOLDER_POD_ANNOTATION);
    annotations.insert(FENCE_ANNOTATION.to_string(), fence.0.to_string());
    annotations.insert(RELEASED_AT_ANNOTATION.to_string(), lease_time(now));
    let spec = next.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    Ok(next)
}

fn sequence_of(lease: &Lease) -> String {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SEQUENCE_LABEL))
        .cloned()
        .unwrap_or_default()
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
    use chrono::Timelike;

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

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 123_456_789).expect("a time")
    }

    fn vacant_orders_3() -> Lease {
        let mut seq = IdSequence::new("orders", Default::default());
        seq.metadata.namespace = Some("shop".into());
        seq.metadata.uid = Some("seq-uid".into());
        vacant(&seq, Slot(3))
    }

    const POD_A: Holder<'static> = Holder {
        uid: "uid-a",
        pod: "a",
    };

    #[test]
    fn a_vacant_slot_lease_is_owned_by_its_sequence_and_has_fence_zero() {
        let lease = vacant_orders_3();
        let parsed = SlotLease::parse(&lease).unwrap();
        assert_eq!(
            (parsed.slot, parsed.fence, parsed.holder),
            (Slot(3), Tick(0), None)
        );
        assert_eq!(lease.metadata.name.as_deref(), Some("orders-slot-3"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("shop"));
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            ("seq-uid", Some(true))
        );
    }

    #[test]
    fn assignment_keeps_the_fence_rule_9_and_counts_the_acquisition() {
        let mut lease = vacant_orders_3();
        lease = renew_unchecked(lease, Tick(500));
        let given = assign(&lease, POD_A, 15, at(0)).unwrap();
        let parsed = SlotLease::parse(&given).unwrap();
        assert_eq!(
            parsed.fence,
            Tick(500),
            "rule 9: the fence is never lowered by assignment"
        );
        assert_eq!(parsed.holder.as_deref(), Some("uid-a"));
        assert_eq!(parsed.holder_pod.as_deref(), Some("a"));
        assert_eq!(parsed.transitions, 1);
        assert_eq!(
            given
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .get(HOLDER_LABEL)
                .map(String::as_str),
            Some("uid-a")
        );
        let again = assign(
            &release(&given, Releaser::Operator, at(1)).unwrap(),
            POD_A,
            15,
            at(2),
        );
        assert_eq!(SlotLease::parse(&again.unwrap()).unwrap().transitions, 2);
    }

    fn renew_unchecked(mut lease: Lease, fence: Tick) -> Lease {
        lease
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(FENCE_ANNOTATION.to_string(), fence.0.to_string());
        lease
    }

    #[test]
    fn only_the_holder_renews_and_the_fence_never_goes_down_rule_5() {
        let held = assign(&vacant_orders_3(), POD_A, 15, at(0)).unwrap();
        let up = renew(&held, "uid-a", Tick(900), at(1)).unwrap();
        assert_eq!(SlotLease::parse(&up).unwrap().fence, Tick(900));
        let not_down = renew(&up, "uid-a", Tick(100), at(2)).unwrap();
        assert_eq!(
            SlotLease::parse(&not_down).unwrap().fence,
            Tick(900),
            "rule 5"
        );
        assert_eq!(
            renew(&up, "uid-b", Tick(1000), at(2)),
            Err(TransitionError::NotHolder)
        );
        let freed = release(&up, Releaser::Operator, at(3)).unwrap();
        assert_eq!(
            renew(&freed, "uid-a", Tick(1000), at(4)),
            Err(TransitionError::NotHolder),
            "a freed slot is not renewed by its former holder"
        );
    }

    #[test]
    fn the_operator_keeps_the_fence_on_release_only_the_holder_lowers_it_to_its_high_water() {
        let held = assign(&vacant_orders_3(), POD_A, 15, at(0)).unwrap();
        let held = renew(&held, "uid-a", Tick(900), at(1)).unwrap();
        let by_operator = SlotLease::parse(&release(&held, Releaser::Operator, at(2)).unwrap());
        let by_holder = SlotLease::parse(
            &release(
                &held,
                Releaser::Holder {
                    high_water: Tick(640),
                },
                at(2),
            )
            .unwrap(),
        );
        for freed in [&by_operator, &by_holder] {
            let freed = freed.as_ref().unwrap();
            assert_eq!(freed.holder, None);
            assert_eq!(freed.holder_pod, None);
            assert_eq!(
                freed.released_time(),
                Some(at(2).with_nanosecond(123_456_000).unwrap())
            );
            assert_eq!(freed.transitions, 1, "the acquisition count stays");
        }
        assert_eq!(by_operator.unwrap().fence, Tick(900), "rule 9");
        assert_eq!(by_holder.unwrap().fence, Tick(640), "rule 5's exception");
    }

    #[test]
    fn a_parsed_slot_lease_written_back_reads_the_same() {
        let mut seq = IdSequence::new("orders", Default::default());
        seq.metadata.namespace = Some("shop".into());
        let held = assign(&vacant(&seq, Slot(3)), POD_A, 15, at(0)).unwrap();
        let held = renew(&held, "uid-a", Tick(77), at(1)).unwrap();
        let freed = release(&held, Releaser::Operator, at(2)).unwrap();
        for lease in [held, freed] {
            let parsed = SlotLease::parse(&lease).unwrap();
            assert_eq!(SlotLease::parse(&parsed.to_lease(&seq)).unwrap(), parsed);
        }
    }

    #[test]
    fn released_at_times_compare_as_times_whatever_precision_wrote_them() {
        // An older operator wrote whole seconds, an older sidecar nanoseconds: as text,
        // "…:00Z" sorts after "…:00.5Z" although it is earlier.
        let seconds = "2026-11-23T08:00:00Z";
        let later = "2026-11-23T08:00:00.500000000Z";
        assert!(seconds > later, "the texts sort the wrong way round");
        assert!(parse_lease_time(seconds) < parse_lease_time(later));
        assert_eq!(
            lease_time(parse_lease_time(later).unwrap()),
            "2026-11-23T08:00:00.500000Z"
        );
        assert_eq!(parse_lease_time("yesterday"), None);
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

    fn with_format(mut lease: Lease, format: &str) -> Lease {
        lease
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(FORMAT_ANNOTATION.to_string(), format.to_string());
        lease
    }

    #[test]
    fn a_lease_without_a_format_is_format_1_as_0_1_0_wrote_it() {
        let labels = lease_labels("orders", Slot(3), Some("uid-1"));
        let parsed = SlotLease::parse(&lease(labels, Some("123"))).unwrap();
        assert_eq!((parsed.format, parsed.fence), (1, Tick(123)));
    }

    #[test]
    fn format_1_is_read() {
        let labels = lease_labels("orders", Slot(3), Some("uid-1"));
        let parsed = SlotLease::parse(&with_format(lease(labels, Some("123")), "1")).unwrap();
        assert_eq!((parsed.format, parsed.fence), (1, Tick(123)));
    }

    #[test]
    fn a_newer_format_is_refused_naming_the_lease_the_formats_and_what_to_do() {
        let labels = lease_labels("orders", Slot(3), Some("uid-1"));
        let newer = with_format(lease(labels, Some("123")), "2");
        let err = SlotLease::parse(&newer).unwrap_err();
        assert_eq!(
            err,
            SlotLeaseError::UnsupportedFormat {
                name: "orders-slot-3".into(),
                found: 2,
                understood: 1,
            }
        );
        assert!(err.is_format());
        let message = err.to_string();
        for part in [
            "orders-slot-3",
            "newer kubeflake",
            "format 2",
            "up to 1",
            "Upgrade this operator and its sidecars",
            "roll the newer release back",
            "the Lease was not changed",
        ] {
            assert!(message.contains(part), "{part:?} missing: {message}");
        }
        // No transition is built on a Lease this release cannot read.
        assert!(matches!(
            assign(&newer, POD_A, 15, at(0)),
            Err(SlotLeaseError::UnsupportedFormat { .. })
        ));
        assert!(matches!(
            renew(&newer, "uid-1", Tick(900), at(0)),
            Err(TransitionError::BadLease(
                SlotLeaseError::UnsupportedFormat { .. }
            ))
        ));
        assert!(matches!(
            release(&newer, Releaser::Operator, at(0)),
            Err(SlotLeaseError::UnsupportedFormat { .. })
        ));
    }

    #[test]
    fn a_format_that_is_not_a_format_number_is_refused_not_guessed() {
        let labels = lease_labels("orders", Slot(3), Some("uid-1"));
        for bad in [
            "two",
            "",
            "0",
            "-1",
            "+1",
            "1.0",
            " 1",
            "99999999999999999999999",
        ] {
            let err =
                SlotLease::parse(&with_format(lease(labels.clone(), Some("1")), bad)).unwrap_err();
            assert_eq!(
                err,
                SlotLeaseError::BadFormat {
                    name: "orders-slot-3".into(),
                    value: bad.into(),
                },
                "{bad:?}"
            );
            assert!(err.is_format());
            assert!(
                err.to_string().contains("the Lease was not changed"),
                "{err}"
            );
        }
        assert!(
            !SlotLeaseError::BadFence {
                name: "x".into(),
                value: "y".into()
            }
            .is_format()
        );
    }

    #[test]
    fn new_leases_write_the_format_and_every_transition_keeps_what_it_read() {
        let fresh = vacant_orders_3();
        assert_eq!(
            fresh
                .metadata
                .annotations
                .as_ref()
                .unwrap()
                .get(FORMAT_ANNOTATION),
            Some(&LEASE_FORMAT.to_string()),
            "the operator writes the format of the Leases it creates"
        );
        let format_of = |l: &Lease| {
            l.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(FORMAT_ANNOTATION))
                .cloned()
        };
        // A 0.1.0 Lease (no format) and one written out, each with an annotation no
        // transition owns: renew and release must keep both (the Lease policy lets a holder
        // change only the fence, holder-pod and released-at).
        for format in [None, Some("1")] {
            let mut start = vacant_orders_3();
            let annotations = start.metadata.annotations.as_mut().unwrap();
            annotations.remove(FORMAT_ANNOTATION);
            if let Some(f) = format {
                annotations.insert(FORMAT_ANNOTATION.into(), f.into());
            }
            annotations.insert("example.com/note".into(), "kept".into());
            let held = assign(&start, POD_A, 15, at(0)).unwrap();
            let renewed = renew(&held, "uid-a", Tick(900), at(1)).unwrap();
            let freed = release(
                &renewed,
                Releaser::Holder {
                    high_water: Tick(640),
                },
                at(2),
            )
            .unwrap();
            for written in [&held, &renewed, &freed] {
                assert_eq!(format_of(written).as_deref(), format, "{written:?}");
                assert_eq!(
                    written
                        .metadata
                        .annotations
                        .as_ref()
                        .unwrap()
                        .get("example.com/note"),
                    Some(&"kept".to_string())
                );
            }
        }
    }
}
