//! Joining an ID space: the checks that refuse a cluster before it can repeat an ID, and
//! the blocks an existing sequence's pods already use.
//!
//! A cluster joins with its identity and name, its sequence's parameters, and the slots
//! its sequence has used (its slot Leases: the fence, and whether a pod holds the slot
//! now). It is refused, with what to fix, when its sequence differs from the space's
//! (layout, epoch, time unit, mode; a strict sequence never joins), when its identity is a
//! member under another name (a cluster built from another's etcd backup shares its
//! `kube-system` UID) or its name is another identity's, or when its past use cannot be
//! kept apart from another member's. Otherwise its held slots' blocks become its first
//! claims, and the floor of every other block it used is raised to its fences there: no
//! layout change, and nobody later starts at or below a tick it may have issued.

use std::collections::BTreeMap;

use super::identity::{MemberId, MemberName};
use super::registry::{BlockState, Claim, Grant, Member, Registry, first_generation, grant_of};
use super::space::{BlockIndex, Space, SpaceSequence};
use crate::layout::{DatacenterId, Layout, Slot, Tick};

/// One slot the joining cluster's sequence has used: its slot Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotUse {
    pub slot: Slot,
    /// The Lease's fence: the highest tick any holder of the slot may have used.
    pub fence: Tick,
    /// A pod holds the slot now (and keeps issuing through the join).
    pub held: bool,
}

/// A cluster asking to join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    pub id: MemberId,
    pub name: MemberName,
    pub sequence: SpaceSequence,
    pub datacenter: DatacenterId,
    pub used: Vec<SlotUse>,
    /// The joining cluster's tick.
    pub now: Tick,
}

/// Why a cluster may not join. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error(
        "strict sequences cannot span clusters: every strict value goes through one oracle, \
         which a partitioned member could not reach; keep this strict IdSequence to one cluster"
    )]
    Strict,
    #[error(
        "the sequence's mode is {member:?} but the ID space's is {space:?}: every member must \
         use the same mode; join a space made from this sequence, or a sequence of that mode"
    )]
    ModeDiffers {
        space: crate::sequence::Mode,
        member: crate::sequence::Mode,
    },
    #[error(
        "the sequence's layout is {member} but the ID space's is {space}: every member must use \
         the same layout (the layout cannot change); join a space made from this sequence's \
         layout, or create a sequence with the space's"
    )]
    LayoutDiffers { space: String, member: String },
    #[error(
        "the sequence's epoch and time unit ({member}) differ from the ID space's ({space}): \
         every member must count ticks alike; join a space made from this sequence, or create a \
         sequence with the space's epoch and time unit"
    )]
    TimebaseDiffers { space: String, member: String },
    #[error(
        "datacenterId {0} does not fit the space's layout: the sequence cannot be in this space"
    )]
    DatacenterOutOfLayout(u32),
    #[error(
        "cluster ID {id} is already member {existing}, so it cannot join as {requested}. If this \
         is {existing}, join with that name. If it is another cluster (one built from \
         {existing}'s etcd backup has the same kube-system UID), give it its own identity: a \
         cluster.clusterset.k8s.io ClusterProperty with a value no member has"
    )]
    DuplicateIdentity {
        id: MemberId,
        existing: MemberName,
        requested: MemberName,
    },
    #[error(
        "member name {name} is already cluster {existing}: choose another name for cluster \
         {requested}, or, if {name} was rebuilt and the old cluster is gone, forget the old \
         member first (`kubectl kubeflake hub forget {name}`, which cannot repeat an ID)"
    )]
    NameTaken {
        name: MemberName,
        existing: MemberId,
        requested: MemberId,
    },
    #[error(
        "slot {slot} is held by a pod of this cluster, but block {block} holding it is member \
         {owner}'s: both clusters issue that worker ID. Scale the sequence's pods to zero (or \
         delete the pods holding slots outside free blocks) and join again: after the join \
         this cluster's pods get slots only in its own blocks"
    )]
    HeldSlotInOthersBlock {
        slot: u32,
        block: u32,
        owner: MemberId,
    },
    #[error(
        "slot {slot} is held by a pod of this cluster, but block {block}'s last owner may \
         issue up to tick {floor}, beyond now ({now}): join again after that tick, or restart \
         the pods holding its slots after joining"
    )]
    HeldSlotBlockFenced {
        slot: u32,
        block: u32,
        floor: u64,
        now: u64,
    },
    #[error(
        "slot {slot} of this cluster has a fence at tick {fence}, not yet passed, and block \
         {block} holding it is member {owner}'s, which may issue there: join again after that \
         tick"
    )]
    FencedSlotInOthersBlock {
        slot: u32,
        block: u32,
        fence: u64,
        owner: MemberId,
    },
}

/// The registry after a join, and the claims it gave the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub registry: Registry,
    pub grants: Vec<Grant>,
    /// The cluster was a member already, under this name: nothing changed.
    pub already: bool,
}

