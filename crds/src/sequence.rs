//! The `IdSequence` custom resource: one ID space.
//!
//! Doc comments on these fields are what `kubectl explain idsequence.spec...` prints.
//! What a JSON schema cannot say is written as CEL rules (`x-kubernetes-validations`), each
//! with a message telling the user what to change. Layout, epoch, time unit and datacenter
//! ID are immutable: changing any of them could make new IDs collide with issued ones.
//!
//! One piece (over 400 lines) because the resource is one schema: every field, its
//! default, its CEL rule and its validation into `SequenceParams` must change together.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::layout::{DatacenterId, Layout, LayoutError};

mod layout_spec;
use crate::timebase::{DEFAULT_EPOCH, EpochError, TimeUnit, Timebase};
pub use layout_spec::{LayoutSpec, SequenceStartSpec};

/// An ID space: a Snowflake layout, epoch and time unit shared by every worker that
/// participates. Pods labelled `kubeflake.io/sequence: <name>` each get a worker slot.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
// printcolumn(...) repeats keys such as type_ by design; clippy (1.95) reads that as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "kubeflake.io",
    version = "v1alpha1",
    kind = "IdSequence",
    namespaced,
    shortname = "idseq",
    doc = "An ID space for 64-bit Snowflake IDs: pods labelled kubeflake.io/sequence=<name> each get a worker slot and a sidecar that serves IDs which never repeat.",
    status = "IdSequenceStatus",
    printcolumn(
        name = "Capacity",
        type_ = "integer",
        json_path = ".status.capacity",
        description = "Worker slots in the layout"
    ),
    printcolumn(
        name = "Assigned",
        type_ = "integer",
        json_path = ".status.assigned",
        description = "Slots held by pods"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Exhausts At",
        type_ = "string",
        json_path = ".status.exhaustsAt",
        description = "When the timestamp bits run out"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "Snowflake (time-based 64-bit IDs) or Segment (dense counter values in blocks)"
    ),
    printcolumn(
        name = "Next",
        type_ = "integer",
        json_path = ".status.segment.next",
        description = "Segment mode: the first counter value not yet claimed (high-water mark)"
    ),
    printcolumn(
        name = "Claims/min",
        type_ = "number",
        json_path = ".status.segment.claimsPerMinute",
        description = "Segment mode: block claims per minute between the last two observations"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "self.layout.datacenterBits > 10 || self.datacenterId < [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024][self.layout.datacenterBits]"
).message("datacenterId does not fit in layout.datacenterBits: it must be below 2^datacenterBits; raise layout.datacenterBits or choose a smaller datacenterId").field_path(".datacenterId"))]
#[x_kube(validation = Rule::new("!has(self.segment) || self.mode == 'Segment'").message(
    "segment is set but mode is Snowflake: set mode: Segment to hand out counter values in blocks, or remove segment"
).field_path(".segment"))]
#[x_kube(validation = Rule::new(
    "(has(self.segment) && has(self.segment.strict) && self.segment.strict) == (has(oldSelf.segment) && has(oldSelf.segment.strict) && oldSelf.segment.strict)"
).message(
    "segment.strict is immutable: values served from blocks and strict values interleave, which would break the strict order; create a new IdSequence instead"
).field_path(".segment"))]
#[serde(rename_all = "camelCase")]
pub struct IdSequenceSpec {
    /// Snowflake (default): time-based 64-bit IDs from a worker slot per pod. Segment:
    /// small dense integers from one counter, handed to each sidecar in blocks (like a
    /// database SEQUENCE; gaps where a block is abandoned, never duplicates). Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("mode is immutable: the two modes hand out different values that could collide; create a new IdSequence instead"))]
    pub mode: Mode,

    /// Segment mode settings (only with mode: Segment; defaults apply when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<SegmentSpec>,

    /// How the 63 bits of an ID are split between time, datacenter, worker slot and a
    /// per-tick sequence. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("layout is immutable: changing it could repeat issued IDs; create a new IdSequence instead"))]
    pub layout: LayoutSpec,

