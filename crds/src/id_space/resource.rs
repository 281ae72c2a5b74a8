//! The `IdSpace` custom resource, kept on the hub (one per namespace), and its CRD's own
//! checks: what a JSON schema cannot say is written as CEL rules (`x-kubernetes-validations`),
//! each with a message that names the field and what to change. They hold for every writer,
//! the hub's administrator included:
//!
//! - the shared sequence, `blockSlots`, `toleranceSeconds` and `renewEverySeconds` are
//!   immutable (changing any of them would move blocks or bounds under members that issue);
//! - `blockSlots` is a power of two, at most `2^workerBits`, giving at most
//!   [`MAX_BLOCKS`](super::space::MAX_BLOCKS) blocks; `renewEverySeconds` is at most half
//!   the tolerance; a strict sequence never makes a space;
//! - one member per cluster ID (the members list is keyed by `id`), one member per name,
//!   one entry per block (keyed by `index`); a member's name and datacenter never change;
//! - a block's floor never goes down, the registry's revision and a member's generation
//!   never go down, and the Segment counter's `next` never goes down, nor is the counter
//!   removed once set;
//! - a held block has both an owner and a bound, the bound above the floor.
//!
//! What the CRD cannot see (who writes, and which registry transitions are legal) is the
//! hub's ValidatingAdmissionPolicy's ([`super::hub_policy`]); what neither can see (a block
//! held by a non-member) is refused when the registry is read ([`super::records`]).
//! The rules for the parameters mirror [`Space::new`](super::Space::new); the validated
//! types stay the ones of [`super::space`] and [`crate::sequence`].

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::space;
use crate::sequence::{LayoutSpec, Mode};
use crate::timebase::TimeUnit;

/// CEL: 2^n for n from 0 to 16 (workerBits is at most 16, datacenterBits at most 10).
macro_rules! pow2 {
    () => {
        "[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]"
    };
}

