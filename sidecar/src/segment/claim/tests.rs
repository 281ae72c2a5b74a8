use super::fake::FakeStore;
use super::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blocks_never_overlap_under_concurrent_claims() {
    let store = Arc::new(FakeStore::starting_at(1));
    let backoff = Backoff {
        max_conflicts: 10_000,
        ..Backoff::default()
    };
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut blocks: Vec<Block> = Vec::new();
                for _ in 0..40 {
                    // The floor of a running claimer: never a false refusal.
                    let floor = blocks.last().map_or(0, |b| b.end);
                    let c = claim(store.as_ref(), 10 + i, floor, &backoff)
                        .await
                        .unwrap();
                    blocks.push(c.block);
                }
                blocks
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        let blocks = t.await.unwrap();
        assert!(
            blocks.windows(2).all(|w| w[0].end <= w[1].start),
            "one claimer's blocks increase"
        );
        all.extend(blocks);
    }
    all.sort_by_key(|b| b.start);
    assert_eq!(all.len(), 640);
    assert!(
        all.windows(2).all(|w| w[0].end <= w[1].start),
        "no two blocks overlap"
    );
    assert_eq!(all[0].start, 1);
    assert_eq!(
        all.last().unwrap().end,
        store.next(),
        "the counter is the high-water mark"
    );
    let claimed: u64 = all.iter().map(Block::len).sum();
    assert_eq!(
        claimed,
        store.next() - 1,
        "and without gaps when nobody abandons a block"
    );
}

#[tokio::test]
async fn a_failed_claim_hands_out_nothing_and_the_next_claim_starts_above_it() {
    let store = FakeStore::starting_at(100);
    store
        .apply_then_fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(claim(&store, 50, 0, &Backoff::default()).await.is_err());
    assert_eq!(
        store.next(),
        150,
        "the write went through though its reply was lost"
    );
    store
        .apply_then_fail
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let c = claim(&store, 50, 0, &Backoff::default()).await.unwrap();
    assert_eq!(
        c.block,
        Block {
            start: 150,
            end: 200
        },
        "the lost block is a gap, never reused"
    );
}

#[tokio::test]
async fn the_last_block_is_cut_at_2_pow_63_and_then_the_sequence_is_exhausted() {
    let store = FakeStore::starting_at(LIMIT - 5);
    let c = claim(&store, 1000, 0, &Backoff::default()).await.unwrap();
    assert_eq!(
        c.block,
        Block {
            start: LIMIT - 5,
            end: LIMIT
        }
    );
    assert_eq!(
        claim(&store, 1000, 0, &Backoff::default()).await,
        Err(ClaimError::Exhausted)
    );
}

#[tokio::test]
async fn nothing_is_given_back_to_a_counter_that_may_only_go_up() {
    let store = FakeStore {
        only_up: true,
        ..FakeStore::starting_at(0)
    };
    claim(&store, 100, 0, &Backoff::default()).await.unwrap();
    let writes = store.writes.load(Ordering::SeqCst);
    assert!(!give_back(&store, 40, 100).await.unwrap());
    assert_eq!(store.next(), 100, "the unused values stay a gap");
    assert_eq!(
        store.writes.load(Ordering::SeqCst),
        writes,
        "not even tried: the API server would refuse it"
    );
}

#[tokio::test]
async fn give_back_lowers_the_counter_only_when_nobody_claimed_after() {
    let store = FakeStore::starting_at(0);
    claim(&store, 100, 0, &Backoff::default()).await.unwrap();
    assert!(give_back(&store, 40, 100).await.unwrap());
    assert_eq!(store.next(), 40);
    claim(&store, 100, 0, &Backoff::default()).await.unwrap(); // someone else: 40..140
    assert!(
        !give_back(&store, 90, 100).await.unwrap(),
        "100 is no longer the top"
    );
    assert_eq!(store.next(), 140);
}

