//! One ID space across clusters (issue 55): the hub's objects and the block protocol,
//! as types and pure functions. Designed in docs/design/2026-11-29-multicluster.md; not
//! wired into the operator yet, and the `IdSpace` CRD is not in the chart.
//!
//! A *hub* (a Kubernetes API server every member's operator can reach; a management
//! cluster or one of the members) keeps one namespace per ID space, holding one
//! [`IdSpace`]: the sequence every member shares, how its worker IDs are cut into blocks,
//! and the registry ([`Registry`]): the members, by cluster ID, and who holds which block
//! up to which tick. A member's operator claims blocks ahead of need, assigns its pods
//! slots only inside them, keeps a copy of its claims in its own cluster ([`LocalRecord`]),
//! and renews them long before they run out, so neither a pod's start nor an ID ever waits
//! on the hub.
//!
//! - [`identity`]: who a member is ([`MemberId`], [`MemberName`]).
//! - [`space`]: the validated parameters ([`Space`]) and blocks ([`BlockIndex`]).
//! - [`registry`]: the registry and its transitions: claim, renew, release, reclaim, forget.
//! - [`join`]: admitting a cluster, and the refusals that say what to fix.
//! - [`local`]: the member's copy and the choices it makes alone.
//! - [`records`]: the registry as the `IdSpace` object stores it, read and written whole.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::sequence::{LayoutSpec, Mode};
use crate::timebase::TimeUnit;

pub mod identity;
pub mod join;
pub mod local;
pub mod records;
pub mod registry;
pub mod space;

pub use identity::{IdentityError, MemberId, MemberName};
pub use join::{JoinError, JoinRequest, Joined, SlotUse, join};
pub use local::{CopyOfAnotherCluster, HubCheck, LocalRecord, check_cluster, check_hub};
pub use records::RecordError;
pub use registry::{BlockState, Claim, Grant, Member, MemberView, Registry, RegistryError};
pub use space::{BlockIndex, Space, SpaceError, SpaceSequence};

/// One ID space shared by clusters, kept on the hub, one per namespace. Members read it and
/// change its registry by compare-and-swap; the sequence, the block size and the timing are
/// fixed when it is made.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[kube(
    group = "kubeflake.io",
    version = "v1alpha1",
    kind = "IdSpace",
    namespaced,
    shortname = "idspace",
    doc = "One ID space shared by several clusters: the sequence its members share, its blocks of worker IDs, and which member holds which block up to which tick."
)]
#[serde(rename_all = "camelCase")]
pub struct IdSpaceSpec {
    /// The sequence every member's IdSequence must match: layout, epoch, time unit, mode.
    pub sequence: SpaceSequenceSpec,
    /// Worker IDs per block: a power of two, at most 2^layout.workerBits.
    pub block_slots: i64,
    /// How long a member keeps issuing while it cannot reach the hub (seconds, default 3600).
    #[serde(default = "default_tolerance")]
    pub tolerance_seconds: i64,
    /// How often a member renews its blocks (seconds, default 300).
    #[serde(default = "default_renew_every")]
    pub renew_every_seconds: i64,
    /// Members and block claims, written by members' operators only.
    #[serde(default)]
    pub registry: RegistryRecord,
}

/// The shared sequence's identity, in the words of an IdSequence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceSequenceSpec {
    #[serde(default)]
    pub layout: LayoutSpec,
    #[serde(default)]
    pub time_unit: TimeUnit,
    /// RFC 3339, as in an IdSequence (default 2025-01-01T00:00:00Z).
    #[serde(default = "default_epoch")]
    pub epoch: String,
    #[serde(default)]
    pub mode: Mode,
    /// Refused: strict sequences do not span clusters.
    #[serde(default)]
    pub strict: bool,
}

/// The registry as stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryRecord {
    /// Counts every change.
    #[serde(default)]
    pub revision: i64,
    #[serde(default)]
    pub members: Vec<MemberRecord>,
    /// Only blocks ever used; a block not listed was never used (floor 0).
    #[serde(default)]
    pub blocks: Vec<BlockRecord>,
}

/// A member as stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberRecord {
    /// The cluster ID: its cluster.clusterset.k8s.io ClusterProperty, or its kube-system UID.
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub datacenter_id: i64,
    #[serde(default)]
    pub generation: i64,
}

/// A block as stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockRecord {
    pub index: i64,
    #[serde(default)]
    pub term: i64,
    /// Ticks at or below this are never issued in this block again.
    #[serde(default)]
    pub floor: i64,
    /// The holder's cluster ID; absent when the block is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The last tick the holder may issue; only with an owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<i64>,
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

fn default_tolerance() -> i64 {
    space::DEFAULT_TOLERANCE_SECS as i64
}
fn default_renew_every() -> i64 {
    space::DEFAULT_RENEW_EVERY_SECS as i64
}
fn default_epoch() -> String {
    crate::timebase::DEFAULT_EPOCH.to_string()
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
