//! The IdSequence's status conditions, part of the API: their types and reasons as enums,
//! and the one way to set one. The operator sets them; the plugin, the tests and anyone
//! reading a status read them by these names.
//!
//! To add a condition: add its type to [`ConditionType`] and its reasons to [`Reason`]
//! (each with its `as_str`), then set it with [`set_condition`] where the operator builds
//! the status (`operator/src/controller/snowflake/status.rs`, `segment/counter.rs`). The
//! operator writes the status in `update_status.rs` only, and only when it changed.

use crate::sequence::{IdSequence, IdSequenceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The types of the IdSequence's conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionType {
    /// Sidecars can hand out IDs (slots assigned, or the segment counter in place).
    Ready,
    /// Pods wait for a free slot, or the segment counter reached its limit.
    Exhausted,
    /// Less than a year of timestamp bits is left (Snowflake mode).
    Expiring,
    /// A Lease has the name of one of the sequence's Leases but was not made by kubeflake
    /// (docs/safety.md rule 16): it is neither used, changed nor deleted. Set only once
    /// one was found (then back to False when none is left), so a sequence that never had
    /// one does not show it.
    ForeignLeases,
    /// The sequence shares an ID space across clusters (an IdSpaceMembership names it): its
    /// membership's state with the hub, and whether its blocks hand out slots
    /// (docs/design/2026-11-29-multicluster.md). Set only once a membership named the
    /// sequence (then `False` `NotJoined` when none does any more), so a lone sequence does
    /// not show it.
    IdSpace,
}

impl ConditionType {
    pub const ALL: [ConditionType; 5] = [
        ConditionType::Ready,
        ConditionType::Exhausted,
        ConditionType::Expiring,
        ConditionType::ForeignLeases,
        ConditionType::IdSpace,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Exhausted => "Exhausted",
            ConditionType::Expiring => "Expiring",
            ConditionType::ForeignLeases => "ForeignLeases",
            ConditionType::IdSpace => "IdSpace",
        }
    }
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
        }
    }
}

/// Every reason a condition can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Ready=False: the spec does not validate.
    InvalidSpec,
    /// Ready=False: the sequence is being deleted and waits for its slots.
    Deleting,
    /// Ready=False: the epoch lies in the future.
    EpochInFuture,
    /// Ready=True (Snowflake).
    Reconciled,
    /// Exhausted=True (Snowflake).
    PodsWaiting,
    /// Exhausted=False (Snowflake).
    SlotsAvailable,
    /// Expiring=True.
    TimestampBitsRunningOut,
    /// Expiring=False.
    TimestampBitsLast,
    /// Ready=True (Segment).
    CounterReady,
    /// Ready=False (Segment): the counter Lease was deleted after it existed.
    CounterLost,
    /// Ready=False (Segment): the counter shows fewer claims than already seen.
    CounterWentBack,
    /// Exhausted=True (Segment).
    CounterExhausted,
    /// Exhausted=False (Segment).
    ValuesLeft,
    /// Ready=False (both modes): a slot Lease or the segment counter is in a format this
    /// release does not understand (written by a newer kubeflake); it is neither used nor
    /// changed.
    LeaseFormatUnsupported,
    /// Ready=False (both modes): the API server's Lease policy or its binding is missing or
    /// not as the chart installs it, so the operator assigns no slot and lists no claimant
    /// (docs/safety.md rule 14).
    LeasePolicyMissing,
    /// ForeignLeases=True, and Ready=False when the foreign Lease is the segment counter or
    /// the strict oracle Lease (the sequence cannot work without its own).
    ForeignLease,
    /// ForeignLeases=False: none is left.
    NoForeignLease,
    /// IdSpace=True: the membership's last contact with the hub went through and its blocks
    /// hand out slots.
    Joined,
    /// IdSpace=True: as `Joined`, but a spare block was wanted and the hub had none free.
    BlocksLow,
    /// IdSpace=False, copied from the membership's `Ready` (its message says more):
    /// no contact yet since the operator started.
    HubCheckPending,
    /// IdSpace=False: the hub Secret is missing or the hub did not answer (the sequence
    /// keeps issuing from its blocks up to their bounds).
    HubUnreachable,
    /// IdSpace=False: the hub refused the join.
    JoinRefused,
    /// IdSpace=False: the membership's copy was made by another cluster.
    MembershipOfAnotherCluster,
    /// IdSpace=False: the hub's registry went back, or its IdSpace was re-created.
    HubWentBack,
    /// IdSpace=False: the copy, the IdSpace or the IdSequence cannot be read as it is.
    BadRecord,
    /// IdSpace=False: the membership gives no usable copy now (not joined yet, the fences
    /// not raised after a restore, two memberships...): no slot is handed out; the message
    /// says why.
    NoUsableCopy,
    /// IdSpace=False: no IdSpaceMembership names the sequence any more.
    NotJoined,
}