#[tokio::test]
async fn a_counter_below_the_claimers_own_top_is_refused_never_served() {
    let store = FakeStore::starting_at(1);
    let a = claim(&store, 100, 0, &Backoff::default()).await.unwrap();
    assert_eq!(a.block.end, 101);
    // kubectl delete lease; the counter comes back at start (or from an old backup).
    store.recreate_at(1);
    let err = claim(&store, 100, a.block.end, &Backoff::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ClaimError::CounterBehind {
            next: 1,
            floor: 101
        }
    );
    assert!(
        err.to_string().contains("Ready"),
        "says where to look: {err}"
    );
    assert_eq!(store.next(), 1, "nothing was written");
    store.recreate_at(101);
    let b = claim(&store, 100, a.block.end, &Backoff::default())
        .await
        .unwrap();
    assert_eq!(b.block.start, 101, "a counter at the floor is fine");
}

/// Rule 22 (and Segment rules 4/5): a pod that claimed nothing while the others claimed
/// still knows how far the counter got (its watch records every `next` it sees). An etcd
/// snapshot restored under it brings the counter back below that: its next claim refuses
/// it, although the counter is above this pod's own blocks, instead of claiming values the
/// others already issued.
#[tokio::test]
async fn rule22_a_counter_below_the_highest_next_this_claimer_saw_is_refused_though_its_own_blocks_are_lower()
 {
    let store = FakeStore {
        only_up: true,
        ..FakeStore::starting_at(1)
    };
    let mine = claim(&store, 100, 0, &Backoff::default()).await.unwrap();
    assert_eq!(mine.block, Block { start: 1, end: 101 });
    // The snapshot is taken here (next = 101); the other pods claim up to 5,000 after it,
    // and this pod's watch of the counter sees it there.
    store.counter.lock().unwrap().0 = 5_000;
    assert_eq!(store.seen.record(5_000), None);
    store.recreate_at(101); // the snapshot restored: next = 101
    let err = claim(&store, 100, mine.block.end, &Backoff::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ClaimError::CounterBehind {
            next: 101,
            floor: 5_000
        }
    );
    assert!(err.to_string().contains("highest next it saw"), "{err}");
    assert_eq!(
        store.next(),
        101,
        "nothing was claimed from the restored copy"
    );
    // Raised above every value issued (the operator's fresh range, or a person): claims
    // resume there.
    store.recreate_at(5_000);
    let after = claim(&store, 100, mine.block.end, &Backoff::default())
        .await
        .unwrap();
    assert_eq!(after.block.start, 5_000);
}

/// What a claimer saw the counter at only ever rises; a lower sighting says by how much
/// the counter went back, and leaves the record as it was.
#[test]
fn the_highest_next_seen_only_rises_and_a_lower_sighting_is_reported() {
    let seen = HighestSeen::default();
    assert_eq!(seen.get(), 0);
    assert_eq!(seen.record(700), None);
    assert_eq!(seen.record(700), None, "the same value is no step back");
    assert_eq!(seen.record(300), Some(700));
    assert_eq!(seen.get(), 700);
    assert_eq!(seen.record(900), None);
    assert_eq!(seen.get(), 900);
}

/// A store whose counter may go down (a standalone file: a graceful stop gives values
/// back) keeps no such record: its floor is the claimer's own top alone.
#[tokio::test]
async fn a_counter_that_may_go_down_keeps_no_record_of_what_was_seen() {
    let store = FakeStore::starting_at(1);
    claim(&store, 100, 0, &Backoff::default()).await.unwrap();
    assert!(store.may_lower());
    assert_eq!(store.seen_next(), 0);
}

