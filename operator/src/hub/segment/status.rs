//! The Segment path's reads and writes of the membership's status (docs/safety.md rule
//! 22): the hub's revision checked against the one it saw, the identity written before any
//! range is taken, and a range kept between its take on the hub and its queueing.

use std::ops::Range;

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use kubeflake_crds::id_space::membership::{IdSpaceMembership, RangeRecord};
use kubeflake_crds::id_space::{IdSpace, MemberId};

use super::refused;
use crate::hub::conditions::Reason;
use crate::hub::connect::CALL_TIMEOUT;
use crate::hub::step::Refusal;

/// Refuses a hub whose registry revision is below the highest this member saw.
pub(super) fn check_hub_revision(
    membership: &IdSpaceMembership,
    object: &IdSpace,
) -> Result<(), Refusal> {
    let seen = membership.status.as_ref().map_or(0, |s| s.revision_seen);
    let hub = object.spec.registry.revision;
    if hub < seen {
        return Err(refused(
            Reason::HubWentBack,
            format!(
                "the hub's registry is at revision {hub}, behind revision {seen} this cluster \
                 saw: it was restored from a backup, and its Segment counter may be below ranges \
                 it handed out. No range is taken there; this cluster issues from the ranges it \
                 holds. Recover the hub (`kubectl kubeflake hub recover`)"
            ),
        ));
    }
    Ok(())
}

pub(super) fn pending_of(membership: &IdSpaceMembership) -> Option<Range<u64>> {
    let r = membership.status.as_ref()?.segment_range.as_ref()?;
    Some(u64::try_from(r.start).ok()?..u64::try_from(r.end).ok()?)
}

/// Writes the two write-once fields (this cluster's ID, the hub IdSpace's UID) into the
/// status when not set yet, before any range is taken: a copy restored into another
/// cluster is then refused there (`check_cluster`), never used.
pub(super) async fn with_identity(
    api: &Api<IdSpaceMembership>,
    membership: IdSpaceMembership,
    this: &MemberId,
    space_uid: &str,
) -> Result<IdSpaceMembership, Refusal> {
    let status = membership.status.clone().unwrap_or_default();
    if status.member_id.is_some() && status.id_space_uid.is_some() {
        return Ok(membership);
    }
    let mut object = membership;
    let status = object.status.get_or_insert_with(Default::default);
    status.member_id.get_or_insert_with(|| this.to_string());
    status
        .id_space_uid
        .get_or_insert_with(|| space_uid.to_string());
    write_status(api, &object).await
}

/// Keeps `range` (or none) in `status.segmentRange`, and, after a take, raises
/// `revisionSeen` to its revision and keeps the generation it wrote, by compare-and-swap on
/// the membership as read.
pub(super) async fn keep_range(
    api: &Api<IdSpaceMembership>,
    mut membership: IdSpaceMembership,
    (range, written): (Option<Range<u64>>, Option<(i64, u64)>),
) -> Result<IdSpaceMembership, Refusal> {
    let status = membership.status.get_or_insert_with(Default::default);
    status.segment_range = range.map(|r| RangeRecord {
        start: i64::try_from(r.start).unwrap_or(i64::MAX),
        end: i64::try_from(r.end).unwrap_or(i64::MAX),
    });
    if let Some((revision, generation)) = written {
        status.revision_seen = status.revision_seen.max(revision);
        status.generation = i64::try_from(generation).unwrap_or(i64::MAX);
    }
    write_status(api, &membership).await
}

pub(super) async fn write_status(
    api: &Api<IdSpaceMembership>,
    membership: &IdSpaceMembership,
) -> Result<IdSpaceMembership, Refusal> {
    let (name, post) = (membership.name_any(), PostParams::default());
    let write = api.replace_status(&name, &post, membership);
    match tokio::time::timeout(CALL_TIMEOUT, write).await {
        Ok(Ok(written)) => Ok(written),
        Ok(Err(e)) => Err(refused(
            Reason::HubCheckPending,
            format!("cannot write the IdSpaceMembership status: {e}"),
        )),
        Err(_) => Err(refused(
            Reason::HubCheckPending,
            "writing the IdSpaceMembership status timed out",
        )),
    }
}
