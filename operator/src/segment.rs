//! Segment-mode sequences: no slots. The operator creates the sequence's counter Lease
//! (`next = start`) for a sequence that never had one, raises it when `start` is raised
//! (never lowers it), and reports the high-water mark and the claim rate in the status.
//! Sidecars claim blocks from the counter themselves, by compare-and-swap; the operator is
//! not on that path, so its restarts do not matter.
//!
//! The counter has no owner reference on purpose: deleting the IdSequence leaves it, so a
//! sequence re-created under the same name continues above every value issued instead of
//! starting again at `start`.
//!
//! **A lost counter is never re-created.** Once the status shows a counter (`status.segment`
//! is set), a missing Lease means it was deleted: creating it again at `start` would hand
//! out values already issued. The operator then sets `Ready=False` (`CounterLost`), records
//! a Warning Event and waits for a person to re-create it above every value issued
//! (docs/segment.md, "The counter was lost"). A counter whose claim count went down (an old
//! copy restored, or re-created by hand without the count) is `CounterWentBack`. The
//! operator does not touch it: the status keeps the last good observation, and every
//! sidecar, even one started since, refuses to claim from a counter with fewer claims than
//! `status.segment.blocksClaimed`. Raising it to the last `next` seen would not be enough
//! (that is only a lower bound: sidecars claim between two looks), so a person repairs it.
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kubeflake_crds::segment_counter::{Counter, LIMIT, counter_name, new_counter};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus, SegmentParams, SegmentStatus};

use crate::reconcile::{
    Context, Error, is_conflict, not_ready_status, set_condition, update_status,
};

/// How often a Segment sequence is looked at again (the counter is not watched).
const RESYNC: Duration = Duration::from_secs(15);
/// The claim rate is measured over windows at least this long (at most one status write
/// for it per window).
const RATE_WINDOW_SECS: i64 = 30;