#[tokio::test]
async fn a_freshly_started_claimer_refuses_a_counter_with_fewer_claims_than_recorded() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = FakeStore::starting_at(1);
    let b = Backoff::default();
    for _ in 0..3 {
        claim(&store, 100, 0, &b).await.unwrap();
    }
    // The operator recorded 3 claims; then the counter is re-created at 1 (no claims).
    store.known_claims.store(3, SeqCst);
    store.recreate_at(1);
    // A sidecar that just started has no floor of its own: the record stops it.
    let err = claim(&store, 100, 0, &b).await.unwrap_err();
    assert_eq!(
        err,
        ClaimError::CounterWentBack {
            claims: 0,
            known: 3
        }
    );
    assert!(
        err.to_string()
            .contains("kubeflake.io/claims is at least 3"),
        "{err}"
    );
    assert_eq!(store.next(), 1, "nothing was written");
    // Repaired by hand: next above every value issued, claims at least the record.
    *store.counter.lock().unwrap() = (10_000, 3, 99);
    let repaired = claim(&store, 100, 0, &b).await.unwrap();
    assert_eq!(repaired.block.start, 10_000);
}

#[tokio::test]
async fn a_graceful_give_back_keeps_the_claim_count_so_the_record_never_refuses_it() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = FakeStore::starting_at(0);
    let b = Backoff::default();
    let g = claim(&store, 100, 0, &b).await.unwrap().block;
    store.known_claims.store(1, SeqCst);
    assert!(give_back(&store, g.start, g.end).await.unwrap());
    assert_eq!(
        claim(&store, 100, 0, &b).await.unwrap().block.start,
        g.start
    );
}

#[tokio::test]
async fn a_graceful_give_back_never_trips_another_running_claimers_floor() {
    let store = FakeStore::starting_at(0);
    let b = Backoff::default();
    // A claims, then G claims twice right after it; G stops and gives back its unused
    // top: the counter goes down, but never below A's top.
    let a = claim(&store, 100, 0, &b).await.unwrap().block;
    let g1 = claim(&store, 100, 0, &b).await.unwrap().block;
    let g2 = claim(&store, 100, g1.end, &b).await.unwrap().block;
    assert!(give_back(&store, g1.start + 10, g2.end).await.unwrap());
    assert!(store.next() < g2.end);
    let next = claim(&store, 100, a.end, &b).await.unwrap().block;
    assert_eq!(next.start, g1.start + 10, "A claims the given-back values");
    // A stopped sidecar that gave back everything down to where G starts: G's floor
    // still holds, since what A gave back lies above G's blocks.
    let g = claim(&store, 100, 0, &b).await.unwrap().block;
    let a = claim(&store, 100, 0, &b).await.unwrap().block;
    assert!(give_back(&store, a.start, a.end).await.unwrap());
    assert!(claim(&store, 100, g.end, &b).await.is_ok());
}

#[tokio::test]
async fn a_store_that_never_answers_fails_the_claim_after_the_call_timeout() {
    let store = FakeStore::starting_at(1);
    store.hang.store(true, std::sync::atomic::Ordering::SeqCst);
    let backoff = Backoff {
        call_timeout: Duration::from_millis(50),
        ..Backoff::default()
    };
    let err = claim(&store, 10, 0, &backoff).await.unwrap_err();
    assert_eq!(
        err,
        ClaimError::Store(StoreError::TimedOut(Duration::from_millis(50)))
    );
    store.hang.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(claim(&store, 10, 0, &backoff).await.unwrap().block.start, 1);
}

#[test]
fn backoff_is_jittered_and_capped() {
    let b = Backoff::default();
    for n in 1..40 {
        assert!(b.delay(n) <= b.max);
    }
    let distinct: std::collections::HashSet<_> = (0..20).map(|_| b.delay(5)).collect();
    assert!(distinct.len() > 1, "jitter spreads retries");
}

// docs/safety.md rule 12: "raise the counter to at least x+1, then add a block".

