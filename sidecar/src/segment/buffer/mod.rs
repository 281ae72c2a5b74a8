//! The block buffer of one sidecar: the current block and a spare (double buffering).
//!
//! This file (about 320 lines) keeps taking, waiting, stopping and giving back together:
//! they share the buffer's mutex and the refill channel, and their invariants (a value is
//! taken once; nothing is served after `stop`) are easiest to check side by side.
//!
//! Values come from the current block under a short mutex (a few arithmetic operations;
//! no I/O is ever done while holding it). When the used share of the current block reaches
//! `prefetchPercent`, one background task claims the next block; callers wait on the API
//! server only when both blocks are used up. A block is only ever put into the buffer
//! after its claim was written, so a failed claim never issues a value.
//!
//! Values are handed out in increasing order: blocks are claimed one after the other, each
//! above the one before (the counter only grows), and within a block in order.

//!
//! - `state`: the state under the mutex, and taking values from it
//!   (`Segment::take_buffered`, the one `impl Segment` step that only reads the state);
//! - `fetch`: the background claim of the next block (`Segment::spawn_fetch`, the one
//!   step that writes to the API server);
//! - `sizing`: adaptive block sizes and the prefetch threshold;
//! - `range`: consecutive values from one block (`Segment::take_range`, for `/range`).
//!
//! So `impl Segment` is in four files on purpose, one step each where its invariant is
//! checked; every other step (take, wait, stop, give back) is below in this file.

mod fetch;
mod range;
#[cfg(test)]
mod range_tests;
#[cfg(test)]
mod rule22_tests;
mod sizing;
mod state;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kubeflake_crds::sequence::SegmentParams;
use tokio::sync::watch;

use super::claim::{Backoff, Block, CounterStore, give_back};
use crate::metrics::SegmentMetrics;
use sizing::metrics_block_size;
use state::State;

/// How long [`Segment::give_back`] waits for a claim still in flight.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(2);

/// Why values cannot be handed out now (HTTP 503 with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SegmentRefusal {
    #[error("no block of values is buffered and claiming one failed or is slow: {0}")]
    NoBlock(String),
    #[error(
        "the sequence is exhausted: every value up to 2^63-1 was claimed; create a new IdSequence"
    )]
    Exhausted,
    #[error("the sidecar is stopping")]
    Stopping,
    #[error(
        "after={after} was never issued by this sequence (its counter is at {next}), and an \
         `after` may raise the counter only below 2^62, so that no request can use up the \
         sequence"
    )]
    AfterAboveCounter { after: u64, next: u64 },
    /// The ID space range of a joined sequence is used up, none queued (rule 22).
    #[error("no block of values is buffered: {0}")]
    RangeUsedUp(String),
}

/// An `after` may raise the counter only below this (docs/safety.md rule 12): what is
/// left above it, 2^62 values, cannot be used up by requests.
pub(crate) const RAISE_LIMIT: u64 = 1 << 62;

impl SegmentRefusal {
    /// A short, fixed label for metrics and JSON.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            SegmentRefusal::NoBlock(_) => "no_block",
            SegmentRefusal::Exhausted => "exhausted",
            SegmentRefusal::Stopping => "stopping",
            SegmentRefusal::AfterAboveCounter { .. } => "after_above_counter",
            SegmentRefusal::RangeUsedUp(_) => "range_used_up",
        }
    }

    pub(crate) fn retry_after_secs(&self) -> u64 {
        match self {
            SegmentRefusal::Exhausted => 3600,
            _ => 1,
        }
    }
}

/// Whether serving values of at least `min` (above [`RAISE_LIMIT`]) can do without raising
/// the counter: one read of the counter, only on this rare path.
pub(crate) async fn check_raise(
    store: &dyn CounterStore,
    backoff: &Backoff,
    min: u64,
) -> Result<(), SegmentRefusal> {
    let read = tokio::time::timeout(backoff.call_timeout, store.read()).await;
    match read {
        Ok(Ok(counter)) if min <= counter.next => Ok(()),
        Ok(Ok(counter)) => Err(SegmentRefusal::AfterAboveCounter {
            after: min - 1,
            next: counter.next,
        }),
        Ok(Err(e)) => Err(SegmentRefusal::NoBlock(format!("reading the counter: {e}"))),
        Err(_) => Err(SegmentRefusal::NoBlock(format!(
            "reading the counter took more than {:?}",
            backoff.call_timeout
        ))),
    }
}

/// Values taken from the buffer: consecutive runs, in increasing order.
pub(crate) type Runs = Vec<Block>;