    /// Length of one tick of the timestamp field: 1ms, 10ms, 100ms or 1s. Coarser units
    /// make the timestamp bits last longer but allow fewer IDs per second. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("timeUnit is immutable: changing it could repeat issued IDs; create a new IdSequence instead"))]
    pub time_unit: TimeUnit,

    /// The instant of tick 0, in RFC 3339 (for example 2025-01-01T00:00:00Z). Must not
    /// be in the future when pods start issuing. Immutable.
    #[serde(default = "default_epoch")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new(
        "self.matches('^(19[7-9][0-9]|2[0-9]{3})-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\\\.[0-9]+)?(Z|[+-][0-2][0-9]:[0-5][0-9])$')"
    ).message("epoch must be an RFC 3339 time after 1970, such as 2025-01-01T00:00:00Z"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("epoch is immutable: changing it could repeat issued IDs; create a new IdSequence instead"))]
    pub epoch: String,

    /// The datacenter field carried by every ID of this sequence: 0 up to
    /// 2^layout.datacenterBits - 1. Immutable.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1023))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("datacenterId is immutable: changing it could repeat issued IDs; create a new IdSequence instead"))]
    pub datacenter_id: i64,

    /// How slots are held.
    #[serde(default)]
    pub lease: LeaseSpec,

    /// How the generators treat the wall clock.
    #[serde(default)]
    pub clock: ClockSpec,
}

/// How a sequence hands out values.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum Mode {
    /// 64-bit time-based IDs; each pod holds a worker slot.
    #[default]
    Snowflake,
    /// Dense integers from one counter, claimed in blocks by compare-and-swap.
    Segment,
}

/// Segment mode: one counter per sequence (a Lease `<name>-segment-counter`), from which
/// each sidecar claims blocks of consecutive values by compare-and-swap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.maxBlockSize) || self.maxBlockSize >= self.blockSize").message(Message::Expression(
    "'segment.maxBlockSize (%d) is below segment.blockSize (%d): raise maxBlockSize, lower blockSize, or remove maxBlockSize to keep a fixed block size'.format([self.maxBlockSize, self.blockSize])".into()
)))]
#[x_kube(validation = Rule::new("!has(self.strict) || !self.strict || !has(self.maxBlockSize)").message(
    "segment.maxBlockSize has no effect with strict: true (a strict sequence claims no blocks, every request is one write of the counter): remove maxBlockSize"
))]
#[serde(rename_all = "camelCase")]
pub struct SegmentSpec {
    /// The first value handed out (0 or more; default 1). Raising it later moves the
    /// counter up to it; lowering it has no effect (the counter never goes back).
    #[serde(default = "default_segment_start")]
    #[schemars(range(min = 0))]
    pub start: i64,
    /// Values per claimed block (1 or more; default 1000): the API server sees about one
    /// write per block per sidecar. Values of a block not used when a sidecar stops are
    /// lost (gaps).
    #[serde(default = "default_block_size")]
    #[schemars(range(min = 1))]
    pub block_size: i64,
    /// Enables adaptive sizing: blocks grow up to this size when they are used up faster
    /// than targetClaimIntervalSeconds, and shrink back to blockSize when used slowly.
    /// Must be at least blockSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_block_size: Option<i64>,
    /// When this share of the current block is used (1-90 %, default 10), the next block
    /// is claimed in the background, so callers never wait on the API server.
    #[serde(default = "default_prefetch_percent")]
    #[schemars(range(min = 1, max = 90))]
    pub prefetch_percent: i32,
    /// Adaptive sizing aims at about one claim per sidecar per this many seconds
    /// (1-86400, default 60).
    #[serde(default = "default_claim_interval")]
    #[schemars(range(min = 1, max = 86400))]
    pub target_claim_interval_seconds: i32,
    /// Strict sequence (default false): every request is one compare-and-set write of the
    /// counter in the API server, with no blocks and no prefetch. Values then increase
    /// across all pods in real-time order: a request that returned before another one
    /// started, on any pod, got the smaller value (usable as fencing tokens). Costs one
    /// API write per request (concurrent requests to one sidecar share a write);
    /// blockSize, prefetchPercent and targetClaimIntervalSeconds are ignored. Immutable.
    #[serde(default)]
    pub strict: bool,
}

