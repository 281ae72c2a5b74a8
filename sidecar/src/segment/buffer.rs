//! The block buffer of one sidecar: the current block and a spare (double buffering).
//!
//! Values come from the current block under a short mutex (a few arithmetic operations;
//! no I/O is ever done while holding it). When the used share of the current block reaches
//! `prefetchPercent`, one background task claims the next block; callers wait on the API
//! server only when both blocks are used up. A block is only ever put into the buffer
//! after its claim was written, so a failed claim never issues a value.
//!
//! Values are handed out in increasing order: blocks are claimed one after the other, each
//! above the one before (the counter only grows), and within a block in order.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kubeflake_crds::sequence::SegmentParams;
use tokio::sync::watch;

use super::claim::{Backoff, Block, ClaimError, CounterStore, claim, give_back};

/// How long [`Segment::give_back`] waits for a claim still in flight.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(2);
use crate::metrics::SegmentMetrics;

/// Why values cannot be handed out now (HTTP 503 with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentRefusal {
    #[error("no block of values is buffered and claiming one failed or is slow: {0}")]
    NoBlock(String),
    #[error(
        "the sequence is exhausted: every value up to 2^63-1 was claimed; create a new IdSequence"
    )]
    Exhausted,
    #[error("the sidecar is stopping")]
    Stopping,
}

impl SegmentRefusal {
    /// A short, fixed label for metrics and JSON.
    pub fn reason(&self) -> &'static str {
        match self {
            SegmentRefusal::NoBlock(_) => "no_block",
            SegmentRefusal::Exhausted => "exhausted",
            SegmentRefusal::Stopping => "stopping",
        }
    }

    pub fn retry_after_secs(&self) -> u64 {
        match self {
            SegmentRefusal::Exhausted => 3600,
            _ => 1,
        }
    }
}

/// The size of the next block from how fast the last one was used: about one claim per
/// `target`, within `[min, max]`, and at most 4 times larger or smaller than `current`
/// per step (one burst does not claim a huge block that is then abandoned).
pub fn next_block_size(
    current: u64,
    used: u64,
    took: Duration,
    target: Duration,
    min: u64,
    max: u64,
) -> u64 {
    if min >= max {
        return min;
    }
    let rate = used as f64 / took.as_secs_f64().max(1e-3);
    let ideal = rate * target.as_secs_f64();
    let lower = (current / 4).max(min) as f64;
    let upper = current.saturating_mul(4).min(max) as f64;
    ideal.clamp(lower, upper.max(lower)).round() as u64
}

struct State {
    /// Next value to hand out and the end of the current block.
    cursor: u64,
    end: u64,
    /// Size of the current block and when it became current (adaptive sizing).
    current_len: u64,
    current_since: Instant,
    spare: Option<Block>,
    /// Values that last about two claims' time at the last block's rate: the spare is
    /// claimed when no more than this is left, even below the prefetch share (a fast
    /// consumer of small blocks would otherwise wait for each claim).
    early: u64,
    /// How long the last claim took (for `early`).
    last_claim: Duration,
    fetching: bool,
    exhausted: bool,
    stopped: bool,
    /// The size of the next claim.
    size: u64,
    /// Used share of the current block (per mille) at which the spare is claimed.
    prefetch_permille: u64,
    last_error: Option<String>,
    /// End of the highest block claimed (for giving back the unused top on stop).
    top: u64,
}

impl State {
    fn buffered(&self) -> u64 {
        (self.end - self.cursor) + self.spare.map_or(0, |b| b.len())
    }

    /// Forgets every buffered value (never to be served); returns how many there were.
    fn drop_buffered(&mut self) -> u64 {
        let dropped = self.buffered();
        self.cursor = self.end;
        self.spare = None;
        self.current_len = 0;
        dropped
    }
}

/// Values taken from the buffer: consecutive runs, in increasing order.
pub type Runs = Vec<Block>;

/// One sidecar's segment source.
pub struct Segment {
    state: Mutex<State>,
    store: Arc<dyn CounterStore>,
    params: SegmentParams,
    backoff: Backoff,
    /// How long a caller may wait for a block when none is buffered.
    wait_limit: Duration,
    /// Bumped whenever a claim finished (either way): waiters re-check.
    refilled: watch::Sender<u64>,
    /// Kept so that a waiter's receiver is never the last one: dropping the last receiver
    /// wakes the sender's waiters, which nobody needs.
    _refills: watch::Receiver<u64>,
    metrics: SegmentMetrics,
}

impl Segment {
    /// A segment source that claims its first block in the background at once.
    pub fn start(
        store: Arc<dyn CounterStore>,
        params: SegmentParams,
        wait_limit: Duration,
        metrics: SegmentMetrics,
    ) -> Arc<Segment> {
        Segment::start_with(store, params, wait_limit, Backoff::default(), metrics)
    }

