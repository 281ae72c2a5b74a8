//! Hotspot-free key forms: how a layout turns its *time-ordered* value into the stored ID.
//!
//! A plain Snowflake ID grows with time, so a range-partitioned store (CockroachDB, TiDB,
//! Spanner, HBase, ...) sends every insert to its last range, and at low rates the sequence
//! field is almost always 0, so `id % N` sharding puts most rows on one shard. Each option
//! here is a *bijection* on the layout's values, applied after the fields are packed, so
//! uniqueness never depends on the added bits: two different (tick, datacenter, worker,
//! sequence) tuples give two different time-ordered values, and a bijection keeps them
//! different (docs/layouts.md, docs/safety.md rule 3).
//!
//! - [`Spread::ShardBits`]: `k` bits on top hold a hash of the rest (as TiDB's
//!   `AUTO_RANDOM` does): consecutive IDs of one pod land in `2^k` ranges. The hash is
//!   checked on decode, so a mistyped ID is refused rather than decoded.
//! - [`Spread::BitReversed`]: the whole value's bits reversed (as Spanner's bit-reversed
//!   sequences): the fastest-changing bits become the top bits.
//! - [`SequenceStart::Rotating`]: each tick's sequence numbers start at an offset derived
//!   from the tick instead of 0, so `id % N` spreads even at one ID per tick.

/// Allowed range of `shardBits` when the option is on.
pub const SHARD_BITS: (u8, u8) = (1, 10);

/// Where the high-order bits of a stored ID come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Spread {
    /// The stored ID is the time-ordered value: IDs grow with time (the default).
    #[default]
    TimeOrdered,
    /// `bits` shard bits on top: a hash of the time-ordered value below them.
    ShardBits { bits: u8 },
    /// The time-ordered value with its bits reversed.
    BitReversed,
}

impl Spread {
    /// Bits the option takes from the total (only shard bits take any).
    pub fn shard_bits(self) -> u8 {
        match self {
            Spread::ShardBits { bits } => bits,
            Spread::TimeOrdered | Spread::BitReversed => 0,
        }
    }
    /// The name used in the IdSequence spec and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Spread::TimeOrdered => "none",
            Spread::ShardBits { .. } => "shardBits",
            Spread::BitReversed => "bitReversed",
        }
    }
}

/// Where each tick's sequence numbers start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SequenceStart {
    /// Every tick starts at 0 (the classic Snowflake; the default).
    #[default]
    Zero,
    /// Every tick starts at an offset derived from the tick (`rotation_of_tick`).
    Rotating,
}

impl SequenceStart {
    /// The name used in the IdSequence spec.
    pub fn name(self) -> &'static str {
        match self {
            SequenceStart::Zero => "Zero",
            SequenceStart::Rotating => "Rotating",
        }
    }
}

/// A 64-bit mixing function (the splitmix64 finalizer): every input bit affects every
/// output bit. Deterministic and part of the ID format: changing it changes every ID of
/// sequences using shard bits or rotating sequences, so it never changes.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The offset at which `tick`'s sequence numbers start (0 when `sequence_bits` is 0).
#[inline]
pub fn rotation_of_tick(tick: u64, sequence_bits: u8) -> u64 {
    if sequence_bits == 0 {
        return 0;
    }
    mix64(tick) >> (64 - u32::from(sequence_bits))
}

/// The shard of a time-ordered value: the top `bits` bits of its hash.
#[inline]
pub fn shard_of(value: u64, bits: u8) -> u64 {
    mix64(value) >> (64 - u32::from(bits))
}

/// Reverses the low `width` bits of `value` (the bits above must be zero).
#[inline]
pub fn reverse_bits(value: u64, width: u32) -> u64 {
    value.reverse_bits() >> (64 - width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversing_twice_gives_the_value_back_and_keeps_it_within_its_width() {
        for width in [53u32, 63] {
            for v in [0u64, 1, 2, 12345, (1 << width) - 1, (1 << (width - 1)) + 7] {
                let r = reverse_bits(v, width);
                assert!(r < 1 << width, "{v} reversed over {width} bits is {r}");
                assert_eq!(reverse_bits(r, width), v);
            }
        }
        assert_eq!(reverse_bits(1, 63), 1 << 62);
    }

    #[test]
    fn rotation_stays_within_the_sequence_field() {
        for bits in 1..=22u8 {
            for tick in 0..200u64 {
                assert!(rotation_of_tick(tick, bits) < 1 << bits);
            }
        }
        assert_eq!(rotation_of_tick(77, 0), 0);
    }

    #[test]
    fn consecutive_ticks_start_at_spread_out_offsets() {
        // 4,096 consecutive ticks, 12 sequence bits: the offsets mod 16 hit every residue
        // about equally (what makes `id % 16` spread at one ID per tick).
        let mut counts = [0u32; 16];
        for tick in 1_000_000..1_004_096u64 {
            counts[(rotation_of_tick(tick, 12) % 16) as usize] += 1;
        }
        for c in counts {
            assert!((192..=320).contains(&c), "offsets mod 16: {counts:?}");
        }
    }
}