/// Reconciles one Segment-mode sequence that is not being deleted.
pub async fn reconcile(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    name: &str,
    params: &SegmentParams,
) -> Result<Action, Error> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let lease_name = counter_name(name);
    let found = api.get_opt(&lease_name).await?;
    if found.is_none() {
        // Judge on the freshest status, not the cache: the status written right after the
        // counter was created must not be missed.
        let sequences: Api<IdSequence> = Api::namespaced(ctx.client.clone(), ns);
        let fresh = sequences.get(name).await?;
        if let Some(last) = counter_existed(fresh.status.as_ref()) {
            return counter_trouble(&fresh, ctx, &Trouble::Lost { last }).await;
        }
    }
    if let Some(lease) = &found {
        let counter = Counter::parse(lease)?;
        if let Some(last) = went_back(seq.status.as_ref(), &counter) {
            let found = counter.next;
            return counter_trouble(seq, ctx, &Trouble::WentBack { last, found }).await;
        }
    }
    let counter = match found {
        None => match api
            .create(&PostParams::default(), &new_counter(name, ns, params.start))
            .await
        {
            Ok(created) => {
                tracing::info!(sequence = name, namespace = ns, counter = %lease_name, start = params.start, "created the segment counter");
                Counter::parse(&created)?
            }
            Err(e) if is_conflict(&e) => return Ok(Action::requeue(Duration::from_millis(500))),
            Err(e) => return Err(e.into()),
        },
        Some(lease) => {
            let counter = Counter::parse(&lease)?;
            if counter.next >= params.start {
                counter
            } else {
                // start was raised: move the counter up to it (a CAS; never down).
                let raised = Counter {
                    next: params.start,
                    ..counter
                };
                match api
                    .replace(
                        &lease_name,
                        &PostParams::default(),
                        &raised.write_into(lease),
                    )
                    .await
                {
                    Ok(written) => {
                        tracing::info!(
                            sequence = name,
                            namespace = ns,
                            next = params.start,
                            "raised the segment counter to spec.segment.start"
                        );
                        Counter::parse(&written)?
                    }
                    Err(e) if is_conflict(&e) => {
                        return Ok(Action::requeue(Duration::from_millis(500)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    let status = segment_status(seq, &counter, Utc::now());
    update_status(seq, ctx, status).await?;
    Ok(Action::requeue(RESYNC))
}

/// What the status last saw of the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastSeen {
    /// `status.segment.next`: a lower bound of the counter before it was lost, not more.
    pub next: u64,
    pub claims: u64,
}

/// Whether the status shows that this sequence had a counter: then a missing counter was
/// lost, and must not be created again at `start`.
pub fn counter_existed(status: Option<&IdSequenceStatus>) -> Option<LastSeen> {
    let seen = status?.segment.as_ref()?;
    if seen.next.is_none() && seen.blocks_claimed.is_none() {
        return None;
    }
    let as_u64 = |v: Option<i64>| v.map_or(0, |v| u64::try_from(v).unwrap_or(0));
    Some(LastSeen {
        next: as_u64(seen.next),
        claims: as_u64(seen.blocks_claimed),
    })
}

/// Whether `counter` is older than what the status saw: its claim count went down. Claims
/// only ever grow (a graceful give-back lowers `next` but keeps the count), so fewer claims
/// means the Lease was re-created or restored from an older copy.
pub fn went_back(status: Option<&IdSequenceStatus>, counter: &Counter) -> Option<LastSeen> {
    counter_existed(status).filter(|last| counter.claims < last.claims)
}

/// Why the counter cannot be trusted.
enum Trouble {
    Lost { last: LastSeen },
    WentBack { last: LastSeen, found: u64 },
}

impl Trouble {
    fn reason(&self) -> &'static str {
        match self {
            Trouble::Lost { .. } => "CounterLost",
            Trouble::WentBack { .. } => "CounterWentBack",
        }
    }

    fn message(&self, name: &str) -> String {
        let lease = counter_name(name);
        match self {
            Trouble::Lost { last } => format!(
                "segment counter Lease {lease} was deleted after it had reached at least {next} \
                 ({claims} blocks claimed). It is NOT re-created at spec.segment.start, which \
                 would issue values again; sidecars serve what they hold, then refuse. Re-create \
                 it by hand with kubeflake.io/next above every value ever issued (at least \
                 {next}, which is only a lower bound) and kubeflake.io/claims at least {claims}; \
                 see docs/segment.md, \"The counter was lost\"",
                next = last.next,
                claims = last.claims
            ),
            Trouble::WentBack { last, found } => format!(
                "segment counter Lease {lease} went backwards: it shows fewer claims than the \
                 {claims} already seen (re-created, or restored from an older copy), and values \
                 from {found} up may already have been issued. Sidecars refuse to claim from it \
                 and serve what they hold, then refuse. Set kubeflake.io/next above every value \
                 ever issued (at least {next}, which is only a lower bound) and \
                 kubeflake.io/claims to at least {claims}; see docs/segment.md, \"The counter \
                 was lost\"",
                claims = last.claims,
                next = last.next,
            ),
        }
    }
}

/// Ready=False with the trouble's reason, a Warning Event when it is new, and the last good
/// `status.segment` kept as it is (it is the evidence).
async fn counter_trouble(
    seq: &IdSequence,
    ctx: &Context,
    trouble: &Trouble,
) -> Result<Action, Error> {
    let name = seq.name_any();
    let message = trouble.message(&name);
    tracing::error!(sequence = %name, namespace = seq.namespace().unwrap_or_default(), reason = trouble.reason(), %message, "segment counter cannot be trusted");
    let was = seq
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason.clone());
    let status = not_ready_status(seq, trouble.reason(), &message);
    if was.as_deref() != Some(trouble.reason()) {
        let event = Event {
            type_: EventType::Warning,
            reason: trouble.reason().into(),
            note: Some(message.chars().take(1000).collect()),
            action: "CheckCounter".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &seq.object_ref(&())).await {
            tracing::warn!(error = %e, "could not record an Event");
        }
    }
    update_status(seq, ctx, status).await?;
    Ok(Action::requeue(RESYNC))
}

/// The rate window after observing `claims` at `now`: `(claims per minute, window start,
/// claims at the window start)`. The rate is recomputed when the window is at least
/// [`RATE_WINDOW_SECS`] long (then a new window starts); otherwise the last rate is kept.
pub fn observe(
    previous: Option<&SegmentStatus>,
    claims: u64,
    now: DateTime<Utc>,
) -> (Option<f64>, String, i64) {
    let claims = i64::try_from(claims).unwrap_or(i64::MAX);
    let now_text = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    let window = previous.and_then(|p| {
        let at = DateTime::parse_from_rfc3339(p.observed_at.as_deref()?).ok()?;
        Some((p, at.with_timezone(&Utc), p.claims_at_observed_at?))
    });
    let Some((prev, start, start_claims)) = window else {
        return (None, now_text, claims);
    };
    let elapsed = now.signed_duration_since(start).num_seconds();
    if (0..RATE_WINDOW_SECS).contains(&elapsed) {
        let start_text = prev.observed_at.clone().unwrap_or(now_text);
        return (prev.claims_per_minute, start_text, start_claims);
    }
    // A counter that went down was re-created by hand: no rate for this window.
    let rate = (elapsed > 0 && claims >= start_claims)
        .then(|| ((claims - start_claims) as f64 * 60.0 / elapsed as f64 * 100.0).round() / 100.0);
    (rate, now_text, claims)
}

fn segment_status(seq: &IdSequence, counter: &Counter, now: DateTime<Utc>) -> IdSequenceStatus {
    let mut status = seq.status.clone().unwrap_or_default();
    status.observed_generation = seq.meta().generation;
    let (claims_per_minute, observed_at, claims_at_observed_at) =
        observe(status.segment.as_ref(), counter.claims, now);
    status.segment = Some(SegmentStatus {
        next: Some(i64::try_from(counter.next).unwrap_or(i64::MAX)),
        blocks_claimed: Some(i64::try_from(counter.claims).unwrap_or(i64::MAX)),
        claims_per_minute,
        observed_at: Some(observed_at),
        claims_at_observed_at: Some(claims_at_observed_at),
    });
    let name = seq.name_any();
    set_condition(
        &mut status.conditions,
        seq,
        "Ready",
        "True",
        "CounterReady",
        &format!(
            "segment counter {} is at {}; sidecars claim blocks from it",
            counter_name(&name),
            counter.next
        ),
    );
    if counter.next >= LIMIT {
        set_condition(
            &mut status.conditions,
            seq,
            "Exhausted",
            "True",
            "CounterExhausted",
            "every value up to 2^63-1 was claimed; create a new IdSequence",
        );
    } else {
        set_condition(
            &mut status.conditions,
            seq,
            "Exhausted",
            "False",
            "ValuesLeft",
            &format!("{} values left", LIMIT - counter.next),
        );
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn window(start_claims: i64, secs: i64, rate: Option<f64>) -> SegmentStatus {
        SegmentStatus {
            next: Some(1),
            blocks_claimed: Some(start_claims),
            claims_per_minute: rate,
            observed_at: Some(at(secs).to_rfc3339_opts(SecondsFormat::Secs, true)),
            claims_at_observed_at: Some(start_claims),
        }
    }

    #[test]
    fn the_claim_rate_is_measured_over_windows_of_at_least_30_s() {
        let (rate, _, start) = observe(None, 10, at(0));
        assert_eq!((rate, start), (None, 10), "no rate from one observation");
        let (rate, when, start) = observe(Some(&window(10, 0, None)), 70, at(60));
        assert_eq!((rate, start), (Some(60.0), 70), "a new window starts");
        assert_eq!(when, at(60).to_rfc3339_opts(SecondsFormat::Secs, true));
        let (rate, _, _) = observe(Some(&window(10, 0, None)), 25, at(45));
        assert_eq!(rate, Some(20.0));
    }

    #[test]
    fn within_a_window_the_rate_and_window_are_kept_so_status_writes_stay_rare() {
        let prev = window(10, 0, Some(5.0));
        let (rate, when, start) = observe(Some(&prev), 99, at(10));
        assert_eq!((rate, start), (Some(5.0), 10));
        assert_eq!(Some(when), prev.observed_at);
    }

    fn status_with(segment: Option<SegmentStatus>) -> IdSequenceStatus {
        IdSequenceStatus {
            segment,
            ..Default::default()
        }
    }

    fn counter(next: u64, claims: u64) -> Counter {
        Counter {
            next,
            claims,
            resource_version: Some("7".into()),
        }
    }

    #[test]
    fn a_sequence_whose_status_saw_a_counter_never_gets_it_created_again() {
        let seen = SegmentStatus {
            next: Some(5000),
            blocks_claimed: Some(12),
            ..Default::default()
        };
        assert_eq!(
            counter_existed(Some(&status_with(Some(seen)))),
            Some(LastSeen {
                next: 5000,
                claims: 12
            })
        );
        // Even a counter seen at start with no claim yet: a sidecar may have claimed since.
        let fresh = SegmentStatus {
            next: Some(1),
            blocks_claimed: Some(0),
            ..Default::default()
        };
        assert!(counter_existed(Some(&status_with(Some(fresh)))).is_some());
    }

    #[test]
    fn only_a_sequence_that_never_had_a_counter_gets_one_created_at_start() {
        assert_eq!(counter_existed(None), None);
        assert_eq!(counter_existed(Some(&status_with(None))), None);
        assert_eq!(
            counter_existed(Some(&status_with(Some(SegmentStatus::default())))),
            None
        );
    }

    #[test]
    fn fewer_claims_than_seen_means_the_counter_went_back_but_a_give_back_does_not() {
        let seen = status_with(Some(SegmentStatus {
            next: Some(5000),
            blocks_claimed: Some(12),
            ..Default::default()
        }));
        let last = LastSeen {
            next: 5000,
            claims: 12,
        };
        assert_eq!(
            went_back(Some(&seen), &counter(1, 0)),
            Some(last),
            "re-created"
        );
        assert_eq!(
            went_back(Some(&seen), &counter(4000, 9)),
            Some(last),
            "old backup"
        );
        assert_eq!(
            went_back(Some(&seen), &counter(4500, 12)),
            None,
            "a graceful give-back lowers next but keeps the claim count"
        );
        assert_eq!(went_back(Some(&seen), &counter(4800, 13)), None);
        assert_eq!(went_back(None, &counter(1, 0)), None, "nothing seen yet");
    }

    #[test]
    fn the_lost_counter_condition_says_what_happened_and_how_to_recover() {
        let last = LastSeen {
            next: 5000,
            claims: 12,
        };
        let lost = Trouble::Lost { last }.message("orders");
        for needle in [
            "orders-segment-counter",
            "NOT re-created",
            "at least 5000",
            "lower bound",
            "kubeflake.io/claims at least 12",
        ] {
            assert!(lost.contains(needle), "{needle}: {lost}");
        }
        let back = Trouble::WentBack { last, found: 1 };
        assert_eq!(back.reason(), "CounterWentBack");
        let text = back.message("orders");
        for needle in [
            "from 1 up",
            "Sidecars refuse",
            "at least 5000",
            "kubeflake.io/claims to at least 12",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }

    #[test]
    fn a_counter_that_went_down_gives_no_rate() {
        let (rate, _, _) = observe(Some(&window(100, 0, Some(3.0))), 5, at(60));
        assert_eq!(rate, None);
    }
}
