//! Releasing a membership's blocks when the `IdSpaceMembership` is deleted (issue 55;
//! docs/design/2026-11-29-multicluster.md, "Blue/green" and the failure table's "member
//! deleted without cleanup").
//!
//! The task adds the finalizer [`FINALIZER`] to every membership it contacts. When one is
//! deleted, the task gives each block this cluster holds in that space back on the hub with
//! the registry's release transition, one per compare-and-swap write (the hub's policy
//! admits one transition per write): the floor becomes the bound, so the next owner starts
//! above every tick this cluster could have issued, whatever its pods still do, and a
//! release is safe at any time. Only then is the finalizer removed.
//!
//! If the hub cannot be reached the finalizer stays: `Ready=False` says why and how to get
//! out, with a Warning Event. The way out is to remove the finalizer by hand (`kubectl patch
//! idspacemembership NAME --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]'`):
//! the blocks then simply lapse (about the tolerance plus a renewal period after the last
//! renewal) and any member reclaims them, as for a member deleted without cleanup.
//!
//! A membership whose copy was not made by this cluster (a restored namespace), or that
//! never joined, releases nothing: the finalizer is removed at once. Nor does one of a
//! Segment space: its ranges are never taken back (docs/safety.md rule 22), and its
//! counter keeps claiming only inside the ranges it holds.

use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::registry::{Registry, RegistryError};
use kubeflake_crds::id_space::{IdSpace, MemberId};

use super::conditions::Reason;
use super::connect::{self, Hub, bounded};
use super::step::Refusal;

/// The finalizer that keeps a deleted membership until its blocks are released on the hub.
pub const FINALIZER: &str = "kubeflake.io/id-space-blocks";

