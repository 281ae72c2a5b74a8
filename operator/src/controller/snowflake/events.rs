//! The Events of a Snowflake pass: one aggregated Event per kind and pass, so that a burst
//! of pods does not become a burst of Events. A failed Event is logged, never fatal.

use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kubeflake_crds::sequence::IdSequence;
use kubeflake_crds::slot_lease::SlotLeaseError;

use super::apply::Outcome;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::update_status::not_ready;
use kubeflake_crds::conditions::{ConditionStatus, ConditionType, Reason, has_condition};

/// The Events for this pass's outcomes: `(type, reason, action, note)`. Pure.
pub fn events_for(
    seq: &IdSequence,
    outcomes: &[Outcome],
    waiting: u64,
    why: &str,
) -> Vec<(EventType, &'static str, &'static str, String)> {
    let mut assigned = Vec::new();
    let mut released = Vec::new();
    for o in outcomes {
        match o {
            Outcome::Assigned { slot, pod } => assigned.push(format!("{}->{}", pod.name, slot.0)),
            Outcome::Released { slot, pod, reason } => released.push(format!(
                "{} from {} ({})",
                slot.0,
                pod.as_deref().unwrap_or("?"),
                reason.label()
            )),
            _ => {}
        }
    }
    let summarize = |items: &[String]| {
        let shown: Vec<&str> = items.iter().take(10).map(String::as_str).collect();
        let more = items.len().saturating_sub(shown.len());
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    let mut events = Vec::new();
    if !assigned.is_empty() {
        events.push((
            EventType::Normal,
            "SlotsAssigned",
            "Assign",
            format!(
                "assigned {} slots: {}",
                assigned.len(),
                summarize(&assigned)
            ),
        ));
    }
    if !released.is_empty() {
        events.push((
            EventType::Normal,
            "SlotsReclaimed",
            "Reclaim",
            format!(
                "released {} slots, fences kept: {}",
                released.len(),
                summarize(&released)
            ),
        ));
    }
    let was_exhausted = has_condition(
        seq.status.as_ref(),
        ConditionType::Exhausted,
        ConditionStatus::True,
    );
    if waiting > 0 && !was_exhausted {
        events.push((
            EventType::Warning,
            "Exhausted",
            "Assign",
            format!("{waiting} pods wait: {why}"),
        ));
    }
    events
}

/// Publishes this pass's Events.
pub async fn publish(
    seq: &IdSequence,
    ctx: &Context,
    outcomes: &[Outcome],
    waiting: u64,
    why: &str,
) {
    let reference = seq.object_ref(&());
    for (type_, reason, action, note) in events_for(seq, outcomes, waiting, why) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "could not record an Event");
        }
    }
}

/// A slot Lease of the sequence is in a format this release does not understand: the pass
/// plans nothing (no guess at what its fields mean), and says so in the log, in
/// `Ready=False LeaseFormatUnsupported` and in a Warning Event (recorded when the reason is
/// new, not on every pass). The Lease is not touched.
pub async fn unreadable_lease(
    seq: &IdSequence,
    ctx: &Context,
    e: &SlotLeaseError,
) -> Result<(), Error> {
    let reason = Reason::LeaseFormatUnsupported;
    let message = format!(
        "no slot of this sequence is assigned, reclaimed or deleted until every slot Lease \
         is readable: {e}"
    );
    tracing::error!(sequence = %seq.name_any(), namespace = seq.namespace().unwrap_or_default(), reason = reason.as_str(), %message, "slot Lease in a format this operator does not understand");
    not_ready(seq, ctx, reason, "CheckLeases", &message).await
}
