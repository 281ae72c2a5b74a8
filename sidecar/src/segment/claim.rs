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
//! - **The recorded claim count**: a sidecar that never claimed (just started) has no floor.
//!   So every claim also reads a lower bound of the counter's claim count kept outside the
//!   counter (in a cluster, the IdSequence's `status.segment.blocksClaimed`, written by the
//!   operator). Claims only ever grow (a give-back keeps the count), so a counter with fewer
//!   claims is an older copy, and is refused until a person repairs it.
//! - **The call timeout**: each read and each write of the counter is abandoned after a
//!   bounded time. A write whose outcome is unknown is harmless: it was conditional on the
//!   version read, so at worst its block is a gap.

use std::time::Duration;

use futures::future::BoxFuture;
use kubeflake_crds::segment_counter::{Counter, LIMIT};

/// Consecutive values `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub start: u64,
    pub end: u64,
}

impl Block {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Why the counter could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
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
pub trait CounterStore: Send + Sync + 'static {
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

/// Why no block was claimed. No value of a failed claim is ever handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "the sequence is exhausted: every value up to 2^63-1 was claimed; create a new IdSequence"
    )]
    Exhausted,
    #[error("{conflicts} conflicting claims in a row; retrying later")]
    TooManyConflicts { conflicts: u32 },
    #[error(
        "the counter reads next = {next}, below the top of this sidecar's own blocks ({floor}): \
         it was deleted and re-created or restored from an older copy, and values from it \
         may already have been issued. Refusing to claim from it; see the IdSequence's Ready \
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
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Retry pacing after conflicts: a random delay up to `first * 2^n`, capped at `max`; and
/// how long one call to the store may take.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    /// Conflicts tolerated within one claim before giving up (the caller retries later).
    pub max_conflicts: u32,
    /// Each read or write of the counter is abandoned after this long (an API server that
    /// does not answer must not hold the claim, and the buffer, for minutes).
    pub call_timeout: Duration,
}

/// Default of [`Backoff::call_timeout`].
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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
    pub fn delay(&self, n: u32) -> Duration {
        let ceiling = self.first.saturating_mul(1 << n.min(20)).min(self.max);
        ceiling.mul_f64(fastrand::f64())
    }
}

/// A successful claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    pub block: Block,
    /// Conflicts met on the way.
    pub conflicts: u32,
}

/// The block a claim takes when the counter reads `next`: up to `size` (at least 1) values
/// from `next`, or from `min_start` when that is higher (an `after` request: the counter is
/// raised to at least `min_start`, the values skipped are a gap), cut at 2^63. `None` when
/// no value is left below 2^63. The counter's new `next` is the block's `end`, so it only
/// ever goes up.
pub fn block_from(next: u64, min_start: u64, size: u64) -> Option<Block> {
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
pub async fn claim(
    store: &dyn CounterStore,
    size: u64,
    floor: u64,
    backoff: &Backoff,
) -> Result<Claimed, ClaimError> {
    claim_above(store, size, floor, 0, backoff).await
}

/// [`claim`] a block that starts at `min_start` or above (docs/safety.md rule 12): when the
/// counter is lower, the same compare-and-set raises it to `min_start + size`.
pub async fn claim_above(
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
        let Some(block) = block_from(seen.next, min_start, size) else {
            return Err(ClaimError::Exhausted);
        };
        let new = Counter {
            next: block.end,
            claims: seen.claims.saturating_add(1),
            resource_version: seen.resource_version.clone(),
        };
        match bounded(backoff.call_timeout, store.compare_and_swap(&seen, new)).await {
            Ok(()) => {
                return Ok(Claimed { block, conflicts });
            }
            Err(StoreError::Conflict) => {
                conflicts += 1;
                if conflicts >= backoff.max_conflicts {
                    return Err(ClaimError::TooManyConflicts { conflicts });
                }
                tokio::time::sleep(backoff.delay(conflicts)).await;
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
pub async fn give_back(
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
        resource_version: seen.resource_version.clone(),
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
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    #[derive(Default)]
    pub struct FakeStore {
        pub counter: Mutex<(u64, u64, u64)>, // next, claims, version
        pub fail_writes: AtomicBool,
        /// Fail the write but apply it (a lost reply): the block must still never be used.
        pub apply_then_fail: AtomicBool,
        pub writes: AtomicU64,
        /// Never answer (a blackholed API server).
        pub hang: AtomicBool,
        /// Yield between read and write, so concurrent claims interleave.
        pub interleave: bool,
        /// What the IdSequence's status would record (see `CounterStore::known_claims`).
        pub known_claims: AtomicU64,
        /// A counter that may only go up, like a cluster's Lease under the API server's policy.
        pub only_up: bool,
        /// Reads find the counter rewritten in a newer Lease format (as the Lease store
        /// reports it).
        pub newer_format: AtomicBool,
    }

    impl FakeStore {
        pub fn starting_at(next: u64) -> FakeStore {
            FakeStore {
                counter: Mutex::new((next, 0, 1)),
                interleave: true,
                ..Default::default()
            }
        }

        pub fn next(&self) -> u64 {
            self.counter.lock().unwrap().0
        }

        /// The counter deleted and re-created at `next` (or restored from a backup).
        pub fn recreate_at(&self, next: u64) {
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
                if self.interleave {
                    tokio::task::yield_now().await;
                }
                Ok(Counter {
                    next,
                    claims,
                    resource_version: Some(version.to_string()),
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
                *c = (new.next, new.claims, c.2 + 1);
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
mod tests {
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
}
