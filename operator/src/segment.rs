//! Segment-mode sequences: no slots. The operator creates the sequence's counter Lease
//! (`next = start`), raises it when `start` is raised (never lowers it), and reports the
//! high-water mark and the claim rate in the status. Sidecars claim blocks from the
//! counter themselves, by compare-and-swap; the operator is not on that path, so its
//! restarts do not matter.
//!
//! The counter has no owner reference on purpose: deleting the IdSequence leaves it, so a
//! sequence re-created under the same name continues above every value issued instead of
//! starting again at `start`. Delete the Lease by hand to really start over.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use kubeflake_crds::segment_counter::{Counter, LIMIT, counter_name, new_counter};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus, SegmentParams, SegmentStatus};

use crate::reconcile::{Context, Error, is_conflict, set_condition, update_status};

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
    let counter = match api.get_opt(&lease_name).await? {
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

    #[test]
    fn a_counter_that_went_down_gives_no_rate() {
        let (rate, _, _) = observe(Some(&window(100, 0, Some(3.0))), 5, at(60));
        assert_eq!(rate, None);
    }
}
