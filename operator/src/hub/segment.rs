//! The membership task's Segment path (docs/safety.md rule 22): a Segment sequence joined to
//! an ID space takes ranges of values from the hub's counter (`IdSpace.spec.segment.next`)
//! and queues them into its local counter Lease (format 3), a spare range ahead, so that a
//! sidecar's claim never waits on the hub in steady state. The decisions are pure
//! (`kubeflake_crds::segment_counter::range::plan`); this module does the reads and the
//! three compare-and-swap writes, **in this order**:
//!
//! 1. the hub: `spec.segment.next` raised by the range's size and `spec.registry.revision`
//!    counted up by 1, with this member's entry's generation, on the IdSpace's
//!    resourceVersion read (the hub policy admits one range per write). The range is
//!    now this member's, and nobody else's, forever;
//! 2. the membership's status: the usable part of the range in `status.segmentRange` (and
//!    the revision written in `revisionSeen`), on the membership's resourceVersion;
//! 3. the counter Lease: the range queued behind the range in use (a counter that had no
//!    range is put in format 3 in the same write), on the Lease's resourceVersion; then
//!    `status.segmentRange` is cleared.
//!
//! Why a crash (or a lost write) at any point never hands a value out twice: the hub's
//! counter only goes up, so a range written there is never given to anyone else. A crash
//! after 1 and before 2 loses the range: a gap, never a duplicate (ranges are never taken
//! back). After 2, the next contact finds the range in the status and queues it
//! ([`plan::pending`]): only the part at or above what the counter may use, and nothing if
//! it is queued already, in use or used up, so a range is queued at most once. No new range
//! is taken while one is kept in the status. A hub whose registry revision is below the
//! one this member saw (restored from a backup, its counter perhaps lower too) is refused
//! before anything is taken.
//!
//! Records that went back (rule 22, [`member`]): the member keeps an entry in the hub's
//! registry whose generation every take, and every contact that finds the counter moved
//! since the last count-up, counts up by 1 (in the take's write, or in one of its own), then
//! keeps in the membership's `status.generation`. Before anything is taken or queued, a
//! status apart from the hub's entry (the counter and the status restored from an older
//! snapshot) gives the counter's ranges up, and the range kept in the status, first.
//!
//! Join-time rule: a counter that issued values alone before it joined queues only values
//! at or above its `next` ([`plan::usable`], [`plan::take_size`]). A counter already ranged
//! when the membership has recorded no cluster yet (restored or copied from another
//! cluster, whose ranges they are) gives its ranges up first ([`plan::abandon`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::join::check_sequence;
use kubeflake_crds::id_space::membership::{IdSpaceMembership, check_space_uid};
use kubeflake_crds::id_space::resource::SpaceCounterRecord;
use kubeflake_crds::id_space::segment_member::{count_up, counted_up_since};
use kubeflake_crds::id_space::segment_range;
use kubeflake_crds::id_space::{IdSpace, MemberId, MemberName, SpaceSequence};
use kubeflake_crds::ownership::counter_name;
use kubeflake_crds::segment_counter::range::plan::{self, Pending};

use super::conditions::Reason;
use super::connect::{Hub, bounded};
use super::step::{MAX_WRITES_PER_CONTACT, Refusal};
use crate::metrics::hub::{HubMetrics, Member, RangesHeld};

mod local;
mod member;
mod status;

pub use local::show_held;
use local::{Write, abandon_ranges, no_0_1_claimants, raise_claims, read_counter, write_counter};
use member::Entry;
use status::{check_hub_revision, keep_range, pending_of, with_identity};

/// The smallest range taken from the hub: many sidecar blocks (values are 63-bit, so a
/// range left unused when a member leaves costs nothing that matters).
pub const MIN_RANGE: u64 = 1 << 24;

