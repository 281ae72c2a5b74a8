//! docs/safety.md rule 22: a joined Segment sequence's counter hands out values only inside
//! the ranges its operator took from the hub.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use super::*;
use crate::segment_counter::{NEXT_ANNOTATION, new_counter};
use crate::slot_lease::FORMAT_ANNOTATION;

fn ranged(next: u64, limit: u64, queued: Option<(u64, u64)>) -> Counter {
    Counter {
        next,
        claims: 4,
        format: COUNTER_FORMAT_RANGED,
        resource_version: Some("7".into()),
        range: Some(Ranged {
            limit,
            queued: queued.map(|(start, limit)| Queued { start, limit }),
        }),
    }
}

fn plain(next: u64) -> Counter {
    Counter {
        range: None,
        format: 1,
        ..ranged(next, 0, None)
    }
}

/// A counter Lease with these annotations set over a new counter's.
fn lease_with(format: &str, pairs: &[(&str, &str)]) -> Lease {
    let mut lease = new_counter("orders", "ns", 100);
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(FORMAT_ANNOTATION.into(), format.into());
    for (k, v) in pairs {
        annotations.insert((*k).into(), (*v).into());
    }
    lease
}

#[test]
fn rule22_a_counter_without_a_range_claims_as_before() {
    let taken = take(&plain(100), 10, 0).unwrap();
    assert_eq!((taken.start, taken.end, taken.moved), (100, 110, false));
    assert_eq!((taken.counter.next, taken.counter.claims), (110, 5));
    assert_eq!(taken.counter.range, None);
    assert_eq!(taken.counter.resource_version.as_deref(), Some("7"));
    // `after` raises the start (rule 12); the end of the value range cuts the block.
    assert_eq!(take(&plain(100), 10, 500).unwrap().start, 500);
    assert_eq!(take(&plain(LIMIT - 3), 10, 0).unwrap().end, LIMIT);
    assert_eq!(take(&plain(LIMIT), 10, 0), Err(TakeError::Exhausted));
    assert_eq!(take(&plain(5), 0, 0).unwrap().end, 6, "at least one value");
}

#[test]
fn rule22_a_claim_never_passes_the_limit_and_takes_what_is_left_below_it() {
    let taken = take(&ranged(100, 1000, None), 10, 0).unwrap();
    assert_eq!((taken.start, taken.end, taken.moved), (100, 110, false));
    assert_eq!(taken.counter.range, ranged(0, 1000, None).range);
    let last = take(&ranged(995, 1000, None), 10, 0).unwrap();
    assert_eq!((last.start, last.end), (995, 1000), "the rest, not past it");
    assert_eq!(last.counter.next, 1000);
    // An `after` inside the range raises the start, still cut at the limit.
    let after = take(&ranged(100, 1000, None), 10, 998).unwrap();
    assert_eq!((after.start, after.end), (998, 1000));
}

#[test]
fn rule22_a_used_up_range_moves_to_the_queued_one_inside_the_same_write() {
    let taken = take(&ranged(1000, 1000, Some((5000, 6000))), 10, 0).unwrap();
    assert_eq!((taken.start, taken.end, taken.moved), (5000, 5010, true));
    assert_eq!(taken.counter.next, 5010);
    assert_eq!(
        taken.counter.range,
        ranged(0, 1000, Some((5000, 6000))).range,
        "only next and claims are written"
    );
    assert_eq!(
        taken.counter.range.unwrap().in_use(taken.counter.next),
        Some((6000, None)),
        "next inside the queued range: it is the one in use, and nothing is queued"
    );
    // The next claim goes on in the queued range, up to its limit, then is refused.
    let on = take(&taken.counter, 2000, 0).unwrap();
    assert_eq!((on.start, on.end, on.moved), (5010, 6000, false));
    assert!(matches!(
        take(&on.counter, 1, 0),
        Err(TakeError::RangeUsedUp { limit: 6000, .. })
    ));
    // A range not yet used up is used first: the queue stays.
    let before = take(&ranged(999, 1000, Some((5000, 6000))), 10, 0).unwrap();
    assert_eq!((before.start, before.end, before.moved), (999, 1000, false));
    assert!(before.counter.range.unwrap().queued.is_some());
    // `after` beyond the range in use moves too, above the request's value.
    let after = take(&ranged(100, 1000, Some((5000, 6000))), 10, 5500).unwrap();
    assert_eq!((after.start, after.end, after.moved), (5500, 5510, true));
    // A queued range smaller than the block is taken whole, not passed.
    let small = take(&ranged(1000, 1000, Some((5000, 5003))), 10, 0).unwrap();
    assert_eq!((small.start, small.end), (5000, 5003));
}

#[test]
fn rule22_a_used_up_range_with_nothing_queued_is_refused_and_says_why() {
    let err = take(&ranged(1000, 1000, None), 10, 0).unwrap_err();
    assert!(matches!(err, TakeError::RangeUsedUp { limit: 1000, .. }));
    let message = err.to_string();
    for part in ["used up", "limit 1000", "hub", "rule 22"] {
        assert!(message.contains(part), "{part:?}: {message}");
    }
    // An `after` above every range held is refused too, and says so.
    let err = take(&ranged(100, 1000, Some((5000, 6000))), 10, 6000).unwrap_err();
    assert!(err.to_string().contains("at or above 6000"), "{err}");
    let err = take(&ranged(100, 1000, None), 10, 1000).unwrap_err();
    assert!(matches!(err, TakeError::RangeUsedUp { .. }), "{err}");
}

