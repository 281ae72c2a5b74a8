//! The task that keeps a fence file ahead of its generator (both modes), and the one way
//! async code writes a fence: on the blocking pool, never on an async worker (a write ends
//! in an fsync that can take long on a busy disk).
//!
//! The task owns the fence by value. Stopping it waits for a write in flight and hands the
//! fence back, so the file always comes back to the lifecycle code (for the final, lowering
//! write of docs/safety.md rule 5, or for the next slot). If a renewal panics, the task
//! ends by itself: [`Renewer::died`] says so, and the caller must stop issuing and end the
//! process with an error, so that it is restarted and starts above its fence (rules 4 and
//! 6) instead of serving on without a renewed fence.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use crate::fence::{FenceFileError, LocalFence};

/// A fence that can be renewed (a blocking write).
pub(crate) trait Renew: Send + 'static {
    /// Whether a renewal would write anything: checked on the async worker, so that a tick
    /// with nothing to write costs no hop to the blocking pool.
    fn due(&self) -> bool;
    fn renew(&mut self) -> Result<(), FenceFileError>;
    /// Notified when a renewal is wanted before the next period (an ID met the fence).
    fn asked(&self) -> Arc<Notify>;
    /// Whether only being [`asked`](Self::asked) can make a renewal due, so the task may
    /// skip its periodic looks until then (an idle sidecar then wakes for nothing).
    fn quiet_until_asked(&self) -> bool;
}

impl Renew for LocalFence {
    fn due(&self) -> bool {
        LocalFence::due(self).is_some()
    }
    fn asked(&self) -> Arc<Notify> {
        LocalFence::asked(self)
    }
    fn quiet_until_asked(&self) -> bool {
        LocalFence::quiet_until_asked(self)
    }
    fn renew(&mut self) -> Result<(), FenceFileError> {
        LocalFence::renew(self)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RenewerError {
    #[error(
        "the fence renewal task died ({0}); stopped issuing, exiting so that the container is \
         restarted and starts above its fence"
    )]
    Died(String),
}

/// Runs `write` on `fence` on the blocking pool and hands the fence back with the result.
/// An `Err` means the write panicked (the fence is gone with it).
pub(crate) async fn off_worker<F, T>(
    mut fence: F,
    write: impl FnOnce(&mut F) -> T + Send + 'static,
) -> Result<(F, T), RenewerError>
where
    F: Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let out = write(&mut fence);
        (fence, out)
    })
    .await
    .map_err(|e| RenewerError::Died(e.to_string()))
}

/// A running renewal task that owns its fence.
pub(crate) struct Renewer<F> {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<F, RenewerError>>,
}

impl<F: Renew> Renewer<F> {
    /// Renews `fence` every `every` (at least 10 ms), and whenever it is asked, until
    /// stopped. While the fence is [quiet until asked](Renew::quiet_until_asked), the
    /// periodic looks pause: only being asked (or stopped) wakes the task.
    pub(crate) fn spawn(fence: F, every: Duration) -> Renewer<F> {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let asked = fence.asked();
        let task = tokio::spawn(async move {
            let mut fence = fence;
            let mut interval = tokio::time::interval(every.max(Duration::from_millis(10)));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut quiet = false;
            loop {
                tokio::select! {
                    biased;
                    // Asked to stop (or the `Renewer` was dropped): hand the fence back.
                    _ = &mut stopped => return Ok(fence),
                    () = asked.notified() => {
                        if quiet {
                            // The periods resume from now, not with the ones missed.
                            interval.reset();
                        }
                    }
                    _ = interval.tick(), if !quiet => {}
                }
                quiet = false;
                if !fence.due() {
                    quiet = fence.quiet_until_asked();
                    continue;
                }
                // Not cancelled by a stop: a write in flight always finishes first.
                let (back, written) = off_worker(fence, F::renew).await?;
                fence = back;
                if let Err(e) = written {
                    tracing::warn!(error = %e, "fence write failed; serving only up to the last fence written");
                }
            }
        });
        Renewer {
            stop: Some(stop),
            task,
        }
    }

    /// Completes only if the task ended without being asked: a renewal panicked. Do not
    /// call [`stop`](Self::stop) after this completed.
    pub(crate) async fn died(&mut self) -> RenewerError {
        match (&mut self.task).await {
            Ok(Err(e)) => e,
            Err(e) => RenewerError::Died(e.to_string()),
            Ok(Ok(_)) => RenewerError::Died("it ended unasked".into()),
        }
    }

