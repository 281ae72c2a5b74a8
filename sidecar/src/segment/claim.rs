//! Claiming a block: read the counter, write `next + size` conditional on the version read
//! (compare-and-swap), and only then hand out the values. On a conflict (another sidecar
//! was first) re-read and retry after a capped, jittered exponential backoff, so that many
//! sidecars contending do not retry in lockstep.
//!
//! Two guards keep a claim from ever handing out a value twice when the store misbehaves:
//! - **The floor**: a running sidecar passes the end of the highest block it has claimed.
//!   The counter can never legitimately be below it while the sidecar runs (the counter only
//!   grows, and a graceful give-back (standalone only: a cluster counter never goes down)
//!   lowers it only to the giver's own unused values, which
//!   lie above every other sidecar's blocks). A counter below the floor was deleted and
//!   re-created, or restored from a backup: the claim is refused, never served.
//! - **The highest `next` seen**: a counter that may never go down (a cluster's Lease)
//!   cannot legitimately read below any `next` this sidecar saw it at, in a claim of its
//!   own or another's (the cluster sidecar follows the counter with a watch, so a pod that
//!   claimed nothing for a while still knows how far the others got). A read below it is a
//!   copy restored from a backup or an etcd snapshot, or a counter re-created: refused as
//!   below the floor ([`HighestSeen`]).
//! - **The recorded claim count**: a sidecar that never claimed (just started) has no floor.
//!   So every claim also reads a lower bound of the counter's claim count kept outside the
//!   counter (in a cluster, the IdSequence's `status.segment.blocksClaimed`, written by the
//!   operator). Claims only ever grow (a give-back keeps the count), so a counter with fewer
//!   claims is an older copy, and is refused until a person repairs it.
//! - **The call timeout**: each read and each write of the counter is abandoned after a
//!   bounded time. A write whose outcome is unknown is harmless: it was conditional on the
//!   version read, so at worst its block is a gap.
//!
//! One piece (over 400 lines): the claim loop, its guards and its errors are one protocol
//! and are read together; the tests are in `claim/tests.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kubeflake_crds::segment_counter::{Counter, LIMIT, TakeError, take};

use crate::metrics::SegmentMetrics;

/// Consecutive values `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl Block {
    pub(crate) fn len(&self) -> u64 {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Why the counter could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("the counter changed since it was read (another sidecar claimed a block)")]
    Conflict,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Corrupt(String),
    /// The counter is in a format this release does not understand (written by a newer
    /// kubeflake, or not a format number): nothing is claimed from it and it is not
    /// written; the message names the Lease and what to do.
    #[error("{0}")]
    UnsupportedFormat(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("the counter did not answer within {0:?}; if a write was in flight its block is a gap")]
    TimedOut(Duration),
}

/// Where the counter lives: a Lease in a cluster, a file standalone, a map in tests.
pub(crate) trait CounterStore: Send + Sync + 'static {
    /// The counter now, with the version a write must be conditional on.
    fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>>;
    /// Writes `new` only if the counter is still the version `seen`; `Ok` means the write
    /// is durable. Never writes unconditionally.
    fn compare_and_swap<'a>(
        &'a self,
        seen: &'a Counter,
        new: Counter,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// A lower bound of the counter's claim count recorded outside the counter (the
    /// IdSequence's status in a cluster); a counter with fewer claims is an older copy.
    /// Stores with no such record answer 0.
    fn known_claims(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async { Ok(0) })
    }
    /// The highest `next` this store has seen the counter at (read or written), for a
    /// store whose counter may never go down ([`HighestSeen`]); 0 for one that may.
    fn seen_next(&self) -> u64 {
        0
    }
    /// Whether a graceful stop may lower the counter to give unused values back. A cluster's
    /// counter Lease may only go up (the API server refuses the rest, docs/safety.md).
    fn may_lower(&self) -> bool {
        true
    }
    /// Claims up to `size` values starting at `max(next, min_start)` ([`block_from`]) in
    /// one step, when the store can do that atomically (a local file under one lock: one
    /// blocking job instead of two). `None`: the caller reads and compares-and-swaps.
    fn claim_at_once(
        &self,
        _size: u64,
        _floor: u64,
        _min_start: u64,
    ) -> Option<BoxFuture<'_, Result<Block, ClaimError>>> {
        None
    }
}