/// One ID space shared by clusters, kept on the hub, one per namespace. Members read it and
/// change its registry by compare-and-swap; the sequence, the block size and the timing are
/// fixed when it is made.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
// printcolumn(...) repeats keys such as type_ by design; clippy reads that as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "kubeflake.io",
    version = "v1alpha1",
    kind = "IdSpace",
    namespaced,
    shortname = "idspace",
    doc = "One ID space shared by several clusters: the sequence its members share, its blocks of worker IDs, and which member holds which block up to which tick.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.sequence.mode"),
    printcolumn(
        name = "Block Slots",
        type_ = "integer",
        json_path = ".spec.blockSlots",
        description = "Worker IDs per block"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".spec.registry.revision",
        description = "Counts every change of the registry"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(concat!(pow2!(), ".exists(p, p == self.blockSlots)")).message(Message::Expression(
    "'blockSlots is %d, but it must be a power of two (1, 2, 4, ... up to 2^workerBits): blocks are aligned runs of worker IDs'.format([self.blockSlots])".into()
)).field_path(".blockSlots"))]
#[x_kube(validation = Rule::new(concat!("self.blockSlots <= ", pow2!(), "[self.sequence.layout.workerBits]")).message(Message::Expression(
    concat!("'blockSlots is %d, larger than the slot space of the layout (2^workerBits = %d): choose at most %d; with datacenter bits, that makes each block one datacenter ID'.format([self.blockSlots, ", pow2!(), "[self.sequence.layout.workerBits], ", pow2!(), "[self.sequence.layout.workerBits]])").into()
)).field_path(".blockSlots"))]
#[x_kube(validation = Rule::new(concat!("self.blockSlots < 1 || ", pow2!(), "[self.sequence.layout.workerBits] * ", pow2!(), "[self.sequence.layout.datacenterBits] / self.blockSlots <= 4096")).message(Message::Expression(
    concat!("'blockSlots %d cuts the space into %d blocks, more than the 4096 one hub object can list: raise blockSlots'.format([self.blockSlots, ", pow2!(), "[self.sequence.layout.workerBits] * ", pow2!(), "[self.sequence.layout.datacenterBits] / self.blockSlots])").into()
)).field_path(".blockSlots"))]
#[x_kube(validation = Rule::new("self.renewEverySeconds * 2 <= self.toleranceSeconds").message(Message::Expression(
    "'renewEverySeconds is %d, but it must be at most half of toleranceSeconds (%d): a member renews its claims this often, and needs a second chance before a bound'.format([self.renewEverySeconds, self.toleranceSeconds])".into()
)).field_path(".renewEverySeconds"))]
#[x_kube(validation = Rule::new(concat!("self.registry.members.all(m, m.datacenterId < ", pow2!(), "[self.sequence.layout.datacenterBits])")).message(
    "a member's datacenterId does not fit in sequence.layout.datacenterBits: it must be below 2^datacenterBits; fix that member's datacenterId"
).field_path(".registry.members"))]
#[x_kube(validation = Rule::new(concat!("self.blockSlots < 1 || self.registry.blocks.all(b, b.index < ", pow2!(), "[self.sequence.layout.workerBits] * ", pow2!(), "[self.sequence.layout.datacenterBits] / self.blockSlots)")).message(
    "a block's index is not below the space's block count (2^(workerBits + datacenterBits) / blockSlots): remove that block entry"
).field_path(".registry.blocks"))]
#[x_kube(validation = Rule::new("!has(self.segment) || self.sequence.mode == 'Segment'").message(
    "segment is set but sequence.mode is Snowflake: a Snowflake space hands out blocks of worker IDs, not counter ranges; remove segment"
).field_path(".segment"))]
#[x_kube(validation = Rule::new("!has(oldSelf.segment) || has(self.segment)").message(
    "segment may not be removed once set: its next would start again at 0, below values already handed to members (docs/safety.md rule 22); put it back as it was"
).field_path(".segment"))]
#[serde(rename_all = "camelCase")]
pub struct IdSpaceSpec {
    /// The sequence every member's IdSequence must match: layout, epoch, time unit, mode.
    /// Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("sequence is immutable: every member issues IDs under it; make a new IdSpace instead"))]
    pub sequence: SpaceSequenceSpec,
    /// Worker IDs per block: a power of two, at most 2^layout.workerBits, giving at most
    /// 4096 blocks. Immutable.
    #[schemars(range(min = 1, max = 65536))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("blockSlots is immutable: members hold blocks of this size; make a new IdSpace instead"))]
    pub block_slots: i64,
    /// How long a member keeps issuing while it cannot reach the hub (seconds, 60 to
    /// 2592000, default 3600). Immutable.
    #[serde(default = "default_tolerance")]
    #[schemars(range(min = 60, max = 2592000))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("toleranceSeconds is immutable: members' bounds were set with it; make a new IdSpace instead"))]
    pub tolerance_seconds: i64,
    /// How often a member renews its blocks (seconds, at least 10 and at most half of
    /// toleranceSeconds, default 300). Immutable.
    #[serde(default = "default_renew_every")]
    #[schemars(range(min = 10, max = 1296000))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("renewEverySeconds is immutable: members' bounds were set with it; make a new IdSpace instead"))]
    pub renew_every_seconds: i64,
    /// Members and block claims, written by members' operators only.
    #[serde(default)]
    pub registry: RegistryRecord,
    /// Segment mode only: the counter members take ranges of values from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<SpaceCounterRecord>,
}

/// The shared sequence's identity, in the words of an IdSequence.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpaceSequenceSpec {
    #[serde(default)]
    pub layout: LayoutSpec,
    #[serde(default)]
    pub time_unit: TimeUnit,
    /// RFC 3339, as in an IdSequence (default 2025-01-01T00:00:00Z).
    #[serde(default = "default_epoch")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new(
        r"self.matches('^(19[7-9][0-9]|2[0-9]{3})-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]+)?(Z|[+-][0-2][0-9]:[0-5][0-9])$')"
    ).message("sequence.epoch must be an RFC 3339 time after 1970, such as 2025-01-01T00:00:00Z (the epoch of the members' IdSequences)"))]
    pub epoch: String,
    #[serde(default)]
    pub mode: Mode,
    /// Refused: strict sequences do not span clusters.
    #[serde(default)]
    #[x_kube(validation = Rule::new("!self").message("sequence.strict must be false: strict sequences cannot span clusters (every strict value goes through one oracle, which a partitioned member could not reach); keep one strict IdSequence per cluster"))]
    pub strict: bool,
}

/// The registry as stored.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RegistryRecord {
    /// Counts every change; never goes down.
    #[serde(default)]
    #[schemars(range(min = 0))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("registry.revision may not go down: members remember the highest they saw and refuse a registry that went back; recover a restored hub with `kubectl kubeflake hub recover`"))]
    pub revision: i64,
    /// One entry per cluster ID, and one per name; at most 512 (the CEL cost of the name
    /// check grows with the square of the list, and the API server caps it).
    #[serde(default)]
    #[schemars(length(max = 512))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["id".into()]))]
    #[x_kube(validation = Rule::new("self.all(m, self.exists_one(n, n.name == m.name))").message(
        "two members share one name: every member needs its own (docs/design/2026-11-29-multicluster.md); join the second cluster with another name, or forget the old member first"
    ))]
    pub members: Vec<MemberRecord>,
    /// Only blocks ever used; a block not listed was never used (floor 0).
    #[serde(default)]
    #[schemars(length(max = 4096))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["index".into()]))]
    pub blocks: Vec<BlockRecord>,
}

