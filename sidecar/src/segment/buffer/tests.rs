//! Tests of the block buffer (a fake store with the API server's CAS semantics).

use super::super::claim::StoreError;
use super::super::claim::fake::FakeStore;
use super::sizing::{next_block_size, prefetch_threshold};
use super::*;
use kubeflake_crds::segment_counter::Counter;
use std::sync::atomic::Ordering;

fn params(block: u64, max: u64, prefetch: u8) -> SegmentParams {
    SegmentParams {
        start: 1,
        block_size: block,
        max_block_size: max,
        prefetch_percent: prefetch,
        target_claim_interval_secs: 60,
        strict: false,
    }
}

fn values(runs: &Runs) -> Vec<u64> {
    runs.iter().flat_map(|b| b.start..b.end).collect()
}

/// Retries after failures back off up to 2 s.
async fn ready_within_5s(seg: &Segment) {
    for _ in 0..250 {
        if seg.check_ready().is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not ready within 5 s");
}

async fn settle(store: &FakeStore, writes: u64) {
    for _ in 0..500 {
        if store.writes.load(Ordering::SeqCst) >= writes {
            tokio::time::sleep(Duration::from_millis(5)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("no claim within 1 s");
}

#[tokio::test]
async fn the_next_block_is_prefetched_when_the_configured_share_is_used() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 20),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(values(&seg.take(1).await.unwrap()), vec![1]);
    settle(&store, 1).await;
    assert_eq!(
        seg.take(8).await.unwrap().len(),
        1,
        "one run within the block"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.writes.load(Ordering::SeqCst),
        1,
        "9% used: below half of 20%, no prefetch yet"
    );
    seg.take(21).await.unwrap();
    settle(&store, 2).await;
    assert_eq!(
        seg.buffered(),
        70 + 100,
        "30% used (1.5 x 20%): the spare was claimed"
    );
    assert_eq!(store.next(), 201);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.writes.load(Ordering::SeqCst),
        2,
        "only one spare at a time"
    );
}

#[tokio::test]
async fn take_one_serves_every_value_in_order_across_blocks() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(7, 7, 10),
        Duration::from_secs(2),
        SegmentMetrics::unregistered(),
    );
    let mut got = Vec::new();
    for i in 0..50 {
        got.push(seg.take_one().await.unwrap());
        if i % 3 == 0 {
            got.extend(values(&seg.take(2).await.unwrap()));
        }
    }
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    assert_eq!(got[0], 1);
    assert!(
        got.len() as u64 + seg.buffered() < store.next(),
        "nothing served that was not claimed"
    );
}

#[test]
fn prefetch_thresholds_are_spread_around_the_configured_share() {
    let t: Vec<u64> = (0..1000).map(|_| prefetch_threshold(10)).collect();
    assert!(
        t.iter().all(|p| (50..150).contains(p)),
        "within half and 1.5 x 10%"
    );
    assert!(
        t.iter().any(|p| *p < 80) && t.iter().any(|p| *p > 120),
        "spread"
    );
    assert!((0..100).all(|_| prefetch_threshold(90) <= 950));
}

#[tokio::test]
async fn a_batch_spans_blocks_in_increasing_order() {
    let store = Arc::new(FakeStore::starting_at(10));
    let seg = Segment::start(
        store.clone(),
        params(7, 7, 10),
        Duration::from_secs(2),
        SegmentMetrics::unregistered(),
    );
    let got = values(&seg.take(50).await.unwrap());
    assert_eq!(got.len(), 50);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(got[0], 10);
}

#[tokio::test]
async fn a_failed_claim_never_issues_values_and_callers_get_a_refusal() {
    let store = Arc::new(FakeStore::starting_at(1));
    store.fail_writes.store(true, Ordering::SeqCst);
    let seg = Segment::start(
        store.clone(),
        params(10, 10, 10),
        Duration::from_millis(200),
        SegmentMetrics::unregistered(),
    );
    let err = seg.take(1).await.unwrap_err();
    assert_eq!(err.reason(), "no_block");
    assert!(err.to_string().contains("down"), "{err}");
    assert!(seg.check_ready().is_err());
    store.fail_writes.store(false, Ordering::SeqCst);
    ready_within_5s(&seg).await;
    assert_eq!(
        values(&seg.take(1).await.unwrap()),
        vec![1],
        "recovers once writes work"
    );
}

#[tokio::test]
async fn a_lost_claim_reply_leaves_a_gap_never_a_duplicate() {
    let store = Arc::new(FakeStore::starting_at(1));
    store.apply_then_fail.store(true, Ordering::SeqCst);
    let seg = Segment::start(
        store.clone(),
        params(10, 10, 10),
        Duration::from_millis(100),
        SegmentMetrics::unregistered(),
    );
    assert!(seg.take(1).await.is_err());
    store.apply_then_fail.store(false, Ordering::SeqCst);
    ready_within_5s(&seg).await;
    let first = values(&seg.take(1).await.unwrap())[0];
    assert!(
        first > 10,
        "blocks whose write reply was lost are skipped, got {first}"
    );
}

