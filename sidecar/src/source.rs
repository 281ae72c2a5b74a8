//! Where a segment sidecar's values come from: blocks held in memory ([`Segment`]); in a
//! strict sequence, one counter write per group of concurrent requests standalone
//! ([`Strict`]) or the sequence's oracle in a cluster ([`Oracle`]). The HTTP layer and the
//! lifecycle code see only [`Source`].
//!
//! Its own module, above both rooms it chooses between: [`crate::segment`] (blocks, and the
//! standalone strict source) and [`crate::oracle`] (strict in a cluster), so that neither
//! room imports the other's way up (the oracle builds on the segment counter; the segment
//! room knows nothing of the oracle).

use std::sync::Arc;
use std::time::Duration;

use kubeflake_crds::sequence::SegmentParams;

use crate::metrics::SegmentMetrics;
use crate::oracle::Oracle;
use crate::segment::buffer::{Runs, Segment, SegmentRefusal};
use crate::segment::claim::{Backoff, Block, CounterStore};
use crate::segment::strict::Strict;

/// A running segment source.
#[derive(Clone)]
pub(crate) enum Source {
    /// Values from claimed blocks, the next one prefetched.
    Blocks(Arc<Segment>),
    /// `segment.strict`, standalone: every value from its own counter write
    /// (docs/safety.md rule 13).
    Strict(Arc<Strict>),
    /// `segment.strict` in a cluster: values from the sequence's oracle (this sidecar or
    /// another), served from a window reserved on the counter.
    Oracle(Arc<Oracle>),
}

impl Source {
    /// The source `params` ask for; blocks start claiming in the background at once.
    pub(crate) fn start(
        store: Arc<dyn CounterStore>,
        params: SegmentParams,
        wait_limit: Duration,
        metrics: SegmentMetrics,
    ) -> Source {
        if params.strict {
            Source::Strict(Strict::start(
                store,
                wait_limit,
                Backoff::default(),
                metrics,
            ))
        } else {
            Source::Blocks(Segment::start(store, params, wait_limit, metrics))
        }
    }

    pub(crate) fn is_strict(&self) -> bool {
        matches!(self, Source::Strict(_) | Source::Oracle(_))
    }

    /// `Ok` when a request can be answered now.
    pub(crate) fn check_ready(&self) -> Result<(), SegmentRefusal> {
        match self {
            Source::Blocks(s) => s.check_ready(),
            Source::Strict(s) => s.check_ready(),
            Source::Oracle(o) => o.check_ready(),
        }
    }

    /// Values held in memory, ready to be served (always 0 when strict).
    pub(crate) fn buffered(&self) -> u64 {
        match self {
            Source::Blocks(s) => s.buffered(),
            Source::Strict(_) | Source::Oracle(_) => 0,
        }
    }

    /// `want` values, each at least `min` (`after + 1`, docs/safety.md rule 12).
    pub(crate) async fn take_from(&self, want: u64, min: u64) -> Result<Runs, SegmentRefusal> {
        match self {
            Source::Blocks(s) => s.take_from(want, min).await,
            Source::Strict(s) => s.take_from(want, min).await,
            Source::Oracle(o) => o.take_from(want, min).await,
        }
    }

    /// One value of at least `min`.
    pub(crate) async fn take_one_from(&self, min: u64) -> Result<u64, SegmentRefusal> {
        match self {
            Source::Blocks(s) => s.take_one_from(min).await,
            Source::Strict(s) => s.take_one_from(min).await,
            Source::Oracle(o) => o.take_one_from(min).await,
        }
    }

    /// [`Source::stop`], and the log line saying what became of the unused values
    /// (docs/safety.md, segment mode rules 4/5). Standalone and cluster mode end this way.
    pub(crate) async fn stop_and_log(&self) {
        if let Some((unused, given)) = self.stop().await {
            tracing::info!(
                unused_start = unused.start,
                unused_end = unused.end,
                given_back = given,
                "stopped: unused values {}",
                if given {
                    "given back to the counter"
                } else {
                    "left as a gap"
                }
            );
        }
    }

    /// Stops serving for good, then gives the unused top of the blocks back to the counter
    /// when nobody claimed after this sidecar (a strict source holds nothing to give
    /// back). Returns the unused values and whether they were given back.
    pub(crate) async fn stop(&self) -> Option<(Block, bool)> {
        match self {
            Source::Blocks(s) => {
                s.stop();
                s.give_back().await
            }
            Source::Strict(s) => {
                s.stop();
                None
            }
            Source::Oracle(o) => {
                o.stop().await;
                None
            }
        }
    }
}