/// What a Segment contact found: the membership as last written (its status holds any
/// range taken but not queued yet), and whether a spare range is queued or not needed.
#[derive(Debug)]
pub struct Kept {
    pub membership: IdSpaceMembership,
    /// A range the hub handed over could not be queued yet (another is queued): said in
    /// the conditions; claims go on from the ranges held.
    pub waiting: Option<String>,
    /// The claim rate measured (values per second) and the space's tolerance: the range
    /// sizing's inputs, for the metrics.
    pub claim_rate: f64,
    pub tolerance_secs: u64,
    /// This member's records were found behind the hub's (its etcd restored): the
    /// counter's ranges were given up. Said in a Warning Event and the metrics.
    pub went_back: Option<String>,
}

/// The recent claim rate of each joined Segment sequence, from the counter's `next` seen
/// at each contact (kept in memory: after a restart, ranges are sized at [`MIN_RANGE`]
/// until two contacts measured it); and the counter's `next` read before each one's last
/// count-up of its generation on the hub (after a restart, the first contact counts up).
#[derive(Debug, Default)]
pub struct Rates {
    seen: Mutex<HashMap<String, (u64, Instant, f64)>>,
    counted: Mutex<HashMap<String, u64>>,
    /// When each one's ranges were last given up because its records went back.
    gave_up: Mutex<HashMap<String, Instant>>,
}

/// How long after a give-up the claim count is raised to the IdSequence's at each contact:
/// the controller may write the count it saw before the restore for as long as its watch
/// has not listed the restored store again (seconds).
const CLAIMS_REPAIR: std::time::Duration = std::time::Duration::from_secs(300);

impl Rates {
    fn gave_up(&self, key: &str) {
        if let Ok(mut gave_up) = self.gave_up.lock() {
            gave_up.insert(key.to_string(), Instant::now());
        }
    }

    fn repairing(&self, key: &str) -> bool {
        self.gave_up
            .lock()
            .ok()
            .and_then(|g| g.get(key).map(|at| at.elapsed() < CLAIMS_REPAIR))
            .unwrap_or(false)
    }

    /// The counter's `next` read before `key`'s last count-up, if any since the start.
    fn counted_at(&self, key: &str) -> Option<u64> {
        self.counted.lock().ok()?.get(key).copied()
    }

    /// `key` counted its generation up on the hub after reading `next`.
    fn counted_up(&self, key: &str, next: u64) {
        if let Ok(mut counted) = self.counted.lock() {
            counted.insert(key.to_string(), next);
        }
    }

    /// Values per second for `key`, counting `next` seen now.
    fn observe(&self, key: &str, next: u64) -> f64 {
        let Ok(mut seen) = self.seen.lock() else {
            return 0.0;
        };
        let now = Instant::now();
        let rate = match seen.get(key) {
            Some((before, at, rate)) => {
                let secs = now.duration_since(*at).as_secs_f64();
                if secs < 1.0 {
                    return *rate;
                }
                // The higher of the last and this window: a burst is not forgotten at once.
                (next.saturating_sub(*before) as f64 / secs).max(rate / 2.0)
            }
            None => 0.0,
        };
        seen.insert(key.to_string(), (next, now, rate));
        rate
    }
}

pub(super) fn refused(reason: Reason, e: impl std::fmt::Display) -> Refusal {
    Refusal {
        reason,
        message: e.to_string(),
    }
}

/// What a Segment contact reaches the hub with, and where its figures go.
#[derive(Debug, Clone, Copy)]
pub struct Reach<'a> {
    pub hub: &'a Hub,
    pub metrics: &'a HubMetrics,
    pub rates: &'a Rates,
}