fn default_segment_start() -> i64 {
    1
}
fn default_block_size() -> i64 {
    1000
}
fn default_prefetch_percent() -> i32 {
    10
}
fn default_claim_interval() -> i32 {
    60
}

impl Default for SegmentSpec {
    fn default() -> Self {
        SegmentSpec {
            start: default_segment_start(),
            block_size: default_block_size(),
            max_block_size: None,
            prefetch_percent: default_prefetch_percent(),
            target_claim_interval_seconds: default_claim_interval(),
            strict: false,
        }
    }
}

/// Segment settings, validated: what a sidecar needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentParams {
    pub start: u64,
    pub block_size: u64,
    /// Equal to `block_size` when adaptive sizing is off.
    pub max_block_size: u64,
    pub prefetch_percent: u8,
    pub target_claim_interval_secs: u64,
    /// Every request is its own counter write (`segment.strict`).
    pub strict: bool,
}

impl SegmentSpec {
    /// Validates the settings the same way the API server does (for files and old objects).
    pub fn params(&self) -> Result<SegmentParams, SpecError> {
        let bad = |field: &'static str, value: i64, need: &'static str| SpecError::Segment {
            field,
            value,
            need,
        };
        let start = u64::try_from(self.start).map_err(|_| bad("start", self.start, "0 or more"))?;
        let block_size = u64::try_from(self.block_size)
            .ok()
            .filter(|b| *b >= 1)
            .ok_or_else(|| bad("blockSize", self.block_size, "1 or more"))?;
        if self.strict && self.max_block_size.is_some() {
            return Err(SpecError::StrictWithMaxBlockSize);
        }
        let max_block_size = match self.max_block_size {
            None => block_size,
            Some(m) => u64::try_from(m)
                .ok()
                .filter(|m| *m >= block_size)
                .ok_or_else(|| bad("maxBlockSize", m, "at least blockSize"))?,
        };
        let prefetch_percent = u8::try_from(self.prefetch_percent)
            .ok()
            .filter(|p| (1..=90).contains(p))
            .ok_or_else(|| bad("prefetchPercent", self.prefetch_percent.into(), "1 to 90"))?;
        let target_claim_interval_secs = u64::try_from(self.target_claim_interval_seconds)
            .ok()
            .filter(|s| (1..=86_400).contains(s))
            .ok_or_else(|| {
                bad(
                    "targetClaimIntervalSeconds",
                    self.target_claim_interval_seconds.into(),
                    "1 to 86400",
                )
            })?;
        Ok(SegmentParams {
            start,
            block_size,
            max_block_size,
            prefetch_percent,
            target_claim_interval_secs,
            strict: self.strict,
        })
    }
}

fn default_epoch() -> String {
    DEFAULT_EPOCH.to_string()
}

/// How a pod holds its slot.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Seconds a slot lease stays valid without renewal (15-3600). A holder raises its fence
    /// this far ahead; the operator reclaims a slot whose lease it has seen unchanged for
    /// this long. Longer means fewer API writes and a longer wait before a silent pod's slot
    /// is reused.
    #[serde(default = "default_lease_seconds")]
    #[schemars(range(min = 15, max = 3600))]
    pub duration_seconds: i32,
}

fn default_lease_seconds() -> i32 {
    120
}

impl Default for LeaseSpec {
    fn default() -> Self {
        LeaseSpec {
            duration_seconds: default_lease_seconds(),
        }
    }
}

/// How the generator treats the wall clock.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClockSpec {
    /// How far, in milliseconds (0-600000), a generator may run ahead of the wall clock:
    /// after the clock steps back, or when a burst uses up a tick's sequence numbers. Beyond
    /// it the sidecar refuses with 503 and Retry-After until the clock catches up.
    #[serde(default = "default_max_drift")]
    #[schemars(range(min = 0, max = 600000))]
    pub max_drift_millis: i64,
}

