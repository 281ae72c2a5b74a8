//! docs/safety.md rule 22: a counter of a sequence joined to an ID space (format 3) is
//! claimed from only below its limit, moves to the queued range inside the claim's own
//! compare-and-swap, and refuses when the range is used up with none queued.

use super::fake::FakeStore;
use super::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[tokio::test]
async fn rule22_a_claim_stops_at_the_limit_then_moves_to_the_queued_range_in_its_own_write() {
    let store = FakeStore::ranged(990, 1000);
    let backoff = Backoff::default();
    let first = claim(&store, 50, 0, &backoff).await.unwrap();
    assert_eq!(
        first.block,
        Block {
            start: 990,
            end: 1000
        },
        "the rest of the range, not past it"
    );
    store.queue(5000, 6000);
    let writes = store.writes.load(Ordering::SeqCst);
    let moved = claim(&store, 50, first.block.end, &backoff).await.unwrap();
    assert_eq!(
        moved.block,
        Block {
            start: 5000,
            end: 5050
        }
    );
    assert_eq!(
        store.writes.load(Ordering::SeqCst),
        writes + 1,
        "one write: the move and the claim together"
    );
    assert_eq!(store.next(), 5050);
    assert_eq!(
        store.range().unwrap().in_use(store.next()),
        Some((6000, None)),
        "the queued range is the one in use"
    );
}

#[tokio::test]
async fn rule22_a_used_up_range_with_nothing_queued_is_refused_and_nothing_is_written() {
    let store = FakeStore::ranged(1000, 1000);
    let err = claim(&store, 50, 0, &Backoff::default()).await.unwrap_err();
    let ClaimError::RangeUsedUp(message) = &err else {
        panic!("another error: {err}");
    };
    assert!(
        message.contains("used up") && message.contains("rule 22"),
        "{message}"
    );
    assert_eq!(store.writes.load(Ordering::SeqCst), 0);
    assert_eq!(store.next(), 1000);
}

#[tokio::test]
async fn rule22_a_counter_without_a_range_claims_as_before() {
    let store = FakeStore::starting_at(1);
    let c = claim(&store, 10, 0, &Backoff::default()).await.unwrap();
    assert_eq!(c.block, Block { start: 1, end: 11 });
    assert_eq!(store.range(), None, "no range written");
}

/// 16 claimers race over a range that is used up while the operator queues the next
/// ranges: every block lies inside a range the member was given, and none overlaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_concurrent_claimers_stay_inside_the_ranges_given_and_never_overlap() {
    let store = Arc::new(FakeStore::ranged(0, 500));
    let given = [(0u64, 500u64), (10_000, 10_700), (20_000, 20_900)];
    let backoff = Backoff {
        max_conflicts: 10_000,
        ..Backoff::default()
    };
    let queuer = {
        let store = store.clone();
        tokio::spawn(async move {
            for (start, limit) in given[1..].iter().copied() {
                loop {
                    let waiting = store
                        .range()
                        .and_then(|r| r.in_use(store.next()))
                        .is_some_and(|(_, queued)| queued.is_none());
                    if waiting {
                        store.queue(start, limit);
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut blocks: Vec<Block> = Vec::new();
                let mut refused = 0;
                while refused < 200 {
                    let floor = blocks.last().map_or(0, |b| b.end);
                    match claim(store.as_ref(), 7 + i, floor, &backoff).await {
                        Ok(c) => blocks.push(c.block),
                        Err(ClaimError::RangeUsedUp(_)) => {
                            refused += 1;
                            tokio::task::yield_now().await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                blocks
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    queuer.await.unwrap();
    all.sort_by_key(|b| b.start);
    assert!(
        all.windows(2).all(|w| w[0].end <= w[1].start),
        "no two blocks overlap"
    );
    for b in &all {
        assert!(
            given.iter().any(|(s, l)| *s <= b.start && b.end <= *l),
            "block {b:?} outside the ranges given"
        );
    }
    let claimed: u64 = all.iter().map(Block::len).sum();
    assert_eq!(
        claimed,
        500 + 700 + 900,
        "every range used up, nothing else"
    );
}
