//! Strict sequences (`segment.strict: true`, docs/safety.md rule 13): every value is served
//! only after the compare-and-set that made it the counter's new value succeeded. Nothing
//! is buffered or prefetched, so if one request returned before another was invoked, on
//! any sidecar, the second got the larger value.
//!
//! Concurrent requests to one sidecar share a write (group commit): one task takes every
//! request queued so far, claims their values in one compare-and-set, and hands each its
//! part. A request joins only a write that starts after it arrived, so each value is
//! still the counter's new value at a moment between the request's call and its return,
//! which is all rule 13 needs. Requests that arrive while a write is in flight wait for
//! the next one.
//!
//! Why this is in the segment room and not the oracle's ([`crate::oracle`], strict
//! sequences in a cluster): it is a segment source like the block buffer, over any
//! [`CounterStore`] (the counter file, standalone), written by the same claim loop
//! ([`claim_counted`]) with a block exactly the group's size; it has no Lease, term,
//! election or port. The oracle builds on it and on this room (the claim loop, [`group`]),
//! so the arrows point one way, from the oracle down into segment.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::buffer::{Runs, SegmentRefusal, check_raise};
use super::claim::{Backoff, ClaimError, CounterStore, StoreError, claim_counted};
use super::group::{self, Waiting};
use crate::metrics::SegmentMetrics;

/// What the writer task and the requests share.
#[derive(Default)]
struct Queue {
    requests: group::Queue,
    /// The end of the highest range this sidecar wrote: the counter is never below it
    /// while this sidecar runs (the floor of [`claim_above`]).
    top: u64,
}

/// A strict segment source: one counter write per group of concurrent requests.
pub(crate) struct Strict {
    queue: Mutex<Queue>,
    /// Wakes the writer task: requests queued, or stopped.
    wake: Notify,
    store: Arc<dyn CounterStore>,
    backoff: Backoff,
    wait_limit: Duration,
    metrics: SegmentMetrics,
}

