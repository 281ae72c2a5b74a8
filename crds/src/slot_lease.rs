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
//! | annotation `kubeflake.io/fence-cap` | highest fence the holder may write: its ID-space block's bound ([`fence_cap`]; absent = none) |
//! | annotation `kubeflake.io/holder-pod` | the holder pod's name, for people and for reclaim |
//! | annotation `kubeflake.io/released-at` | when the slot was last freed (least recently used first) |
//! | annotation `kubeflake.io/format`   | the format all of the above is written in ([`LEASE_FORMAT`]; absent = 1) |
//! | annotation `kubeflake.io/sequence-spec` | the sequence's spec at the assignment, for its sidecar ([`sequence_spec`]; optional) |
//! | labels `kubeflake.io/sequence`, `slot`, `holder` | for label-selected watches        |
//!
//! Every write is conditional on the `resourceVersion` read (docs/safety.md rule 1).
//!
//! **Transitions change the Lease as read.** [`SlotLease`] keeps the Lease it was parsed
//! from ([`SlotLease::read`]), and every transition (assign, renew, release) starts from
//! that Lease and changes only the fields it owns: labels, annotations and owner
//! references it does not model, the lease duration, the format annotation and the
//! `resourceVersion` are written back as read. A record rebuilt from the parsed fields
//! would drop them (and an earlier operator did so on release).
//!
//! **Each transition checks who holds the slot**, on the Lease as read, and refuses with a
//! [`TransitionError`] (nothing to write) otherwise: assign only a free slot, renew and a
//! holder's release only by the pod the Lease names, an operator's release only of the
//! holder its plan saw ([`Releaser`]).
//!
//! **Formats.** What the fields above mean is format 1 (kubeflake 0.1.0 wrote it without
//! saying so: an absent [`FORMAT_ANNOTATION`] is format 1). A release that changes a meaning
//! (say, the fence's unit) writes a higher format, and a release that does not understand a
//! Lease's format refuses it: [`SlotLease::parse`] (and the segment counter's parse) fails
//! with [`SlotLeaseError::UnsupportedFormat`] or [`SlotLeaseError::BadFormat`], so nothing
//! built on the parse (assign, renew, release, serving) uses or rewrites that Lease.
//! Every transition keeps the annotation as read; new Leases are written with
//! [`LEASE_FORMAT`].
//!
//! One piece (over 400 lines): the names above, the parse and every transition (vacant,
//! assign, renew, release) describe one object and are read together; the tests are in
//! `slot_lease/tests.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::layout::{Slot, Tick};
use crate::ownership::{self, LeaseKind};
use crate::{IdSequence, IdSequenceSpec};

pub mod fence_cap;
pub mod sequence_spec;
pub use fence_cap::{BlockLimits, FENCE_CAP_ANNOTATION};
pub use sequence_spec::{SEQUENCE_SPEC_ANNOTATION, assigned_sequence_spec};

pub use crate::ownership::{SEQUENCE_LABEL, SLOT_LABEL, lease_name, slot_of_name};
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
/// The highest fence a slot Lease may carry: the last tick of the widest layout
/// ([`MAX_TICK`](crate::layout::MAX_TICK), 2^55-1), the bound the Lease policy enforces on
/// every write. A larger one is refused as unreadable, not wrapped or clamped.
pub const MAX_FENCE: Tick = crate::layout::MAX_TICK;
/// The highest Lease format this release understands, and the one it writes.
pub const LEASE_FORMAT: u64 = 1;
/// Finalizer on an IdSequence: its leases are removed before it goes (rule 10).
pub const FINALIZER: &str = "kubeflake.io/slot-leases";