fn default_max_drift() -> i64 {
    2000
}

impl Default for ClockSpec {
    fn default() -> Self {
        ClockSpec {
            max_drift_millis: default_max_drift(),
        }
    }
}

/// What the operator observed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IdSequenceStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Exhausted (pods wait for a free slot), Expiring (less than a year of
    /// timestamp bits left), and for a sequence that shares an ID space across clusters,
    /// IdSpace (its membership's state with the hub, for example HubUnreachable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Worker slots in the layout: 2^workerBits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    /// Slots currently held by pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned: Option<i64>,
    /// The instant the timestamp bits run out (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausts_at: Option<String>,
    /// Segment mode: the counter as last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<SegmentStatus>,
}

/// The segment counter as the operator observed it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SegmentStatus {
    /// The counter's next value as last observed (every 15 s): every value handed out
    /// before is below it. A lower bound only: sidecars may have claimed above it since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
    /// Blocks claimed since the counter was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks_claimed: Option<i64>,
    /// Block claims per minute over the last rate window (at least 30 s): the API writes
    /// per minute caused by this sequence's sidecars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims_per_minute: Option<f64>,
    /// Start of the current rate window (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<String>,
    /// blocksClaimed at observedAt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims_at_observed_at: Option<i64>,
}

/// Why a spec cannot be turned into a working generator configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Epoch(#[from] EpochError),
    #[error("datacenterId is {0}, but it must be 0 or more")]
    NegativeDatacenter(i64),
    #[error("segment.{field} is {value}, but it must be {need}")]
    Segment {
        field: &'static str,
        value: i64,
        need: &'static str,
    },
    #[error(
        "segment is set but mode is Snowflake: set mode: Segment to hand out counter values in blocks, or remove segment"
    )]
    SegmentWithoutMode,
    #[error(
        "segment.maxBlockSize has no effect with strict: true (a strict sequence claims no blocks, every request is one write of the counter): remove maxBlockSize"
    )]
    StrictWithMaxBlockSize,
}

/// Everything a generator needs from a spec, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceParams {
    pub layout: Layout,
    pub timebase: Timebase,
    pub datacenter: DatacenterId,
    pub max_drift_ms: u64,
    pub lease_duration_secs: u64,
}

impl IdSequenceSpec {
    /// Validates the spec the same way the API server does, for specs read from files.
    pub fn params(&self) -> Result<SequenceParams, SpecError> {
        let layout = self.layout.to_layout()?;
        let datacenter = u64::try_from(self.datacenter_id)
            .map_err(|_| SpecError::NegativeDatacenter(self.datacenter_id))?;
        let datacenter = layout.check_datacenter(datacenter)?;
        Ok(SequenceParams {
            layout,
            timebase: Timebase::parse(&self.epoch, self.time_unit)?,
            datacenter,
            max_drift_ms: u64::try_from(self.clock.max_drift_millis).unwrap_or(0),
            lease_duration_secs: u64::try_from(self.lease.duration_seconds).unwrap_or(0),
        })
    }
}

impl IdSequenceSpec {
    /// The segment settings when the mode is Segment (defaults when `segment` is absent);
    /// `None` in Snowflake mode.
    pub fn segment_params(&self) -> Result<Option<SegmentParams>, SpecError> {
        match (self.mode, &self.segment) {
            (Mode::Snowflake, None) => Ok(None),
            (Mode::Snowflake, Some(_)) => Err(SpecError::SegmentWithoutMode),
            (Mode::Segment, segment) => segment.clone().unwrap_or_default().params().map(Some),
        }
    }
}

impl Default for IdSequenceSpec {
    fn default() -> Self {
        IdSequenceSpec {
            mode: Mode::Snowflake,
            segment: None,
            layout: LayoutSpec::default(),
            time_unit: TimeUnit::default(),
            epoch: default_epoch(),
            datacenter_id: 0,
            lease: LeaseSpec::default(),
            clock: ClockSpec::default(),
        }
    }
}