/// A member as stored.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.name == oldSelf.name").message(
    "a member's name is immutable: forget the member and join again under the new name"
).field_path(".name"))]
#[x_kube(validation = Rule::new("self.datacenterId == oldSelf.datacenterId").message(
    "a member's datacenterId is immutable: its blocks lie in that datacenter; forget the member and join again"
).field_path(".datacenterId"))]
#[x_kube(validation = Rule::new("self.generation >= oldSelf.generation").message(
    "a member's generation may not go down: its cluster compares it with its own copy to see records that went back"
).field_path(".generation"))]
#[serde(rename_all = "camelCase")]
pub struct MemberRecord {
    /// The cluster ID: its cluster.clusterset.k8s.io ClusterProperty, or its kube-system UID.
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message(
        "a member's id must be a cluster ID: the UID of its kube-system namespace or its cluster.clusterset.k8s.io ClusterProperty (lower-case letters, digits, '-' and '.', at most 128 characters)"
    ))]
    pub id: String,
    /// The member's name, for people: a DNS label.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message(
        "a member's name must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (for example prod-eu)"
    ))]
    pub name: String,
    /// The datacenter ID its sequence carries: it holds blocks of that datacenter only.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1023))]
    pub datacenter_id: i64,
    /// Counts this member's writes.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub generation: i64,
}

/// A block as stored.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.owner) == has(self.bound)").message(
    "a block has an owner and a bound together (held) or neither (free): set both, or remove both and raise the floor to at least the old bound"
))]
#[x_kube(validation = Rule::new("!has(self.bound) || (self.bound > self.floor && self.term > 0)").message(
    "a held block's bound must be above its floor, and its term at least 1"
).field_path(".bound"))]
#[x_kube(validation = Rule::new("self.floor >= oldSelf.floor").message(Message::Expression(
    "'block %d: floor may not go down (from %d): every tick at or below it may have been issued in this block'.format([self.index, oldSelf.floor])".into()
)).field_path(".floor"))]
#[serde(rename_all = "camelCase")]
pub struct BlockRecord {
    /// The block's number: `datacenter * 2^workerBits / blockSlots + slot / blockSlots`.
    #[schemars(range(min = 0, max = 4095))]
    pub index: i64,
    /// Counts the block's hand-overs.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub term: i64,
    /// Ticks at or below this are never issued in this block again.
    #[serde(default)]
    #[schemars(range(min = 0, max = 36028797018963967_i64))]
    pub floor: i64,
    /// The holder's cluster ID; absent when the block is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub owner: Option<String>,
    /// The last tick the holder may issue; only with an owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36028797018963967_i64))]
    pub bound: Option<i64>,
}

/// A Segment space's counter on the hub: members take ranges from it by compare-and-swap
/// ([`super::segment_range`]).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SpaceCounterRecord {
    /// The first value not yet handed to a member; never goes down (values below were
    /// handed out).
    #[serde(default)]
    #[schemars(range(min = 0))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("segment.next may not go down: the values below it were handed to members and may have been issued"))]
    pub next: i64,
}

impl Default for SpaceSequenceSpec {
    /// The defaults of an IdSequence with `spec: {}`.
    fn default() -> Self {
        SpaceSequenceSpec {
            layout: LayoutSpec::default(),
            time_unit: TimeUnit::default(),
            epoch: default_epoch(),
            mode: Mode::default(),
            strict: false,
        }
    }
}

impl IdSpaceSpec {
    /// A space for `sequence` in blocks of `block_slots`, with the CRD's default timing
    /// (tolerance 1 h, renewal 5 min), an empty registry and no Segment counter: what a hub
    /// starts from.
    pub fn new(sequence: SpaceSequenceSpec, block_slots: i64) -> IdSpaceSpec {
        IdSpaceSpec {
            sequence,
            block_slots,
            tolerance_seconds: default_tolerance(),
            renew_every_seconds: default_renew_every(),
            registry: RegistryRecord::default(),
            segment: None,
        }
    }
}

fn default_tolerance() -> i64 {
    space::DEFAULT_TOLERANCE_SECS as i64
}
fn default_renew_every() -> i64 {
    space::DEFAULT_RENEW_EVERY_SECS as i64
}
fn default_epoch() -> String {
    crate::timebase::DEFAULT_EPOCH.to_string()
}
