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