impl Reason {
    pub const ALL: [Reason; 27] = [
        Reason::InvalidSpec,
        Reason::Deleting,
        Reason::EpochInFuture,
        Reason::Reconciled,
        Reason::PodsWaiting,
        Reason::SlotsAvailable,
        Reason::TimestampBitsRunningOut,
        Reason::TimestampBitsLast,
        Reason::CounterReady,
        Reason::CounterLost,
        Reason::CounterWentBack,
        Reason::CounterExhausted,
        Reason::ValuesLeft,
        Reason::LeaseFormatUnsupported,
        Reason::LeasePolicyMissing,
        Reason::ForeignLease,
        Reason::NoForeignLease,
        Reason::Joined,
        Reason::BlocksLow,
        Reason::HubCheckPending,
        Reason::HubUnreachable,
        Reason::JoinRefused,
        Reason::MembershipOfAnotherCluster,
        Reason::HubWentBack,
        Reason::BadRecord,
        Reason::NoUsableCopy,
        Reason::NotJoined,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Deleting => "Deleting",
            Reason::EpochInFuture => "EpochInFuture",
            Reason::Reconciled => "Reconciled",
            Reason::PodsWaiting => "PodsWaiting",
            Reason::SlotsAvailable => "SlotsAvailable",
            Reason::TimestampBitsRunningOut => "TimestampBitsRunningOut",
            Reason::TimestampBitsLast => "TimestampBitsLast",
            Reason::CounterReady => "CounterReady",
            Reason::CounterLost => "CounterLost",
            Reason::CounterWentBack => "CounterWentBack",
            Reason::CounterExhausted => "CounterExhausted",
            Reason::ValuesLeft => "ValuesLeft",
            Reason::LeaseFormatUnsupported => "LeaseFormatUnsupported",
            Reason::LeasePolicyMissing => "LeasePolicyMissing",
            Reason::ForeignLease => "ForeignLease",
            Reason::NoForeignLease => "NoForeignLease",
            Reason::Joined => "Joined",
            Reason::BlocksLow => "BlocksLow",
            Reason::HubCheckPending => "HubCheckPending",
            Reason::HubUnreachable => "HubUnreachable",
            Reason::JoinRefused => "JoinRefused",
            Reason::MembershipOfAnotherCluster => "MembershipOfAnotherCluster",
            Reason::HubWentBack => "HubWentBack",
            Reason::BadRecord => "BadRecord",
            Reason::NoUsableCopy => "NoUsableCopy",
            Reason::NotJoined => "NotJoined",
        }
    }
}

/// The condition of `type_` in `status`, if set.
pub fn condition(status: Option<&IdSequenceStatus>, type_: ConditionType) -> Option<&Condition> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == type_.as_str())
}

/// Whether `status` has the condition `type_` with `value`.
pub fn has_condition(
    status: Option<&IdSequenceStatus>,
    type_: ConditionType,
    value: ConditionStatus,
) -> bool {
    condition(status, type_).is_some_and(|c| c.status == value.as_str())
}

/// Sets one condition; its `lastTransitionTime` moves only when its status changes, so an
/// unchanged condition leaves the status equal (and unwritten).
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    seq: &IdSequence,
    type_: ConditionType,
    status: ConditionStatus,
    reason: Reason,
    message: &str,
) {
    let generation = seq.metadata.generation;
    let (type_, status, reason) = (type_.as_str(), status.as_str(), reason.as_str());
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::now());
        }
        c.status = status.to_string();
        c.reason = reason.to_string();
        c.message = message.to_string();
        c.observed_generation = generation;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    });
}

/// The sequence's status with `Ready=False` for `reason`; everything else kept.
pub fn not_ready_status(seq: &IdSequence, reason: Reason, message: &str) -> IdSequenceStatus {
    let mut status = seq.status.clone().unwrap_or_default();
    status.observed_generation = seq.metadata.generation;
    set_condition(
        &mut status.conditions,
        seq,
        ConditionType::Ready,
        ConditionStatus::False,
        reason,
        message,
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence::IdSequenceSpec;

    #[test]
    fn every_type_and_reason_has_a_distinct_name() {
        let types: std::collections::BTreeSet<_> =
            ConditionType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(types.len(), ConditionType::ALL.len());
        let reasons: std::collections::BTreeSet<_> =
            Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(reasons.len(), Reason::ALL.len());
    }

    #[test]
    fn the_crds_ready_column_reads_the_ready_condition_by_its_name() {
        use kube::CustomResourceExt;
        let crd = IdSequence::crd();
        let columns = &crd.spec.versions[0].additional_printer_columns;
        let ready = columns
            .iter()
            .flatten()
            .find(|c| c.name == "Ready")
            .expect("a Ready column");
        assert_eq!(
            ready.json_path,
            format!(
                ".status.conditions[?(@.type==\"{}\")].status",
                ConditionType::Ready.as_str()
            )
        );
    }

    #[test]
    fn setting_a_condition_again_unchanged_leaves_the_status_equal() {
        let seq = IdSequence::new("s", IdSequenceSpec::default());
        let first = not_ready_status(&seq, Reason::InvalidSpec, "bad");
        let mut again = seq.clone();
        again.status = Some(first.clone());
        assert_eq!(not_ready_status(&again, Reason::InvalidSpec, "bad"), first);
        assert!(has_condition(
            Some(&first),
            ConditionType::Ready,
            ConditionStatus::False
        ));
    }
}
