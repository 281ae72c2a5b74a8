//! The status of a Snowflake sequence, built from what the pass saw and did. Pure.

use chrono::Utc;
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus, SequenceParams};
use kubeflake_crds::timebase::rfc3339;

use kubeflake_crds::conditions::{ConditionStatus, ConditionType, Reason, set_condition};

use crate::controller::id_spaces::blocks::{Blocks, Waiting};
use crate::hub::conditions::Reason as Hub;

/// A year: the `Expiring` condition turns true when less is left.
const EXPIRING_WITHIN_MS: u64 = 365 * 24 * 3600 * 1000;

pub(crate) fn now_ms() -> u64 {
    Utc::now().timestamp_millis().max(0) as u64
}

/// Ready, Exhausted and Expiring for a sequence that is not being deleted.
pub fn ready_status(
    seq: &IdSequence,
    p: &SequenceParams,
    assigned: i64,
    waiting: u64,
    why: &str,
) -> IdSequenceStatus {
    use ConditionStatus::{False, True};
    use ConditionType::{Exhausted, Expiring, Ready};
    let mut status = seq.status.clone().unwrap_or_default();
    let conditions = &mut status.conditions;
    let capacity = p.layout.slot_count() as i64;
    let exhausts_at = p.timebase.exhausts_at_ms(&p.layout);
    let now = now_ms();
    if p.timebase.epoch_unix_ms() > now {
        let message = format!(
            "epoch {} is in the future: sidecars refuse to issue IDs until then; choose an epoch in the past (create a new IdSequence, epoch is immutable)",
            seq.spec.epoch
        );
        set_condition(
            conditions,
            seq,
            Ready,
            False,
            Reason::EpochInFuture,
            &message,
        );
    } else {
        let message = format!("{assigned} of {capacity} slots assigned");
        set_condition(conditions, seq, Ready, True, Reason::Reconciled, &message);
    }
    if waiting > 0 {
        let message = format!("{waiting} pods wait for a free slot: {why}");
        set_condition(
            conditions,
            seq,
            Exhausted,
            True,
            Reason::PodsWaiting,
            &message,
        );
    } else {
        set_condition(
            conditions,
            seq,
            Exhausted,
            False,
            Reason::SlotsAvailable,
            "every labelled pod has a slot",
        );
    }
    if exhausts_at.saturating_sub(now) < EXPIRING_WITHIN_MS {
        let message = format!(
            "the timestamp bits run out at {}; plan a new IdSequence",
            rfc3339(exhausts_at)
        );
        set_condition(
            conditions,
            seq,
            Expiring,
            True,
            Reason::TimestampBitsRunningOut,
            &message,
        );
    } else {
        let message = format!("the timestamp bits last until {}", rfc3339(exhausts_at));
        set_condition(
            conditions,
            seq,
            Expiring,
            False,
            Reason::TimestampBitsLast,
            &message,
        );
    }
    status.observed_generation = seq.metadata.generation;
    status.capacity = Some(capacity);
    status.assigned = Some(assigned);
    status.exhausts_at = Some(rfc3339(exhausts_at));
    status
}

/// Why pods wait for a slot, and what to do (`Exhausted` and its Event): all slots held,
/// or what the sequence's ID space lets it hand out (rule 17).
pub fn why_waiting(blocks: &Blocks, capacity: u64) -> String {
    match blocks {
        Blocks::Lone => format!(
            "all {capacity} slots are held; raise layout.workerBits in a new IdSequence or run fewer pods"
        ),
        Blocks::Joined(_) => "this sequence shares an ID space, and every slot of the blocks this \
             cluster holds is held (or too near its bound); the operator's membership task claims \
             a spare block from the hub (see the IdSpaceMembership's BlocksLow condition)"
            .to_string(),
        Blocks::Waiting(w) => w.to_string(),
    }
}

/// `Ready=False Deleting` with what deletion waits for; everything else kept.
pub fn deleting_status(seq: &IdSequence, message: &str) -> IdSequenceStatus {
    let mut status = seq.status.clone().unwrap_or_default();
    set_condition(
        &mut status.conditions,
        seq,
        ConditionType::Ready,
        ConditionStatus::False,
        Reason::Deleting,
        message,
    );
    status
}

/// The `IdSpace` condition of a sequence that shares an ID space (issue 55): its
/// membership's state with the hub, copied so that `kubectl get idsequence -o yaml` shows
/// it; `False` `NotJoined` once no membership names a sequence that had it; not set for a
/// sequence that never joined.
pub fn set_id_space(status: &mut IdSequenceStatus, seq: &IdSequence, blocks: &Blocks) {
    let had = status
        .conditions
        .iter()
        .any(|c| c.type_ == ConditionType::IdSpace.as_str());
    let Some((value, reason, message)) = id_space(blocks) else {
        if had {
            let message = "no IdSpaceMembership names this sequence any more: no slot is \
                           assigned (its former blocks may be another member's); join again, \
                           or delete the IdSequence and create it again";
            let (t, f) = (ConditionType::IdSpace, ConditionStatus::False);
            set_condition(
                &mut status.conditions,
                seq,
                t,
                f,
                Reason::NotJoined,
                message,
            );
        }
        return;
    };
    let t = ConditionType::IdSpace;
    set_condition(&mut status.conditions, seq, t, value, reason, &message);
}

/// The `IdSpace` condition `blocks` gives (pure): `None` for a lone sequence.
pub fn id_space(blocks: &Blocks) -> Option<(ConditionStatus, Reason, String)> {
    use ConditionStatus::{False, True};
    let joined = match blocks {
        // Not listed yet: nothing is known about a membership, so nothing is written (a
        // sequence with the condition and no membership is one that left its space).
        Blocks::Lone | Blocks::Waiting(Waiting::NotListed) => return None,
        Blocks::Waiting(w) => return Some((False, Reason::NoUsableCopy, w.to_string())),
        Blocks::Joined(j) => j,
    };
    let Some(ready) = &joined.hub.ready else {
        let message = "the operator's membership task has not reached the hub yet";
        return Some((False, Reason::HubCheckPending, message.into()));
    };
    let low = joined.hub.blocks_low.as_ref().filter(|c| c.is_true);
    if ready.is_true {
        return Some(match low {
            Some(low) => (
                True,
                Reason::BlocksLow,
                format!("BlocksLow: {}", low.message),
            ),
            None => (True, Reason::Joined, ready.message.clone()),
        });
    }
    let reason = [
        (Hub::HubCheckPending, Reason::HubCheckPending),
        (Hub::HubUnreachable, Reason::HubUnreachable),
        (Hub::JoinRefused, Reason::JoinRefused),
        (
            Hub::MembershipOfAnotherCluster,
            Reason::MembershipOfAnotherCluster,
        ),
        (Hub::HubWentBack, Reason::HubWentBack),
    ]
    .into_iter()
    .find(|(hub, _)| hub.as_str() == ready.reason)
    .map_or(Reason::BadRecord, |(_, ours)| ours);
    Some((False, reason, ready.message.clone()))
}