/// The next release of this member's blocks (pure): the registry with its first held block
/// handed back, or `None` when it holds none (or is not a member: forgotten, or never
/// joined).
pub fn next_release(
    registry: &Registry,
    this: &MemberId,
) -> Result<Option<Registry>, RegistryError> {
    let view = match registry.view_of(this) {
        Ok(view) => view,
        Err(RegistryError::UnknownMember(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(grant) = view.grants.first() else {
        return Ok(None);
    };
    registry.release(this, grant.block, grant.term).map(Some)
}

/// Whether the membership's copy is this cluster's: only then are blocks released for it.
pub fn releases_here(membership: &IdSpaceMembership, this: &MemberId) -> bool {
    membership
        .status
        .as_ref()
        .and_then(|s| s.member_id.as_deref())
        == Some(this.as_str())
}

/// Releases every block `this` holds in the membership's space on `hub`, one write each.
/// Returns how many were released.
pub async fn release_all(
    hub: &Hub,
    membership: &IdSpaceMembership,
    this: &MemberId,
) -> Result<usize, Refusal> {
    let space_ref = &membership.spec.space;
    let spaces: Api<IdSpace> = Api::namespaced(hub.client.clone(), &space_ref.namespace);
    for released in 0..=MAX_BLOCKS {
        let mut object = bounded(hub, "reading the IdSpace", spaces.get(&space_ref.name))
            .await
            .map_err(|e| unreachable(&e))?;
        // A Segment space's ranges are never taken back (rule 22): nothing to release; the
        // sequence's counter keeps the ranges it holds and claims nothing past them.
        if object.spec.sequence.mode == kubeflake_crds::sequence::Mode::Segment {
            return Ok(0);
        }
        let space = object.spec.space().map_err(|e| unreachable(&e))?;
        let registry = object.spec.registry(&space).map_err(|e| unreachable(&e))?;
        let Some(next) = next_release(&registry, this).map_err(|e| unreachable(&e))? else {
            return Ok(released);
        };
        object.spec.registry = next.to_record();
        bounded(
            hub,
            "writing the IdSpace registry",
            spaces.replace(&space_ref.name, &PostParams::default(), &object),
        )
        .await
        .map_err(|e| unreachable(&e))?;
    }
    Err(unreachable(
        &"the hub still lists blocks of this cluster after as many releases as a space has blocks",
    ))
}

/// The most blocks a space has (the IdSpace CRD's limit).
const MAX_BLOCKS: usize = 4096;

/// Why a deleted membership still holds its blocks: `Ready=False`, saying the way out.
fn unreachable(e: &dyn std::fmt::Display) -> Refusal {
    Refusal {
        reason: Reason::HubUnreachable,
        message: format!(
            "this IdSpaceMembership is being deleted and its blocks are released on the hub \
             first, but {e}. The finalizer {FINALIZER} stays until they are (retried every \
             contact); to let the blocks lapse instead (they come back by themselves after \
             the tolerance), remove the finalizer"
        ),
    }
}

/// Who leaves, and whether its blocks are released.
pub struct Leave<'a> {
    /// The operator's namespace, where the hub Secrets are.
    pub secret_namespace: &'a str,
    pub this: &'a MemberId,
    /// False when an earlier membership of this cluster joins the same space: the blocks
    /// are that one's, and the deleted one releases nothing (docs/safety.md rule 20).
    pub release: bool,
}

/// A deleted membership holding [`FINALIZER`]: its blocks released (when its copy is this
/// cluster's), then the finalizer removed. When the hub cannot be reached a Warning Event
/// says so, the finalizer stays, and the refusal is returned for `Ready=False`.
pub async fn leave_deleted(
    client: &Client,
    recorder: &Recorder,
    leave: Leave<'_>,
    membership: &IdSpaceMembership,
) -> Option<Refusal> {
    if !membership.finalizers().iter().any(|f| f == FINALIZER) {
        return None;
    }
    let Leave {
        secret_namespace,
        this,
        release,
    } = leave;
    let released = if release && releases_here(membership, this) {
        match connect::connect(client, secret_namespace, &membership.spec.hub_secret).await {
            Ok(hub) => release_all(&hub, membership, this).await,
            Err(e) => Err(unreachable(&e)),
        }
    } else {
        Ok(0)
    };
    let name = membership.name_any();
    match released {
        Ok(released) => {
            match set_finalizer(client, membership, false).await {
                Ok(_) => {
                    tracing::info!(membership = %name, released, "blocks released on the hub; the IdSpaceMembership's finalizer is removed")
                }
                Err(e) => {
                    tracing::warn!(membership = %name, error = %e, "cannot remove the IdSpaceMembership's finalizer (its blocks are released)")
                }
            }
            None
        }
        Err(refusal) => {
            tracing::warn!(membership = %name, error = %refusal.message, "a deleted IdSpaceMembership's blocks are not released yet");
            let event = Event {
                type_: EventType::Warning,
                reason: "BlocksNotReleased".into(),
                note: Some(refusal.message.chars().take(1000).collect()),
                action: "ReleaseBlocks".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &membership.object_ref(&())).await {
                tracing::warn!(error = %e, "could not record an Event");
            }
            Some(refusal)
        }
    }
}

/// The membership with [`FINALIZER`] (added when missing). When it cannot be added, the
/// membership as it is, and a warning: its blocks would lapse instead of being released.
pub async fn with_finalizer(client: &Client, membership: IdSpaceMembership) -> IdSpaceMembership {
    match set_finalizer(client, &membership, true).await {
        Ok(added) => added.unwrap_or(membership),
        Err(e) => {
            tracing::warn!(membership = %membership.name_any(), error = %e, "cannot add the IdSpaceMembership's finalizer: its blocks lapse instead of being released when it is deleted");
            membership
        }
    }
}

/// The membership with [`FINALIZER`] added (`add`) or removed, written by compare-and-swap
/// on the version read. Nothing is written when it is already so.
pub async fn set_finalizer(
    client: &Client,
    membership: &IdSpaceMembership,
    add: bool,
) -> Result<Option<IdSpaceMembership>, kube::Error> {
    let has = membership.finalizers().iter().any(|f| f == FINALIZER);
    if has == add {
        return Ok(None);
    }
    let mut object = membership.clone();
    let finalizers = object.metadata.finalizers.get_or_insert_with(Vec::new);
    if add {
        finalizers.push(FINALIZER.to_string());
    } else {
        finalizers.retain(|f| f != FINALIZER);
    }
    let api: Api<IdSpaceMembership> =
        Api::namespaced(client.clone(), &membership.namespace().unwrap_or_default());
    api.replace(&membership.name_any(), &PostParams::default(), &object)
        .await
        .map(Some)
}

#[cfg(test)]
mod tests;