/// Why a Lease is not a well-formed slot lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotLeaseError {
    #[error("lease {name} has no valid {SLOT_LABEL} label")]
    BadSlot { name: String },
    #[error(
        "lease {name} has a {FENCE_ANNOTATION} annotation that is not a tick count from 0 to \
         2^55-1 (the last tick any layout holds): {value:?}; it is neither used nor changed: set it by hand to at least the \
         highest tick any holder of the slot may have used, never lower"
    )]
    BadFence { name: String, value: String },
    #[error(
        "lease {name} has a {FENCE_CAP_ANNOTATION} annotation that is not a tick count from 0 to \
         2^55-1: {value:?}; it is neither used nor changed. The operator writes it from its \
         ID-space block's bound (docs/safety.md rule 17): put back the value it wrote, or \
         delete the holder pod so that the slot is assigned again"
    )]
    BadFenceCap { name: String, value: String },
    #[error(
        "slot lease {name} has spec.leaseTransitions {value}: kubeflake counts acquisitions \
         from 0 up to 2^31-2; it is neither used nor changed"
    )]
    BadTransitions { name: String, value: i32 },
    /// Not kubeflake's (docs/safety.md rule 16): never read further.
    #[error(transparent)]
    Foreign(#[from] crate::ownership::Foreign),
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
    lease_format_up_to(lease, LEASE_FORMAT)
}

/// [`lease_format`] for an object whose formats go up to `understood` (the segment
/// counter: [`crate::segment_counter::COUNTER_FORMAT`]).
pub fn lease_format_up_to(lease: &Lease, understood: u64) -> Result<u64, FormatProblem> {
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
    if format > understood {
        return Err(FormatProblem::Newer(format));
    }
    Ok(format)
}

/// What one slot lease says, and the Lease it says it of.
///
/// Two records are equal when they say the same (the parsed fields); the Lease as read
/// is not compared (a cache may strip fields nobody reads, such as managed fields).
#[derive(Debug, Clone)]
pub struct SlotLease {
    pub name: String,
    pub slot: Slot,
    /// Pod UID of the holder.
    pub holder: Option<String>,
    pub holder_pod: Option<String>,
    pub fence: Tick,
    /// The highest fence a holder may write ([`FENCE_CAP_ANNOTATION`]): the bound of the
    /// ID-space block the slot lies in, for a sequence joined to one; `None` otherwise.
    pub fence_cap: Option<Tick>,
    pub transitions: i32,
    pub resource_version: Option<String>,
    /// When last released (RFC 3339), if ever.
    pub released_at: Option<String>,
    /// The format the Lease is written in (never above [`LEASE_FORMAT`]: others do not parse).
    pub format: u64,
    /// The Lease exactly as read: every transition starts from it, so fields this record
    /// does not model are kept and the write is a compare-and-swap on its version.
    pub read: Arc<Lease>,
}

impl PartialEq for SlotLease {
    fn eq(&self, other: &SlotLease) -> bool {
        // Spelled out so that a new field must be placed here: compared, or not.
        let SlotLease {
            name,
            slot,
            holder,
            holder_pod,
            fence,
            fence_cap,
            transitions,
            resource_version,
            released_at,
            format,
            read: _,
        } = self;
        (
            name,
            slot,
            holder,
            holder_pod,
            (fence, fence_cap),
            transitions,
            resource_version,
            released_at,
            format,
        ) == (
            &other.name,
            &other.slot,
            &other.holder,
            &other.holder_pod,
            (&other.fence, &other.fence_cap),
            &other.transitions,
            &other.resource_version,
            &other.released_at,
            &other.format,
        )
    }
}

impl Eq for SlotLease {}

impl SlotLease {
    /// Reads a slot lease, keeping a copy of the Lease for the transitions.
    pub fn parse(lease: &Lease) -> Result<SlotLease, SlotLeaseError> {
        SlotLease::parse_shared(Arc::new(lease.clone()))
    }

