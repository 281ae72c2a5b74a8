//! The registry on the hub: who the members are and who holds which block, and the block
//! protocol as pure transitions over it (docs/design/2026-11-29-multicluster.md).
//!
//! A block is *free* or *held*. A held block has an owner, a term (counts hand-overs), a
//! floor and a bound: its owner issues only ticks above the floor and at most the bound,
//! and the bound was written here before the owner used it. Every way a block leaves its
//! owner (a release, a reclaim once the bound passed, forgetting a member) sets the
//! block's floor to at least the bound recorded here, so the next owner starts above every
//! tick the last one could have issued, as the hub recorded it: nothing the old member
//! says, or fails to say, enters into it. The floor never goes down; during a term the
//! bound only goes up.
//!
//! Each transition takes the registry as read and returns the registry to write; the
//! write is a compare-and-swap on the hub object's `resourceVersion` (rule 1), so two
//! members' writes never both apply to one reading.

use std::collections::BTreeMap;

use super::identity::{MemberId, MemberName};
use super::space::{BlockIndex, Space};
use crate::layout::{DatacenterId, Tick};

/// How far `hub recover` moves the revision up ([`Registry::recover_after_restore`]):
/// more writes than a hub takes in centuries (each is one member's transition, a few a
/// minute per member), so it is above any revision a member saw after the backup.
pub const RECOVERY_REVISION_STEP: u64 = 1 << 32;
/// The generation a new member entry starts at, in the write that makes it (a join, also
/// after `hub forget`): that write's revision. A generation counts up with the revision,
/// never faster, so this lies above every generation an earlier entry of the same cluster
/// reached, and a copy of a forgotten entry (an etcd snapshot of the member from before
/// the forget) never matches it (docs/safety.md rules 21 and 22). The hub policy admits
/// nothing else.
pub fn first_generation(new_revision: u64) -> u64 {
    new_revision.max(1)
}

/// The highest revision the IdSpace holds (`spec.registry.revision` is an `int64`).
pub const MAX_REVISION: u64 = i64::MAX as u64;

/// A member as the registry records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: MemberName,
    /// The datacenter ID its sequence carries: it uses only blocks of that datacenter.
    pub datacenter: DatacenterId,
    /// Counts this member's writes to the registry; the member keeps the last one it wrote
    /// in its own cluster, so a record that went back (an etcd restore) shows.
    pub generation: u64,
}

/// A held block: its owner may issue ticks in `(floor, bound]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub(super) owner: MemberId,
    pub(super) term: u64,
    pub(super) floor: Tick,
    pub(super) bound: Tick,
}

impl Claim {
    pub fn owner(&self) -> &MemberId {
        &self.owner
    }
    pub fn term(&self) -> u64 {
        self.term
    }
    pub fn floor(&self) -> Tick {
        self.floor
    }
    pub fn bound(&self) -> Tick {
        self.bound
    }
}

/// One block's state. A block the registry never lists is free with floor 0, term 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockState {
    /// Nobody holds it; whoever takes it next issues only above `floor`.
    Free {
        term: u64,
        floor: Tick,
    },
    Held(Claim),
}

impl BlockState {
    const NEVER_USED: BlockState = BlockState::Free {
        term: 0,
        floor: Tick(0),
    };
    /// The tick a next owner must start above (for a held block: the holder's own floor).
    pub fn floor(&self) -> Tick {
        match self {
            BlockState::Free { floor, .. } => *floor,
            BlockState::Held(claim) => claim.floor,
        }
    }
}

/// What a member may use: one block, in one term, ticks in `(floor, bound]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub block: BlockIndex,
    pub term: u64,
    pub floor: Tick,
    pub bound: Tick,
}

/// What the registry says about one member: everything its cluster keeps a copy of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub generation: u64,
    /// The registry's revision when this view was taken.
    pub revision: u64,
    pub grants: Vec<Grant>,
}