#[tokio::test]
async fn stop_refuses_and_gives_back_the_unused_top() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 10),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    seg.take(30).await.unwrap();
    settle(&store, 2).await;
    assert_eq!(store.next(), 201);
    seg.stop();
    assert_eq!(seg.take(1).await.unwrap_err(), SegmentRefusal::Stopping);
    let (unused, given) = seg.give_back().await.unwrap();
    assert_eq!(
        unused,
        Block {
            start: 31,
            end: 201
        }
    );
    assert!(given);
    assert_eq!(store.next(), 31, "a clean stop leaves no gap");
}

#[tokio::test]
async fn give_back_never_lowers_the_counter_below_another_sidecars_block() {
    let store = Arc::new(FakeStore::starting_at(1));
    let a = Segment::start(
        store.clone(),
        params(100, 100, 90),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    a.take(1).await.unwrap();
    let b = Segment::start(
        store.clone(),
        params(100, 100, 90),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(values(&b.take(1).await.unwrap()), vec![101]);
    a.stop();
    let (unused, given) = a.give_back().await.unwrap();
    assert_eq!((unused, given), (Block { start: 2, end: 101 }, false));
    assert_eq!(store.next(), 201, "b claimed after a: nothing given back");
}

#[tokio::test]
async fn a_running_sidecar_refuses_a_counter_below_its_top_and_drops_what_it_holds() {
    let store = Arc::new(FakeStore::starting_at(1));
    let metrics = SegmentMetrics::unregistered();
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 10),
        Duration::from_millis(300),
        metrics.clone(),
    );
    assert_eq!(values(&seg.take(1).await.unwrap()), vec![1]);
    // The counter Lease is deleted and comes back at start, while 99 values of the
    // first block are still buffered: another sidecar may claim them now.
    store.recreate_at(1);
    seg.take(20).await.unwrap(); // 21% used: the next claim sees the counter at 1
    for _ in 0..250 {
        if metrics.counter_behind.get() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(metrics.counter_behind.get() > 0, "the refusal is counted");
    assert_eq!(
        store.next(),
        1,
        "nothing was claimed from the lowered counter"
    );
    assert_eq!(
        seg.buffered(),
        0,
        "the held values are dropped, never served"
    );
    assert_eq!(metrics.values_dropped.get(), 79);
    assert_eq!(metrics.claimed_top.get(), 101);
    let err = seg.take(1).await.unwrap_err();
    assert_eq!(err.reason(), "no_block");
    assert!(
        err.to_string()
            .contains("the top of this sidecar's own blocks"),
        "{err}"
    );
    assert!(seg.check_ready().is_err());
    // Recovered by hand above every value issued: claims resume from there.
    store.recreate_at(500);
    ready_within_5s(&seg).await;
    assert_eq!(values(&seg.take(1).await.unwrap()), vec![500]);
}

#[tokio::test]
async fn a_counter_that_never_answers_is_given_up_after_the_call_timeout() {
    let store = Arc::new(FakeStore::starting_at(1));
    store.hang.store(true, Ordering::SeqCst);
    let seg = Segment::start_with(
        store.clone(),
        params(10, 10, 10),
        Duration::from_millis(300),
        Backoff {
            call_timeout: Duration::from_millis(50),
            ..Backoff::default()
        },
        SegmentMetrics::unregistered(),
    );
    let err = seg.take(1).await.unwrap_err();
    assert!(err.to_string().contains("did not answer"), "{err}");
    // The stuck claim was abandoned, so a later attempt can succeed.
    store.hang.store(false, Ordering::SeqCst);
    ready_within_5s(&seg).await;
    assert_eq!(values(&seg.take(1).await.unwrap()), vec![1]);
}

#[tokio::test]
async fn the_exhausted_sequence_is_refused_with_its_own_reason() {
    let store = Arc::new(FakeStore::starting_at(
        kubeflake_crds::segment_counter::LIMIT - 3,
    ));
    let seg = Segment::start(
        store.clone(),
        params(10, 10, 10),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(seg.take(3).await.unwrap().len(), 1);
    assert_eq!(seg.take(1).await.unwrap_err(), SegmentRefusal::Exhausted);
}

#[tokio::test]
async fn a_block_used_up_quickly_makes_the_next_claim_larger() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(10, 1000, 90),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(
        values(&seg.take(10).await.unwrap()),
        (1..11).collect::<Vec<u64>>()
    );
    settle(&store, 2).await;
    assert_eq!(
        store.next(),
        11 + 40,
        "10 values in far less than 60 s: 4 times larger"
    );
}

/// A store whose first write takes `delay` (a claim in flight when the sidecar stops).
struct SlowFirstWrite {
    inner: FakeStore,
    delay: Duration,
    delayed: std::sync::atomic::AtomicBool,
}

impl CounterStore for SlowFirstWrite {
    fn read(&self) -> futures::future::BoxFuture<'_, Result<Counter, StoreError>> {
        self.inner.read()
    }

    fn compare_and_swap<'a>(
        &'a self,
        seen: &'a Counter,
        new: Counter,
    ) -> futures::future::BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.delayed.swap(true, Ordering::SeqCst) {
                tokio::time::sleep(self.delay).await;
            }
            self.inner.compare_and_swap(seen, new).await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn give_back_returns_as_soon_as_the_claim_in_flight_lands() {
    // Not a multiple of any polling period: a poller would notice only later.
    let claim_takes = Duration::from_millis(1003);
    let store = Arc::new(SlowFirstWrite {
        inner: FakeStore::starting_at(1),
        delay: claim_takes,
        delayed: false.into(),
    });
    let started = tokio::time::Instant::now();
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 10),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    seg.stop();
    let (unused, given) = seg.give_back().await.expect("the claim landed in time");
    let waited = started.elapsed();
    assert_eq!((unused, given), (Block { start: 1, end: 101 }, true));
    assert_eq!(store.inner.next(), 1, "a clean stop leaves no gap");
    assert!(waited >= claim_takes, "returned before the claim landed");
    assert!(
        waited < claim_takes + Duration::from_millis(2),
        "returned {waited:?} after the stop, though the claim landed at {claim_takes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn give_back_gives_up_on_a_claim_that_does_not_land_in_time() {
    let store = Arc::new(FakeStore::starting_at(1));
    store.hang.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 10),
        Duration::from_secs(1),
        SegmentMetrics::unregistered(),
    );
    seg.stop();
    assert_eq!(seg.give_back().await, None, "nothing to give back yet");
    let waited = started.elapsed();
    assert!(
        (GIVE_BACK_WAIT..GIVE_BACK_WAIT + Duration::from_millis(100)).contains(&waited),
        "{waited:?}"
    );
    assert_eq!(store.next(), 1);
}