/// The highest `next` a counter that may never go down was seen at by this process: read
/// by a claim, written by one, or delivered by the cluster sidecar's watch of the counter.
/// Every `next` the counter held is a floor for every later read of it (the API server's
/// reads of one object are linearizable and the Lease policy lets nobody lower `next`), so
/// a read below it is a counter that went back: restored from an etcd snapshot or a backup,
/// or re-created. Claims refuse it ([`ClaimError::CounterBehind`]), also in a sidecar whose
/// own blocks lie below it (docs/safety.md, Segment rules 4 and 5, and rule 22).
#[derive(Debug, Default)]
pub(crate) struct HighestSeen(AtomicU64);

impl HighestSeen {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Records that the counter read `next`. `Some(highest)`: it read below `highest`,
    /// seen before, so it went back (the record keeps `highest`).
    pub(crate) fn record(&self, next: u64) -> Option<u64> {
        let before = self.0.fetch_max(next, Ordering::SeqCst);
        (next < before).then_some(before)
    }
}

/// Why no block was claimed. No value of a failed claim is ever handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ClaimError {
    #[error(
        "the sequence is exhausted: every value up to 2^63-1 was claimed; create a new IdSequence"
    )]
    Exhausted,
    #[error("{conflicts} conflicting claims in a row; retrying later")]
    TooManyConflicts { conflicts: u32 },
    #[error(
        "the counter reads next = {next}, below {floor}, the top of this sidecar's own blocks \
         or the highest next it saw the counter at: it was deleted and re-created or restored \
         from an older copy (a backup, an etcd snapshot), and values from it may already have \
         been issued. Refusing to claim from it; see the IdSequence's Ready \
         condition and docs/segment.md (\"The counter was lost\") to recover"
    )]
    CounterBehind { next: u64, floor: u64 },
    #[error(
        "the counter shows {claims} claims, fewer than the {known} already recorded in the \
         IdSequence's status: it was re-created or restored from an older copy, and values \
         from it may already have been issued. Refusing to claim from it until its \
         kubeflake.io/claims is at least {known}; see docs/segment.md (\"The counter was lost\")"
    )]
    CounterWentBack { claims: u64, known: u64 },
    /// A counter of a sequence joined to an ID space (format 3) has used up the range
    /// its operator took from the hub, and no next range is queued (docs/safety.md rule
    /// 22): nothing is claimed until the operator queues one.
    #[error("{0}")]
    RangeUsedUp(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Retry pacing after conflicts: a random delay up to `first * 2^n`, capped at `max`; and
/// how long one call to the store may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
    /// Conflicts tolerated within one claim before giving up (the caller retries later).
    pub(crate) max_conflicts: u32,
    /// Each read or write of the counter is abandoned after this long (an API server that
    /// does not answer must not hold the claim, and the buffer, for minutes).
    pub(crate) call_timeout: Duration,
}

/// Default of [`Backoff::call_timeout`].
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(2),
            max: Duration::from_millis(500),
            max_conflicts: 64,
            call_timeout: CALL_TIMEOUT,
        }
    }
}

/// Runs one store call, giving up after `limit`.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or(Err(StoreError::TimedOut(limit)))
}

impl Backoff {
    /// The pause after the `n`-th conflict in a row (n >= 1): "full jitter".
    pub(crate) fn delay(&self, n: u32) -> Duration {
        let ceiling = self.first.saturating_mul(1 << n.min(20)).min(self.max);
        ceiling.mul_f64(fastrand::f64())
    }
}

/// A successful claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) block: Block,
    /// Conflicts met on the way.
    pub(crate) conflicts: u32,
}

