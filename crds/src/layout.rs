//! The bit layout of a kubeflake ID.
//!
//! An ID is a non-negative `i64` (bit 63 is always zero, so it fits signed columns):
//!
//! ```text
//!  [0][ timestamp (ticks since epoch) ][ datacenter ][ worker slot ][ sequence ]
//! ```
//!
//! [`Layout`] can only be built through [`Layout::new`] or [`Layout::with_form`], which
//! check every field range and that the fields add up to the layout's total (63, or 53 for
//! IDs that JavaScript numbers hold exactly). Everything downstream can therefore shift and
//! mask without re-checking.
//!
//! The packed fields above are the *time-ordered value*. A layout may store it in a
//! hotspot-free form instead ([`spread`]): shard bits on top, bit-reversed, and/or a
//! rotating sequence start. Each form is a bijection, so uniqueness never depends on it.
//! [`IdParts::sequence`] is always the ID's place among its worker's IDs of that tick (the
//! issue order), whatever the stored sequence field holds.
//!
//! One piece (over 400 lines with its tests' helpers): encoding, decoding and the ranges of
//! a tick must change together whenever the ID format does.

use std::fmt;

pub mod spread;

pub use spread::{SequenceStart, Spread};

/// Allowed range of `timestampBits`.
pub const TIMESTAMP_BITS: (u8, u8) = (30, 55);
/// Allowed range of `datacenterBits`.
pub const DATACENTER_BITS: (u8, u8) = (0, 10);
/// Allowed range of `workerBits` (at most 65,536 slots, each a Lease).
pub const WORKER_BITS: (u8, u8) = (1, 16);
/// Allowed range of `sequenceBits`.
pub const SEQUENCE_BITS: (u8, u8) = (0, 22);
/// Total of the four fields for full-range IDs (bit 63 stays zero).
pub const FULL_TOTAL_BITS: u8 = 63;
/// Total of the four fields for JavaScript-safe IDs (every ID below 2^53).
pub const JS_SAFE_TOTAL_BITS: u8 = 53;

/// Ticks (time units) since the sequence's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(pub u64);

/// The last tick any layout holds: that of the widest timestamp field
/// (`TIMESTAMP_BITS.1`, 55 bits). The one bound of a fence everywhere: the Lease policy
/// refuses a write above it and every fence parser refuses to read one above it, so what
/// one accepts the other does (docs/safety.md rule 14). A sequence's own layout may end
/// sooner ([`Layout::max_tick`]).
pub const MAX_TICK: Tick = Tick((1 << TIMESTAMP_BITS.1) - 1);

/// A worker slot: `0 .. 2^workerBits`. Assigned by the operator, never derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Slot(pub u32);

/// A datacenter ID: `0 .. 2^datacenterBits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DatacenterId(pub u32);

/// An issued ID. Always below 2^63, so it is a valid non-negative `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(u64);

impl Id {
    /// Wraps a raw value; fails for values with bit 63 set.
    pub fn new(raw: u64) -> Result<Id, LayoutError> {
        if raw >> 63 != 0 {
            return Err(LayoutError::IdOutOfRange {
                id: raw,
                total_bits: 63,
            });
        }
        Ok(Id(raw))
    }
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The fields of one ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdParts {
    pub tick: Tick,
    pub datacenter: DatacenterId,
    pub slot: Slot,
    pub sequence: u32,
}

/// Why a layout, or a value for one of its fields, is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("layout.{field} is {value}, but it must be between {min} and {max}")]
    BitsOutOfRange {
        field: &'static str,
        value: i64,
        min: u8,
        max: u8,
    },
    #[error(
        "layout.totalBits is {0}, but it must be 63 (full 64-bit range) or 53 (JavaScript-safe IDs)"
    )]
    BadTotal(i64),
    #[error(
        "layout bits add up to {sum} (timestampBits + datacenterBits + workerBits + sequenceBits \
         + shardBits), \
         but they must add up to totalBits = {total}; change one of them"
    )]
    BadSum { sum: u32, total: u8 },
    #[error("{field} is {value}, but this layout allows at most {max}")]
    FieldTooLarge {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("{id} does not fit this layout: IDs have at most {total_bits} bits")]
    IdOutOfRange { id: u64, total_bits: u8 },
    #[error(
        "layout.shardBits is {0}, but it must be between 1 and 10 (or leave it out for no shard bits)"
    )]
    ShardBitsOutOfRange(i64),
    #[error("layout.shardBits and layout.bitReversed are two ways to spread IDs: choose one")]
    TwoSpreads,
    #[error(
        "layout.sequenceStart is Rotating, but layout.sequenceBits is 0: there is no sequence \
         field to rotate; use sequenceStart Zero or give the sequence bits"
    )]
    NothingToRotate,
    #[error(
        "{id} is not an ID of this sequence: its top {shard_bits} bits (the shard) do not match \
         the rest of the ID; check it was copied whole"
    )]
    ShardMismatch { id: u64, shard_bits: u8 },
    #[error(
        "this layout stores IDs {0}: the IDs of one time are not one range of numbers; query the \
         time-ordered key instead (`kubectl kubeflake sql` prints a function for it)"
    )]
    NotTimeOrdered(&'static str),
}

