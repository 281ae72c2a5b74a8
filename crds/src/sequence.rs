//! The `IdSequence` custom resource: one ID space.
//!
//! Doc comments on these fields are what `kubectl explain idsequence.spec...` prints.
//! What a JSON schema cannot say is written as CEL rules (`x-kubernetes-validations`), each
//! with a message telling the user what to change. Layout, epoch, time unit and datacenter
//! ID are immutable: changing any of them could make new IDs collide with issued ones.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::layout::{DatacenterId, Layout, LayoutError};
use crate::timebase::{DEFAULT_EPOCH, EpochError, TimeUnit, Timebase};

/// An ID space: a Snowflake layout, epoch and time unit shared by every worker that
/// participates. Pods labelled `kubeflake.io/sequence: <name>` each get a worker slot.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
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
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "self.layout.datacenterBits > 10 || self.datacenterId < [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024][self.layout.datacenterBits]"
).message("datacenterId does not fit in layout.datacenterBits: it must be below 2^datacenterBits; raise layout.datacenterBits or choose a smaller datacenterId").field_path(".datacenterId"))]
#[serde(rename_all = "camelCase")]
pub struct IdSequenceSpec {
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

fn default_epoch() -> String {
    DEFAULT_EPOCH.to_string()
}

/// Bits of each ID field. The four fields must add up to `totalBits`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new(
    "self.timestampBits + self.datacenterBits + self.workerBits + self.sequenceBits == self.totalBits"
).message(Message::Expression(
    "'timestampBits + datacenterBits + workerBits + sequenceBits must add up to totalBits (%d), but they add up to %d; change one of them'.format([self.totalBits, self.timestampBits + self.datacenterBits + self.workerBits + self.sequenceBits])".into()
)))]
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
        }
    }
}

impl LayoutSpec {
    /// The validated layout.
    pub fn to_layout(&self) -> Result<Layout, LayoutError> {
        Layout::new(
            self.timestamp_bits.into(),
            self.datacenter_bits.into(),
            self.worker_bits.into(),
            self.sequence_bits.into(),
            self.total_bits.into(),
        )
    }
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
    /// timestamp bits left).
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

impl Default for IdSequenceSpec {
    fn default() -> Self {
        IdSequenceSpec {
            layout: LayoutSpec::default(),
            time_unit: TimeUnit::default(),
            epoch: default_epoch(),
            datacenter_id: 0,
            lease: LeaseSpec::default(),
            clock: ClockSpec::default(),
        }
    }
}
