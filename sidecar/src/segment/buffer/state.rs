//! The buffer's state under its mutex: the current block, the spare, and the
//! bookkeeping that decides when to claim the next block and how large. Only arithmetic
//! happens here, never I/O.

use std::time::{Duration, Instant};

use super::sizing::{next_block_size, prefetch_threshold};
use super::{Runs, Segment, SegmentRefusal};
use crate::segment::claim::Block;

pub(super) struct State {
    /// Next value to hand out and the end of the current block.
    pub(super) cursor: u64,
    pub(super) end: u64,
    /// Size of the current block and when it became current (adaptive sizing).
    pub(super) current_len: u64,
    pub(super) current_since: Instant,
    pub(super) spare: Option<Block>,
    /// Values that last about two claims' time at the last block's rate: the spare is
    /// claimed when no more than this is left, even below the prefetch share (a fast
    /// consumer of small blocks would otherwise wait for each claim).
    pub(super) early: u64,
    /// How long the last claim took (for `early`).
    pub(super) last_claim: Duration,
    pub(super) fetching: bool,
    pub(super) exhausted: bool,
    pub(super) stopped: bool,
    /// The size of the next claim.
    pub(super) size: u64,
    /// Used share of the current block (per mille) at which the spare is claimed.
    pub(super) prefetch_permille: u64,
    pub(super) last_error: Option<String>,
    /// The last claim found the ID space range used up, none queued (rule 22).
    pub(super) range_used_up: bool,
    /// End of the highest block claimed (for giving back the unused top on stop).
    pub(super) top: u64,
    /// The highest `after + 1` asked for: claims start at or above it (docs/safety.md
    /// rule 12). Only grows; once the counter has passed it, it changes nothing.
    pub(super) above: u64,
}

impl State {
    pub(super) fn buffered(&self) -> u64 {
        (self.end - self.cursor) + self.spare.map_or(0, |b| b.len())
    }

    /// Forgets the buffered values below `min` (never to be served: gaps) and makes later
    /// claims start at `min` or above; returns how many values were dropped.
    pub(super) fn drop_below(&mut self, min: u64) -> u64 {
        self.above = self.above.max(min);
        let mut dropped = 0;
        if self.cursor < min {
            let to = min.min(self.end);
            dropped += to - self.cursor;
            self.cursor = to;
        }
        if let Some(spare) = self.spare
            && spare.start < min
        {
            let to = min.min(spare.end);
            dropped += to - spare.start;
            self.spare = (to < spare.end).then_some(Block {
                start: to,
                end: spare.end,
            });
        }
        dropped
    }

    /// The refusal when nothing is buffered: why the last claim failed (`otherwise` when
    /// none did), as [`SegmentRefusal::RangeUsedUp`] when its range is used up.
    pub(super) fn no_block(&self, otherwise: impl FnOnce() -> String) -> SegmentRefusal {
        let why = self.last_error.clone().unwrap_or_else(otherwise);
        if self.range_used_up {
            SegmentRefusal::RangeUsedUp(why)
        } else {
            SegmentRefusal::NoBlock(why)
        }
    }

    /// Forgets every buffered value (never to be served); returns how many there were.
    pub(super) fn drop_buffered(&mut self) -> u64 {
        let dropped = self.buffered();
        self.cursor = self.end;
        self.spare = None;
        self.current_len = 0;
        dropped
    }
}

impl State {
    /// Whether to start a claim now: no claim running, no spare, and the used share of the
    /// current block has reached its prefetch threshold (or nothing is buffered at all).
    pub(super) fn fetch_due(&mut self) -> bool {
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

impl Segment {
    /// Takes up to `want` buffered values, in at most `max_runs` runs (one block each),
    /// without waiting; returns them and whether a claim must be started.
    /// Values below `min` are dropped first (`after`, docs/safety.md rule 12): the blocks
    /// are in increasing order, so everything taken after that is at least `min`.
    pub(super) fn take_buffered(
        &self,
        want: u64,
        min: u64,
        max_runs: usize,
        out: &mut Runs,
    ) -> (u64, bool) {
        let mut s = self.lock();
        if min > s.cursor || s.spare.is_some_and(|b| b.start < min) {
            let dropped = s.drop_below(min);
            if dropped > 0 {
                self.metrics.values_dropped.inc_by(dropped);
            }
        }
        let mut taken = 0;
        let mut runs = 0;
        while taken < want && runs < max_runs && !s.stopped {
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
            runs += 1;
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
}