    /// [`start`](Self::start) with its own claim pacing and store call timeout.
    pub fn start_with(
        store: Arc<dyn CounterStore>,
        params: SegmentParams,
        wait_limit: Duration,
        backoff: Backoff,
        metrics: SegmentMetrics,
    ) -> Arc<Segment> {
        let (refilled, refills) = watch::channel(0);
        let segment = Arc::new(Segment {
            state: Mutex::new(State {
                cursor: 0,
                end: 0,
                current_len: 0,
                current_since: Instant::now(),
                spare: None,
                early: 0,
                last_claim: Duration::ZERO,
                fetching: false,
                exhausted: false,
                stopped: false,
                size: params.block_size,
                prefetch_permille: 0,
                last_error: None,
                top: 0,
            }),
            store,
            params,
            backoff,
            wait_limit,
            refilled,
            _refills: refills,
            metrics,
        });
        metrics_block_size(&segment.metrics, params.block_size);
        let fetch = segment.lock().fetch_due();
        if fetch {
            segment.clone().spawn_fetch();
        }
        segment
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Values buffered now (current block's rest and the spare).
    pub fn buffered(&self) -> u64 {
        self.lock().buffered()
    }

    /// `Ok` when a value can be handed out without waiting.
    pub fn check_ready(&self) -> Result<(), SegmentRefusal> {
        let s = self.lock();
        if s.stopped {
            Err(SegmentRefusal::Stopping)
        } else if s.buffered() > 0 {
            Ok(())
        } else if s.exhausted {
            Err(SegmentRefusal::Exhausted)
        } else {
            Err(SegmentRefusal::NoBlock(
                s.last_error
                    .clone()
                    .unwrap_or_else(|| "the first block is being claimed".into()),
            ))
        }
    }

    /// Takes up to `want` buffered values without waiting; returns them and whether a
    /// claim must be started.
    fn take_buffered(&self, want: u64, out: &mut Runs) -> (u64, bool) {
        let mut s = self.lock();
        let mut taken = 0;
        while taken < want && !s.stopped {
            if s.cursor == s.end {
                let Some(spare) = s.spare.take() else { break };
                s.cursor = spare.start;
                s.end = spare.end;
                s.current_len = spare.len();
                s.current_since = Instant::now();
                s.prefetch_permille = prefetch_threshold(self.params.prefetch_percent);
            }
            let n = (want - taken).min(s.end - s.cursor);
            out.push(Block {
                start: s.cursor,
                end: s.cursor + n,
            });
            s.cursor += n;
            taken += n;
            if s.cursor == s.end && s.current_len > 0 {
                // The current block is used up: learn from how long it lasted.
                let took = s.current_since.elapsed();
                let rate = s.current_len as f64 / took.as_secs_f64().max(1e-6);
                s.early = (rate * s.last_claim.as_secs_f64() * 2.0).min(s.size as f64) as u64;
                s.size = next_block_size(
                    s.size,
                    s.current_len,
                    took,
                    Duration::from_secs(self.params.target_claim_interval_secs),
                    self.params.block_size,
                    self.params.max_block_size,
                );
                s.current_len = 0;
            }
        }
        let fetch = s.fetch_due();
        (taken, fetch)
    }

    /// Takes `want` values, waiting (up to the wait limit) for claims when the buffer runs
    /// dry. On a refusal, values already taken for this request are dropped (a gap).
    pub async fn take(self: &Arc<Self>, want: u64) -> Result<Runs, SegmentRefusal> {
        let mut runs = Runs::with_capacity(2);
        // Fast path: from the buffer, without subscribing to refills or reading the clock.
        let (taken, fetch) = self.take_buffered(want, &mut runs);
        if fetch {
            self.clone().spawn_fetch();
        }
        if taken == want {
            return Ok(runs);
        }
        self.take_waiting(want, taken, runs).await
    }

    /// Takes one value (the `/id` path): no allocation when it is buffered.
    pub async fn take_one(self: &Arc<Self>) -> Result<u64, SegmentRefusal> {
        let (value, fetch) = {
            let mut s = self.lock();
            let value = if !s.stopped && s.cursor < s.end && s.end - s.cursor > 1 {
                // Not the block's last value: nothing to switch or learn.
                s.cursor += 1;
                Some(s.cursor - 1)
            } else {
                None
            };
            let fetch = value.is_some() && s.fetch_due();
            (value, fetch)
        };
        if fetch {
            self.clone().spawn_fetch();
        }
        match value {
            Some(v) => Ok(v),
            // `take(1)` returns exactly one value or a refusal; never invent one.
            None => self.take(1).await?.first().map(|b| b.start).ok_or_else(|| {
                SegmentRefusal::NoBlock("no value was taken from the buffer".to_string())
            }),
        }
    }

    /// The slow path of [`take`](Self::take): `taken` values are in `runs`, the rest must
    /// wait for claims.
    async fn take_waiting(
        self: &Arc<Self>,
        want: u64,
        mut taken: u64,
        mut runs: Runs,
    ) -> Result<Runs, SegmentRefusal> {
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        loop {
            // Subscribe before looking, so a refill between the look and the wait is seen.
            let mut refills = self.refilled.subscribe();
            let (n, fetch) = self.take_buffered(want - taken, &mut runs);
            taken += n;
            if fetch {
                self.clone().spawn_fetch();
            }
            if taken == want {
                return Ok(runs);
            }
            let refusal = {
                let s = self.lock();
                if s.stopped {
                    Some(SegmentRefusal::Stopping)
                } else if s.exhausted && s.buffered() == 0 && !s.fetching {
                    Some(SegmentRefusal::Exhausted)
                } else {
                    None
                }
            };
            let refusal = match refusal {
                Some(r) => Some(r),
                None => match tokio::time::timeout_at(deadline, refills.changed()).await {
                    Ok(_) => None,
                    Err(_) => Some(SegmentRefusal::NoBlock(
                        self.lock().last_error.clone().unwrap_or_else(|| {
                            format!("no block claimed within {:?}", self.wait_limit)
                        }),
                    )),
                },
            };
            if let Some(refusal) = refusal {
                if taken > 0 {
                    self.metrics.values_dropped.inc_by(taken);
                }
                return Err(refusal);
            }
        }
    }

    /// Claims blocks until one is in the buffer (or the sidecar stops, or the sequence is
    /// exhausted), retrying failures with backoff.
    fn spawn_fetch(self: Arc<Self>) {
        tokio::spawn(async move {
            let mut failures: u32 = 0;
            loop {
                // The top of our own blocks is a floor: the counter cannot be below it.
                let (size, floor) = {
                    let s = self.lock();
                    (s.size, s.top)
                };
                let started = Instant::now();
                let result = claim(self.store.as_ref(), size, floor, &self.backoff).await;
                let took = started.elapsed();
                self.metrics.claim_seconds.observe(took.as_secs_f64());
                let retry = {
                    let mut s = self.lock();
                    match result {
                        Ok(claimed) => {
                            s.last_claim = took;
                            self.metrics.blocks_claimed.inc();
                            self.metrics
                                .claim_conflicts
                                .inc_by(u64::from(claimed.conflicts));
                            metrics_block_size(&self.metrics, claimed.block.len());
                            s.top = s.top.max(claimed.block.end);
                            self.metrics
                                .claimed_top
                                .set(i64::try_from(s.top).unwrap_or(i64::MAX));
                            s.last_error = None;
                            if s.stopped {
                                // Never served (takes are refused); kept as the spare only
                                // so that it can be given back.
                                if s.spare.is_none() {
                                    s.spare = Some(claimed.block);
                                }
                            } else if s.cursor == s.end && s.spare.is_none() {
                                s.cursor = claimed.block.start;
                                s.end = claimed.block.end;
                                s.current_len = claimed.block.len();
                                s.current_since = Instant::now();
                                s.prefetch_permille =
                                    prefetch_threshold(self.params.prefetch_percent);
                            } else {
                                s.spare = Some(claimed.block);
                            }
                            tracing::debug!(
                                start = claimed.block.start,
                                end = claimed.block.end,
                                conflicts = claimed.conflicts,
                                "claimed a block"
                            );
                            s.fetching = false;
                            None
                        }
                        Err(ClaimError::Exhausted) => {
                            s.exhausted = true;
                            s.fetching = false;
                            s.last_error = Some(ClaimError::Exhausted.to_string());
                            tracing::error!(
                                "segment sequence exhausted: no values left below 2^63"
                            );
                            None
                        }
                        Err(
                            e @ (ClaimError::CounterBehind { .. }
                            | ClaimError::CounterWentBack { .. }),
                        ) => {
                            // Below our own top, other sidecars may now claim the values
                            // this one still holds: serving them could issue them twice, so
                            // drop them. With only fewer claims than recorded, what we hold
                            // lies below our top, which the counter is not below: keep it.
                            let dropped = match e {
                                ClaimError::CounterBehind { .. } => s.drop_buffered(),
                                _ => 0,
                            };
                            self.metrics.values_dropped.inc_by(dropped);
                            self.metrics.counter_behind.inc();
                            self.metrics.claim_errors.inc();
                            tracing::error!(
                                error = %e,
                                dropped,
                                top = floor,
                                "the segment counter went backwards: refusing to claim from it"
                            );
                            s.last_error = Some(e.to_string());
                            if s.stopped {
                                s.fetching = false;
                                None
                            } else {
                                Some(e)
                            }
                        }
                        Err(e) => {
                            self.metrics.claim_conflicts.inc_by(match e {
                                ClaimError::TooManyConflicts { conflicts } => u64::from(conflicts),
                                _ => 0,
                            });
                            self.metrics.claim_errors.inc();
                            s.last_error = Some(format!("claiming a block failed: {e}"));
                            if s.stopped {
                                s.fetching = false;
                                None
                            } else {
                                Some(e)
                            }
                        }
                    }
                };
                self.refilled.send_modify(|n| *n += 1);
                let Some(e) = retry else { return };
                failures += 1;
                let pause = Backoff {
                    first: Duration::from_millis(100),
                    max: Duration::from_secs(2),
                    ..Backoff::default()
                }
                .delay(failures)
                .max(Duration::from_millis(20));
                tracing::warn!(error = %e, ?pause, "claiming a block failed; retrying");
                tokio::time::sleep(pause).await;
            }
        });
    }

    /// Stops handing out values for good (waiting requests are refused).
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.refilled.send_modify(|n| *n += 1);
    }

    /// The unused values at the top of what was claimed, `[lowest, top)`: the spare, and
    /// the current block's rest when the spare follows it directly (or there is none).
    fn unused_top(s: &State) -> Option<Block> {
        let mut lowest = s.top;
        if let Some(spare) = s.spare
            && spare.end == lowest
        {
            lowest = spare.start;
        }
        if s.end == lowest && s.cursor < s.end {
            lowest = s.cursor;
        }
        (lowest < s.top).then_some(Block {
            start: lowest,
            end: s.top,
        })
    }

    /// After [`stop`](Self::stop) and once no request is in flight: lowers the counter to
    /// the first value not issued, if nobody claimed after this sidecar (a CAS write), so a
    /// clean restart leaves no gap. Best effort: returns the unused values and whether they
    /// were given back.
    pub async fn give_back(&self) -> Option<(Block, bool)> {
        // A claim still in flight would land above: wait for it (bounded). Every claim
        // that ends clears `fetching` and then bumps `refilled`; subscribe before looking,
        // so an end between the look and the wait is seen.
        let deadline = tokio::time::Instant::now() + GIVE_BACK_WAIT;
        let mut refills = self.refilled.subscribe();
        while self.lock().fetching {
            match tokio::time::timeout_at(deadline, refills.changed()).await {
                Ok(Ok(())) => {}
                // Waited long enough (or the sender is gone, impossible while `self`
                // lives): the check below gives nothing back.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let unused = {
            let s = self.lock();
            if !s.stopped || s.fetching {
                return None;
            }
            Segment::unused_top(&s)?
        };
        match give_back(self.store.as_ref(), unused.start, unused.end).await {
            Ok(done) => Some((unused, done)),
            Err(e) => {
                tracing::warn!(error = %e, "could not give back the unused values; they stay a gap");
                Some((unused, false))
            }
        }
    }
}

impl State {
    /// Whether to start a claim now: no claim running, no spare, and the used share of the
    /// current block has reached its prefetch threshold (or nothing is buffered at all).
    fn fetch_due(&mut self) -> bool {
        if self.fetching || self.spare.is_some() || self.exhausted || self.stopped {
            return false;
        }
        let left = self.end - self.cursor;
        let used = self.current_len - left;
        let due = left <= self.early
            || self.cursor == self.end
            || used * 1000 >= self.current_len * self.prefetch_permille;
        if due {
            self.fetching = true;
        }
        due
    }
}

/// The used share (per mille) of a new block at which the next one is claimed:
/// `prefetchPercent`, randomised per block between half and one and a half times it, so
/// that sidecars under the same load do not all claim at the same moment (which turns into
/// CAS conflicts: measured 2 conflicts per claim for 8 sidecars in lockstep).
fn prefetch_threshold(percent: u8) -> u64 {
    let base = f64::from(percent) * 10.0;
    ((base * (0.5 + fastrand::f64())) as u64).clamp(1, 950)
}

fn metrics_block_size(metrics: &SegmentMetrics, size: u64) {
    metrics
        .block_size
        .set(i64::try_from(size).unwrap_or(i64::MAX));
}

#[cfg(test)]
mod tests {
    use super::super::claim::StoreError;
    use super::super::claim::fake::FakeStore;
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
        assert!(err.to_string().contains("below the top"), "{err}");
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
}