/// Why a transition was refused. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "cluster {0} is not a member of this ID space: join it first (`kubectl kubeflake hub \
         join`); a member that was forgotten joins again as new"
    )]
    UnknownMember(MemberId),
    #[error(
        "no free block for member {member} in datacenter ID {datacenter}: every block is held. \
         Blocks come back when members leave or when a lost member's claims lapse (`kubectl \
         kubeflake hub blocks` lists them); a new space with smaller blocks (blockSlots) or \
         more worker bits has more"
    )]
    NoFreeBlock { member: MemberName, datacenter: u32 },
    #[error(
        "block {block} is not held by this member in term {term} (it was released, reclaimed \
         or the member forgotten): stop using its slots now; they issue only up to the bound \
         already granted"
    )]
    NotOwner { block: u32, term: u64 },
    #[error(
        "block {block} is held by member {owner} until tick {bound}: it can be reclaimed only \
         once that tick has passed (forgetting the member takes it back at once, safely)"
    )]
    BoundNotPassed {
        block: u32,
        owner: MemberId,
        bound: u64,
    },
    #[error("block {0} is not held: there is nothing to reclaim")]
    NotHeld(u32),
}

/// The registry: members and blocks. Valid by construction: every held block's owner is a
/// member and lies in that member's reach, and every bound is above its floor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Registry {
    pub(super) revision: u64,
    pub(super) members: BTreeMap<MemberId, Member>,
    pub(super) blocks: BTreeMap<BlockIndex, BlockState>,
}

impl Registry {
    /// Counts every change of the registry: members remember the highest they saw, so a
    /// registry restored from a backup shows.
    pub fn revision(&self) -> u64 {
        self.revision
    }
    pub fn member(&self, id: &MemberId) -> Option<&Member> {
        self.members.get(id)
    }
    pub fn members(&self) -> impl Iterator<Item = (&MemberId, &Member)> {
        self.members.iter()
    }
    pub fn block(&self, block: BlockIndex) -> &BlockState {
        self.blocks.get(&block).unwrap_or(&BlockState::NEVER_USED)
    }

    /// What the registry grants `id`, for its cluster's copy.
    pub fn view_of(&self, id: &MemberId) -> Result<MemberView, RegistryError> {
        let member = self.known(id)?;
        Ok(MemberView {
            generation: member.generation,
            revision: self.revision,
            grants: self.grants_of(id),
        })
    }

    /// The blocks `id` holds, as grants.
    pub(super) fn grants_of(&self, id: &MemberId) -> Vec<Grant> {
        self.blocks
            .iter()
            .filter_map(|(block, state)| match state {
                BlockState::Held(claim) if claim.owner == *id => Some(grant_of(*block, claim)),
                _ => None,
            })
            .collect()
    }

    /// Claims a free block for `id`, `now` by the member's clock. Free blocks whose floor
    /// has passed come first (usable at once), lowest floor and then lowest index first;
    /// otherwise the one with the lowest floor. The bound is set a tolerance plus a renewal
    /// period above `now`, or above the floor when that is later.
    pub fn claim(
        &self,
        space: &Space,
        id: &MemberId,
        now: Tick,
    ) -> Result<(Registry, Grant), RegistryError> {
        let member = self.known(id)?;
        let best = space
            .reach(member.datacenter)
            .filter_map(|i| space.block(u64::from(i)))
            .filter_map(|block| match self.block(block) {
                BlockState::Free { term, floor } => Some((block, *term, *floor)),
                BlockState::Held(_) => None,
            })
            .filter(|(_, _, floor)| *floor < space.sequence().layout.max_tick())
            .min_by_key(|(block, _, floor)| (*floor >= now, *floor, *block))
            .ok_or_else(|| RegistryError::NoFreeBlock {
                member: member.name.clone(),
                datacenter: member.datacenter.0,
            })?;
        let (block, term, floor) = best;
        let claim = Claim {
            owner: id.clone(),
            term: term + 1,
            floor,
            bound: space.bound_from(now.max(floor)),
        };
        let grant = grant_of(block, &claim);
        let mut next = self.written_by(id);
        next.blocks.insert(block, BlockState::Held(claim));
        Ok((next, grant))
    }

    /// Raises the bound of a block `id` holds in `term` to a tolerance plus a renewal
    /// period above `now` (never lowers it).
    pub fn renew(
        &self,
        space: &Space,
        id: &MemberId,
        block: BlockIndex,
        term: u64,
        now: Tick,
    ) -> Result<(Registry, Grant), RegistryError> {
        self.known(id)?;
        let mut claim = self.held_by(id, block, term)?.clone();
        claim.bound = claim.bound.max(space.bound_from(now));
        let grant = grant_of(block, &claim);
        let mut next = self.written_by(id);
        next.blocks.insert(block, BlockState::Held(claim));
        Ok((next, grant))
    }

    /// `id` gives a block back. Its floor becomes the bound: the next owner starts above
    /// every tick this term could have issued, whatever the member did or says.
    pub fn release(
        &self,
        id: &MemberId,
        block: BlockIndex,
        term: u64,
    ) -> Result<Registry, RegistryError> {
        self.known(id)?;
        let claim = self.held_by(id, block, term)?;
        let mut next = self.written_by(id);
        next.blocks.insert(block, hand_back(claim));
        Ok(next)
    }

    /// Anyone takes a block back from an owner whose bound has passed by `now` (the
    /// reclaimer's clock; when it is wrong the owner only loses the block early: safety
    /// rests on the floor, not on the time).
    pub fn reclaim(&self, block: BlockIndex, now: Tick) -> Result<Registry, RegistryError> {
        let BlockState::Held(claim) = self.block(block) else {
            return Err(RegistryError::NotHeld(block.get()));
        };
        if claim.bound >= now {
            return Err(RegistryError::BoundNotPassed {
                block: block.get(),
                owner: claim.owner.clone(),
                bound: claim.bound.0,
            });
        }
        let mut next = self.changed();
        next.blocks.insert(block, hand_back(claim));
        Ok(next)
    }

    /// Removes a member and takes back every block it holds, at any time: each block's
    /// floor becomes its bound, so this cannot make an ID repeat even while the member
    /// still runs (it stops at its bounds). Also how a member leaves.
    pub fn forget(&self, id: &MemberId) -> Result<Registry, RegistryError> {
        self.known(id)?;
        let mut next = self.changed();
        next.members.remove(id);
        for state in next.blocks.values_mut() {
            if let BlockState::Held(claim) = state
                && claim.owner == *id
            {
                *state = hand_back(claim);
            }
        }
        Ok(next)
    }

    /// After the registry was restored from a backup (members report
    /// [`HubCheck::HubWentBack`](super::HubCheck)): claims made after the backup are missing
    /// from it, so every block, listed or not, is freed with its floor at `now` (the
    /// recovering person's tick) plus a tolerance, a renewal period and `skew` ticks for
    /// clocks that run behind: no member can hold a bound beyond that. Members keep their
    /// memberships and claim again; what they issue under their old grants stays below
    /// every new floor.
    ///
    /// The revision jumps by [`RECOVERY_REVISION_STEP`], not by one: a member that saw a
    /// revision written after the backup refuses any registry below it (`HubWentBack`), and
    /// the hub cannot know how many writes it lost. Above every revision a member saw,
    /// members take the recovered registry as newer and claim again.
    pub fn recover_after_restore(&self, space: &Space, now: Tick, skew: u64) -> Registry {
        let floor = space.bound_from(Tick(now.0.saturating_add(skew)));
        let mut next = self.changed();
        next.revision = self
            .revision
            .saturating_add(RECOVERY_REVISION_STEP)
            .min(MAX_REVISION);
        for block in space.blocks() {
            let (term, old) = match self.block(block) {
                BlockState::Free { term, floor } => (*term, *floor),
                BlockState::Held(claim) => (claim.term, claim.floor.max(claim.bound)),
            };
            next.blocks.insert(
                block,
                BlockState::Free {
                    term,
                    floor: old.max(floor),
                },
            );
        }
        next
    }

    fn known(&self, id: &MemberId) -> Result<&Member, RegistryError> {
        self.members
            .get(id)
            .ok_or_else(|| RegistryError::UnknownMember(id.clone()))
    }

    fn held_by(
        &self,
        id: &MemberId,
        block: BlockIndex,
        term: u64,
    ) -> Result<&Claim, RegistryError> {
        match self.block(block) {
            BlockState::Held(claim) if claim.owner == *id && claim.term == term => Ok(claim),
            _ => Err(RegistryError::NotOwner {
                block: block.get(),
                term,
            }),
        }
    }

    /// A copy with the revision counted up.
    pub(super) fn changed(&self) -> Registry {
        let mut next = self.clone();
        next.revision += 1;
        next
    }

    /// A copy with the revision and `id`'s generation counted up.
    pub(super) fn written_by(&self, id: &MemberId) -> Registry {
        let mut next = self.changed();
        if let Some(member) = next.members.get_mut(id) {
            member.generation += 1;
        }
        next
    }
}

/// The free state a held block goes back to: floor at the bound (never lower).
fn hand_back(claim: &Claim) -> BlockState {
    BlockState::Free {
        term: claim.term,
        floor: claim.floor.max(claim.bound),
    }
}

pub(super) fn grant_of(block: BlockIndex, claim: &Claim) -> Grant {
    Grant {
        block,
        term: claim.term,
        floor: claim.floor,
        bound: claim.bound,
    }
}
