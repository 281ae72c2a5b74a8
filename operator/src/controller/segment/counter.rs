//! What the status says about the segment counter, and the segment status itself. Pure:
//! whether a counter existed (then it is never created again), whether it went back, the
//! messages that say how to repair it, and the claim-rate window.

use chrono::{DateTime, SecondsFormat, Utc};
use kube::ResourceExt;
use kubeflake_crds::segment_counter::{Counter, LIMIT, counter_name};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus, SegmentStatus};

use kubeflake_crds::conditions::{ConditionStatus, ConditionType, Reason, set_condition};

/// The claim rate is measured over windows at least this long (at most one status write
/// for it per window).
const RATE_WINDOW_SECS: i64 = 30;

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
pub(crate) enum Trouble {
    Lost {
        last: LastSeen,
    },
    WentBack {
        last: LastSeen,
        found: u64,
    },
    /// In a format this release does not understand: the parse error, which names the
    /// Lease, the format and what to do.
    Format(kubeflake_crds::segment_counter::CounterError),
}

impl Trouble {
    pub(crate) fn reason(&self) -> Reason {
        match self {
            Trouble::Lost { .. } => Reason::CounterLost,
            Trouble::WentBack { .. } => Reason::CounterWentBack,
            Trouble::Format(_) => Reason::LeaseFormatUnsupported,
        }
    }

    pub(crate) fn message(&self, name: &str) -> String {
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
            Trouble::Format(e) => format!(
                "the operator neither raises the counter nor lists claimants on it, and \
                 sidecars of this release claim nothing from it: {e}"
            ),
        }
    }
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

pub(crate) fn segment_status(
    seq: &IdSequence,
    counter: &Counter,
    now: DateTime<Utc>,
) -> IdSequenceStatus {
    let mut status = seq.status.clone().unwrap_or_default();
    status.observed_generation = seq.metadata.generation;
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
        ConditionType::Ready,
        ConditionStatus::True,
        Reason::CounterReady,
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
            ConditionType::Exhausted,
            ConditionStatus::True,
            Reason::CounterExhausted,
            "every value up to 2^63-1 was claimed; create a new IdSequence",
        );
    } else {
        set_condition(
            &mut status.conditions,
            seq,
            ConditionType::Exhausted,
            ConditionStatus::False,
            Reason::ValuesLeft,
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
            format: 1,
            resource_version: Some("7".into()),
            range: None,
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
        assert_eq!(back.reason().as_str(), "CounterWentBack");
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