/// One Segment contact of `membership` (its hub's IdSpace `object` already read).
pub async fn contact(
    client: &Client,
    reach: Reach<'_>,
    this: &MemberId,
    membership: &IdSpaceMembership,
    sequence: &IdSequence,
    object: IdSpace,
) -> Result<Kept, Refusal> {
    let Reach {
        hub,
        metrics,
        rates,
    } = reach;
    let space_sequence = object
        .spec
        .space_sequence()
        .map_err(|e| refused(Reason::BadRecord, e))?;
    let params = sequence
        .spec
        .params()
        .map_err(|e| refused(Reason::BadRecord, e))?;
    let member_sequence = SpaceSequence {
        layout: params.layout,
        timebase: params.timebase,
        mode: sequence.spec.mode,
        strict: sequence.spec.segment.as_ref().is_some_and(|s| s.strict),
    };
    check_sequence(&space_sequence, &member_sequence)
        .map_err(|e| refused(Reason::JoinRefused, e))?;
    let space_uid = object.metadata.uid.clone().unwrap_or_default();
    let status = membership.status.clone().unwrap_or_default();
    check_space_uid(status.id_space_uid.as_deref(), &space_uid)
        .map_err(|e| refused(Reason::HubWentBack, e))?;
    let namespace = membership.namespace().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let lease_name = counter_name(&membership.spec.sequence);
    let memberships: Api<IdSpaceMembership> = Api::namespaced(client.clone(), &namespace);
    let spaces: Api<IdSpace> =
        Api::namespaced(hub.client.clone(), &membership.spec.space.namespace);
    let member = Member::of(membership);
    let lead_secs = u64::try_from(object.spec.tolerance_seconds).unwrap_or(3600);
    let key = format!("{namespace}/{}", membership.name_any());
    let mut object = object;
    let name =
        MemberName::new(&membership.spec.member_name).map_err(|e| refused(Reason::BadRecord, e))?;
    let entry = Entry {
        id: this,
        name: &name,
    };
    // Before anything is taken or queued: a hub that went back is refused, and records of
    // this member that went back give the counter's ranges up (rule 22).
    check_hub_revision(membership, &object)?;
    let hub_generation = member::hub_generation(&object, entry)?;
    let new = status.member_id.is_none();
    if new {
        // Not recorded by this membership: any ranges the counter has are given up first.
        abandon_ranges(&leases, &lease_name).await?;
    }
    let membership = with_identity(&memberships, membership.clone(), this, &space_uid).await?;
    let checked = member::check_went_back(
        (&leases, &lease_name),
        &memberships,
        membership,
        hub_generation,
        new,
    )
    .await?;
    let (mut membership, went_back) = (checked.membership, checked.went_back);
    if went_back.is_some() {
        rates.gave_up(&key);
    }
    if rates.repairing(&key) {
        let known = sequence
            .status
            .as_ref()
            .and_then(|s| s.segment.as_ref())
            .and_then(|s| s.blocks_claimed)
            .and_then(|c| u64::try_from(c).ok())
            .unwrap_or(0);
        raise_claims(&leases, &lease_name, known).await?;
    }
    let mut rate = None;
    let mut waiting = None;
    // The counter's `next` read last, and whether this contact counted up since.
    let mut read_next = None;
    let mut counted = false;
    for _ in 0..MAX_WRITES_PER_CONTACT {
        check_hub_revision(&membership, &object)?;
        let (lease, counter) = read_counter(&leases, &lease_name).await?;
        metrics.ranges_held(&member, RangesHeld::of(&counter));
        let rate = *rate.get_or_insert_with(|| rates.observe(&key, counter.next));
        if !counted {
            read_next = Some(counter.next);
        }
        if let Some(range) = pending_of(&membership) {
            match plan::pending(&counter, range.clone()) {
                Pending::Wait => {
                    waiting = Some(format!(
                        "the range {}..{} taken from the hub waits until claims move to the \
                         range queued now",
                        range.start, range.end
                    ));
                    break;
                }
                Pending::Queue(written) => {
                    if counter.range.is_none() {
                        // The first write in format 3: never while a 0.1.0 sidecar may claim.
                        no_0_1_claimants(client, &namespace, &membership.spec.sequence, &lease)
                            .await?;
                    }
                    // Behind an empty range in use (given up, or used up): moved to at once,
                    // so that sidecars whose blocks lie above a counter that went back claim
                    // again (rule 22). A joining counter keeps its queue for its first claim.
                    let written = if counter.range.is_some() || went_back.is_some() {
                        plan::lift(&written)
                    } else {
                        written
                    };
                    let queued = RangesHeld::of(&written);
                    let lease = written.write_into(lease);
                    if write_counter(&leases, &lease_name, &lease).await? == Write::Conflict {
                        continue;
                    }
                    metrics.ranges_held(&member, queued);
                    tracing::info!(membership = %membership.name_any(), start = range.start, end = range.end, "queued a range from the hub into the segment counter");
                }
                Pending::Done => {}
            }
            membership = keep_range(&memberships, membership, (None, None)).await?;
            continue;
        }
        let Some(want) = plan::need(&plan::into_ranged(&counter), rate, lead_secs, MIN_RANGE)
        else {
            break;
        };
        let hub_next = object.spec.segment.as_ref().map_or(0, |s| s.next);
        let hub_record = SpaceCounterRecord { next: hub_next };
        let size = plan::take_size(&counter, u64::try_from(hub_next).unwrap_or(0), want);
        let (written, taken) =
            segment_range::take(&hub_record, size).map_err(|e| refused(Reason::BadRecord, e))?;
        // The take counts this member's generation up in the same write (rule 22).
        let (registry, generation) = count_up(&object.spec.registry, this, &name)
            .map_err(|e| refused(Reason::JoinRefused, e))?;
        object.spec.segment = Some(written);
        object.spec.registry = registry;
        let post = PostParams::default();
        let write = bounded(
            hub,
            "taking a range from the IdSpace's counter",
            spaces.replace(&membership.spec.space.name, &post, &object),
        );
        object = match metrics.call(&member, write).await {
            Ok(written) => {
                rates.counted_up(&key, counter.next);
                counted = true;
                written
            }
            // Another member took a range meanwhile: read the counter again.
            Err(e) if e.is_conflict() => {
                let read = bounded(
                    hub,
                    "reading the IdSpace",
                    spaces.get(&membership.spec.space.name),
                );
                object = metrics
                    .call(&member, read)
                    .await
                    .map_err(|e| refused(Reason::HubUnreachable, e))?;
                continue;
            }
            Err(e) => return Err(refused(Reason::HubUnreachable, e)),
        };
        metrics.range_taken(&member);
        // The range is this member's now. Kept in the status before it is queued: lost only
        // if this write fails (a gap, never a duplicate).
        let usable = plan::usable(&counter, taken.clone());
        tracing::info!(membership = %membership.name_any(), start = taken.start, end = taken.end, usable = ?usable, "took a range from the hub's counter");
        let revision = object.spec.registry.revision;
        let kept = (usable, Some((revision, generation)));
        membership = keep_range(&memberships, membership, kept)
            .await
            .inspect_err(|_| {
                tracing::warn!(
                    start = taken.start,
                    end = taken.end,
                    "a range taken from the hub was not kept: its values are skipped (a gap)"
                );
            })?;
    }
    // Claims since the last count-up and no take in this contact: counted up alone, so a
    // snapshot of before them is caught (rule 22).
    if let Some(next) =
        read_next.filter(|n| !counted && counted_up_since(rates.counted_at(&key), *n))
    {
        let at = (hub, metrics, &member);
        let (written, generation) = member::count_up_alone(at, &spaces, object, entry).await?;
        rates.counted_up(&key, next);
        let revision = written.spec.registry.revision;
        membership =
            member::keep_generation(&memberships, membership, generation, revision).await?;
    }
    Ok(Kept {
        membership,
        waiting,
        claim_rate: rate.unwrap_or(0.0),
        tolerance_secs: lead_secs,
        went_back,
    })
}

#[cfg(test)]
mod tests;