/// A validated split of the ID bits. See the module docs for the bit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    timestamp_bits: u8,
    datacenter_bits: u8,
    worker_bits: u8,
    sequence_bits: u8,
    spread: Spread,
    sequence_start: SequenceStart,
}

fn check_range(field: &'static str, value: i64, (min, max): (u8, u8)) -> Result<u8, LayoutError> {
    if value < i64::from(min) || value > i64::from(max) {
        return Err(LayoutError::BitsOutOfRange {
            field,
            value,
            min,
            max,
        });
    }
    Ok(value as u8)
}

fn mask(bits: u8) -> u64 {
    (1u64 << bits) - 1
}

impl Default for Layout {
    /// 41/0/10/12: 69 years at 1 ms, 1,024 workers, 4,096 IDs per millisecond each.
    fn default() -> Self {
        Layout {
            timestamp_bits: 41,
            datacenter_bits: 0,
            worker_bits: 10,
            sequence_bits: 12,
            spread: Spread::TimeOrdered,
            sequence_start: SequenceStart::Zero,
        }
    }
}

impl Layout {
    /// Validates a time-ordered layout (the classic Snowflake). `total_bits` is 63 (full
    /// range) or 53 (JavaScript-safe).
    pub fn new(
        timestamp_bits: i64,
        datacenter_bits: i64,
        worker_bits: i64,
        sequence_bits: i64,
        total_bits: i64,
    ) -> Result<Layout, LayoutError> {
        Layout::with_form(
            [timestamp_bits, datacenter_bits, worker_bits, sequence_bits],
            total_bits,
            Spread::TimeOrdered,
            SequenceStart::Zero,
        )
    }

    /// Validates a layout with a key form: `bits` are timestamp, datacenter, worker and
    /// sequence bits; with [`Spread::ShardBits`] they add up to `total_bits` minus the shard
    /// bits.
    pub fn with_form(
        [timestamp_bits, datacenter_bits, worker_bits, sequence_bits]: [i64; 4],
        total_bits: i64,
        spread: Spread,
        sequence_start: SequenceStart,
    ) -> Result<Layout, LayoutError> {
        let layout = Layout {
            timestamp_bits: check_range("timestampBits", timestamp_bits, TIMESTAMP_BITS)?,
            datacenter_bits: check_range("datacenterBits", datacenter_bits, DATACENTER_BITS)?,
            worker_bits: check_range("workerBits", worker_bits, WORKER_BITS)?,
            sequence_bits: check_range("sequenceBits", sequence_bits, SEQUENCE_BITS)?,
            spread,
            sequence_start,
        };
        if let Spread::ShardBits { bits } = spread
            && !(spread::SHARD_BITS.0..=spread::SHARD_BITS.1).contains(&bits)
        {
            return Err(LayoutError::ShardBitsOutOfRange(bits.into()));
        }
        if sequence_start == SequenceStart::Rotating && layout.sequence_bits == 0 {
            return Err(LayoutError::NothingToRotate);
        }
        let total = match total_bits {
            63 => FULL_TOTAL_BITS,
            53 => JS_SAFE_TOTAL_BITS,
            other => return Err(LayoutError::BadTotal(other)),
        };
        let sum = layout.total_bits();
        if sum != u32::from(total) {
            return Err(LayoutError::BadSum { sum, total });
        }
        Ok(layout)
    }

