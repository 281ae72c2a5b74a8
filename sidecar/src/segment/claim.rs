//! Claiming a block: read the counter, write `next + size` conditional on the version read
//! (compare-and-swap), and only then hand out the values. On a conflict (another sidecar
//! was first) re-read and retry after a capped, jittered exponential backoff, so that many
//! sidecars contending do not retry in lockstep.

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
    #[error("{0}")]
    Unavailable(String),
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
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Retry pacing after conflicts: a random delay up to `first * 2^n`, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    /// Conflicts tolerated within one claim before giving up (the caller retries later).
    pub max_conflicts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(2),
            max: Duration::from_millis(500),
            max_conflicts: 64,
        }
    }
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

/// Claims up to `size` values (fewer only at the very end of the value range).
pub async fn claim(
    store: &dyn CounterStore,
    size: u64,
    backoff: &Backoff,
) -> Result<Claimed, ClaimError> {
    let mut conflicts = 0;
    loop {
        let seen = store.read().await?;
        if seen.next >= LIMIT {
            return Err(ClaimError::Exhausted);
        }
        let end = seen.next.saturating_add(size.max(1)).min(LIMIT);
        let new = Counter {
            next: end,
            claims: seen.claims.saturating_add(1),
            resource_version: seen.resource_version.clone(),
        };
        match store.compare_and_swap(&seen, new).await {
            Ok(()) => {
                return Ok(Claimed {
                    block: Block {
                        start: seen.next,
                        end,
                    },
                    conflicts,
                });
            }
            Err(StoreError::Conflict) => {
                conflicts += 1;
                if conflicts >= backoff.max_conflicts {
                    return Err(ClaimError::TooManyConflicts { conflicts });
                }
                tokio::time::sleep(backoff.delay(conflicts)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Gives back the unused top of the counter: sets `next` from `top` down to `lowest`, but
/// only if nobody claimed after us (the counter still reads `top`). Used on a graceful
/// stop, after the last value was issued, so a clean restart leaves no gap.
pub async fn give_back(
    store: &dyn CounterStore,
    lowest: u64,
    top: u64,
) -> Result<bool, StoreError> {
    let seen = store.read().await?;
    if seen.next != top || lowest >= top {
        return Ok(false);
    }
    let new = Counter {
        next: lowest,
        claims: seen.claims,
        resource_version: seen.resource_version.clone(),
    };
    match store.compare_and_swap(&seen, new).await {
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
        /// Yield between read and write, so concurrent claims interleave.
        pub interleave: bool,
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
    }

    impl CounterStore for FakeStore {
        fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>> {
            Box::pin(async move {
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
                    let mut blocks = Vec::new();
                    for _ in 0..40 {
                        let c = claim(store.as_ref(), 10 + i, &backoff).await.unwrap();
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
        assert!(claim(&store, 50, &Backoff::default()).await.is_err());
        assert_eq!(
            store.next(),
            150,
            "the write went through though its reply was lost"
        );
        store
            .apply_then_fail
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let c = claim(&store, 50, &Backoff::default()).await.unwrap();
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
        let c = claim(&store, 1000, &Backoff::default()).await.unwrap();
        assert_eq!(
            c.block,
            Block {
                start: LIMIT - 5,
                end: LIMIT
            }
        );
        assert_eq!(
            claim(&store, 1000, &Backoff::default()).await,
            Err(ClaimError::Exhausted)
        );
    }

    #[tokio::test]
    async fn give_back_lowers_the_counter_only_when_nobody_claimed_after() {
        let store = FakeStore::starting_at(0);
        claim(&store, 100, &Backoff::default()).await.unwrap();
        assert!(give_back(&store, 40, 100).await.unwrap());
        assert_eq!(store.next(), 40);
        claim(&store, 100, &Backoff::default()).await.unwrap(); // someone else: 40..140
        assert!(
            !give_back(&store, 90, 100).await.unwrap(),
            "100 is no longer the top"
        );
        assert_eq!(store.next(), 140);
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
}
