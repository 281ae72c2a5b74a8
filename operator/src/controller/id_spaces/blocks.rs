//! Which slots a Snowflake pass may hand out when its sequence shares an ID space across
//! clusters (issue 55; docs/safety.md rule 17; docs/design/2026-11-29-multicluster.md,
//! "Never waiting on the hub"). Pure.
//!
//! An IdSequence is joined when an `IdSpaceMembership` of its namespace names it. Then:
//! - only slots of the blocks this cluster holds are handed out
//!   ([`LocalRecord::assignable`]: floor passed, bound at least a lease duration away),
//!   never a slot of another member's block;
//! - a new holder starts above the block's floor and its fence is capped at the grant's
//!   bound ([`BlockLimits`], written by `SlotLease::assign_in_block`); a grant with no tick
//!   left for it ([`kubeflake_crds::slot_lease::NoRoom`]) gives no slot;
//! - a held Lease whose cap is below its grant's bound (the hub renewed the block), or that
//!   has no cap, has its cap raised, so its holder goes on;
//! - a membership whose copy cannot be used (not joined yet, made by another cluster, a
//!   bad record) hands out no slot at all: pods wait, and the IdSequence says why
//!   ([`Waiting`]);
//! - nor does one whose copy went back (this cluster's etcd restored: the membership task
//!   found it behind the hub's) until the task has raised the fences of the slot Leases in
//!   its blocks: its condition `FencesRaised` is not `True` (rule 21, `hub/fences.rs`).
//!
//! - nor does a second sequence of this cluster joined to a space an earlier membership
//!   of this cluster joined (same space and hub Secret, or the same IdSpace UID): the hub
//!   sees one member per cluster, so both would use the same blocks (rule 20);
//! - a held Lease outside the blocks held now is released ([`Blocks::held_outside`]).
//!
//! A sequence no membership names is [`Blocks::Lone`]: planned exactly as before.
//!
//! One piece (over 400 lines): the decision and its reasons ([`Waiting`], one message per
//! way a membership is unusable) are read together; split, each would need the other.
//!
//! Its tests, with the plan, are `operator/src/controller/snowflake/plan/rule17_tests.rs`.

use std::collections::BTreeSet;

use kube::ResourceExt;

use kubeflake_crds::id_space::membership::{BadCopy, IdSpaceMembership, IdSpaceMembershipStatus};
use kubeflake_crds::id_space::{
    CopyOfAnotherCluster, LocalRecord, MemberId, Space, SpaceError, SpaceSequence, check_cluster,
};
use kubeflake_crds::layout::DatacenterId;
use kubeflake_crds::slot_lease::{BlockLimits, SlotLease};
use kubeflake_crds::{Slot, Tick};

use crate::hub::conditions::{BLOCKS_LOW, FENCES_RAISED, READY};

/// What the ID space lets a pass hand out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocks {
    /// No membership names the sequence: every slot of its layout, no cap.
    Lone,
    /// Joined, with a usable copy: only the slots of the blocks this cluster holds.
    Joined(Joined),
    /// A membership names the sequence, but its copy cannot be used: no slot is handed out.
    Waiting(Waiting),
}

/// A joined sequence's usable copy of its grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    space: Space,
    datacenter: DatacenterId,
    record: LocalRecord,
    /// The slots a new holder may get now, ascending.
    assignable: BTreeSet<Slot>,
    /// The membership's `Ready` and `BlocksLow`, which the IdSequence's `IdSpace`
    /// condition repeats (`snowflake/status.rs`).
    pub hub: HubState,
}

/// The membership's own conditions, as the task last wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HubState {
    pub ready: Option<HubCondition>,
    pub blocks_low: Option<HubCondition>,
}

/// One condition of the membership: whether it is `True`, its reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubCondition {
    pub is_true: bool,
    pub reason: String,
    pub message: String,
}