/// The block a claim takes when the counter reads `next`: up to `size` (at least 1) values
/// from `next`, or from `min_start` when that is higher (an `after` request: the counter is
/// raised to at least `min_start`, the values skipped are a gap), cut at 2^63. `None` when
/// no value is left below 2^63. The counter's new `next` is the block's `end`, so it only
/// ever goes up.
pub(crate) fn block_from(next: u64, min_start: u64, size: u64) -> Option<Block> {
    let start = next.max(min_start);
    (start < LIMIT).then(|| Block {
        start,
        end: start.saturating_add(size.max(1)).min(LIMIT),
    })
}

/// Claims up to `size` values (fewer only at the very end of the value range). `floor` is
/// the end of the highest block the caller claimed before (0 if none): a counter below it
/// is refused with [`ClaimError::CounterBehind`]; a counter with fewer claims than the
/// store's [`CounterStore::known_claims`] with [`ClaimError::CounterWentBack`].
#[cfg(test)]
pub(crate) async fn claim(
    store: &dyn CounterStore,
    size: u64,
    floor: u64,
    backoff: &Backoff,
) -> Result<Claimed, ClaimError> {
    claim_above(store, size, floor, 0, backoff).await
}

/// [`claim_above`], timed and counted in the segment metrics: every source (the block
/// buffer, a strict sidecar, the oracle) claims through this, so the series mean the same
/// whoever claims. `claimed_top` is left to the caller, which knows its own top.
pub(crate) async fn claim_counted(
    store: &dyn CounterStore,
    size: u64,
    floor: u64,
    min_start: u64,
    backoff: &Backoff,
    metrics: &SegmentMetrics,
) -> (Result<Claimed, ClaimError>, Duration) {
    let started = Instant::now();
    let result = claim_above(store, size, floor, min_start, backoff).await;
    let took = started.elapsed();
    metrics.claim_seconds.observe(took.as_secs_f64());
    match &result {
        Ok(claimed) => {
            metrics.blocks_claimed.inc();
            metrics.claim_conflicts.inc_by(u64::from(claimed.conflicts));
        }
        // Not a failure to retry: the end of the value range (the sources say it).
        Err(ClaimError::Exhausted) => {}
        Err(e) => {
            metrics.claim_errors.inc();
            match e {
                ClaimError::TooManyConflicts { conflicts } => {
                    metrics.claim_conflicts.inc_by(u64::from(*conflicts));
                }
                ClaimError::CounterBehind { .. } | ClaimError::CounterWentBack { .. } => {
                    metrics.counter_behind.inc();
                }
                _ => {}
            }
        }
    }
    (result, took)
}