#[test]
fn adaptive_size_aims_at_one_claim_per_interval_within_bounds() {
    let t = Duration::from_secs(60);
    // 1000 values used in 1 s: 60,000 per interval, but at most 4x per step.
    assert_eq!(
        next_block_size(1000, 1000, Duration::from_secs(1), t, 1000, 100_000),
        4000
    );
    assert_eq!(
        next_block_size(40_000, 40_000, Duration::from_secs(10), t, 1000, 100_000),
        100_000,
        "capped at max"
    );
    // 1000 values in 120 s: half a block per interval: shrink, never below min.
    assert_eq!(
        next_block_size(1000, 1000, Duration::from_secs(120), t, 1000, 100_000),
        1000
    );
    assert_eq!(
        next_block_size(8000, 8000, Duration::from_secs(120), t, 1000, 100_000),
        4000
    );
    assert_eq!(
        next_block_size(5, 5, Duration::ZERO, t, 5, 5),
        5,
        "fixed size without maxBlockSize"
    );
    for took_ms in [0u64, 1, 10, 1000, 60_000, 10_000_000] {
        for current in [1000u64, 3000, 100_000] {
            let n = next_block_size(
                current,
                current,
                Duration::from_millis(took_ms),
                t,
                1000,
                100_000,
            );
            assert!((1000..=100_000).contains(&n), "{current} {took_ms}: {n}");
        }
    }
}

// docs/safety.md rule 12: values handed out for `after = x` are above x.

#[tokio::test]
async fn rule12_a_buffered_block_below_after_is_dropped_and_the_counter_raised_above_it() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 90),
        Duration::from_secs(2),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(seg.take_one().await.unwrap(), 1);
    settle(&store, 1).await;
    // Another sidecar handed out 5000: the whole buffered block (2..101) lies below it.
    assert_eq!(seg.take_one_from(5001).await.unwrap(), 5001);
    assert_eq!(
        seg.metrics.values_dropped.get(),
        99,
        "the block below x was dropped"
    );
    assert!(
        store.next() >= 5002,
        "the counter was raised above x by the claim"
    );
    assert!(
        store.next() <= 5001 + 100,
        "to at least x+1, plus one block"
    );
    // Plain requests continue above it, never below.
    let next = seg.take_one().await.unwrap();
    assert_eq!(next, 5002);
    let batch = values(&seg.take_from(150, 5001).await.unwrap());
    assert!(batch.iter().all(|&v| v > 5002));
    assert!(batch.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn rule12_an_after_inside_the_buffer_skips_only_the_values_up_to_it() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 90),
        Duration::from_secs(2),
        SegmentMetrics::unregistered(),
    );
    ready_within_5s(&seg).await; // the first block, 1..101, is buffered
    assert_eq!(
        values(&seg.take_from(3, 50).await.unwrap()),
        vec![50, 51, 52]
    );
    assert_eq!(seg.metrics.values_dropped.get(), 49, "1..49 skipped");
    assert_eq!(store.next(), 101, "no claim was needed for it");
    // An after in the past changes nothing.
    assert_eq!(seg.take_one_from(10).await.unwrap(), 53);
    assert_eq!(values(&seg.take_from(2, 0).await.unwrap()), vec![54, 55]);
    assert_eq!(seg.metrics.values_dropped.get(), 49);
}