#[test]
fn rule22_the_range_round_trips_through_the_lease() {
    let lease = lease_with(
        "3",
        &[
            (RANGE_LIMIT_ANNOTATION, "1000"),
            (QUEUED_START_ANNOTATION, "5000"),
            (QUEUED_LIMIT_ANNOTATION, "6000"),
        ],
    );
    let read = Counter::parse(&lease).unwrap();
    assert_eq!(read.range, ranged(0, 1000, Some((5000, 6000))).range);
    assert_eq!((read.next, read.format), (100, 3));
    // The move written back: next inside the queued range, the range annotations kept.
    let moved = take(&Counter { next: 1000, ..read }, 10, 0).unwrap();
    let written = moved.counter.write_into(lease.clone());
    let annotations = written.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[RANGE_LIMIT_ANNOTATION], "1000");
    assert_eq!(annotations[QUEUED_START_ANNOTATION], "5000");
    assert_eq!(annotations[NEXT_ANNOTATION], "5010");
    assert_eq!(annotations[FORMAT_ANNOTATION], "3", "the format kept");
    assert_eq!(Counter::parse(&written).unwrap(), moved.counter);
    // The operator's normal form of it: the range in use as the limit, nothing queued.
    let mut normal = moved.counter.clone();
    normal.range = Some(Ranged {
        limit: 6000,
        queued: None,
    });
    let written = normal.write_into(written);
    let annotations = written.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[RANGE_LIMIT_ANNOTATION], "6000");
    assert!(!annotations.contains_key(QUEUED_START_ANNOTATION));
    assert!(!annotations.contains_key(QUEUED_LIMIT_ANNOTATION));
    assert_eq!(Counter::parse(&written).unwrap(), normal);
    // A counter without a range writes no range annotation.
    let fresh = new_counter("orders", "ns", 1);
    let written = Counter::parse(&fresh).unwrap().write_into(fresh.clone());
    assert_eq!(written.metadata.annotations, fresh.metadata.annotations);
}

#[test]
fn rule22_a_counter_whose_range_does_not_read_as_one_is_refused_whole() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 9] = [
        ("3", &[], "without kubeflake.io/limit"),
        ("3", &[(RANGE_LIMIT_ANNOTATION, "99")], "above"),
        (
            "3",
            &[
                (RANGE_LIMIT_ANNOTATION, "50"),
                (QUEUED_START_ANNOTATION, "101"),
                (QUEUED_LIMIT_ANNOTATION, "200"),
            ],
            "not inside the queued range",
        ),
        (
            "3",
            &[(RANGE_LIMIT_ANNOTATION, "soon")],
            "not a whole number",
        ),
        (
            "3",
            &[(RANGE_LIMIT_ANNOTATION, "+1000")],
            "not a whole number",
        ),
        (
            "3",
            &[
                (RANGE_LIMIT_ANNOTATION, "1000"),
                (QUEUED_START_ANNOTATION, "5000"),
            ],
            "queued range",
        ),
        (
            "3",
            &[
                (RANGE_LIMIT_ANNOTATION, "1000"),
                (QUEUED_START_ANNOTATION, "500"),
                (QUEUED_LIMIT_ANNOTATION, "600"),
            ],
            "queued range",
        ),
        ("1", &[(RANGE_LIMIT_ANNOTATION, "1000")], "format 1"),
        ("2", &[(QUEUED_LIMIT_ANNOTATION, "1000")], "format 2"),
    ];
    for (format, pairs, said) in cases {
        let err = Counter::parse(&lease_with(format, pairs)).unwrap_err();
        assert!(
            matches!(err, CounterError::BadRange { .. }) && !err.is_format(),
            "{pairs:?}: {err}"
        );
        let message = err.to_string();
        for part in [said, "orders-segment-counter", "No value is claimed"] {
            assert!(message.contains(part), "{part:?}: {message}");
        }
    }
}

/// The hub's counter as `id_space::segment_range::take` keeps it (not used here: the
/// module graph keeps `segment_counter` below `id_space`): `size` values from `next` up.
fn hub_take(hub: &mut u64, size: u64) -> (u64, u64) {
    let start = *hub;
    *hub += size;
    (start, *hub)
}

/// The model: two members take ranges from one hub counter, each into its own counter,
/// queueing the next range whenever none is queued, while claims of random sizes (some
/// with `after`) run against both. Every value handed out is handed out once.
#[test]
fn rule22_two_members_taking_ranges_from_one_hub_never_hand_out_a_value_twice() {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let mut hub = 0;
    let mut members: Vec<Counter> = Vec::new();
    for _ in 0..2 {
        let (start, end) = hub_take(&mut hub, 50);
        members.push(ranged(start, end, None));
    }
    let mut seen = std::collections::BTreeSet::new();
    let (mut handed, mut refused) = (0u64, 0u64);
    for step in 0..20_000 {
        let m = usize::try_from(random(2)).unwrap();
        let (in_use, queued) = members[m].range.unwrap().in_use(members[m].next).unwrap();
        if random(4) == 0 && queued.is_none() {
            // The operator: the range in use as the limit, the next one from the hub queued.
            let (start, limit) = hub_take(&mut hub, 1 + random(60));
            members[m].range = Some(Ranged {
                limit: in_use,
                queued: Some(Queued { start, limit }),
            });
            continue;
        }
        let after = if random(10) == 0 {
            members[m].next + random(30)
        } else {
            0
        };
        match take(&members[m], 1 + random(20), after) {
            Ok(taken) => {
                assert!(taken.counter.next >= members[m].next, "next went down");
                for v in taken.start..taken.end {
                    assert!(seen.insert(v), "value {v} handed out twice (step {step})");
                    assert!(v >= after, "{v} not above after {after}");
                }
                handed += taken.end - taken.start;
                members[m] = taken.counter;
            }
            Err(TakeError::RangeUsedUp { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        handed > 10_000 && refused > 0,
        "{handed} handed, {refused} refused"
    );
}