/// Why a joined sequence hands out no slot. Each message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Waiting {
    #[error(
        "the operator has not listed the IdSpaceMemberships yet, so it cannot tell whether \
         this sequence shares an ID space; no slot is assigned until it has (if this lasts, \
         check the operator's log and its RBAC on idspacememberships)"
    )]
    NotListed,
    #[error(
        "IdSpaceMembership {membership} holds no copy of this cluster's blocks yet ({state}): \
         no slot of this sequence is assigned until the operator's membership task has joined \
         the ID space on the hub (see the membership's Ready condition: \
         `kubectl get idspacemembership {membership} -o yaml`)"
    )]
    NotJoined { membership: String, state: String },
    #[error("IdSpaceMembership {membership}: {source}")]
    OtherCluster {
        membership: String,
        #[source]
        source: CopyOfAnotherCluster,
    },
    #[error(
        "IdSpaceMembership {membership}: {source}; no slot of this sequence is assigned \
         until then"
    )]
    BadCopy {
        membership: String,
        #[source]
        source: BadCopy,
    },
    #[error(
        "IdSpaceMembership {membership}: status.memberId does not read ({error}); the copy is \
         not used and no slot of this sequence is assigned: join the ID space from this \
         cluster again (a new IdSpaceMembership)"
    )]
    BadMemberId { membership: String, error: String },
    #[error(
        "IdSpaceMembership {membership}: the ID space's parameters in its status do not fit \
         this sequence ({source}); no slot of this sequence is assigned until they do (remove \
         status.blockSlots: the membership task writes them again from the hub)"
    )]
    BadSpace {
        membership: String,
        #[source]
        source: SpaceError,
    },
    #[error(
        "IdSpaceMembership {membership}: this operator cannot read its cluster's ID ({error}), \
         so it cannot check the copy was made here; no slot of this sequence is assigned until \
         it can (the operator needs get on kube-system)"
    )]
    ClusterUnknown { membership: String, error: String },
    #[error(
        "IdSpaceMembership {membership}: this cluster's copy of its claims went back (its etcd \
         was restored from an older snapshot) and the fences of the slot Leases in its blocks \
         are not raised yet ({state}); no slot of this sequence is assigned until they are \
         (the operator's membership task retries at every contact)"
    )]
    FencesNotRaised { membership: String, state: String },
    #[error(
        "IdSpaceMembership {membership}: the operator has not compared this cluster's copy of \
         its claims with the hub since it started or since its watch listed again from \
         scratch ({state}), so it cannot tell whether its etcd went back; no new slot of this \
         sequence is assigned until the membership task reaches the hub (running pods keep \
         issuing; if this lasts, see the membership's Ready condition)"
    )]
    HubCheckPending { membership: String, state: String },
    #[error(
        "IdSpaceMembership {membership} could not be read from this cluster's API server \
         ({error}); a slot of a joined sequence is assigned only from the membership as the \
         API server has it now, so none is this pass (the pass is retried; check the \
         operator's access to the API server)"
    )]
    Unread { membership: String, error: String },
    #[error(
        "IdSpaceMemberships {first} and {second} both name this sequence: a sequence joins one \
         ID space; no slot is assigned until one of them is deleted"
    )]
    TwoMemberships { first: String, second: String },
    #[error(
        "IdSpaceMembership {membership} joins the same ID space as {earlier} (same space and \
         hub Secret, or the same IdSpace UID), made earlier for another sequence of this \
         cluster: one cluster is one member, so both sequences would use the same blocks and \
         repeat each other's IDs. No slot of this sequence is assigned: delete one of the two \
         memberships, or join this sequence to a space of its own"
    )]
    SpaceJoinedTwice { membership: String, earlier: String },
    #[error(
        "this sequence shared an ID space (its status has the IdSpace condition) and no \
         IdSpaceMembership names it any more: its slots may be another member's now, so none \
         is assigned and held slots stop at their fence cap. Join again (a new \
         IdSpaceMembership naming it), or, once no other cluster issues this sequence's IDs, \
         delete the IdSequence and create it again (a new sequence starts lone)"
    )]
    LeftIdSpace,
    #[error(
        "IdSpaceMembership {membership}: this sequence's slot lease is longer than the ID \
         space keeps a block's bound ahead (toleranceSeconds + renewEverySeconds = \
         {reach_secs} s), and a slot is assigned only while its block's bound is a whole lease \
         ahead, so none ever is: shorten spec.lease.durationSeconds below {reach_secs} s, or \
         use a space with a longer toleranceSeconds"
    )]
    LeaseBeyondBound { membership: String, reach_secs: u64 },
}