/// `claim` a block that starts at `min_start` or above (docs/safety.md rule 12): when the
/// counter is lower, the same compare-and-set raises it to `min_start + size`.
pub(crate) async fn claim_above(
    store: &dyn CounterStore,
    size: u64,
    floor: u64,
    min_start: u64,
    backoff: &Backoff,
) -> Result<Claimed, ClaimError> {
    if let Some(at_once) = store.claim_at_once(size, floor, min_start) {
        return match tokio::time::timeout(backoff.call_timeout, at_once).await {
            Ok(block) => block.map(|block| Claimed {
                block,
                conflicts: 0,
            }),
            Err(_) => Err(StoreError::TimedOut(backoff.call_timeout).into()),
        };
    }
    // Whatever the counter was seen at before this read is a floor for it.
    let mut floor = floor.max(store.seen_next());
    // The record is read once per claim, beside the first read of the counter (not one
    // round trip after it): it only ever grows, so an older answer is merely less strict.
    let (known, first) = tokio::join!(
        bounded(backoff.call_timeout, store.known_claims()),
        bounded(backoff.call_timeout, store.read())
    );
    let known = known?;
    let mut seen = first?;
    let mut conflicts = 0;
    loop {
        if seen.next < floor {
            return Err(ClaimError::CounterBehind {
                next: seen.next,
                floor,
            });
        }
        if seen.claims < known {
            return Err(ClaimError::CounterWentBack {
                claims: seen.claims,
                known,
            });
        }
        // Below the range's limit, or moved to the queued range in this same write, for a
        // counter joined to an ID space (rule 22); as `block_from` for any other.
        let taken = take(&seen, size, min_start).map_err(|e| match e {
            TakeError::Exhausted => ClaimError::Exhausted,
            e @ TakeError::RangeUsedUp { .. } => ClaimError::RangeUsedUp(e.to_string()),
        })?;
        let block = Block {
            start: taken.start,
            end: taken.end,
        };
        match bounded(
            backoff.call_timeout,
            store.compare_and_swap(&seen, taken.counter),
        )
        .await
        {
            Ok(()) => {
                return Ok(Claimed { block, conflicts });
            }
            Err(StoreError::Conflict) => {
                conflicts += 1;
                if conflicts >= backoff.max_conflicts {
                    return Err(ClaimError::TooManyConflicts { conflicts });
                }
                tokio::time::sleep(backoff.delay(conflicts)).await;
                floor = floor.max(store.seen_next());
                seen = bounded(backoff.call_timeout, store.read()).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Gives back the unused top of the counter: sets `next` from `top` down to `lowest`, but
/// only if nobody claimed after us (the counter still reads `top`). Used on a graceful
/// stop, after the last value was issued, so a clean restart leaves no gap. Nothing is
/// given back to a store that may not go down ([`CounterStore::may_lower`]).
pub(crate) async fn give_back(
    store: &dyn CounterStore,
    lowest: u64,
    top: u64,
) -> Result<bool, StoreError> {
    if !store.may_lower() {
        return Ok(false);
    }
    let seen = bounded(CALL_TIMEOUT, store.read()).await?;
    if seen.next != top || lowest >= top {
        return Ok(false);
    }
    let new = Counter {
        next: lowest,
        claims: seen.claims,
        format: seen.format,
        resource_version: seen.resource_version.clone(),
        range: seen.range,
    };
    match bounded(CALL_TIMEOUT, store.compare_and_swap(&seen, new)).await {
        Ok(()) => Ok(true),
        Err(StoreError::Conflict) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! An in-memory counter with the API server's CAS semantics, and fault switches.
    use super::*;
    use kubeflake_crds::segment_counter::{COUNTER_FORMAT_RANGED, Queued, Ranged};
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    #[derive(Default)]
    pub(crate) struct FakeStore {
        pub(crate) counter: Mutex<(u64, u64, u64)>, // next, claims, version
        pub(crate) fail_writes: AtomicBool,
        /// Fail the write but apply it (a lost reply): the block must still never be used.
        pub(crate) apply_then_fail: AtomicBool,
        pub(crate) writes: AtomicU64,
        /// Never answer (a blackholed API server).
        pub(crate) hang: AtomicBool,
        /// Yield between read and write, so concurrent claims interleave.
        pub(crate) interleave: bool,
        /// What the IdSequence's status would record (see `CounterStore::known_claims`).
        pub(crate) known_claims: AtomicU64,
        /// A counter that may only go up, like a cluster's Lease under the API server's
        /// policy: its reads and writes are recorded in `seen`, as the Lease store does.
        pub(crate) only_up: bool,
        pub(crate) seen: HighestSeen,
        /// Reads find the counter rewritten in a newer Lease format (as the Lease store
        /// reports it).
        pub(crate) newer_format: AtomicBool,
        /// The format reads report (0 reads as 1): 2 for a strict oracle's counter.
        pub(crate) format: AtomicU64,
        /// A format 3 counter's ranges (docs/safety.md rule 22); a write whose `next`
        /// passes its limit is refused, as the Lease policy refuses it.
        pub(crate) range: Mutex<Option<Ranged>>,
    }

    impl FakeStore {
        pub(crate) fn starting_at(next: u64) -> FakeStore {
            FakeStore {
                counter: Mutex::new((next, 0, 1)),
                interleave: true,
                ..Default::default()
            }
        }

        pub(crate) fn next(&self) -> u64 {
            self.counter.lock().unwrap().0
        }

        /// A format 3 counter at `next`, claims stopping at `limit`.
        pub(crate) fn ranged(next: u64, limit: u64) -> FakeStore {
            let store = FakeStore::starting_at(next);
            *store.range.lock().unwrap() = Some(Ranged {
                limit,
                queued: None,
            });
            store
        }

        /// The operator queues `[start, limit)` (a compare-and-swap of its own), writing
        /// the range in use as the limit.
        pub(crate) fn queue(&self, start: u64, limit: u64) {
            let mut c = self.counter.lock().unwrap();
            let mut range = self.range.lock().unwrap();
            if let Some((in_use, _)) = range.and_then(|r| r.in_use(c.0)) {
                *range = Some(Ranged {
                    limit: in_use,
                    queued: Some(Queued { start, limit }),
                });
            }
            c.2 += 1;
        }

        pub(crate) fn range(&self) -> Option<Ranged> {
            *self.range.lock().unwrap()
        }

        /// The counter deleted and re-created at `next` (or restored from a backup).
        pub(crate) fn recreate_at(&self, next: u64) {
            let mut c = self.counter.lock().unwrap();
            *c = (next, 0, c.2 + 1);
        }

        async fn maybe_hang(&self) {
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }
    }

    impl CounterStore for FakeStore {
        fn may_lower(&self) -> bool {
            !self.only_up
        }

        fn seen_next(&self) -> u64 {
            self.seen.get()
        }

        fn known_claims(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
            Box::pin(async move { Ok(self.known_claims.load(Ordering::SeqCst)) })
        }

        fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>> {
            Box::pin(async move {
                self.maybe_hang().await;
                if self.newer_format.load(Ordering::SeqCst) {
                    return Err(StoreError::UnsupportedFormat(
                        "segment counter Lease orders-segment-counter was written by a newer \
                         kubeflake (format 2)"
                            .into(),
                    ));
                }
                let (next, claims, version) = *self.counter.lock().unwrap();
                if self.only_up {
                    self.seen.record(next);
                }
                let range = self.range();
                if self.interleave {
                    tokio::task::yield_now().await;
                }
                let format = if range.is_some() {
                    COUNTER_FORMAT_RANGED
                } else {
                    self.format.load(Ordering::SeqCst).max(1)
                };
                Ok(Counter {
                    next,
                    claims,
                    format,
                    resource_version: Some(version.to_string()),
                    range,
                })
            })
        }

        fn compare_and_swap<'a>(
            &'a self,
            seen: &'a Counter,
            new: Counter,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                self.maybe_hang().await;
                if self.interleave {
                    tokio::task::yield_now().await;
                }
                if self.fail_writes.load(Ordering::SeqCst) {
                    return Err(StoreError::Unavailable(
                        "the fake API server is down".into(),
                    ));
                }
                let mut c = self.counter.lock().unwrap();
                if Some(c.2.to_string()) != seen.resource_version {
                    return Err(StoreError::Conflict);
                }
                let range = self.range.lock().unwrap();
                if range.is_some_and(|r| new.range != Some(r) || r.in_use(new.next).is_none()) {
                    return Err(StoreError::Unavailable(
                        "the Lease policy refuses a claim outside the ranges or of the ranges"
                            .into(),
                    ));
                }
                *c = (new.next, new.claims, c.2 + 1);
                if self.only_up {
                    self.seen.record(new.next);
                }
                self.writes.fetch_add(1, Ordering::SeqCst);
                if self.apply_then_fail.load(Ordering::SeqCst) {
                    return Err(StoreError::Unavailable("reply lost".into()));
                }
                Ok(())
            })
        }
    }
}

#[cfg(test)]
mod rule22_tests;
#[cfg(test)]
mod tests;