    /// Stops renewing: waits for a write in flight, then hands the fence back.
    pub(crate) async fn stop(mut self) -> Result<F, RenewerError> {
        if let Some(stop) = self.stop.take() {
            // Fails only if the task has already ended; awaiting it below says how.
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(RenewerError::Died(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, mpsc};

    /// Counts renewals; the `panic_at`-th panics; every renewal first waits for `gate`.
    struct Fake {
        entered: Arc<AtomicU32>,
        renewals: Arc<AtomicU32>,
        panic_at: u32,
        gate: Option<mpsc::Receiver<()>>,
    }

    impl Renew for Fake {
        fn due(&self) -> bool {
            true
        }
        fn asked(&self) -> Arc<Notify> {
            Arc::new(Notify::new())
        }
        fn quiet_until_asked(&self) -> bool {
            false
        }
        fn renew(&mut self) -> Result<(), FenceFileError> {
            self.entered.fetch_add(1, Ordering::SeqCst);
            if let Some(gate) = &self.gate {
                let _ = gate.recv_timeout(Duration::from_secs(10));
            }
            let n = self.renewals.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(n != self.panic_at, "renewal {n} panics (test)");
            Ok(())
        }
    }

    fn fake(
        panic_at: u32,
        gate: Option<mpsc::Receiver<()>>,
    ) -> (Fake, Arc<AtomicU32>, Arc<AtomicU32>) {
        let (entered, renewals) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let fake = Fake {
            entered: entered.clone(),
            renewals: renewals.clone(),
            panic_at,
            gate,
        };
        (fake, entered, renewals)
    }

    #[tokio::test]
    async fn a_panic_in_a_renewal_is_reported_not_dropped() {
        let (fake, _, renewals) = fake(3, None);
        let mut renewer = Renewer::spawn(fake, Duration::from_millis(10));
        let died = tokio::time::timeout(Duration::from_secs(5), renewer.died()).await;
        let Ok(RenewerError::Died(why)) = died else {
            panic!("a panicking renewal must end the task: {died:?}");
        };
        assert!(why.contains("panic"), "{why}");
        assert_eq!(renewals.load(Ordering::SeqCst), 3);
    }

    /// The fence comes back however long a write in flight takes: `stop` has no time-out
    /// (the old code gave up after 5 s, leaving a pod that held its slot but could never
    /// serve again, with `/healthz` 200).
    #[tokio::test]
    async fn stop_waits_for_a_write_in_flight_and_always_hands_the_fence_back() {
        let (release, gate) = mpsc::channel();
        let (fake, entered, renewals) = fake(0, Some(gate));
        let renewer = Renewer::spawn(fake, Duration::from_millis(10));
        while entered.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The first renewal is blocked in its "fsync"; stop is asked meanwhile.
        let stopping = tokio::spawn(renewer.stop());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !stopping.is_finished(),
            "stop waits for the write in flight"
        );
        release.send(()).unwrap();
        let back = stopping.await.unwrap();
        assert!(back.is_ok(), "the fence came back");
        assert_eq!(
            renewals.load(Ordering::SeqCst),
            1,
            "no renewal after the stop"
        );
    }

    /// An ID that meets an idle local fence wakes the task at once: with a period no test
    /// outlives, only being asked can make it write.
    #[tokio::test]
    async fn an_id_that_meets_the_fence_wakes_the_renewal_task_without_waiting_for_its_period() {
        use kubeflake_crds::Tick;
        let dir = tempfile::tempdir().unwrap();
        let epoch = 1_735_689_600_000;
        let (local, g, clock) =
            crate::fence::testing::written_once(dir.path(), epoch + 10_000, 60_000);
        let renewer = Renewer::spawn(local, Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_millis(50)).await; // its first, idle tick
        clock.advance_millis(10_000);
        assert!(g.next_id().is_err(), "met the idle fence");
        let mut served = false;
        for _ in 0..500 {
            if g.next_id().is_ok() {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(served, "the renewal wrote when asked, not a period later");
        assert_eq!(g.fence(), Tick(20_000 + 2000 + 1000));
        renewer.stop().await.unwrap();
    }

    /// A fence with nothing due: counts the task's looks; `quiet` is what it says of itself.
    struct Idle {
        looks: Arc<AtomicU32>,
        asked: Arc<Notify>,
        quiet: bool,
    }

    impl Renew for Idle {
        fn due(&self) -> bool {
            self.looks.fetch_add(1, Ordering::SeqCst);
            false
        }
        fn asked(&self) -> Arc<Notify> {
            self.asked.clone()
        }
        fn quiet_until_asked(&self) -> bool {
            self.quiet
        }
        fn renew(&mut self) -> Result<(), FenceFileError> {
            unreachable!("never due")
        }
    }

    /// Over 10 s of 10 ms periods: every period is looked at while the fence is not quiet;
    /// once it is quiet until asked, only being asked wakes the task (an idle sidecar's
    /// renewal task wakes for nothing: docs/safety.md rule 6 is unchanged, what is written
    /// and when an ID may use it stay the same).
    #[tokio::test(start_paused = true)]
    async fn a_fence_quiet_until_asked_is_not_looked_at_each_period_only_when_asked() {
        for quiet in [false, true] {
            let looks = Arc::new(AtomicU32::new(0));
            let asked = Arc::new(Notify::new());
            let fence = Idle {
                looks: looks.clone(),
                asked: asked.clone(),
                quiet,
            };
            let renewer = Renewer::spawn(fence, Duration::from_millis(10));
            tokio::time::sleep(Duration::from_secs(10)).await;
            let periodic = looks.load(Ordering::SeqCst);
            asked.notify_one();
            tokio::time::sleep(Duration::from_millis(1)).await;
            let after_ask = looks.load(Ordering::SeqCst);
            renewer.stop().await.unwrap();
            if quiet {
                assert_eq!(periodic, 1, "quiet: the first look only");
                assert_eq!(after_ask, 2, "one look when asked");
            } else {
                assert!(periodic >= 900, "a look each period: {periodic}");
                assert!(after_ask > periodic, "and when asked");
            }
        }
    }
}