    pub fn timestamp_bits(&self) -> u8 {
        self.timestamp_bits
    }
    pub fn datacenter_bits(&self) -> u8 {
        self.datacenter_bits
    }
    pub fn worker_bits(&self) -> u8 {
        self.worker_bits
    }
    pub fn sequence_bits(&self) -> u8 {
        self.sequence_bits
    }
    /// How the time-ordered value is stored.
    pub fn spread(&self) -> Spread {
        self.spread
    }
    /// Where each tick's sequence numbers start.
    pub fn sequence_start(&self) -> SequenceStart {
        self.sequence_start
    }
    /// Whether the stored ID is the time-ordered value itself (IDs grow with time).
    pub fn is_time_ordered(&self) -> bool {
        self.spread == Spread::TimeOrdered && self.sequence_start == SequenceStart::Zero
    }
    /// The key form, for messages and fence identities; `None` for the classic form.
    pub fn form_label(&self) -> Option<String> {
        if self.is_time_ordered() {
            return None;
        }
        let spread = match self.spread {
            Spread::TimeOrdered => String::new(),
            Spread::ShardBits { bits } => format!("shardBits {bits} "),
            Spread::BitReversed => "bitReversed ".to_string(),
        };
        Some(format!(
            "{spread}sequenceStart {}",
            self.sequence_start.name()
        ))
    }
    /// 63 or 53: the fields plus any shard bits.
    pub fn total_bits(&self) -> u32 {
        self.value_bits() + u32::from(self.spread.shard_bits())
    }
    /// Bits of the time-ordered value: timestamp, datacenter, worker and sequence.
    pub fn value_bits(&self) -> u32 {
        u32::from(self.timestamp_bits) + self.low_bits()
    }
    /// Bits below the timestamp: datacenter, worker and sequence.
    fn low_bits(&self) -> u32 {
        u32::from(self.datacenter_bits)
            + u32::from(self.worker_bits)
            + u32::from(self.sequence_bits)
    }

    /// Number of worker slots: `2^workerBits`.
    pub fn slot_count(&self) -> u64 {
        1 << self.worker_bits
    }
    /// IDs one worker can issue per tick: `2^sequenceBits`.
    pub fn ids_per_tick(&self) -> u64 {
        1 << self.sequence_bits
    }
    /// The last tick the timestamp field can hold.
    pub fn max_tick(&self) -> Tick {
        Tick(mask(self.timestamp_bits))
    }

    /// Checks a slot fits `workerBits`.
    pub fn check_slot(&self, slot: u64) -> Result<Slot, LayoutError> {
        if slot > mask(self.worker_bits) {
            return Err(LayoutError::FieldTooLarge {
                field: "worker slot",
                value: slot,
                max: mask(self.worker_bits),
            });
        }
        Ok(Slot(slot as u32))
    }

    /// Checks a datacenter ID fits `datacenterBits`.
    pub fn check_datacenter(&self, dc: u64) -> Result<DatacenterId, LayoutError> {
        if dc > mask(self.datacenter_bits) {
            return Err(LayoutError::FieldTooLarge {
                field: "datacenterId",
                value: dc,
                max: mask(self.datacenter_bits),
            });
        }
        Ok(DatacenterId(dc as u32))
    }

    /// Builds an ID from its fields, checking each fits. `parts.sequence` is the issue
    /// order within the tick (see [`IdParts`]).
    pub fn encode(&self, parts: IdParts) -> Result<Id, LayoutError> {
        if parts.tick > self.max_tick() {
            return Err(LayoutError::FieldTooLarge {
                field: "tick",
                value: parts.tick.0,
                max: self.max_tick().0,
            });
        }
        if u64::from(parts.sequence) > mask(self.sequence_bits) {
            return Err(LayoutError::FieldTooLarge {
                field: "sequence",
                value: u64::from(parts.sequence),
                max: mask(self.sequence_bits),
            });
        }
        let node = self.node_bits(
            self.check_datacenter(u64::from(parts.datacenter.0))?,
            self.check_slot(u64::from(parts.slot.0))?,
        );
        let position = (parts.tick.0 << self.sequence_bits) | u64::from(parts.sequence);
        Ok(self.id_at(position, node))
    }

    /// The time-ordered value an ID stores: the ID itself for time-ordered layouts; without
    /// its shard bits (checked) or with its bits reversed back otherwise. Its tick, node and
    /// stored sequence field are the packed fields, so it orders by time.
    pub fn time_ordered_value(&self, id: Id) -> Result<u64, LayoutError> {
        let raw = id.get();
        let total = self.total_bits();
        if raw >> total != 0 {
            return Err(LayoutError::IdOutOfRange {
                id: raw,
                total_bits: total as u8,
            });
        }
        Ok(match self.spread {
            Spread::TimeOrdered => raw,
            Spread::ShardBits { bits } => {
                let value = raw & mask(self.value_bits() as u8);
                if raw >> self.value_bits() != spread::shard_of(value, bits) {
                    return Err(LayoutError::ShardMismatch {
                        id: raw,
                        shard_bits: bits,
                    });
                }
                value
            }
            Spread::BitReversed => spread::reverse_bits(raw, total),
        })
    }

    /// The shard of an ID of a layout with shard bits; `None` for other layouts.
    pub fn shard(&self, id: Id) -> Option<u32> {
        match self.spread {
            Spread::ShardBits { .. } => Some((id.get() >> self.value_bits()) as u32),
            Spread::TimeOrdered | Spread::BitReversed => None,
        }
    }

