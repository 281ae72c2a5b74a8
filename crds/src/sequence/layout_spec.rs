//! The `layout` part of an IdSequence spec: the bits of each field and the key form
//! (docs/layouts.md), with the API server's validation rules (CEL) beside the Rust
//! validation they mirror.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::layout::{Layout, LayoutError, SequenceStart, Spread};

/// Bits of each ID field, and how IDs are spread over a store's key space (docs/layouts.md).
/// The fields (and any shard bits) must add up to `totalBits`. The key-form fields are left
/// out when they have their defaults, so objects written before they existed read back
/// unchanged; the rules test them with `has()` (the schema's default `layout` lacks them).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new(
    "self.timestampBits + self.datacenterBits + self.workerBits + self.sequenceBits + (has(self.shardBits) ? self.shardBits : 0) == self.totalBits"
).message(Message::Expression(
    "'timestampBits + datacenterBits + workerBits + sequenceBits + shardBits must add up to totalBits (%d), but they add up to %d; change one of them'.format([self.totalBits, self.timestampBits + self.datacenterBits + self.workerBits + self.sequenceBits + (has(self.shardBits) ? self.shardBits : 0)])".into()
)))]
#[x_kube(validation = Rule::new("!(has(self.bitReversed) && self.bitReversed && has(self.shardBits) && self.shardBits > 0)").message(
    "shardBits and bitReversed are two ways to spread IDs over a store's key space: choose one (docs/layouts.md)"
))]
#[x_kube(validation = Rule::new("!has(self.sequenceStart) || self.sequenceStart != 'Rotating' || self.sequenceBits > 0").message(
    "sequenceStart Rotating needs a sequence field: give sequenceBits above 0, or use sequenceStart Zero"
))]
#[serde(rename_all = "camelCase")]
pub struct LayoutSpec {
    /// Bits of the tick count since the epoch (30-55). With 1ms ticks, 41 bits last
    /// about 69 years.
    #[serde(default = "default_timestamp_bits")]
    #[schemars(range(min = 30, max = 55))]
    pub timestamp_bits: i32,
    /// Bits of the datacenter ID (0-10). 0 unless several clusters share one ID space.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10))]
    pub datacenter_bits: i32,
    /// Bits of the worker slot (1-16): the sequence has 2^workerBits slots, so at most that
    /// many pods issue IDs at once.
    #[serde(default = "default_worker_bits")]
    #[schemars(range(min = 1, max = 16))]
    pub worker_bits: i32,
    /// Bits of the per-tick counter (0-22): each worker issues up to 2^sequenceBits IDs per
    /// tick.
    #[serde(default = "default_sequence_bits")]
    #[schemars(range(min = 0, max = 22))]
    pub sequence_bits: i32,
    /// What the four fields add up to: 63 (default: IDs use the whole non-negative int64
    /// range) or 53 (the JavaScript-safe preset: every ID is below 2^53, so JavaScript
    /// numbers hold it exactly; for example 36/0/7/10 with a 10ms time unit).
    #[serde(default = "default_total_bits")]
    #[schemars(extend("enum" = [53, 63]))]
    pub total_bits: i32,
    /// Shard bits on top of each ID (0-10; 0, the default, for none): a hash of the rest of
    /// the ID, so that consecutive IDs spread over 2^shardBits ranges of a range-partitioned
    /// store (TiDB's AUTO_RANDOM does the same). They count towards totalBits, so each one
    /// halves the timestamp range. IDs no longer grow with time.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 10), extend("default" = 0))]
    pub shard_bits: i32,
    /// Store each ID with its bits reversed (as Spanner's bit-reversed sequences): the
    /// fastest-changing bits come first, so inserts spread over the key space. Takes no
    /// bits. IDs no longer grow with time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub bit_reversed: bool,
    /// Where each tick's sequence numbers start: `Zero` (default, the classic Snowflake) or
    /// `Rotating` (an offset derived from the tick, so `id % N` spreads even at one ID per
    /// tick; IDs of one tick no longer grow in issue order).
    #[serde(default, skip_serializing_if = "SequenceStartSpec::is_zero")]
    #[schemars(extend("default" = "Zero"))]
    pub sequence_start: SequenceStartSpec,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Where each tick's sequence numbers start (see `LayoutSpec::sequence_start`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum SequenceStartSpec {
    #[default]
    Zero,
    Rotating,
}

impl SequenceStartSpec {
    fn is_zero(&self) -> bool {
        *self == SequenceStartSpec::Zero
    }
}

fn default_timestamp_bits() -> i32 {
    41
}
fn default_worker_bits() -> i32 {
    10
}
fn default_sequence_bits() -> i32 {
    12
}
fn default_total_bits() -> i32 {
    63
}

impl Default for LayoutSpec {
    fn default() -> Self {
        LayoutSpec {
            timestamp_bits: default_timestamp_bits(),
            datacenter_bits: 0,
            worker_bits: default_worker_bits(),
            sequence_bits: default_sequence_bits(),
            total_bits: default_total_bits(),
            shard_bits: 0,
            bit_reversed: false,
            sequence_start: SequenceStartSpec::Zero,
        }
    }
}

impl LayoutSpec {
    /// The validated layout.
    pub fn to_layout(&self) -> Result<Layout, LayoutError> {
        let spread = match (self.shard_bits, self.bit_reversed) {
            (0, false) => Spread::TimeOrdered,
            (0, true) => Spread::BitReversed,
            (bits, false) => Spread::ShardBits {
                bits: u8::try_from(bits)
                    .map_err(|_| LayoutError::ShardBitsOutOfRange(bits.into()))?,
            },
            (_, true) => return Err(LayoutError::TwoSpreads),
        };
        let sequence_start = match self.sequence_start {
            SequenceStartSpec::Zero => SequenceStart::Zero,
            SequenceStartSpec::Rotating => SequenceStart::Rotating,
        };
        Layout::with_form(
            [
                self.timestamp_bits.into(),
                self.datacenter_bits.into(),
                self.worker_bits.into(),
                self.sequence_bits.into(),
            ],
            self.total_bits.into(),
            spread,
            sequence_start,
        )
    }
}
