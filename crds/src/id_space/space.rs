//! An ID space's parameters, validated: what every member must agree on, how the worker
//! IDs are cut into blocks, and how far ahead a claim reaches.
//!
//! A *node* is what an ID carries between its timestamp and its sequence field: the
//! datacenter ID and the worker slot, `datacenter << workerBits | slot`. Blocks are aligned
//! runs of `blockSlots` nodes that never cross a datacenter, so with the default layout (no
//! datacenter bits) a block is a run of slots, and with `blockSlots = 2^workerBits` a block
//! is a whole datacenter ID. A member's sequence fixes its datacenter ID, so it can only
//! use the blocks of that datacenter (its *reach*).

use std::ops::Range;

use crate::layout::{DatacenterId, Layout, Slot, Tick};
use crate::sequence::Mode;
use crate::timebase::Timebase;

/// At most this many blocks in one space: each is an entry of one hub object, which must
/// stay well under etcd's 1.5 MiB object limit.
pub const MAX_BLOCKS: u64 = 4096;
/// The bound a claim keeps ahead of the hub being unreachable, default: one hour.
pub const DEFAULT_TOLERANCE_SECS: u64 = 3600;
/// How often a member renews its claims, default: every five minutes.
pub const DEFAULT_RENEW_EVERY_SECS: u64 = 300;
/// Allowed `toleranceSeconds`: one minute to thirty days. Below five minutes is for tests and
/// labs: a member then stops issuing soon after it loses the hub.
pub const TOLERANCE_SECS: (u64, u64) = (60, 30 * 24 * 3600);
/// Shortest allowed `renewEverySeconds`.
pub const MIN_RENEW_EVERY_SECS: u64 = 10;

/// Why a space's parameters, or a request against them, are not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpaceError {
    #[error(
        "blockSlots is {0}, but it must be a power of two (1, 2, 4, ... up to 2^workerBits): \
         blocks are aligned runs of worker IDs"
    )]
    BlockSlotsNotPowerOfTwo(i64),
    #[error(
        "blockSlots is {block_slots}, larger than the slot space of the layout (2^workerBits = \
         {slots}): choose at most {slots}; with datacenter bits, {slots} makes each block one \
         datacenter ID"
    )]
    BlockLargerThanSlotSpace { block_slots: u64, slots: u64 },
    #[error(
        "blockSlots {block_slots} cuts the space into {blocks} blocks, more than the {MAX_BLOCKS} \
         one hub object can list: raise blockSlots to at least {need}"
    )]
    TooManyBlocks {
        block_slots: u64,
        blocks: u64,
        need: u64,
    },
    #[error(
        "toleranceSeconds is {0}, but it must be between 60 and 2592000 (30 days): it is how \
         long a member keeps issuing while it cannot reach the hub"
    )]
    ToleranceOutOfRange(i64),
    #[error(
        "renewEverySeconds is {renew}, but it must be between 10 and half of toleranceSeconds \
         ({tolerance}): a member renews its claims this often"
    )]
    RenewOutOfRange { renew: i64, tolerance: u64 },
    #[error(
        "a member wants to keep {want} blocks, but its datacenter ID has only {reach}: lower the \
         number of blocks it keeps, or lower blockSlots (a new space) for smaller blocks"
    )]
    WantMoreThanReach { want: u64, reach: u64 },
    #[error(
        "strict sequences cannot span clusters: every strict value goes through one oracle, \
         which a partitioned member could not reach; keep one strict IdSequence per cluster"
    )]
    StrictCannotSpan,
    #[error(
        "this ID space is in Segment mode: it hands out counter ranges, not blocks of worker IDs"
    )]
    NotSnowflake,
}

/// What every member's sequence must agree on: the layout, the epoch and time unit, and
/// the mode. The datacenter ID is each member's own (it fixes the member's reach).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceSequence {
    pub layout: Layout,
    pub timebase: Timebase,
    pub mode: Mode,
    /// `segment.strict`: refused ([`SpaceError::StrictCannotSpan`]).
    pub strict: bool,
}

/// A block: an aligned run of `blockSlots` nodes. Only a [`Space`] makes one, so its index
/// is always below the space's block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockIndex(u32);

impl BlockIndex {
    pub fn get(self) -> u32 {
        self.0
    }
}

/// A validated ID space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    sequence: SpaceSequence,
    block_slots: u64,
    tolerance_secs: u64,
    renew_every_secs: u64,
}

