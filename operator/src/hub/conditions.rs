//! The conditions the membership task writes into an `IdSpaceMembership`'s status, and
//! their reasons (docs/design/2026-11-29-multicluster.md, "Operators can see and steer it").
//!
//! `Ready` says whether the last contact with the hub went through: `True` (`Joined`) when
//! the copy is the hub's, `False` with the reason why not. A `False` Ready does not stop the
//! member issuing: pods keep their slots and the operator keeps assigning from the copy up
//! to the bounds it holds (except `MembershipOfAnotherCluster`, whose copy is never used).
//! `BlocksLow` is `True` while a spare block was wanted and the hub had none free.
//! `FencesRaised` is `False` (`RaisePending`) from the contact that found this cluster's copy
//! behind the hub's until the slot Leases' fences are raised (`hub/fences.rs`); while it is
//! `False` the controller assigns no slot of the sequence. Absent: the copy never went back.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Why a membership is or is not in touch with its hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Ready=True: joined, and the copy is the hub's.
    Joined,
    /// Ready=False: no contact yet since this operator started (the copy is unchecked).
    HubCheckPending,
    /// Ready=False: the Secret is missing or malformed, or the hub did not answer.
    HubUnreachable,
    /// Ready=False: the hub refused the join; the message says what to fix.
    JoinRefused,
    /// Ready=False: the copy was made by another cluster (a restored namespace).
    MembershipOfAnotherCluster,
    /// Ready=False: the hub's registry went back, or its IdSpace was re-created.
    HubWentBack,
    /// Ready=False: the copy, the IdSpace or the IdSequence cannot be read as it is.
    BadRecord,
    /// Ready=False: an earlier membership of this cluster, for another sequence, joins the
    /// same space; this one is never contacted.
    SpaceJoinedTwice,
    /// BlocksLow=True: a spare block was wanted and none was free.
    NoFreeBlock,
    /// BlocksLow=False.
    SpareHeld,
    /// FencesRaised=False: the copy went back; the slot Leases' fences are not raised yet.
    RaisePending,
    /// FencesRaised=True: raised; slots are assigned again.
    Raised,
    /// A Warning Event: a Segment member's records were behind its entry on the hub (its
    /// etcd restored); its counter's ranges were given up (docs/safety.md rule 22).
    LocalBehind,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Joined => "Joined",
            Reason::HubCheckPending => "HubCheckPending",
            Reason::HubUnreachable => "HubUnreachable",
            Reason::JoinRefused => "JoinRefused",
            Reason::MembershipOfAnotherCluster => "MembershipOfAnotherCluster",
            Reason::HubWentBack => "HubWentBack",
            Reason::BadRecord => "BadRecord",
            Reason::SpaceJoinedTwice => "SpaceJoinedTwice",
            Reason::NoFreeBlock => "NoFreeBlock",
            Reason::SpareHeld => "SpareHeld",
            Reason::RaisePending => "RaisePending",
            Reason::Raised => "Raised",
            Reason::LocalBehind => "LocalBehind",
        }
    }
}

pub const READY: &str = "Ready";
pub const BLOCKS_LOW: &str = "BlocksLow";
pub const FENCES_RAISED: &str = "FencesRaised";

/// Sets condition `type_` in `conditions`, keeping its transition time when its status
/// did not change. Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: Time,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    match existing {
        Some(c) if c.status == status && c.reason == reason.as_str() && c.message == message => {
            false
        }
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = reason.as_str().to_string();
            c.message = message.to_string();
            c.observed_generation = generation;
            true
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.as_str().to_string(),
                message: message.to_string(),
                observed_generation: generation,
                last_transition_time: now,
            });
            true
        }
    }
}