/// Admits a cluster, or says why not.
pub fn join(space: &Space, registry: &Registry, req: &JoinRequest) -> Result<Joined, JoinError> {
    check_sequence(space.sequence(), &req.sequence)?;
    if space
        .sequence()
        .layout
        .check_datacenter(u64::from(req.datacenter.0))
        .is_err()
    {
        return Err(JoinError::DatacenterOutOfLayout(req.datacenter.0));
    }
    if let Some(member) = registry.members.get(&req.id) {
        if member.name != req.name {
            return Err(JoinError::DuplicateIdentity {
                id: req.id.clone(),
                existing: member.name.clone(),
                requested: req.name.clone(),
            });
        }
        return Ok(Joined {
            grants: registry.grants_of(&req.id),
            registry: registry.clone(),
            already: true,
        });
    }
    if let Some((existing, _)) = registry.members().find(|(_, m)| m.name == req.name) {
        return Err(JoinError::NameTaken {
            name: req.name.clone(),
            existing: existing.clone(),
            requested: req.id.clone(),
        });
    }
    let used = used_blocks(space, req)?;
    let mut next = registry.changed();
    let generation = first_generation(next.revision);
    next.members.insert(
        req.id.clone(),
        Member {
            name: req.name.clone(),
            datacenter: req.datacenter,
            generation,
        },
    );
    let mut grants = Vec::new();
    for (block, used) in used {
        match (registry.block(block), used.held) {
            (BlockState::Held(claim), Some(slot)) => {
                return Err(JoinError::HeldSlotInOthersBlock {
                    slot: slot.0,
                    block: block.get(),
                    owner: claim.owner.clone(),
                });
            }
            (BlockState::Held(claim), None) => {
                if used.fence >= req.now {
                    return Err(JoinError::FencedSlotInOthersBlock {
                        slot: used.fence_slot.0,
                        block: block.get(),
                        fence: used.fence.0,
                        owner: claim.owner.clone(),
                    });
                }
            }
            (BlockState::Free { term, floor }, Some(slot)) => {
                if *floor >= req.now {
                    return Err(JoinError::HeldSlotBlockFenced {
                        slot: slot.0,
                        block: block.get(),
                        floor: floor.0,
                        now: req.now.0,
                    });
                }
                let claim = Claim {
                    owner: req.id.clone(),
                    term: term + 1,
                    floor: *floor,
                    bound: space.bound_from(req.now).max(used.fence),
                };
                grants.push(grant_of(block, &claim));
                next.blocks.insert(block, BlockState::Held(claim));
            }
            (BlockState::Free { term, floor }, None) => {
                next.blocks.insert(
                    block,
                    BlockState::Free {
                        term: *term,
                        floor: (*floor).max(used.fence),
                    },
                );
            }
        }
    }
    Ok(Joined {
        registry: next,
        grants,
        already: false,
    })
}

/// What the joining cluster did in one block: a slot a pod holds there now, if any, and
/// the slot with the highest fence.
#[derive(Debug, Clone, Copy)]
struct BlockUse {
    held: Option<Slot>,
    fence: Tick,
    fence_slot: Slot,
}

fn used_blocks(
    space: &Space,
    req: &JoinRequest,
) -> Result<BTreeMap<BlockIndex, BlockUse>, JoinError> {
    let mut used: BTreeMap<BlockIndex, BlockUse> = BTreeMap::new();
    for slot_use in &req.used {
        let block = space
            .block_of(req.datacenter, slot_use.slot)
            .ok_or(JoinError::DatacenterOutOfLayout(req.datacenter.0))?;
        let entry = used.entry(block).or_insert(BlockUse {
            held: None,
            fence: Tick(0),
            fence_slot: slot_use.slot,
        });
        if slot_use.held && entry.held.is_none() {
            entry.held = Some(slot_use.slot);
        }
        if slot_use.fence > entry.fence {
            entry.fence = slot_use.fence;
            entry.fence_slot = slot_use.slot;
        }
    }
    Ok(used)
}

/// Whether a member's sequence may be in a space of `space`'s sequence: not strict, and the
/// same mode, layout, epoch and time unit (also the Segment path's check, which has no
/// blocks to join).
pub fn check_sequence(space: &SpaceSequence, member: &SpaceSequence) -> Result<(), JoinError> {
    if member.strict {
        return Err(JoinError::Strict);
    }
    if member.mode != space.mode {
        return Err(JoinError::ModeDiffers {
            space: space.mode,
            member: member.mode,
        });
    }
    if member.layout != space.layout {
        return Err(JoinError::LayoutDiffers {
            space: describe(&space.layout),
            member: describe(&member.layout),
        });
    }
    if member.timebase != space.timebase {
        let show = |t: &crate::timebase::Timebase| {
            format!(
                "epoch {} in {}",
                crate::timebase::rfc3339(t.epoch_unix_ms()),
                t.unit().as_str()
            )
        };
        return Err(JoinError::TimebaseDiffers {
            space: show(&space.timebase),
            member: show(&member.timebase),
        });
    }
    Ok(())
}

/// A layout in the words of its spec, for messages.
fn describe(layout: &Layout) -> String {
    let bits = format!(
        "timestampBits {}, datacenterBits {}, workerBits {}, sequenceBits {}",
        layout.timestamp_bits(),
        layout.datacenter_bits(),
        layout.worker_bits(),
        layout.sequence_bits()
    );
    match layout.form_label() {
        Some(form) => format!("{bits}, {form}"),
        None => bits,
    }
}
