//! The membership's status after a contact: the copy (after a successful contact) and the
//! conditions, by compare-and-swap on the membership as read; a refusal is also an Event.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflake_crds::id_space::MemberId;
use kubeflake_crds::id_space::membership::{IdSpaceMembership, IdSpaceMembershipStatus};

use super::{Contacted, Kept};
use crate::hub::conditions::{self, BLOCKS_LOW, READY, Reason};
use crate::hub::fences;
use crate::hub::step::Refusal;

/// Keeps the copy (after a successful contact) and the conditions in the status, by
/// compare-and-swap on the membership as read; a refusal is also an Event. A copy that went
/// back is kept with `FencesRaised=False` in the same write. Returns what is stored.
pub(super) async fn keep_status(
    client: &Client,
    recorder: &Recorder,
    this: &MemberId,
    membership: &IdSpaceMembership,
    outcome: Result<Contacted, Refusal>,
) -> Result<IdSpaceMembership, kube::Error> {
    let mut status = membership.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let generation = membership.metadata.generation;
    match &outcome {
        Ok(Contacted::Segment(kept)) => {
            if let Some(message) = &kept.went_back {
                // Rule 22: this cluster's records went back; the ranges were given up.
                warn(recorder, membership, Reason::LocalBehind, message).await;
            }
            conditions::set(
                &mut status.conditions,
                READY,
                true,
                Reason::Joined,
                "ranges of values are taken from the hub's counter",
                generation,
                now.clone(),
            );
            // A range kept in the status while another is queued: a spare is held all the
            // same, so ranges are not low.
            let message = kept
                .waiting
                .as_deref()
                .unwrap_or("a spare range is queued or not needed");
            conditions::set(
                &mut status.conditions,
                BLOCKS_LOW,
                false,
                Reason::SpareHeld,
                message,
                generation,
                now,
            );
        }
        Ok(Contacted::Blocks(kept)) => {
            keep_copy(&mut status, this, kept);
            if kept.local_went_back {
                fences::mark_pending(&mut status, generation, now.clone());
            }
            conditions::set(
                &mut status.conditions,
                READY,
                true,
                Reason::Joined,
                "the copy is the hub's",
                generation,
                now.clone(),
            );
            let (low, reason, message) = match &kept.blocks_low {
                Some(m) => (true, Reason::NoFreeBlock, m.as_str()),
                None => (
                    false,
                    Reason::SpareHeld,
                    "a spare block is held or not needed",
                ),
            };
            conditions::set(
                &mut status.conditions,
                BLOCKS_LOW,
                low,
                reason,
                message,
                generation,
                now,
            );
        }
        Err(refusal) => {
            conditions::set(
                &mut status.conditions,
                READY,
                false,
                refusal.reason,
                &refusal.message,
                generation,
                now,
            );
            if matches!(
                refusal.reason,
                Reason::JoinRefused
                    | Reason::MembershipOfAnotherCluster
                    | Reason::HubWentBack
                    | Reason::SpaceJoinedTwice
            ) {
                warn(recorder, membership, refusal.reason, &refusal.message).await;
            }
        }
    }
    if membership.status.as_ref() == Some(&status) {
        return Ok(membership.clone());
    }
    let mut object = membership.clone();
    object.status = Some(status);
    let api: Api<IdSpaceMembership> =
        Api::namespaced(client.clone(), &membership.namespace().unwrap_or_default());
    api.replace_status(&membership.name_any(), &PostParams::default(), &object)
        .await
}

/// A Warning Event on the membership.
async fn warn(recorder: &Recorder, membership: &IdSpaceMembership, reason: Reason, note: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.as_str().into(),
        note: Some(note.chars().take(1000).collect()),
        action: "ContactHub".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &membership.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an Event");
    }
}

/// Writes a successful contact's copy into `status`: the grants, generation and revision,
/// the space's parameters, and the two write-once fields when not set yet.
pub fn keep_copy(status: &mut IdSpaceMembershipStatus, this: &MemberId, kept: &Kept) {
    status.keep(&kept.copy);
    status.keep_space(&kept.space);
    status.member_id.get_or_insert_with(|| this.to_string());
    status
        .id_space_uid
        .get_or_insert_with(|| kept.space_uid.clone());
}