    /// [`Self::parse`] of a Lease shared with a cache (a reflector store hands out
    /// `Arc<Lease>`): kept without a copy.
    pub fn parse_shared(read: Arc<Lease>) -> Result<SlotLease, SlotLeaseError> {
        let lease = read.as_ref();
        let name = lease.metadata.name.clone().unwrap_or_default();
        // Kubeflake's at all (its label, and the name the label gives it; rule 16)? A
        // foreign Lease's fields mean nothing.
        ownership::check_named(lease, LeaseKind::Slot)?;
        // The format next: in a format this release does not know, no field is read.
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
            Some(v) => parse_tick(v).ok_or_else(|| SlotLeaseError::BadFence {
                name: name.clone(),
                value: v.clone(),
            })?,
        };
        let fence_cap = fence_cap::parse(&name, annotations)?;
        let spec = lease.spec.as_ref();
        let transitions = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        if !(0..i32::MAX).contains(&transitions) {
            return Err(SlotLeaseError::BadTransitions {
                name,
                value: transitions,
            });
        }
        Ok(SlotLease {
            slot,
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            holder_pod: annotations
                .and_then(|a| a.get(HOLDER_POD_ANNOTATION))
                .cloned(),
            fence,
            fence_cap,
            transitions,
            resource_version: lease.metadata.resource_version.clone(),
            released_at: annotations
                .and_then(|a| a.get(RELEASED_AT_ANNOTATION))
                .cloned(),
            format,
            name,
            read,
        })
    }

    /// The slot given to `holder` (written by the operator) of the sequence with `sequence`
    /// as its spec: refused if the Lease read names a holder (a held slot is released
    /// first). The fence is kept (rule 9) and so is when the slot was last released; the
    /// acquisition count goes up by one; the lease duration is the sequence's, and the
    /// spec is noted for the holder's sidecar ([`sequence_spec`]).
    pub fn assign(
        &self,
        holder: Holder<'_>,
        sequence: &IdSequenceSpec,
        now: DateTime<Utc>,
    ) -> Result<Lease, TransitionError> {
        if let Some(held_by) = &self.holder {
            return Err(TransitionError::Held {
                name: self.name.clone(),
                holder: held_by.clone(),
            });
        }
        let mut next = Lease::clone(&self.read);
        next.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HOLDER_LABEL.to_string(), holder.uid.to_string());
        let annotations = next.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(FENCE_ANNOTATION.to_string(), self.fence.0.to_string());
        annotations.insert(HOLDER_POD_ANNOTATION.to_string(), holder.pod.to_string());
        // A cap belongs to one assignment in an ID-space block ([`Self::assign_in_block`]).
        annotations.remove(FENCE_CAP_ANNOTATION);
        let transitions = self
            .transitions
            .checked_add(1)
            // What parses: an assignment that could not be read back is refused.
            .filter(|t| *t < i32::MAX)
            .ok_or_else(|| SlotLeaseError::BadTransitions {
                name: self.name.clone(),
                value: self.transitions,
            })?;
        match sequence_spec::note(sequence, transitions) {
            Some(note) => annotations.insert(SEQUENCE_SPEC_ANNOTATION.to_string(), note),
            // Without a note the sidecar reads the sequence; an older note must not stay.
            None => annotations.remove(SEQUENCE_SPEC_ANNOTATION),
        };
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(holder.uid.to_string());
        spec.lease_duration_seconds = Some(sequence.lease.duration_seconds);
        spec.acquire_time = Some(micro_time(now));
        spec.renew_time = Some(micro_time(now));
        spec.lease_transitions = Some(transitions);
        Ok(next)
    }

    /// The slot renewed by its holder `uid` (refused if the Lease read names another pod
    /// or none), with the fence raised to `fence` if that is higher, but never above the
    /// Lease's [`fence_cap`](Self::fence_cap) (rule 17): the fence never goes down here
    /// (rule 5). The holder reads the fence it got from the Lease written, never assumes
    /// the one it asked for.
    pub fn renew(
        &self,
        uid: &str,
        fence: Tick,
        now: DateTime<Utc>,
    ) -> Result<Lease, TransitionError> {
        self.held_by(uid)?;
        let wanted = self.fence_cap.map_or(fence, |cap| fence.min(cap));
        let mut next = Lease::clone(&self.read);
        next.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                FENCE_ANNOTATION.to_string(),
                wanted.max(self.fence).0.to_string(),
            );
        next.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(micro_time(now));
        Ok(next)
    }

    /// The slot freed by `by` (refused unless the Lease read names the holder `by`
    /// expects): no holder, `released-at` now, the fence as [`Releaser`] says. The
    /// acquisition count and the lease duration stay.
    pub fn release(&self, by: Releaser<'_>, now: DateTime<Utc>) -> Result<Lease, TransitionError> {
        let fence = match by {
            Releaser::Operator { holder } => {
                self.held_by(holder)?;
                self.fence
            }
            Releaser::Holder { uid, high_water } => {
                self.held_by(uid)?;
                high_water
            }
        };
        let mut next = Lease::clone(&self.read);
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

    /// `Ok` if the Lease read names `uid` as its holder.
    fn held_by(&self, uid: &str) -> Result<(), TransitionError> {
        if self.holder.as_deref() == Some(uid) {
            return Ok(());
        }
        Err(TransitionError::NotHolder {
            name: self.name.clone(),
            expected: uid.to_string(),
            found: self.holder.clone(),
        })
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

/// A tick count as the fence annotations write it: decimal, at most [`MAX_FENCE`].
fn parse_tick(text: &str) -> Option<Tick> {
    text.parse::<u64>()
        .ok()
        .filter(|f| *f <= MAX_FENCE.0)
        .map(Tick)
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

/// Who frees a slot, and so whose holding is checked and what happens to the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Releaser<'a> {
    /// The operator reclaims the slot from `holder`, the pod UID its plan saw holding it
    /// (gone, silent, or holding a lower slot too); refused if the Lease read names anyone
    /// else. The fence stays where it is (docs/safety.md rule 9), since the holder may
    /// have issued up to it.
    Operator { holder: &'a str },
    /// The holder `uid` itself, after it stopped issuing for good; refused if the Lease
    /// read names another pod or none. The fence comes down to the exact highest tick it
    /// issued (the one exception in rule 5).
    Holder { uid: &'a str, high_water: Tick },
}

/// Why a transition refuses the Lease as read. Nothing is to be written: read the Lease
/// again and decide again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error(
        "slot lease {name} names {} as its holder, not pod {expected}: the slot was given to \
         another pod or freed, so it was not written",
        found.as_deref().map_or_else(|| "no pod".to_string(), |h| format!("pod {h}"))
    )]
    NotHolder {
        name: String,
        /// The pod UID the transition was for.
        expected: String,
        /// The holder the Lease read names.
        found: Option<String>,
    },
    #[error(
        "slot lease {name} is held by pod {holder}: a held slot is given to another pod only \
         after it was released (docs/safety.md rule 9), so it was not written"
    )]
    Held { name: String, holder: String },
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

/// [`SlotLease::assign`] on `current` as read: refused if it is held or unreadable.
pub fn assign(
    current: &Lease,
    holder: Holder<'_>,
    sequence: &IdSequenceSpec,
    now: DateTime<Utc>,
) -> Result<Lease, TransitionError> {
    SlotLease::parse(current)?.assign(holder, sequence, now)
}

/// [`SlotLease::renew`] on `current` as read: refused unless it names `uid` as holder.
pub fn renew(
    current: &Lease,
    uid: &str,
    fence: Tick,
    now: DateTime<Utc>,
) -> Result<Lease, TransitionError> {
    SlotLease::parse(current)?.renew(uid, fence, now)
}

/// [`SlotLease::release`] on `current` as read: refused unless it names the holder `by`
/// expects.
pub fn release(
    current: &Lease,
    by: Releaser<'_>,
    now: DateTime<Utc>,
) -> Result<Lease, TransitionError> {
    SlotLease::parse(current)?.release(by, now)
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
mod tests;