/// What a sequence no membership names may hand out: every slot if it never shared an ID
/// space ([`Blocks::Lone`]); nothing if it did (its status keeps the `IdSpace` condition
/// the controller set while it was joined), since its former blocks may be another
/// member's now and a lone plan would assign them without a cap (rule 17).
pub fn unnamed(seq: &kubeflake_crds::sequence::IdSequence) -> Blocks {
    let id_space = kubeflake_crds::conditions::ConditionType::IdSpace.as_str();
    let shared = seq
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == id_space));
    if shared {
        Blocks::Waiting(Waiting::LeftIdSpace)
    } else {
        Blocks::Lone
    }
}

/// What deciding a sequence's [`Blocks`] reads.
pub struct Membership<'a> {
    /// The memberships of the sequence's namespace that name it.
    pub found: &'a [&'a IdSpaceMembership],
    /// Every membership of this cluster (those in `found` too).
    pub all: &'a [&'a IdSpaceMembership],
    /// Whether the membership task compared this membership's copy with the hub since the
    /// operator started or its watch last listed from scratch (`hub/checks.rs`).
    pub hub_checked: &'a dyn Fn(&IdSpaceMembership) -> bool,
    /// This cluster's ID, or why it could not be read.
    pub this: Result<&'a MemberId, String>,
    pub sequence: SpaceSequence,
    pub datacenter: DatacenterId,
    pub now: Tick,
    /// A slot lease's duration in ticks: a block is used only while its bound is that far.
    pub min_ahead: u64,
}

/// Decides what the ID space lets a pass hand out.
pub fn blocks(m: &Membership<'_>) -> Blocks {
    let membership = match m.found {
        [] => return Blocks::Lone,
        [one] => *one,
        [first, second, ..] => {
            return Blocks::Waiting(Waiting::TwoMemberships {
                first: name(first),
                second: name(second),
            });
        }
    };
    if let Some(earlier) = membership.earlier_of_same_space(m.all) {
        let qualified =
            |m: &IdSpaceMembership| format!("{}/{}", m.namespace().unwrap_or_default(), name(m));
        return Blocks::Waiting(Waiting::SpaceJoinedTwice {
            membership: qualified(membership),
            earlier: qualified(earlier),
        });
    }
    match joined(membership, m) {
        Ok(joined) => Blocks::Joined(joined),
        Err(waiting) => Blocks::Waiting(waiting),
    }
}