#[tokio::test]
async fn rule12_the_spare_block_below_after_is_trimmed_or_dropped() {
    let store = Arc::new(FakeStore::starting_at(1));
    let seg = Segment::start(
        store.clone(),
        params(10, 10, 10),
        Duration::from_secs(2),
        SegmentMetrics::unregistered(),
    );
    assert_eq!(values(&seg.take(2).await.unwrap()), vec![1, 2]); // 20%: spare is due
    settle(&store, 2).await; // 1..11 current, 11..21 spare
    assert_eq!(seg.buffered(), 18);
    assert_eq!(seg.take_one_from(16).await.unwrap(), 16, "within the spare");
    assert_eq!(seg.take_one().await.unwrap(), 17);
    // Both blocks below x: dropped, and a claim starts above x.
    let v = seg.take_one_from(1000).await.unwrap();
    assert_eq!(v, 1000);
    assert!(
        values(&seg.take(30).await.unwrap())
            .iter()
            .all(|&v| v > 1000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule12_concurrent_takers_passing_values_around_never_get_one_at_or_below_their_after() {
    // Two sidecars on one counter (FakeStore: the API server's CAS) pass what they got to
    // each other as `after`, from several tasks at once.
    let store = Arc::new(FakeStore::starting_at(1));
    let segs: Vec<Arc<Segment>> = (0..2)
        .map(|_| {
            Segment::start(
                store.clone(),
                params(50, 50, 50),
                Duration::from_secs(5),
                SegmentMetrics::unregistered(),
            )
        })
        .collect();
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (seg, seen) = (segs[t % 2].clone(), seen.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                for i in 0..300u64 {
                    let x = seen.load(Ordering::Acquire);
                    let vals = if i % 4 == 0 {
                        values(&seg.take_from(7, x + 1).await.unwrap())
                    } else {
                        vec![seg.take_one_from(x + 1).await.unwrap()]
                    };
                    for &v in &vals {
                        assert!(v > x, "{v} is not above after={x}");
                    }
                    seen.fetch_max(*vals.last().unwrap(), Ordering::AcqRel);
                    got.extend(vals);
                }
                got
            })
        })
        .collect();
    let mut all = std::collections::HashSet::new();
    for t in tasks {
        let got = t.await.unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]));
        for v in got {
            assert!(all.insert(v), "duplicate {v}");
        }
    }
    assert!(all.iter().all(|&v| v < store.next()), "only claimed values");
}

/// Issue 23: a counter rewritten by a newer kubeflake (a format this release does not
/// understand) is never claimed from, and the sidecar stops issuing at its next claim:
/// what it holds is dropped (a gap, never a duplicate), requests are refused saying why.
#[tokio::test]
async fn a_counter_in_a_newer_format_is_never_claimed_from_and_what_is_held_is_dropped() {
    let store = Arc::new(FakeStore::starting_at(1));
    let metrics = SegmentMetrics::unregistered();
    let seg = Segment::start(
        store.clone(),
        params(100, 100, 10),
        Duration::from_millis(300),
        metrics.clone(),
    );
    assert_eq!(values(&seg.take(1).await.unwrap()), vec![1]);
    store.newer_format.store(true, Ordering::SeqCst);
    seg.take(20).await.unwrap(); // 21% used: the next claim reads the counter
    for _ in 0..250 {
        if metrics.claim_errors.get() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(metrics.claim_errors.get() > 0, "the refusal is counted");
    assert_eq!(store.next(), 101, "nothing claimed after the first block");
    assert_eq!(seg.buffered(), 0, "what was held is dropped");
    assert_eq!(metrics.values_dropped.get(), 79);
    let err = seg.take(1).await.unwrap_err();
    assert_eq!(err.reason(), "no_block");
    assert!(err.to_string().contains("format 2"), "{err}");
    assert!(seg.check_ready().is_err());
}
