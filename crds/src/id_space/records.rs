//! The registry as the `IdSpace` object stores it: read whole and checked, written whole.
//!
//! A stored registry that breaks an invariant (a block held by a non-member, or outside its
//! owner's datacenter, a bound at or below its floor, a number out of range, a member or
//! block listed twice) is refused as a whole, never read around (as slot Leases are, docs/safety.md
//! rule 11): nothing is claimed or renewed from it until a person repairs it.

use std::collections::BTreeMap;

use super::identity::{IdentityError, MemberId, MemberName};
use super::registry::{BlockState, Claim, Member, Registry};
use super::space::{Space, SpaceError, SpaceSequence};
use super::{BlockRecord, IdSpaceSpec, MemberRecord, RegistryRecord};
use crate::layout::{DatacenterId, LayoutError, Tick};
use crate::timebase::{EpochError, Timebase};

/// Why an `IdSpace` cannot be used. Nothing is written to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("IdSpace sequence.layout: {0}")]
    Layout(#[from] LayoutError),
    #[error("IdSpace sequence.epoch: {0}")]
    Epoch(#[from] EpochError),
    #[error("IdSpace: {0}")]
    Space(#[from] SpaceError),
    #[error("IdSpace registry: {0}; the registry is neither used nor changed until it is repaired")]
    Identity(#[from] IdentityError),
    #[error(
        "IdSpace registry: {field} is {value}, but it must be between 0 and {max}; the registry \
         is neither used nor changed until it is repaired (never lower a floor or a bound)"
    )]
    OutOfRange {
        field: &'static str,
        value: i64,
        max: u64,
    },
    #[error(
        "IdSpace registry lists {what} {key} twice; the registry is neither used nor changed \
         until one entry is removed by hand (keep the one with the higher floor or bound)"
    )]
    Twice { what: &'static str, key: String },
    #[error(
        "IdSpace registry: block {block} is held by {owner}, which is not a member (or not in \
         that block's datacenter); the registry is neither used nor changed until it is \
         repaired: remove the owner and bound and set the floor to at least the bound"
    )]
    BadOwner { block: i64, owner: String },
    #[error(
        "IdSpace registry: block {block} has {problem}; the registry is neither used nor changed \
         until it is repaired"
    )]
    BadClaim { block: i64, problem: &'static str },
}

impl IdSpaceSpec {
    /// The validated parameters.
    pub fn space(&self) -> Result<Space, RecordError> {
        let sequence = self.space_sequence()?;
        Ok(Space::new(
            sequence,
            self.block_slots,
            self.tolerance_seconds,
            self.renew_every_seconds,
        )?)
    }

    /// The sequence every member must match, validated (in either mode: a Segment space
    /// has no [`Space`] of blocks, but its members match its sequence all the same).
    pub fn space_sequence(&self) -> Result<SpaceSequence, RecordError> {
        let seq = &self.sequence;
        Ok(SpaceSequence {
            layout: seq.layout.to_layout()?,
            timebase: Timebase::parse(&seq.epoch, seq.time_unit)?,
            mode: seq.mode,
            strict: seq.strict,
        })
    }

    /// The registry, checked whole against `space`.
    pub fn registry(&self, space: &Space) -> Result<Registry, RecordError> {
        let record = &self.registry;
        let max_tick = space.sequence().layout.max_tick().0;
        let mut members = BTreeMap::new();
        for m in &record.members {
            let id = MemberId::new(&m.id)?;
            let max_dc = (1u64 << space.sequence().layout.datacenter_bits()) - 1;
            let dc = number("datacenterId", m.datacenter_id, max_dc)?;
            let datacenter = DatacenterId(dc as u32);
            let member = Member {
                name: MemberName::new(&m.name)?,
                datacenter,
                generation: number("generation", m.generation, i64::MAX as u64)?,
            };
            if members.values().any(|o: &Member| o.name == member.name) {
                return Err(twice("member name", &m.name));
            }
            if members.insert(id, member).is_some() {
                return Err(twice("member", &m.id));
            }
        }
        let mut blocks = BTreeMap::new();
        for b in &record.blocks {
            let index = number(
                "block index",
                b.index,
                space.block_count().saturating_sub(1),
            )?;
            let block = space.block(index).ok_or(RecordError::OutOfRange {
                field: "block index",
                value: b.index,
                max: space.block_count().saturating_sub(1),
            })?;
            let term = number("term", b.term, i64::MAX as u64)?;
            let floor = Tick(number("floor", b.floor, max_tick)?);
            let state = match (&b.owner, b.bound) {
                (None, None) => BlockState::Free { term, floor },
                (Some(owner), Some(bound)) => {
                    let bound = Tick(number("bound", bound, max_tick)?);
                    let owner_id = MemberId::new(owner)?;
                    let in_reach = members
                        .get(&owner_id)
                        .is_some_and(|m: &Member| space.slots_of(block).0 == m.datacenter);
                    if !in_reach {
                        return Err(RecordError::BadOwner {
                            block: b.index,
                            owner: owner.clone(),
                        });
                    }
                    if bound <= floor || term == 0 {
                        return Err(RecordError::BadClaim {
                            block: b.index,
                            problem: "a bound at or below its floor, or term 0",
                        });
                    }
                    BlockState::Held(Claim {
                        owner: owner_id,
                        term,
                        floor,
                        bound,
                    })
                }
                _ => {
                    return Err(RecordError::BadClaim {
                        block: b.index,
                        problem: "an owner without a bound or a bound without an owner",
                    });
                }
            };
            if blocks.insert(block, state).is_some() {
                return Err(twice("block", &b.index.to_string()));
            }
        }
        Ok(Registry {
            revision: number("revision", record.revision, i64::MAX as u64)?,
            members,
            blocks,
        })
    }
}

impl Registry {
    /// The registry as the `IdSpace` stores it (members by ID, blocks by index).
    pub fn to_record(&self) -> RegistryRecord {
        let members = self
            .members
            .iter()
            .map(|(id, m)| MemberRecord {
                id: id.to_string(),
                name: m.name.to_string(),
                datacenter_id: i64::from(m.datacenter.0),
                generation: to_i64(m.generation),
            })
            .collect();
        let blocks = self
            .blocks
            .iter()
            .map(|(block, state)| match state {
                BlockState::Free { term, floor } => BlockRecord {
                    index: i64::from(block.get()),
                    term: to_i64(*term),
                    floor: to_i64(floor.0),
                    owner: None,
                    bound: None,
                },
                BlockState::Held(claim) => BlockRecord {
                    index: i64::from(block.get()),
                    term: to_i64(claim.term),
                    floor: to_i64(claim.floor.0),
                    owner: Some(claim.owner.to_string()),
                    bound: Some(to_i64(claim.bound.0)),
                },
            })
            .collect();
        RegistryRecord {
            revision: to_i64(self.revision),
            members,
            blocks,
        }
    }
}

fn number(field: &'static str, value: i64, max: u64) -> Result<u64, RecordError> {
    u64::try_from(value)
        .ok()
        .filter(|v| *v <= max)
        .ok_or(RecordError::OutOfRange { field, value, max })
}

/// Ticks fit 55 bits and counters are counted up one at a time from 0, so every value
/// the registry holds fits; a counter at `i64::MAX` is kept there rather than wrapped.
fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn twice(what: &'static str, key: &str) -> RecordError {
    RecordError::Twice {
        what,
        key: key.to_string(),
    }
}
