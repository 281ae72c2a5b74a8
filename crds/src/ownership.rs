//! Which Leases are kubeflake's (docs/safety.md rule 16): one place that says how a slot
//! Lease, a segment counter and a strict oracle Lease are recognised, called by every
//! parser ([`crate::slot_lease::SlotLease::parse`], [`crate::segment_counter::Counter::parse`],
//! [`crate::strict_oracle::OracleLease::parse`]) and so by the operator and the sidecar alike.
//! The names and labels themselves live here too (the Lease modules re-export them), so
//! that the recognition and the objects kubeflake makes cannot drift apart.
//!
//! | object | name | label (what the Lease policy guards) | owner | content |
//! |---|---|---|---|---|
//! | slot Lease | `<seq>-slot-<n>` | `kubeflake.io/sequence: <seq>` and `kubeflake.io/slot: <n>` | the IdSequence, as controller | [`crate::slot_lease`] |
//! | segment counter | `<seq>-segment-counter` | `kubeflake.io/segment-counter: <seq>` | none, on purpose: it outlives its sequence | [`crate::segment_counter`] |
//! | strict oracle Lease | `<seq>-strict-oracle` | `kubeflake.io/strict-oracle: <seq>` | the IdSequence, as controller | [`crate::strict_oracle`] |
//!
//! **Why the label decides.** The operator and the sidecars find these Leases by name, but
//! the Lease policy ([`crate::lease_policy`]) guards them by label: it lets nobody but the
//! operator (and the exempt groups) create a Lease with one of these labels, or add or
//! remove one. A Lease that has the name but not the label (anyone with Lease `create` in
//! the namespace can make one, before the operator does) is therefore not guarded, and was
//! not made by kubeflake: it is *foreign*. Adopting it would let its creator lower a counter
//! or point the oracle address anywhere. So:
//!
//! - every parser checks the name against the label ([`check_named`]): the label is there,
//!   and the name is the one the labelled sequence gives this kind of Lease. A Lease that
//!   fails is refused with [`Foreign`] (it says what to do: delete it) and never read
//!   further, by the operator and the sidecar the same way;
//! - the operator, which knows the sequence's UID, also checks the owner of the kinds it
//!   owns ([`check`]): the controller owner reference names that IdSequence's UID. Sidecars
//!   do not know the UID (they read their slot Lease or the oracle Lease, not the sequence)
//!   and rely on the label, which the policy keeps for them.
//!
//! What kubeflake 0.1.0 and 0.2.0 left passes both: they created every one of these Leases
//! with its label (the counter since Segment mode exists), slot Leases and oracle Leases
//! with the IdSequence as controller owner (the tests read 0.1.0's own objects).
//!
//! A foreign Lease is never written or deleted by kubeflake: it is someone else's. The
//! operator reports it (condition, Event, metric) and works around it where it can (a
//! foreign slot Lease: the next free slot), not where it cannot (a foreign counter or oracle
//! Lease: the sequence is not ready until it is deleted).

use k8s_openapi::api::coordination::v1::Lease;

use crate::layout::Slot;

/// Label on pods that take part in a sequence, and on that sequence's slot leases.
pub const SEQUENCE_LABEL: &str = "kubeflake.io/sequence";
/// Label on a slot lease: the slot number.
pub const SLOT_LABEL: &str = "kubeflake.io/slot";
/// Label on the counter Lease: the sequence's name.
pub const COUNTER_LABEL: &str = "kubeflake.io/segment-counter";
/// Label on the oracle Lease: the sequence's name.
pub const ORACLE_LABEL: &str = "kubeflake.io/strict-oracle";

/// The lease name of a slot.
pub fn lease_name(sequence: &str, slot: Slot) -> String {
    format!("{sequence}-slot-{}", slot.0)
}

/// The counter Lease's name for a sequence.
pub fn counter_name(sequence: &str) -> String {
    format!("{sequence}-segment-counter")
}

/// The oracle Lease's name for a sequence.
pub fn oracle_name(sequence: &str) -> String {
    format!("{sequence}-strict-oracle")
}

/// The slot whose Lease of `sequence` is named `name`, if it is one (the number written as
/// [`lease_name`] writes it: no sign, no leading zero).
pub fn slot_of_name(sequence: &str, name: &str) -> Option<Slot> {
    let number = name.strip_prefix(sequence)?.strip_prefix("-slot-")?;
    let slot = Slot(number.parse::<u32>().ok()?);
    (lease_name(sequence, slot) == name).then_some(slot)
}

/// The kinds of Lease kubeflake makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaseKind {
    Slot,
    SegmentCounter,
    StrictOracle,
}

impl LeaseKind {
    pub const ALL: [LeaseKind; 3] = [
        LeaseKind::Slot,
        LeaseKind::SegmentCounter,
        LeaseKind::StrictOracle,
    ];