fn joined(membership: &IdSpaceMembership, m: &Membership<'_>) -> Result<Joined, Waiting> {
    let mname = name(membership);
    let not_joined = |status: Option<&IdSpaceMembershipStatus>| Waiting::NotJoined {
        membership: mname.clone(),
        state: state(status),
    };
    let status = membership.status.as_ref().ok_or_else(|| not_joined(None))?;
    let copy_of = status
        .member_id
        .as_deref()
        .ok_or_else(|| not_joined(Some(status)))?;
    let this = m.this.clone().map_err(|error| Waiting::ClusterUnknown {
        membership: mname.clone(),
        error,
    })?;
    let copy_of = MemberId::new(copy_of).map_err(|e| Waiting::BadMemberId {
        membership: mname.clone(),
        error: e.to_string(),
    })?;
    check_cluster(&copy_of, this).map_err(|source| Waiting::OtherCluster {
        membership: mname.clone(),
        source,
    })?;
    if crate::hub::fences::pending(status) {
        return Err(Waiting::FencesNotRaised {
            membership: mname.clone(),
            state: condition(status, FENCES_RAISED),
        });
    }
    if !(m.hub_checked)(membership) {
        return Err(Waiting::HubCheckPending {
            membership: mname.clone(),
            state: state(Some(status)),
        });
    }
    let space = status
        .space(m.sequence)
        .ok_or_else(|| not_joined(Some(status)))?
        .map_err(|source| Waiting::BadSpace {
            membership: mname.clone(),
            source,
        })?;
    let reach_secs = space.tolerance_secs() + space.renew_every_secs();
    if m.sequence.timebase.ticks_in_ms(reach_secs * 1000) < m.min_ahead {
        return Err(Waiting::LeaseBeyondBound {
            membership: mname.clone(),
            reach_secs,
        });
    }
    let record = status
        .local_record(&space)
        .map_err(|source| Waiting::BadCopy {
            membership: mname.clone(),
            source,
        })?;
    let assignable = record
        .assignable(&space, m.datacenter, m.now, m.min_ahead)
        .into_iter()
        .collect();
    let found = |type_: &str| {
        let c = status.conditions.iter().find(|c| c.type_ == type_)?;
        Some(HubCondition {
            is_true: c.status == "True",
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
    };
    Ok(Joined {
        space,
        datacenter: m.datacenter,
        record,
        assignable,
        hub: HubState {
            ready: found(READY),
            blocks_low: found(BLOCKS_LOW),
        },
    })
}

fn name(membership: &IdSpaceMembership) -> String {
    membership.metadata.name.clone().unwrap_or_default()
}

/// The membership's Ready condition, as a person reads it.
fn state(status: Option<&IdSpaceMembershipStatus>) -> String {
    status
        .filter(|s| s.conditions.iter().any(|c| c.type_ == READY))
        .map(|s| condition(s, READY))
        .unwrap_or_else(|| "the membership task has not reached the hub yet".into())
}

/// Condition `type_` of the membership, as a person reads it.
fn condition(status: &IdSpaceMembershipStatus, type_: &str) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
        .unwrap_or_default()
}

impl Blocks {
    /// Whether a new holder may get `slot`, whose Lease has `fence`: `None`, not given;
    /// `Some(None)`, given without a cap (lone); `Some(Some(limits))`, given in its block.
    pub fn room(&self, slot: Slot, fence: Tick) -> Option<Option<BlockLimits>> {
        match self {
            Blocks::Lone => Some(None),
            Blocks::Waiting(_) => None,
            Blocks::Joined(j) => j.limits(slot, fence).map(Some),
        }
    }

    /// The slot numbers below `capacity` a never-used slot may be picked from, ascending.
    pub fn candidates(&self, capacity: u64) -> Box<dyn Iterator<Item = Slot> + '_> {
        match self {
            Blocks::Lone => Box::new((0..capacity).map(|n| Slot(n as u32))),
            Blocks::Waiting(_) => Box::new(std::iter::empty()),
            Blocks::Joined(j) => Box::new(
                j.assignable
                    .iter()
                    .copied()
                    .filter(move |s| u64::from(s.0) < capacity),
            ),
        }
    }

    /// The cap `lease` (held) should be raised to: its grant's bound, when above the cap it
    /// has or when it has none. Never for a lone sequence or a slot outside the blocks held
    /// ([`Blocks::held_outside`]: raising that cap would let the holder issue below the
    /// floor of a later term).
    pub fn cap_to_raise(&self, lease: &SlotLease) -> Option<Tick> {
        let Blocks::Joined(j) = self else { return None };
        if self.held_outside(lease) {
            return None;
        }
        let bound = j.record.fence_cap(&j.space, j.datacenter, lease.slot)?;
        match lease.fence_cap {
            Some(cap) if cap >= bound => None,
            _ => Some(bound),
        }
    }

    /// Whether held `lease` lies outside the blocks the member holds now (rule 17): its
    /// block is not the member's any more, or the member holds it again in a later term
    /// (the lease's cap, set in an earlier term, is at or below the new term's floor: within
    /// one term every bound is above the floor). Its holder stopped at its cap; the
    /// controller releases it so that the pod takes a slot in a block held now
    /// ([`ReleaseReason::OutsideBlocks`](crate::controller::snowflake::plan::ReleaseReason)).
    /// A held lease without a cap is the join's (its block became the first claim), so it
    /// is outside only when its block is not held.
    pub fn held_outside(&self, lease: &SlotLease) -> bool {
        let Blocks::Joined(j) = self else {
            return false;
        };
        match j.record.grant_of(&j.space, j.datacenter, lease.slot) {
            None => true,
            Some(grant) => lease.fence_cap.is_some_and(|cap| cap <= grant.floor),
        }
    }

    /// Whether pods injected before 0.2.0 must be kept from the sequence's slots: their
    /// sidecars know no fence cap (as for key forms, rule 15).
    pub fn needs_current_sidecars(&self) -> bool {
        !matches!(self, Blocks::Lone)
    }
}

impl Joined {
    /// The limits of a new holder of `slot` whose Lease has `fence`, if the slot may be
    /// given now: in a block held, usable at `now`, with a tick left above the start.
    fn limits(&self, slot: Slot, fence: Tick) -> Option<BlockLimits> {
        if !self.assignable.contains(&slot) {
            return None;
        }
        let start = self
            .record
            .start_above(&self.space, self.datacenter, slot, fence)?;
        let cap = self.record.fence_cap(&self.space, self.datacenter, slot)?;
        BlockLimits::new(start, cap).ok()
    }
}