#[test]
fn rule12_block_from_starts_at_the_higher_of_next_and_the_minimum_and_stops_at_2_pow_63() {
    assert_eq!(block_from(10, 0, 5), Some(Block { start: 10, end: 15 }));
    assert_eq!(block_from(10, 7, 5), Some(Block { start: 10, end: 15 }));
    assert_eq!(
        block_from(10, 500, 5),
        Some(Block {
            start: 500,
            end: 505
        })
    );
    assert_eq!(
        block_from(10, 500, 0),
        Some(Block {
            start: 500,
            end: 501
        })
    );
    assert_eq!(
        block_from(1, LIMIT - 1, 100),
        Some(Block {
            start: LIMIT - 1,
            end: LIMIT
        })
    );
    assert_eq!(block_from(1, LIMIT, 100), None);
    assert_eq!(block_from(LIMIT, 0, 100), None);
}

#[tokio::test]
async fn rule12_a_claim_above_raises_the_counter_by_compare_and_set_and_never_lowers_it() {
    let store = FakeStore::starting_at(10);
    let b = Backoff::default();
    let c = claim_above(&store, 100, 0, 5000, &b).await.unwrap();
    assert_eq!(
        c.block,
        Block {
            start: 5000,
            end: 5100
        }
    );
    assert_eq!(store.next(), 5100);
    let c = claim_above(&store, 100, c.block.end, 20, &b).await.unwrap();
    assert_eq!(c.block.start, 5100, "a lower minimum changes nothing");
    assert_eq!(store.writes.load(std::sync::atomic::Ordering::SeqCst), 2);
    // A lost reply: the raise happened, nothing of it is served, the next claim is above.
    store
        .apply_then_fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(claim_above(&store, 100, 0, 9000, &b).await.is_err());
    store
        .apply_then_fail
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(claim(&store, 100, 0, &b).await.unwrap().block.start, 9100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule12_concurrent_claimers_above_get_disjoint_blocks_each_at_or_above_its_minimum() {
    let store = Arc::new(FakeStore::starting_at(1));
    let backoff = Backoff {
        max_conflicts: 10_000,
        ..Backoff::default()
    };
    let tasks: Vec<_> = (0..16u64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut blocks: Vec<(u64, Block)> = Vec::new();
                for n in 0..30u64 {
                    let floor = blocks.last().map_or(0, |(_, b)| b.end);
                    // Every third claim asks to start above a value someone "saw".
                    let min = if n % 3 == 0 {
                        (n * 97 + i * 13) * 10
                    } else {
                        0
                    };
                    let c = claim_above(store.as_ref(), 10, floor, min, &backoff)
                        .await
                        .unwrap();
                    blocks.push((min, c.block));
                }
                blocks
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        for (min, block) in t.await.unwrap() {
            assert!(block.start >= min, "{block:?} starts below {min}");
            all.push(block);
        }
    }
    all.sort_by_key(|b| b.start);
    assert!(all.windows(2).all(|w| w[0].end <= w[1].start), "no overlap");
    assert_eq!(all.last().unwrap().end, store.next());
}

#[tokio::test]
async fn every_claim_is_timed_and_counted_one_way_whoever_claims() {
    let metrics = crate::metrics::Metrics::new().segment.clone();
    let store = FakeStore::starting_at(100);
    let backoff = Backoff::default();
    let (ok, _) = claim_counted(&store, 10, 0, 0, &backoff, &metrics).await;
    assert_eq!(
        ok.unwrap().block,
        Block {
            start: 100,
            end: 110
        }
    );
    // A floor above the counter: refused, counted as an error and as "behind".
    let (behind, _) = claim_counted(&store, 10, 500, 0, &backoff, &metrics).await;
    assert!(matches!(behind, Err(ClaimError::CounterBehind { .. })));
    // The end of the value range is no failure to retry.
    let (end, _) = claim_counted(&store, 10, 0, LIMIT, &backoff, &metrics).await;
    assert!(matches!(end, Err(ClaimError::Exhausted)));
    assert_eq!(metrics.blocks_claimed.get(), 1);
    assert_eq!(metrics.claim_errors.get(), 1);
    assert_eq!(metrics.counter_behind.get(), 1);
    assert_eq!(metrics.claim_seconds.get_sample_count(), 3);
}
