//! docs/safety.md rule 22 in the buffer: a sidecar of a joined sequence serves what its
//! range holds, answers `range_used_up` (HTTP 503) once it is used up with none queued,
//! and serves again, from the queued range, as soon as the operator queues one.

use super::super::claim::fake::FakeStore;
use super::*;

fn params(block: u64) -> SegmentParams {
    SegmentParams {
        start: 1,
        block_size: block,
        max_block_size: block,
        prefetch_percent: 50,
        target_claim_interval_secs: 60,
        strict: false,
    }
}

#[tokio::test]
async fn rule22_a_used_up_range_is_refused_with_its_own_reason_until_a_range_is_queued() {
    let store = Arc::new(FakeStore::ranged(100, 130));
    let seg = Segment::start(
        store.clone(),
        params(10),
        Duration::from_millis(300),
        SegmentMetrics::unregistered(),
    );
    let mut served = Vec::new();
    for _ in 0..30 {
        served.push(seg.take_one().await.unwrap());
    }
    assert_eq!(
        served,
        (100..130).collect::<Vec<_>>(),
        "the whole range, in order"
    );
    let err = seg.take_one().await.unwrap_err();
    assert_eq!(err.reason(), "range_used_up", "{err}");
    assert!(err.to_string().contains("used up"), "{err}");
    assert_eq!(seg.check_ready().unwrap_err().reason(), "range_used_up");
    assert_eq!(store.next(), 130, "nothing claimed past the limit");

    store.queue(9000, 9100);
    // The claim is retried with backoff (at most 2 s apart).
    let mut next = None;
    for _ in 0..20 {
        if let Ok(v) = seg.take_one().await {
            next = Some(v);
            break;
        }
    }
    let next = next.expect("served within 6 s of the queue");
    assert_eq!(next, 9000, "served from the queued range once it is there");
    assert!(seg.check_ready().is_ok());
    assert_eq!(
        store.range().unwrap().in_use(store.next()),
        Some((9100, None))
    );
}

/// An `after` above every range the member holds is refused (its request only); it does not
/// stick: once a range is queued, requests are served from it.
#[tokio::test]
async fn rule22_an_after_above_the_ranges_held_is_refused_and_does_not_block_later_claims() {
    let store = Arc::new(FakeStore::ranged(100, 130));
    let seg = Segment::start(
        store.clone(),
        params(10),
        Duration::from_millis(300),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(seg.take_one().await.unwrap(), 100);
    let err = seg.take_one_from(1_000_000).await.unwrap_err();
    assert!(
        matches!(err.reason(), "range_used_up" | "no_block"),
        "{err}"
    );
    store.queue(9000, 9100);
    let mut served = None;
    for _ in 0..20 {
        if let Ok(v) = seg.take_one().await {
            served = Some(v);
            break;
        }
    }
    let v = served.expect("served again within 6 s of the queue");
    assert!(
        v < 130 || (9000..9100).contains(&v),
        "{v} outside the ranges"
    );
}
