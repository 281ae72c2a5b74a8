//! The Segment member's entry on the hub (docs/safety.md rule 22; the pure part is
//! `kubeflake_crds::id_space::segment_member`): records that went back are caught before
//! anything is taken, and a contact that finds claims made since the last count-up counts
//! the member's generation up on the hub, then keeps it in the membership's status.
//!
//! The counter Lease and the membership's status come back together from an older etcd
//! snapshot, the counter's `next` below values sidecars already claimed: only the hub,
//! outside the member's etcd, still holds a generation written after the snapshot. So the
//! status is written only after the hub ([`count_up_alone`], and the take in
//! `segment.rs`), and a contact that finds them apart ([`check_went_back`]) gives the
//! counter's ranges up (the range in use, the queued one, and a range kept in the status)
//! before it takes a fresh one. Sidecars keep the blocks they claimed: those values are
//! theirs; a running sidecar whose own blocks lie above the restored counter refuses it
//! (`CounterBehind`) until the fresh range lifts `next` above them.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::segment_member::{
    SegmentCheck, check_records, count_up, generation_of,
};
use kubeflake_crds::id_space::{IdSpace, MemberId, MemberName};

use super::local::abandon_ranges;
use super::refused;
use super::status::write_status;
use crate::hub::conditions::Reason;
use crate::hub::connect::{Hub, bounded};
use crate::hub::step::{MAX_WRITES_PER_CONTACT, Refusal};
use crate::metrics::hub::{HubMetrics, Member};

/// Who this member is on the hub: its cluster ID and its member name.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub id: &'a MemberId,
    pub name: &'a MemberName,
}

/// The generation of this member's entry in `object` (`None`: it has none yet); an entry of
/// this cluster under another name, or this name under another cluster, is refused as a
/// join would be.
pub fn hub_generation(object: &IdSpace, entry: Entry<'_>) -> Result<Option<u64>, Refusal> {
    generation_of(&object.spec.registry, entry.id, entry.name)
        .map_err(|e| refused(Reason::JoinRefused, e))
}

/// What [`check_went_back`] did: the membership as written, and, when the member's records
/// went back, what to say (a Warning Event and the `went_back` metric).
pub struct Checked {
    pub membership: IdSpaceMembership,
    pub went_back: Option<String>,
}

/// Compares the membership's `status.generation` with this member's entry on the hub.
/// Apart: the counter's ranges are given up ([`abandon_ranges`]), a range kept in the
/// status is dropped, and the hub's generation is kept in the status, in that order (a
/// crash in between repeats the give-up at the next contact, which costs nothing more).
/// A membership that never recorded this cluster (new, or made again) takes the hub's
/// generation without a warning: its ranges were given up already.
pub async fn check_went_back(
    (leases, lease_name): (&Api<Lease>, &str),
    memberships: &Api<IdSpaceMembership>,
    membership: IdSpaceMembership,
    hub_generation: Option<u64>,
    new: bool,
) -> Result<Checked, Refusal> {
    let status = membership.status.clone().unwrap_or_default();
    let local = u64::try_from(status.generation).unwrap_or(0);
    let SegmentCheck::WentBack { local, hub } = check_records(local, hub_generation) else {
        return Ok(Checked {
            membership,
            went_back: None,
        });
    };
    abandon_ranges(leases, lease_name).await?;
    let mut object = membership;
    let status = object.status.get_or_insert_with(Default::default);
    let dropped = status.segment_range.take();
    status.generation = i64::try_from(hub).unwrap_or(i64::MAX);
    let membership = write_status(memberships, &object).await?;
    let message = format!(
        "this cluster's records of the Segment sequence are behind the hub's: the \
         membership's status.generation is {local}, the hub's entry of this member {hub} \
         (its etcd was restored from an older snapshot, or a status write was lost). The \
         segment counter's ranges were given up{} and a fresh range is taken from the hub: \
         a gap, never a value twice. Sidecars keep the blocks they claimed; those whose \
         blocks lie above the restored counter refuse it until the fresh range is in use",
        dropped.map_or(String::new(), |r| format!(
            " (with the range {}..{} kept in the status)",
            r.start, r.end
        ))
    );
    if new {
        tracing::info!(membership = %membership.name_any(), local, hub, "a new membership takes its member's generation from the hub");
        return Ok(Checked {
            membership,
            went_back: None,
        });
    }
    tracing::warn!(membership = %membership.name_any(), local, hub, "{message}");
    Ok(Checked {
        membership,
        went_back: Some(message),
    })
}

/// Counts this member's generation up on the hub in a write of its own (no range taken):
/// by compare-and-swap on `object`, read again after a conflict. Returns the IdSpace as
/// written and the new generation; the caller then keeps it in the status.
pub async fn count_up_alone(
    (hub, metrics, member): (&Hub, &HubMetrics, &Member),
    spaces: &Api<IdSpace>,
    mut object: IdSpace,
    entry: Entry<'_>,
) -> Result<(IdSpace, u64), Refusal> {
    let name = object.name_any();
    for _ in 0..MAX_WRITES_PER_CONTACT {
        let (registry, generation) = count_up(&object.spec.registry, entry.id, entry.name)
            .map_err(|e| refused(Reason::JoinRefused, e))?;
        let mut written = object.clone();
        written.spec.registry = registry;
        let post = PostParams::default();
        let write = bounded(
            hub,
            "counting this member's generation up on the hub",
            spaces.replace(&name, &post, &written),
        );
        match metrics.call(member, write).await {
            Ok(written) => return Ok((written, generation)),
            Err(e) if e.is_conflict() => {
                let read = bounded(hub, "reading the IdSpace", spaces.get(&name));
                object = metrics
                    .call(member, read)
                    .await
                    .map_err(|e| refused(Reason::HubUnreachable, e))?;
            }
            Err(e) => return Err(refused(Reason::HubUnreachable, e)),
        }
    }
    Err(refused(
        Reason::HubCheckPending,
        "other members wrote the IdSpace at each try: this member's generation is counted \
         up at the next contact",
    ))
}

/// Keeps `generation`, the one just written on the hub, in the membership's status, and
/// raises `revisionSeen` to the revision of that write.
pub async fn keep_generation(
    api: &Api<IdSpaceMembership>,
    mut membership: IdSpaceMembership,
    generation: u64,
    revision: i64,
) -> Result<IdSpaceMembership, Refusal> {
    let status = membership.status.get_or_insert_with(Default::default);
    status.generation = i64::try_from(generation).unwrap_or(i64::MAX);
    status.revision_seen = status.revision_seen.max(revision);
    write_status(api, &membership).await
}