    /// Splits an ID into its fields; fails for IDs with bits above the layout's total, and
    /// for IDs whose shard bits do not match the rest.
    pub fn decode(&self, id: Id) -> Result<IdParts, LayoutError> {
        let value = self.time_ordered_value(id)?;
        let seq_shift = self.sequence_bits;
        let worker_shift = seq_shift + self.worker_bits;
        let dc_shift = worker_shift + self.datacenter_bits;
        let tick = value >> dc_shift;
        let stored_sequence = value & mask(self.sequence_bits);
        let sequence = match self.sequence_start {
            SequenceStart::Zero => stored_sequence,
            SequenceStart::Rotating => {
                stored_sequence.wrapping_sub(spread::rotation_of_tick(tick, self.sequence_bits))
                    & mask(self.sequence_bits)
            }
        };
        Ok(IdParts {
            tick: Tick(tick),
            datacenter: DatacenterId(((value >> worker_shift) & mask(self.datacenter_bits)) as u32),
            slot: Slot(((value >> seq_shift) & mask(self.worker_bits)) as u32),
            sequence: sequence as u32,
        })
    }

    /// The datacenter and slot fields of this worker, already in place (the middle bits).
    pub fn node_bits(&self, dc: DatacenterId, slot: Slot) -> NodeBits {
        let worker_field = (u64::from(dc.0) << self.worker_bits) | u64::from(slot.0);
        NodeBits(worker_field << self.sequence_bits)
    }

    /// The ID for a generator *position* (`tick << sequenceBits | sequence`, the monotonic
    /// counter the generator advances; the sequence is the issue order within the tick) and
    /// a worker's [`NodeBits`]. The caller guarantees the position's tick fits
    /// (`<= max_tick`); the generator checks that before use. Distinct positions give
    /// distinct IDs for one worker: each step below is one-to-one.
    #[inline]
    pub fn id_at(&self, position: u64, node: NodeBits) -> Id {
        let tick = position >> self.sequence_bits;
        let seq = match self.sequence_start {
            SequenceStart::Zero => position & mask(self.sequence_bits),
            SequenceStart::Rotating => {
                position.wrapping_add(spread::rotation_of_tick(tick, self.sequence_bits))
                    & mask(self.sequence_bits)
            }
        };
        let tick_shift = self.low_bits();
        let value = (tick << tick_shift) | node.0 | seq;
        Id(match self.spread {
            Spread::TimeOrdered => value,
            Spread::ShardBits { bits } => {
                (spread::shard_of(value, bits) << self.value_bits()) | value
            }
            Spread::BitReversed => spread::reverse_bits(value, self.total_bits()),
        })
    }

    /// The smallest and the largest time-ordered value of `tick` (see
    /// [`time_ordered_value`](Self::time_ordered_value)): the bounds for a range query
    /// over time on that value, for every layout.
    pub fn value_range_of_tick(&self, tick: Tick) -> Result<(u64, u64), LayoutError> {
        if tick > self.max_tick() {
            return Err(LayoutError::FieldTooLarge {
                field: "tick",
                value: tick.0,
                max: self.max_tick().0,
            });
        }
        let low_bits = self.low_bits() as u8;
        let low = tick.0 << low_bits;
        Ok((low, low | mask(low_bits)))
    }

    /// The smallest and the largest ID any worker can produce in `tick`: the bounds for a
    /// range query over time. Only layouts that store the time first have them (a rotating
    /// sequence start does; shard bits and bit reversal do not:
    /// [`shard_range_of_tick`](Self::shard_range_of_tick) gives one range per shard).
    pub fn id_range_of_tick(&self, tick: Tick) -> Result<(Id, Id), LayoutError> {
        match self.spread {
            Spread::TimeOrdered => {
                let (low, high) = self.value_range_of_tick(tick)?;
                Ok((Id(low), Id(high)))
            }
            Spread::ShardBits { .. } => Err(LayoutError::NotTimeOrdered(
                "with shard bits on top (one range of IDs per shard and time)",
            )),
            Spread::BitReversed => Err(LayoutError::NotTimeOrdered("bit-reversed")),
        }
    }

    /// The smallest and the largest ID of `shard` in `tick`, for layouts with shard bits.
    pub fn shard_range_of_tick(&self, tick: Tick, shard: u32) -> Result<(Id, Id), LayoutError> {
        let Spread::ShardBits { bits } = self.spread else {
            return self.id_range_of_tick(tick);
        };
        if u64::from(shard) > mask(bits) {
            return Err(LayoutError::FieldTooLarge {
                field: "shard",
                value: shard.into(),
                max: mask(bits),
            });
        }
        let (low, high) = self.value_range_of_tick(tick)?;
        let top = u64::from(shard) << self.value_bits();
        Ok((Id(top | low), Id(top | high)))
    }
}

/// A worker's datacenter and slot fields, shifted into place; see [`Layout::node_bits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeBits(u64);

#[cfg(test)]
mod tests;