impl Strict {
    /// Starts the writer task. It runs until [`stop`](Self::stop).
    pub(crate) fn start(
        store: Arc<dyn CounterStore>,
        wait_limit: Duration,
        backoff: Backoff,
        metrics: SegmentMetrics,
    ) -> Arc<Strict> {
        let strict = Arc::new(Strict {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            store,
            backoff,
            wait_limit,
            metrics,
        });
        metrics_block_size_zero(&strict.metrics);
        tokio::spawn(strict.clone().write_loop());
        strict
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Ok` unless stopped: a strict sidecar holds nothing to be ready with; each request
    /// succeeds or fails on its own write.
    pub(crate) fn check_ready(&self) -> Result<(), SegmentRefusal> {
        if self.lock().requests.is_stopped() {
            Err(SegmentRefusal::Stopping)
        } else {
            Ok(())
        }
    }

    /// `want` consecutive values, each at least `min`, from one counter write made after
    /// this call began.
    pub(crate) async fn take_from(&self, want: u64, min: u64) -> Result<Runs, SegmentRefusal> {
        if min > super::buffer::RAISE_LIMIT && min > self.lock().top {
            check_raise(self.store.as_ref(), &self.backoff, min).await?;
        }
        let answer = self.lock().requests.push(want, min)?;
        self.wake.notify_one();
        group::answer(answer, self.wait_limit).await
    }

    /// One value of at least `min`.
    pub(crate) async fn take_one_from(&self, min: u64) -> Result<u64, SegmentRefusal> {
        let runs = self.take_from(1, min).await?;
        runs.first().map(|b| b.start).ok_or_else(|| {
            SegmentRefusal::NoBlock("strict: the counter write returned no value".into())
        })
    }

    /// Refuses every request from now on; requests waiting are answered `Stopping`.
    pub(crate) fn stop(&self) {
        let waiting = self.lock().requests.stop();
        group::refuse(waiting, &SegmentRefusal::Stopping);
        self.wake.notify_one();
    }

    /// The writer task: one compare-and-set per group of queued requests.
    async fn write_loop(self: Arc<Self>) {
        loop {
            let (group, floor) = {
                let mut q = self.lock();
                let Some(group) = q.requests.next_group() else {
                    return;
                };
                (group, q.top)
            };
            if group.is_empty() {
                self.wake.notified().await;
                continue;
            }
            self.write_group(group, floor).await;
        }
    }

    /// Claims the values of `group` in one write and answers each request.
    async fn write_group(&self, group: Vec<Waiting>, floor: u64) {
        let (total, min) = group::totals(&group);
        let (result, _) = claim_counted(
            self.store.as_ref(),
            total,
            floor,
            min,
            &self.backoff,
            &self.metrics,
        )
        .await;
        match result {
            Ok(claimed) => {
                let top = {
                    let mut q = self.lock();
                    q.top = q.top.max(claimed.block.end);
                    q.top
                };
                self.metrics
                    .claimed_top
                    .set(i64::try_from(top).unwrap_or(i64::MAX));
                group::hand_out(group, claimed.block, &self.metrics);
            }
            Err(e) => {
                let refusal = match &e {
                    ClaimError::Exhausted => SegmentRefusal::Exhausted,
                    _ => SegmentRefusal::NoBlock(format!("strict: the counter write failed: {e}")),
                };
                match &e {
                    ClaimError::CounterBehind { .. } | ClaimError::CounterWentBack { .. } => {
                        tracing::error!(error = %e, "the segment counter went backwards: refusing to write it");
                    }
                    ClaimError::Store(StoreError::UnsupportedFormat(_)) => {
                        tracing::error!(error = %e, "the segment counter is in a format this release does not understand: refusing to write it");
                    }
                    _ => {}
                }
                tracing::warn!(error = %e, requests = group.len(), "strict: a counter write failed; its requests get 503");
                group::refuse(group, &refusal);
            }
        }
    }
}

/// A strict sidecar claims exactly what each group asks for: no block size to report.
fn metrics_block_size_zero(metrics: &SegmentMetrics) {
    metrics.block_size.set(0);
    metrics.buffered_values.set(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::segment::Block;
    use crate::segment::claim::fake::FakeStore;
    use std::sync::atomic::Ordering;

    fn strict(store: &Arc<FakeStore>) -> Arc<Strict> {
        Strict::start(
            store.clone(),
            Duration::from_secs(5),
            Backoff::default(),
            Metrics::new().segment.clone(),
        )
    }

    /// Rule 13: the counter is written before a value is served, and the next request,
    /// on another sidecar, gets a larger value: nothing is held back in memory.
    #[tokio::test]
    async fn rule13_each_value_is_written_to_the_counter_before_it_is_served() {
        let store = Arc::new(FakeStore::starting_at(1));
        let (a, b) = (strict(&store), strict(&store));
        let mut last = 0;
        for i in 0..200 {
            let sidecar = if i % 2 == 0 { &a } else { &b };
            let v = sidecar.take_one_from(0).await.unwrap();
            assert!(v > last, "value {v} after {last}: strict order broken");
            assert_eq!(
                store.next(),
                v + 1,
                "served before the counter moved past it"
            );
            last = v;
        }
    }

    #[tokio::test]
    async fn rule13_a_batch_is_consecutive_values_from_one_write() {
        let store = Arc::new(FakeStore::starting_at(10));
        let s = strict(&store);
        let runs = s.take_from(5, 0).await.unwrap();
        assert_eq!(runs, vec![Block { start: 10, end: 15 }]);
        assert_eq!(store.next(), 15);
        assert_eq!(s.take_one_from(0).await.unwrap(), 15);
    }

    /// Concurrent requests share writes, and still get distinct values.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_requests_share_writes_and_never_share_a_value() {
        let store = Arc::new(FakeStore::starting_at(1));
        let s = strict(&store);
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    for _ in 0..50 {
                        got.push(s.take_one_from(0).await.unwrap());
                    }
                    got
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            let got = t.await.unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "per caller order");
            all.extend(got);
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a value was served twice");
        assert!(store.next() > *all.last().unwrap());
        let writes = store.writes.load(Ordering::SeqCst);
        assert!(
            writes < n as u64,
            "{writes} writes for {n} values: none shared"
        );
    }

    /// Rule 12 in a strict sequence: the write raises the counter above `after`.
    #[tokio::test]
    async fn rule12_after_raises_the_counter_in_the_same_write() {
        let store = Arc::new(FakeStore::starting_at(1));
        let s = strict(&store);
        assert_eq!(s.take_one_from(1001).await.unwrap(), 1001);
        assert_eq!(store.next(), 1002);
        assert_eq!(s.take_one_from(0).await.unwrap(), 1002);
    }

    #[tokio::test]
    async fn a_failed_write_serves_nothing_and_the_next_request_succeeds() {
        let store = Arc::new(FakeStore::starting_at(1));
        let s = strict(&store);
        store.fail_writes.store(true, Ordering::SeqCst);
        let err = s.take_one_from(0).await.unwrap_err();
        assert_eq!(err.reason(), "no_block", "{err}");
        assert_eq!(store.next(), 1);
        store.fail_writes.store(false, Ordering::SeqCst);
        assert_eq!(s.take_one_from(0).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_counter_found_below_this_sidecars_own_top_is_refused() {
        let store = Arc::new(FakeStore::starting_at(100));
        let s = strict(&store);
        assert_eq!(s.take_one_from(0).await.unwrap(), 100);
        store.recreate_at(1);
        let err = s.take_one_from(0).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("the top of this sidecar's own blocks"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn after_stop_requests_are_refused_and_nothing_is_written() {
        let store = Arc::new(FakeStore::starting_at(1));
        let s = strict(&store);
        s.stop();
        assert_eq!(s.check_ready(), Err(SegmentRefusal::Stopping));
        assert_eq!(
            s.take_one_from(0).await.unwrap_err(),
            SegmentRefusal::Stopping
        );
        assert_eq!(store.next(), 1);
    }
}
