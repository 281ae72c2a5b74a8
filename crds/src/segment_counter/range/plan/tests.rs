//! docs/safety.md rule 22, the operator's decisions.

use super::super::take;
use super::*;

fn plain(next: u64) -> Counter {
    Counter {
        next,
        claims: 3,
        format: 1,
        resource_version: Some("9".into()),
        range: None,
    }
}

#[test]
fn rule22_a_joining_sequence_gets_an_empty_range_and_claims_nothing_until_one_is_queued() {
    let joined = into_ranged(&plain(700));
    assert_eq!(joined.format, COUNTER_FORMAT_RANGED);
    assert_eq!((joined.next, joined.claims), (700, 3));
    assert!(
        matches!(
            take(&joined, 10, 0),
            Err(super::super::TakeError::RangeUsedUp { .. })
        ),
        "never from the plain counter"
    );
    assert_eq!(into_ranged(&joined), joined, "already ranged: unchanged");
    let queued = queue(&joined, 5000..6000).unwrap();
    let taken = take(&queued, 10, 0).unwrap();
    assert_eq!((taken.start, taken.end), (5000, 5010));
}

#[test]
fn rule22_a_range_is_queued_only_above_the_range_in_use_and_only_one_at_a_time() {
    let joined = queue(&into_ranged(&plain(700)), 5000..6000).unwrap();
    assert!(matches!(
        queue(&joined, 7000..8000),
        Err(QueueError::AlreadyQueued {
            start: 5000,
            limit: 6000
        })
    ));
    // A claim moved the counter into the queued range: the next range is queued behind
    // that one, and the limit is rewritten to it.
    let moved = take(&joined, 10, 0).unwrap().counter;
    let next = queue(&moved, 7000..8000).unwrap();
    assert_eq!(
        next.range,
        Some(Ranged {
            limit: 6000,
            queued: Some(Queued {
                start: 7000,
                limit: 8000
            })
        })
    );
    assert_eq!(
        (next.next, next.resource_version.as_deref()),
        (5010, Some("9"))
    );
    for bad in [5500..9000, 100..200, 9000..9000, LIMIT..LIMIT + 1] {
        assert!(
            matches!(queue(&moved, bad.clone()), Err(QueueError::NotAbove { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(
        queue(&plain(1), 5..6),
        Err(QueueError::NotRanged(1))
    ));
}

#[test]
fn rule22_the_next_range_is_taken_ahead_of_need_sized_to_the_rate() {
    let queued = queue(&into_ranged(&plain(0)), 0..10_000).unwrap();
    assert_eq!(need(&queued, 1.0, 3600, 1000), None, "already queued");
    let in_use = take(&queued, 100, 0).unwrap().counter; // moved, nothing queued after it
    assert_eq!(
        in_use.range.unwrap().in_use(in_use.next),
        Some((10_000, None))
    );
    // 9,900 left: enough for the lead at this rate, nothing yet.
    assert_eq!(need(&in_use, 0.1, 3600, 100), None);
    // Not enough: a range lasting the lead.
    assert_eq!(need(&in_use, 10.0, 3600, 100), Some(36_000));
    // At least `min`, at most MAX_RANGE.
    assert_eq!(need(&in_use, 0.0, 3600, 20_000), Some(20_000));
    assert_eq!(need(&in_use, 1e30, 3600, 1), Some(MAX_RANGE));
    assert_eq!(need(&plain(5), 10.0, 3600, 1), None, "not joined: never");
}

/// The join-time rule: a sequence that issued values alone before it joined queues only
/// values above every one of them (its counter's `next`), however far behind the hub is.
#[test]
fn rule22_a_joining_counter_ahead_of_the_hub_queues_only_values_above_what_it_issued() {
    let alone = plain(5_000);
    // The hub is behind: enough is taken to pass the counter and still leave `want`.
    assert_eq!(take_size(&alone, 1_000, 100), 4_100);
    assert_eq!(usable(&alone, 1_000..5_100), Some(5_000..5_100));
    assert_eq!(usable(&alone, 1_000..5_000), None, "wholly below: a gap");
    // Far behind: at most one range per write, nothing of it usable yet.
    assert_eq!(take_size(&alone, 0, 100), 5_100);
    let far = plain(3 * MAX_RANGE);
    assert_eq!(take_size(&far, 0, 100), MAX_RANGE);
    assert_eq!(usable(&far, 0..MAX_RANGE), None);
    // Whatever the hub hands out, nothing queued lies below the counter's next.
    for hub in [0, 4_999, 5_000, 9_000] {
        let size = take_size(&alone, hub, 100);
        let range = usable(&alone, hub..hub + size).expect("something usable");
        assert!(range.start >= alone.next, "hub at {hub}: {range:?}");
        assert!(range.end - range.start >= 100);
        match pending(&alone, range.clone()) {
            Pending::Queue(written) => {
                let taken = take(&written, 10, 0).unwrap();
                assert!(
                    taken.start >= alone.next,
                    "hub at {hub}: claimed {}",
                    taken.start
                );
            }
            other => panic!("hub at {hub}: {other:?}"),
        }
    }
    // A joined counter: its floor is the limit in use, or the queued range's end.
    let joined = queue(&into_ranged(&plain(700)), 5_000..6_000).unwrap();
    assert_eq!(floor(&joined), 6_000);
    assert_eq!(floor(&into_ranged(&plain(700))), 700);
}

/// A range kept in the membership's status is queued once, whichever write the task
/// crashed before: not yet queued, queued, moved to, used up, or overtaken by claims of the
/// plain counter before the join.
#[test]
fn rule22_a_range_kept_in_the_status_is_queued_at_most_once_whatever_the_crash_point() {
    // Not queued yet, counter not joined: put in format 3 and queued in one write.
    let Pending::Queue(written) = pending(&plain(700), 1_000..2_000) else {
        panic!("not queued")
    };
    assert_eq!(written.format, COUNTER_FORMAT_RANGED);
    assert_eq!(
        written.range.unwrap().queued,
        Some(Queued {
            start: 1_000,
            limit: 2_000
        })
    );
    // Queued already (crash before the status was cleared): done.
    assert_eq!(pending(&written, 1_000..2_000), Pending::Done);
    // Moved to by a claim, and used up: done, never queued again.
    let moved = take(&written, 10, 0).unwrap().counter;
    assert!(moved.next > 1_000);
    assert_eq!(pending(&moved, 1_000..2_000), Pending::Done);
    let used_up = take(&moved, 5_000, 0).unwrap().counter;
    assert_eq!(pending(&used_up, 1_000..2_000), Pending::Done);
    // The plain counter claimed into the range before the join: only the rest is queued.
    let Pending::Queue(rest) = pending(&plain(1_500), 1_000..2_000) else {
        panic!("not queued")
    };
    assert_eq!(
        rest.range.unwrap().queued,
        Some(Queued {
            start: 1_500,
            limit: 2_000
        })
    );
    assert_eq!(pending(&plain(2_000), 1_000..2_000), Pending::Done);
    // Another range queued: wait.
    assert_eq!(pending(&written, 3_000..4_000), Pending::Wait);
}

/// A ranged counter its membership did not record (restored into another cluster) gives
/// its ranges up: nothing more is claimed from them, whether or not a claim had moved.
#[test]
fn rule22_a_counter_whose_ranges_are_given_up_claims_nothing_more_from_them() {
    assert_eq!(
        abandon(&plain(700)),
        None,
        "a counter without a range keeps it"
    );
    let joined = queue(&into_ranged(&plain(700)), 5_000..6_000).unwrap();
    let moved = take(&joined, 10, 0).unwrap().counter;
    for counter in [joined, moved] {
        let given_up = abandon(&counter).unwrap();
        assert_eq!(given_up.next, counter.next);
        assert!(
            matches!(
                take(&given_up, 1, 0),
                Err(super::super::TakeError::RangeUsedUp { .. })
            ),
            "{given_up:?}"
        );
    }
}

#[test]
fn rule22_a_range_queued_behind_an_empty_range_in_use_is_moved_to_at_once() {
    // Given up at 700 (an etcd restore): sidecars whose blocks reach 9,000 refuse a counter
    // below their top, so `next` moves into the range queued from the hub.
    let given_up = abandon(&queue(&into_ranged(&plain(700)), 900..1000).unwrap()).unwrap();
    let queued = queue(&given_up, 10_000..20_000).unwrap();
    let lifted = lift(&queued);
    assert_eq!(lifted.next, 10_000);
    let taken = take(&lifted, 10, 0).unwrap();
    assert_eq!((taken.start, taken.end), (10_000, 10_010));
    // Values left in the range in use, or nothing queued: unchanged.
    let in_use = queue(&into_ranged(&plain(700)), 900..1000).unwrap();
    let moved = take(&in_use, 10, 0).unwrap().counter;
    assert_eq!(lift(&moved), moved, "values left below the limit");
    assert_eq!(lift(&given_up), given_up, "nothing queued");
    assert_eq!(lift(&plain(700)), plain(700));
}
