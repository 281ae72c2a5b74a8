//! A member's own copy of its claims, and the choices it makes from it alone: which slots
//! its operator may assign, where a slot's holder starts and how far its fence may go,
//! when to renew and when to claim a spare block. Nothing here waits on the hub: a pod
//! starts on a block already claimed, and a member cut off from the hub keeps issuing
//! until the bounds it holds.
//!
//! The copy is safe to use even when it is old (a member's etcd restored from an earlier
//! snapshot): every grant in it was written on the hub, and a block that left this member
//! since has a floor at or above the bound of every grant this member held of it. What an
//! old copy cannot know is checked against the hub at the next contact ([`check_hub`]).

use std::collections::BTreeMap;

use super::identity::MemberId;
use super::registry::{Grant, MemberView, RECOVERY_REVISION_STEP};
use super::space::{BlockIndex, Space};
use crate::layout::{DatacenterId, Slot, Tick};

/// The member's copy: its grants, the generation it last wrote, the highest registry
/// revision it saw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalRecord {
    pub generation: u64,
    pub revision_seen: u64,
    grants: BTreeMap<BlockIndex, Grant>,
}

/// What comparing the member's copy with the hub found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubCheck {
    /// The copy is the hub's: go on.
    Current,
    /// The copy is not the hub's entry: the hub has writes of this member that the copy
    /// lacks (the member's own records went back, an etcd restore, or a reply was lost; a
    /// copy from before a `hub forget` too: the entry made again starts above every
    /// generation the old one had), or the copy's generation is above the entry's while no
    /// `hub recover` ran since the copy (defence in depth). Either way the copy is not to
    /// be trusted: take the hub's view; before assigning a slot again, raise the fence of
    /// every free slot in the member's blocks (the slot Leases may have gone back too).
    /// The member writes the hub before its copy, so a current copy is never ahead of the
    /// hub.
    LocalBehind { local: u64, hub: u64 },
    /// The copy has seen a later registry than the hub serves: the hub's registry was
    /// restored from a backup. Claim and renew nothing; the hub must be recovered first.
    HubWentBack { seen: u64, hub: u64 },
}

