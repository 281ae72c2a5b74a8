//! The `IdSpaceMembership` custom resource, kept in a member cluster beside the IdSequence
//! that joins an ID space: which sequence, which space on which hub (through which Secret),
//! and, in its status, the member's copy of its claims ([`LocalRecord`]): the grants, the
//! generation it last wrote, the highest registry revision it saw, the cluster ID that made
//! the copy ([`check_cluster`](super::check_cluster)) and the UID of the hub's IdSpace.
//!
//! The IdSpace's UID is kept because a registry restored by re-creating the object gets a
//! new UID: a member whose copy names another UID refuses to claim or renew there
//! ([`check_space_uid`]) until a person has recovered the hub and cleared the copy's UID.
//! The CRD makes the copy's `memberId` and `idSpaceUid` write-once (removable, never
//! replaced), so an operator of another cluster cannot quietly adopt a restored copy.
//!
//! Read and kept by the operator's membership task (`operator/src/hub/task.rs`; plan step 2
//! of docs/design/2026-11-29-multicluster.md).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::local::LocalRecord;
use super::registry::{Grant, MemberView};
use super::space::{Space, SpaceError, SpaceSequence};
use crate::layout::Tick;

/// One IdSequence's membership of an ID space on a hub.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
// printcolumn(...) repeats keys such as type_ by design; clippy reads that as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "kubeflake.io",
    version = "v1alpha1",
    kind = "IdSpaceMembership",
    namespaced,
    shortname = "idspacemember",
    status = "IdSpaceMembershipStatus",
    doc = "An IdSequence's membership of an ID space shared by several clusters: the space on the hub, the Secret that reaches it, and this cluster's copy of its claims.",
    printcolumn(name = "Sequence", type_ = "string", json_path = ".spec.sequence"),
    printcolumn(name = "Member", type_ = "string", json_path = ".spec.memberName"),
    printcolumn(name = "Space", type_ = "string", json_path = ".spec.space.name"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IdSpaceMembershipSpec {
    /// The IdSequence (in this namespace) that joins the space. Immutable.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("sequence must name an IdSequence of this namespace (a DNS subdomain)"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("sequence is immutable: the copy of the claims belongs to that sequence; make a new IdSpaceMembership instead"))]
    pub sequence: String,
    /// This cluster's name in the space, for people: a DNS label. Immutable.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("memberName must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (for example prod-eu)"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("memberName is immutable: the hub knows this member by it; forget the member on the hub and make a new IdSpaceMembership"))]
    pub member_name: String,
    /// The IdSpace on the hub. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("space is immutable: this cluster's claims are in that space; make a new IdSpaceMembership instead"))]
    pub space: SpaceRef,
    /// The Secret, in the operator's namespace, holding the kubeconfig that reaches the hub
    /// (`kubectl kubeflake hub add-member` prints it). May change, to rotate the credential.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("hubSecret must name a Secret in the operator's namespace (a DNS subdomain, for example kubeflake-hub-orders)"))]
    pub hub_secret: String,
}

/// Where the IdSpace is on the hub.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceRef {
    /// The hub namespace that holds the space (for example kubeflake-space-orders).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The IdSpace's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// This cluster's copy of its claims, and what the operator observed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IdSpaceMembershipStatus {
    /// The cluster ID of the cluster that made this copy. Write-once: a copy found in
    /// another cluster (a restored namespace) is refused there, never adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("status.memberId is write-once: this copy was made by that cluster; a copy found in another cluster is not adopted (join the ID space from that cluster itself)"))]
    pub member_id: Option<String>,
    /// The hub IdSpace's metadata.uid when the copy was made. Write-once: removed by a
    /// person after the hub was recovered, never replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("status.idSpaceUid is write-once: a hub IdSpace with another UID was re-created (restored); recover the hub (`kubectl kubeflake hub recover`), then remove status.idSpaceUid"))]
    pub id_space_uid: Option<String>,
    /// The member's generation it last wrote on the hub.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub generation: i64,
    /// The highest registry revision it saw.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub revision_seen: i64,
    /// The hub IdSpace's `blockSlots`, `toleranceSeconds` and `renewEverySeconds` (all
    /// immutable there), written at each contact: with the sequence's layout they make the
    /// [`Space`] the controller maps blocks to slots with ([`Self::space`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub block_slots: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tolerance_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub renew_every_seconds: Option<i64>,
    /// The blocks the hub granted it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4096))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["block".into()]))]
    pub grants: Vec<GrantRecord>,
    /// Segment spaces: a range of counter values the hub handed this member, kept here
    /// between the hub write and its queueing into the sequence's counter Lease (then
    /// removed), so that a crash in between never loses it nor queues it twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_range: Option<RangeRecord>,
    /// Ready, and the reasons of the design (HubUnreachable, BlocksLow, JoinRefused, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A grant as the member's copy stores it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.bound > self.floor && self.term > 0").message("a grant's bound must be above its floor, and its term at least 1"))]
#[serde(rename_all = "camelCase")]
pub struct GrantRecord {
    #[schemars(range(min = 0, max = 4095))]
    pub block: i64,
    #[schemars(range(min = 0))]
    pub term: i64,
    #[schemars(range(min = 0, max = 36028797018963967_i64))]
    pub floor: i64,
    #[schemars(range(min = 0, max = 36028797018963967_i64))]
    pub bound: i64,
}

/// Values `[start, end)` of a Segment space's counter, handed to one member.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.end > self.start").message("segmentRange.end must be above segmentRange.start"))]
#[serde(rename_all = "camelCase")]
pub struct RangeRecord {
    #[schemars(range(min = 0))]
    pub start: i64,
    #[schemars(range(min = 1))]
    pub end: i64,
}

/// The hub's IdSpace is not the one the copy was made from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the hub's IdSpace has UID {hub}, but this cluster's copy was made from UID {kept}: the \
     IdSpace was re-created (restored from a backup?). Nothing is claimed or renewed there; \
     this cluster keeps issuing up to the bounds it holds. Recover the hub (`kubectl \
     kubeflake hub recover`), then remove status.idSpaceUid from this IdSpaceMembership"
)]
pub struct SpaceReplaced {
    pub kept: String,
    pub hub: String,
}