impl Space {
    /// Validates the parameters: a Snowflake, non-strict sequence; `block_slots` a power of
    /// two no larger than the slot space and giving at most [`MAX_BLOCKS`] blocks;
    /// `tolerance_secs` within [`TOLERANCE_SECS`]; `renew_every_secs` from
    /// [`MIN_RENEW_EVERY_SECS`] to half the tolerance.
    pub fn new(
        sequence: SpaceSequence,
        block_slots: i64,
        tolerance_secs: i64,
        renew_every_secs: i64,
    ) -> Result<Space, SpaceError> {
        if sequence.strict {
            return Err(SpaceError::StrictCannotSpan);
        }
        if sequence.mode != Mode::Snowflake {
            return Err(SpaceError::NotSnowflake);
        }
        let slots = sequence.layout.slot_count();
        let block = u64::try_from(block_slots)
            .ok()
            .filter(|b| b.is_power_of_two())
            .ok_or(SpaceError::BlockSlotsNotPowerOfTwo(block_slots))?;
        if block > slots {
            return Err(SpaceError::BlockLargerThanSlotSpace {
                block_slots: block,
                slots,
            });
        }
        let nodes = slots << sequence.layout.datacenter_bits();
        if nodes / block > MAX_BLOCKS {
            return Err(SpaceError::TooManyBlocks {
                block_slots: block,
                blocks: nodes / block,
                need: nodes / MAX_BLOCKS,
            });
        }
        let tolerance = u64::try_from(tolerance_secs)
            .ok()
            .filter(|t| (TOLERANCE_SECS.0..=TOLERANCE_SECS.1).contains(t))
            .ok_or(SpaceError::ToleranceOutOfRange(tolerance_secs))?;
        let renew = u64::try_from(renew_every_secs)
            .ok()
            .filter(|r| (MIN_RENEW_EVERY_SECS..=tolerance / 2).contains(r))
            .ok_or(SpaceError::RenewOutOfRange {
                renew: renew_every_secs,
                tolerance,
            })?;
        Ok(Space {
            sequence,
            block_slots: block,
            tolerance_secs: tolerance,
            renew_every_secs: renew,
        })
    }

    pub fn sequence(&self) -> &SpaceSequence {
        &self.sequence
    }
    pub fn block_slots(&self) -> u64 {
        self.block_slots
    }
    pub fn tolerance_secs(&self) -> u64 {
        self.tolerance_secs
    }
    pub fn renew_every_secs(&self) -> u64 {
        self.renew_every_secs
    }
    /// How many blocks the space has.
    pub fn block_count(&self) -> u64 {
        (self.sequence.layout.slot_count() << self.sequence.layout.datacenter_bits())
            / self.block_slots
    }
    fn blocks_per_datacenter(&self) -> u64 {
        self.sequence.layout.slot_count() / self.block_slots
    }

    /// The block with this index, if the space has it.
    pub fn block(&self, index: u64) -> Option<BlockIndex> {
        (index < self.block_count()).then_some(BlockIndex(index as u32))
    }
    /// Every block, lowest first.
    pub fn blocks(&self) -> impl Iterator<Item = BlockIndex> + use<> {
        (0..self.block_count() as u32).map(BlockIndex)
    }
    /// The block a worker (`datacenter`, `slot`) lies in; `None` if either does not fit
    /// the layout.
    pub fn block_of(&self, datacenter: DatacenterId, slot: Slot) -> Option<BlockIndex> {
        let layout = &self.sequence.layout;
        layout.check_datacenter(u64::from(datacenter.0)).ok()?;
        layout.check_slot(u64::from(slot.0)).ok()?;
        let node = (u64::from(datacenter.0) << layout.worker_bits()) | u64::from(slot.0);
        self.block(node / self.block_slots)
    }
    /// The datacenter ID a block's IDs carry, and its slots.
    pub fn slots_of(&self, block: BlockIndex) -> (DatacenterId, Range<u32>) {
        let per_dc = self.blocks_per_datacenter();
        let dc = u64::from(block.0) / per_dc;
        let first = (u64::from(block.0) % per_dc) * self.block_slots;
        (
            DatacenterId(dc as u32),
            first as u32..(first + self.block_slots) as u32,
        )
    }
    /// The blocks a member whose sequence carries `datacenter` can use; empty when the
    /// datacenter ID does not fit the layout.
    pub fn reach(&self, datacenter: DatacenterId) -> Range<u32> {
        if self
            .sequence
            .layout
            .check_datacenter(u64::from(datacenter.0))
            .is_err()
        {
            return 0..0;
        }
        let per_dc = self.blocks_per_datacenter();
        let first = u64::from(datacenter.0) * per_dc;
        first as u32..(first + per_dc) as u32
    }
    /// Checks a member may keep `want` blocks (in use plus spare) within its reach.
    pub fn check_want(&self, datacenter: DatacenterId, want: u64) -> Result<(), SpaceError> {
        let reach = self.reach(datacenter).len() as u64;
        if want > reach {
            return Err(SpaceError::WantMoreThanReach { want, reach });
        }
        Ok(())
    }

    /// How far beyond `now` a claim's bound is set when it is made or renewed: the
    /// tolerance plus one renewal period, so that after any successful renewal the member
    /// can keep issuing for at least the tolerance without the hub. Saturates at the
    /// layout's last tick.
    pub fn bound_from(&self, now: Tick) -> Tick {
        let ahead = self
            .sequence
            .timebase
            .ticks_in_ms((self.tolerance_secs + self.renew_every_secs) * 1000);
        Tick(
            now.0
                .saturating_add(ahead)
                .min(self.sequence.layout.max_tick().0),
        )
    }
    /// A renewal is due once less than the tolerance is left before `bound` (so one
    /// renewal period after the last one).
    pub fn renewal_due(&self, now: Tick, bound: Tick) -> bool {
        let tolerance = self
            .sequence
            .timebase
            .ticks_in_ms(self.tolerance_secs * 1000);
        bound.0.saturating_sub(now.0) < tolerance
    }
}