    /// The label that marks this kind, whose value is the sequence's name; the Lease
    /// policy guards every Lease that has it.
    pub fn label(self) -> &'static str {
        match self {
            LeaseKind::Slot => SEQUENCE_LABEL,
            LeaseKind::SegmentCounter => COUNTER_LABEL,
            LeaseKind::StrictOracle => ORACLE_LABEL,
        }
    }

    /// For people: "slot Lease", ...
    pub fn what(self) -> &'static str {
        match self {
            LeaseKind::Slot => "slot Lease",
            LeaseKind::SegmentCounter => "segment counter Lease",
            LeaseKind::StrictOracle => "strict oracle Lease",
        }
    }

    /// A bounded metric label.
    pub fn metric_label(self) -> &'static str {
        match self {
            LeaseKind::Slot => "slot",
            LeaseKind::SegmentCounter => "segment_counter",
            LeaseKind::StrictOracle => "strict_oracle",
        }
    }

    /// Whether kubeflake makes the IdSequence this kind's controller owner.
    pub fn owned_by_sequence(self) -> bool {
        match self {
            LeaseKind::Slot | LeaseKind::StrictOracle => true,
            LeaseKind::SegmentCounter => false,
        }
    }
}

/// What about a Lease shows that kubeflake did not make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// It lacks the kind's label: the Lease policy never guarded it.
    NoLabel,
    /// Its label names a sequence whose Lease of this kind has another name (or the slot
    /// label is missing or not a slot number).
    Label { sequence: String },
    /// No controller owner reference to an IdSequence.
    NoOwner,
    /// Its controller owner is another object than the sequence (`uid`).
    OtherOwner { uid: String },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::NoLabel => write!(f, "it has no label"),
            Mismatch::Label { sequence } => write!(
                f,
                "its label says it belongs to sequence {sequence:?}, whose Lease of this kind \
                 has another name"
            ),
            Mismatch::NoOwner => write!(f, "its controller owner is not the IdSequence"),
            Mismatch::OtherOwner { uid } => write!(
                f,
                "its controller owner is object {uid}, not this IdSequence"
            ),
        }
    }
}

/// A Lease that has the name of one of kubeflake's Leases but was not made by kubeflake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Lease {name} has the name of a kubeflake {what} but was not made by kubeflake ({mismatch}; \
     kubeflake labels it {label}): it is neither used, changed nor deleted by kubeflake \
     (docs/safety.md rule 16). Delete Lease {name} (kubectl delete lease {name} in its \
     namespace; it belongs to whoever created it) so that the operator creates its own, and \
     find out who created it",
    what = .kind.what(),
    label = .kind.label()
)]
pub struct Foreign {
    pub name: String,
    pub kind: LeaseKind,
    pub mismatch: Mismatch,
}

fn label<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The name the labelled sequence gives a Lease of `kind`, or `None` when the labels do
/// not say (no slot number).
fn expected_name(lease: &Lease, kind: LeaseKind, sequence: &str) -> Option<String> {
    match kind {
        LeaseKind::Slot => {
            let text = label(lease, SLOT_LABEL)?;
            let slot = Slot(text.parse::<u32>().ok()?);
            // Written as kubeflake writes it: "3", never "03" or "+3".
            (slot.0.to_string() == text).then(|| lease_name(sequence, slot))
        }
        LeaseKind::SegmentCounter => Some(counter_name(sequence)),
        LeaseKind::StrictOracle => Some(oracle_name(sequence)),
    }
}

/// The check every parser makes: `lease` has `kind`'s label, and its name is the one the
/// labelled sequence gives that kind. Returns the sequence's name.
pub fn check_named(lease: &Lease, kind: LeaseKind) -> Result<&str, Foreign> {
    let name = lease.metadata.name.as_deref().unwrap_or_default();
    let foreign = |mismatch| Foreign {
        name: name.to_string(),
        kind,
        mismatch,
    };
    let sequence = label(lease, kind.label()).ok_or_else(|| foreign(Mismatch::NoLabel))?;
    if expected_name(lease, kind, sequence).as_deref() != Some(name) {
        return Err(foreign(Mismatch::Label {
            sequence: sequence.to_string(),
        }));
    }
    Ok(sequence)
}

/// The operator's check of a Lease it found by the name of `sequence`'s Lease of `kind`:
/// [`check_named`], the label names `sequence`, and, for the kinds kubeflake owns, the
/// controller owner reference is the IdSequence with `sequence_uid`.
pub fn check(
    lease: &Lease,
    kind: LeaseKind,
    sequence: &str,
    sequence_uid: &str,
) -> Result<(), Foreign> {
    let name = lease.metadata.name.as_deref().unwrap_or_default();
    let foreign = |mismatch| Foreign {
        name: name.to_string(),
        kind,
        mismatch,
    };
    let labelled = check_named(lease, kind)?;
    if labelled != sequence {
        return Err(foreign(Mismatch::Label {
            sequence: labelled.to_string(),
        }));
    }
    if !kind.owned_by_sequence() {
        return Ok(());
    }
    let controller = lease
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(o) if o.kind == "IdSequence" && o.name == sequence && o.uid == sequence_uid => Ok(()),
        Some(o) if o.kind == "IdSequence" => {
            Err(foreign(Mismatch::OtherOwner { uid: o.uid.clone() }))
        }
        _ => Err(foreign(Mismatch::NoOwner)),
    }
}

// Tests: crds/tests/ownership.rs (they read the parsers, which read this module).