/// Checks the hub's IdSpace is the one the copy was made from. A copy with no UID yet (a
/// new membership, or one cleared after a recovery) takes the hub's.
pub fn check_space_uid(kept: Option<&str>, hub: &str) -> Result<(), SpaceReplaced> {
    match kept {
        Some(kept) if kept != hub => Err(SpaceReplaced {
            kept: kept.to_string(),
            hub: hub.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Why a stored copy cannot be read. The copy is not used until repaired.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "IdSpaceMembership status: grant of block {block} does not fit the space (a block \
     outside it, a negative number, or a bound at or below its floor); the copy is not used \
     until it is repaired (take the hub's view: remove status.grants)"
)]
pub struct BadCopy {
    pub block: i64,
}

impl IdSpaceMembership {
    /// The membership of another sequence of this cluster, made before this one, that joins
    /// the same ID space: same space and hub Secret, or the same IdSpace UID in both copies
    /// (two Secrets for one hub). The hub sees one member per cluster, so a second sequence
    /// would get the first one's blocks; the earlier membership (by creation time, then
    /// namespace and name) keeps them. `all` is every membership of this cluster. The
    /// controller assigns no slot of the later one's sequence, and the membership task does
    /// not contact the hub for it (docs/safety.md rule 20).
    pub fn earlier_of_same_space<'a>(
        &self,
        all: &[&'a IdSpaceMembership],
    ) -> Option<&'a IdSpaceMembership> {
        use kube::ResourceExt;
        let uid = |x: &IdSpaceMembership| x.status.as_ref().and_then(|s| s.id_space_uid.clone());
        let order = |x: &IdSpaceMembership| (x.creation_timestamp(), x.namespace(), x.name_any());
        all.iter().copied().find(|other| {
            let same_sequence =
                other.namespace() == self.namespace() && other.spec.sequence == self.spec.sequence;
            let same_space = (other.spec.space == self.spec.space
                && other.spec.hub_secret == self.spec.hub_secret)
                || uid(other).is_some_and(|u| Some(u) == uid(self));
            !same_sequence && same_space && order(other) < order(self)
        })
    }
}

impl IdSpaceMembershipStatus {
    /// The copy's grants, generation and revision as the pure core reads them.
    pub fn local_record(&self, space: &Space) -> Result<LocalRecord, BadCopy> {
        let mut grants = Vec::new();
        for g in &self.grants {
            let bad = BadCopy { block: g.block };
            let number = |v: i64| u64::try_from(v).map_err(|_| bad.clone());
            let block = space.block(number(g.block)?).ok_or(bad.clone())?;
            let (floor, bound) = (Tick(number(g.floor)?), Tick(number(g.bound)?));
            if bound <= floor {
                return Err(bad);
            }
            grants.push(Grant {
                block,
                term: number(g.term)?,
                floor,
                bound,
            });
        }
        Ok(LocalRecord::from_view(&MemberView {
            generation: u64::try_from(self.generation).unwrap_or(0),
            revision: u64::try_from(self.revision_seen).unwrap_or(0),
            grants,
        }))
    }

    /// The space the copy was made in, for `sequence` (the member's own IdSequence, which
    /// the join checked against the hub's): `None` before the first contact kept it.
    pub fn space(&self, sequence: SpaceSequence) -> Option<Result<Space, SpaceError>> {
        let (Some(block), Some(tolerance), Some(renew)) = (
            self.block_slots,
            self.tolerance_seconds,
            self.renew_every_seconds,
        ) else {
            return None;
        };
        Some(Space::new(sequence, block, tolerance, renew))
    }

    /// Writes the space's parameters into the copy (see [`Self::space`]).
    pub fn keep_space(&mut self, space: &Space) {
        self.block_slots = Some(to_i64(space.block_slots()));
        self.tolerance_seconds = Some(to_i64(space.tolerance_secs()));
        self.renew_every_seconds = Some(to_i64(space.renew_every_secs()));
    }

    /// Writes `local` into the copy (the UIDs and conditions stay).
    pub fn keep(&mut self, local: &LocalRecord) {
        let by_block: BTreeMap<u32, &Grant> = local.grants().map(|g| (g.block.get(), g)).collect();
        self.grants = by_block
            .values()
            .map(|g| GrantRecord {
                block: i64::from(g.block.get()),
                term: to_i64(g.term),
                floor: to_i64(g.floor.0),
                bound: to_i64(g.bound.0),
            })
            .collect();
        self.generation = to_i64(local.generation);
        self.revision_seen = to_i64(local.revision_seen);
    }
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