/// One sidecar's segment source.
pub(crate) struct Segment {
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
    pub(crate) fn start(
        store: Arc<dyn CounterStore>,
        params: SegmentParams,
        wait_limit: Duration,
        metrics: SegmentMetrics,
    ) -> Arc<Segment> {
        Segment::start_with(store, params, wait_limit, Backoff::default(), metrics)
    }

    /// [`start`](Self::start) with its own claim pacing and store call timeout.
    pub(crate) fn start_with(
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
                range_used_up: false,
                top: 0,
                above: 0,
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
    pub(crate) fn buffered(&self) -> u64 {
        self.lock().buffered()
    }

    /// `Ok` when a value can be handed out without waiting.
    pub(crate) fn check_ready(&self) -> Result<(), SegmentRefusal> {
        let s = self.lock();
        if s.stopped {
            Err(SegmentRefusal::Stopping)
        } else if s.buffered() > 0 {
            Ok(())
        } else if s.exhausted {
            Err(SegmentRefusal::Exhausted)
        } else {
            Err(s.no_block(|| "the first block is being claimed".into()))
        }
    }

    /// Takes `want` values, waiting (up to the wait limit) for claims when the buffer runs
    /// dry. On a refusal, values already taken for this request are dropped (a gap).
    #[cfg(test)]
    pub(crate) async fn take(self: &Arc<Self>, want: u64) -> Result<Runs, SegmentRefusal> {
        self.take_from(want, 0).await
    }

    /// `take`, every value at least `min` (`after + 1`, docs/safety.md rule
    /// 12): buffered values below `min` are dropped (gaps), and claims made for this
    /// request start at `min` or above, raising the counter to at least `min` by
    /// compare-and-set when it is lower.
    pub(crate) async fn take_from(
        self: &Arc<Self>,
        want: u64,
        min: u64,
    ) -> Result<Runs, SegmentRefusal> {
        // Before anything is dropped or `above` is raised: a refused request changes nothing.
        if min > RAISE_LIMIT && min > self.lock().top {
            check_raise(self.store.as_ref(), &self.backoff, min).await?;
        }
        let mut runs = Runs::with_capacity(2);
        // Fast path: from the buffer, without subscribing to refills or reading the clock.
        let (taken, fetch) = self.take_buffered(want, min, usize::MAX, &mut runs);
        if fetch {
            self.clone().spawn_fetch();
        }
        if taken == want {
            return Ok(runs);
        }
        self.take_waiting(want, min, taken, runs).await
    }

    /// Takes one value (the `/id` path): no allocation when it is buffered.
    #[cfg(test)]
    pub(crate) async fn take_one(self: &Arc<Self>) -> Result<u64, SegmentRefusal> {
        self.take_one_from(0).await
    }

    /// Takes one value (the `/id` path; no allocation when it is buffered), at least `min` (see [`take_from`](Self::take_from)).
    pub(crate) async fn take_one_from(self: &Arc<Self>, min: u64) -> Result<u64, SegmentRefusal> {
        let (value, fetch) = {
            let mut s = self.lock();
            let value = if !s.stopped && s.cursor >= min && s.cursor < s.end && s.end - s.cursor > 1
            {
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
            // `take_from(1, _)` returns exactly one value or a refusal; never invent one.
            None => self
                .take_from(1, min)
                .await?
                .first()
                .map(|b| b.start)
                .ok_or_else(|| {
                    SegmentRefusal::NoBlock("no value was taken from the buffer".to_string())
                }),
        }
    }

    /// The slow path of `take`: `taken` values are in `runs`, the rest must
    /// wait for claims.
    async fn take_waiting(
        self: &Arc<Self>,
        want: u64,
        min: u64,
        mut taken: u64,
        mut runs: Runs,
    ) -> Result<Runs, SegmentRefusal> {
        let deadline = tokio::time::Instant::now() + self.wait_limit;
        loop {
            // Subscribe before looking, so a refill between the look and the wait is seen.
            let mut refills = self.refilled.subscribe();
            let (n, fetch) = self.take_buffered(want - taken, min, usize::MAX, &mut runs);
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
                    Err(_) => Some(
                        self.lock()
                            .no_block(|| format!("no block claimed within {:?}", self.wait_limit)),
                    ),
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

    /// Stops handing out values for good (waiting requests are refused).
    pub(crate) fn stop(&self) {
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
    pub(crate) async fn give_back(&self) -> Option<(Block, bool)> {
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