impl LocalRecord {
    /// The copy made from what the hub said.
    pub fn from_view(view: &MemberView) -> LocalRecord {
        LocalRecord {
            generation: view.generation,
            revision_seen: view.revision,
            grants: view.grants.iter().map(|g| (g.block, *g)).collect(),
        }
    }

    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.values()
    }

    /// Takes in a grant the hub just wrote (a claim or a renewal): within a term the bound
    /// only goes up; a new term replaces the old.
    pub fn learn(&mut self, grant: Grant, generation: u64, revision: u64) {
        let entry = self.grants.entry(grant.block).or_insert(grant);
        if grant.term > entry.term || (grant.term == entry.term && grant.bound > entry.bound) {
            *entry = grant;
        }
        self.generation = self.generation.max(generation);
        self.revision_seen = self.revision_seen.max(revision);
    }

    /// Drops a block the hub says is no longer this member's (or that it released).
    pub fn forget(&mut self, block: BlockIndex) {
        self.grants.remove(&block);
    }

    /// Whether a worker of this member may issue `tick` on (`datacenter`, `slot`): the slot
    /// is in a block it holds, above the block's floor and at most its bound.
    pub fn may_issue(
        &self,
        space: &Space,
        datacenter: DatacenterId,
        slot: Slot,
        tick: Tick,
    ) -> bool {
        self.grant_of(space, datacenter, slot)
            .is_some_and(|g| g.floor < tick && tick <= g.bound)
    }

    /// The highest fence the slot's Lease may carry: its block's bound.
    pub fn fence_cap(&self, space: &Space, datacenter: DatacenterId, slot: Slot) -> Option<Tick> {
        self.grant_of(space, datacenter, slot).map(|g| g.bound)
    }

    /// Where a new holder of the slot starts: above the slot's own fence and above its
    /// block's floor.
    pub fn start_above(
        &self,
        space: &Space,
        datacenter: DatacenterId,
        slot: Slot,
        slot_fence: Tick,
    ) -> Option<Tick> {
        self.grant_of(space, datacenter, slot)
            .map(|g| g.floor.max(slot_fence))
    }

    /// The slots the operator may give a pod at `now`: in blocks whose floor has passed and
    /// whose bound is at least `min_ahead` ticks away (a slot lease's duration: a pod given a
    /// slot can raise its fence that far).
    pub fn assignable(
        &self,
        space: &Space,
        datacenter: DatacenterId,
        now: Tick,
        min_ahead: u64,
    ) -> Vec<Slot> {
        self.grants
            .values()
            .filter(|g| g.floor < now && g.bound.0 >= now.0.saturating_add(min_ahead))
            .filter(|g| space.slots_of(g.block).0 == datacenter)
            .flat_map(|g| space.slots_of(g.block).1.map(Slot))
            .collect()
    }

    /// Whether to claim another block now: fewer than a block's worth of slots would be
    /// free once `in_use` are taken, counting only blocks usable within the tolerance.
    /// So the next pods never wait on the hub.
    pub fn wants_spare(
        &self,
        space: &Space,
        datacenter: DatacenterId,
        now: Tick,
        in_use: u64,
    ) -> bool {
        let usable = self.assignable(space, datacenter, now, 0).len() as u64;
        usable.saturating_sub(in_use) < space.block_slots()
    }

    /// The blocks whose renewal is due at `now`.
    pub fn due(&self, space: &Space, now: Tick) -> Vec<(BlockIndex, u64)> {
        self.grants
            .values()
            .filter(|g| space.renewal_due(now, g.bound))
            .map(|g| (g.block, g.term))
            .collect()
    }

    /// The grant of the block `slot` lies in, if this member holds that block.
    pub fn grant_of(&self, space: &Space, datacenter: DatacenterId, slot: Slot) -> Option<&Grant> {
        self.grants.get(&space.block_of(datacenter, slot)?)
    }
}

/// Compares the member's copy with what the hub says about it.
pub fn check_hub(local: &LocalRecord, hub: &MemberView) -> HubCheck {
    if hub.revision < local.revision_seen {
        return HubCheck::HubWentBack {
            seen: local.revision_seen,
            hub: hub.revision,
        };
    }
    let ahead = local.generation > hub.generation && !recovered_since(local, hub);
    if hub.generation > local.generation || ahead {
        return HubCheck::LocalBehind {
            local: local.generation,
            hub: hub.generation,
        };
    }
    HubCheck::Current
}

/// Whether a `hub recover` ran since the copy was made: the hub's revision is more than
/// half a [`RECOVERY_REVISION_STEP`] above the highest the copy saw. A recovery adds the
/// step to the restored revision, which lies below what the copy saw by the writes the
/// backup lost (never nearly 2^31 of them); ordinary writes add one each. A member that
/// wrote after the backup then holds a copy ahead of its restored entry, and the recovery
/// freed every block above any bound it held: its copy is dropped for the hub's view
/// without counting as one that went back.
fn recovered_since(local: &LocalRecord, hub: &MemberView) -> bool {
    hub.revision.saturating_sub(local.revision_seen) > RECOVERY_REVISION_STEP / 2
}

/// A copy of claims made by another cluster: the namespace was restored or copied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this sequence's membership of the ID space was made by cluster {copy_of}, not by this \
     cluster ({this}): the namespace was restored or copied from it. No slot of the sequence \
     is assigned here until this cluster joins the ID space itself (`kubectl kubeflake hub \
     join`); the other cluster's blocks are never used here"
)]
pub struct CopyOfAnotherCluster {
    pub copy_of: MemberId,
    pub this: MemberId,
}

/// Checks a copy of claims found in this cluster was made by this cluster.
pub fn check_cluster(copy_of: &MemberId, this: &MemberId) -> Result<(), CopyOfAnotherCluster> {
    if copy_of == this {
        return Ok(());
    }
    Err(CopyOfAnotherCluster {
        copy_of: copy_of.clone(),
        this: this.clone(),
    })
}
