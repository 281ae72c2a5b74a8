//! The background claim: one task at a time claims the next block (with backoff on
//! failure) and installs it only after its claim was written (docs/safety.md rule 2 for
//! segment mode); a counter found below this sidecar's own top, or in a format this release
//! does not understand, drops what it holds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Segment;
use super::sizing::{metrics_block_size, prefetch_threshold};
use crate::segment::claim::{Backoff, ClaimError, StoreError, claim_counted};

impl Segment {
    /// Claims blocks until one is in the buffer (or the sidecar stops, or the sequence is
    /// exhausted), retrying failures with backoff.
    pub(super) fn spawn_fetch(self: Arc<Self>) {
        tokio::spawn(async move {
            let mut failures: u32 = 0;
            loop {
                // The top of our own blocks is a floor: the counter cannot be below it.
                // `above`: requests with `after` want the block to start there or higher.
                let (size, floor, above) = {
                    let s = self.lock();
                    (s.size, s.top, s.above)
                };
                let (result, took) = claim_counted(
                    self.store.as_ref(),
                    size,
                    floor,
                    above,
                    &self.backoff,
                    &self.metrics,
                )
                .await;
                let retry = {
                    let mut s = self.lock();
                    match result {
                        Ok(claimed) => {
                            s.last_claim = took;
                            metrics_block_size(&self.metrics, claimed.block.len());
                            s.top = s.top.max(claimed.block.end);
                            self.metrics
                                .claimed_top
                                .set(i64::try_from(s.top).unwrap_or(i64::MAX));
                            s.last_error = None;
                            s.range_used_up = false;
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
                        Err(e @ ClaimError::RangeUsedUp(_)) => {
                            // A joined sequence between ranges (rule 22): what is buffered
                            // is still in the range and is served; retried until the
                            // operator queues the next range.
                            s.last_error = Some(e.to_string());
                            s.range_used_up = true;
                            // An `after` above every range held is not kept for later
                            // claims (they would all be refused): its request alone skips
                            // the values below it (gaps), others are served.
                            s.above = s.above.min(s.top);
                            if s.stopped {
                                s.fetching = false;
                                None
                            } else {
                                Some(e)
                            }
                        }
                        Err(e @ ClaimError::Store(StoreError::UnsupportedFormat(_))) => {
                            // Written by a newer kubeflake: nothing here reads it, so stop
                            // issuing at once, dropping what is held (a gap, never a
                            // duplicate), and claim nothing until it is readable again.
                            let dropped = s.drop_buffered();
                            self.metrics.values_dropped.inc_by(dropped);
                            tracing::error!(
                                error = %e,
                                dropped,
                                "the segment counter is in a format this release does not understand: stopped issuing, claiming nothing from it"
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
}
