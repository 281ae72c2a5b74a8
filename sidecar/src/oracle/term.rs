//! One oracle term: the window of values this sidecar reserved on the counter, and the
//! moment its serving ends unless a renewal succeeds (docs/safety.md rule 13).
//!
//! Pure: no I/O, the caller passes `now`. The term serves a value only while
//! `now < last renewal sent + serve_for`, and only from blocks whose reservation (a
//! compare-and-set raising the counter's `next`) succeeded. Values of one term are served
//! in increasing order; values skipped (an `after`, a remainder too short for a request,
//! the window left at the term's end) are gaps, never served.
//!
//! Every value a term serves and every reservation it asks for passes [`Term::take`], and
//! that is where the raise limit is kept (docs/safety.md rules 12 and 16): a `min` above
//! [`RAISE_LIMIT`] and above everything the term reserved is refused before anything is
//! skipped, so no request, local or forwarded, can move the counter towards its end. The
//! only other way to ask for values, [`Need::from_next`], has no `min`.

use std::time::{Duration, Instant};

use crate::segment::Block;
use crate::segment::buffer::RAISE_LIMIT;

/// Why a term does not serve a request now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TermRefusal {
    /// No renewal succeeded for `serve_for`: another sidecar may take over soon.
    Lapsed { since: Duration },
    /// The reserved values do not cover the request: reserve what the [`Need`] says.
    NeedsMore(Need),
    /// `min` is above [`RAISE_LIMIT`] and above every value the term reserved (`top`, the
    /// counter's `next` as this term wrote it): serving it would raise the counter towards
    /// its end, so it is refused and nothing changes.
    AboveRaiseLimit { min: u64, top: u64 },
}

/// Values a term needs reserved: at least `want`, from `min` on. Built only in this file:
/// by [`Term::take`], after its raise check, or with no `min` at all
/// ([`Need::from_next`]). So a reservation raises the counter past [`RAISE_LIMIT`] only to
/// serve a `min` the term had already reserved up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    want: u64,
    min: u64,
}

impl Need {
    /// `want` values from the counter's `next`, whatever it is (a window ahead of need).
    pub(crate) fn from_next(want: u64) -> Need {
        Need { want, min: 0 }
    }

    pub(crate) fn want(&self) -> u64 {
        self.want
    }

    /// The smallest value the reservation may start at (0: from `next`).
    pub(crate) fn min(&self) -> u64 {
        self.min
    }
}

/// The serving state of an oracle that holds the Lease.
#[derive(Debug)]
pub(crate) struct Term {
    pub(crate) number: i32,
    /// When the last renewal that succeeded (or the take-over) was sent.
    renewed_sent: Instant,
    serve_for: Duration,
    /// Values reserved and not yet served: `[start, end)`.
    window: Block,
    /// A block reserved ahead, above `window`.
    spare: Option<Block>,
}

impl Term {
    /// A term taken with a write sent at `sent`, serving `first` (already reserved).
    pub(crate) fn new(number: i32, sent: Instant, serve_for: Duration, first: Block) -> Term {
        Term {
            number,
            renewed_sent: sent,
            serve_for,
            window: first,
            spare: None,
        }
    }

    /// A renewal sent at `sent` succeeded.
    pub(crate) fn renewed(&mut self, sent: Instant) {
        self.renewed_sent = self.renewed_sent.max(sent);
    }

    /// Whether the term may serve at `now`.
    pub(crate) fn serving_at(&self, now: Instant) -> Result<(), TermRefusal> {
        let since = now.saturating_duration_since(self.renewed_sent);
        if since >= self.serve_for {
            Err(TermRefusal::Lapsed { since })
        } else {
            Ok(())
        }
    }

    /// `count` consecutive values, each at least `min`, taken at `now`. A `min` above
    /// [`RAISE_LIMIT`] and above [`top`](Self::top) is refused before anything is skipped.
    pub(crate) fn take(
        &mut self,
        count: u64,
        min: u64,
        now: Instant,
    ) -> Result<Block, TermRefusal> {
        self.serving_at(now)?;
        let top = self.top();
        if min > RAISE_LIMIT && min > top {
            return Err(TermRefusal::AboveRaiseLimit { min, top });
        }
        let count = count.max(1);
        loop {
            // Values below `min` are skipped (a gap).
            if self.window.start < min {
                self.window.start = min.min(self.window.end);
            }
            if self.window.len() >= count {
                let part = Block {
                    start: self.window.start,
                    end: self.window.start + count,
                };
                self.window.start = part.end;
                return Ok(part);
            }
            // Too short: the rest is a gap, go on with the spare block.
            match self.spare.take() {
                Some(spare) => self.window = spare,
                None => {
                    self.window.start = self.window.end;
                    return Err(TermRefusal::NeedsMore(Need {
                        want: count,
                        min: min.max(self.window.end),
                    }));
                }
            }
        }
    }

    /// A reservation that succeeded: `block` starts at or above everything held.
    pub(crate) fn add(&mut self, block: Block) {
        let top = self.top();
        debug_assert!(block.start >= top, "a reservation below the term's own top");
        if block.start < top || block.is_empty() {
            return;
        }
        match &mut self.spare {
            None if block.start == self.window.end => self.window.end = block.end,
            None => self.spare = Some(block),
            Some(spare) if block.start == spare.end => spare.end = block.end,
            // Not contiguous with the spare: the spare is kept, the rest is a gap.
            Some(_) => {}
        }
    }

    /// Values reserved and not yet served.
    pub(crate) fn remaining(&self) -> u64 {
        self.window.len() + self.spare.map_or(0, |s| s.len())
    }

    /// The end of the highest block reserved: the counter is never below it.
    pub(crate) fn top(&self) -> u64 {
        self.spare.map_or(self.window.end, |s| s.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVE: Duration = Duration::from_secs(4);

    fn term(start: u64, end: u64) -> (Term, Instant) {
        let t0 = Instant::now();
        (Term::new(1, t0, SERVE, Block { start, end }), t0)
    }

    #[test]
    fn rule13_values_of_a_term_increase_and_come_only_from_reserved_blocks() {
        let (mut t, t0) = term(100, 110);
        let mut last = None;
        for _ in 0..5 {
            let b = t.take(2, 0, t0).unwrap();
            assert!(last.is_none_or(|l: u64| b.start >= l));
            assert!(b.end <= 110);
            last = Some(b.end);
        }
        assert_eq!(
            t.take(1, 0, t0),
            Err(TermRefusal::NeedsMore(Need { want: 1, min: 110 }))
        );
        t.add(Block {
            start: 110,
            end: 120,
        });
        assert_eq!(
            t.take(3, 0, t0).unwrap(),
            Block {
                start: 110,
                end: 113
            }
        );
    }

    #[test]
    fn rule13_a_term_serves_nothing_once_serve_for_has_passed_since_the_last_renewal_was_sent() {
        let (mut t, t0) = term(1, 1000);
        assert!(t.take(1, 0, t0 + SERVE - Duration::from_millis(1)).is_ok());
        assert!(matches!(
            t.take(1, 0, t0 + SERVE),
            Err(TermRefusal::Lapsed { .. })
        ));
        t.renewed(t0 + Duration::from_secs(3));
        assert!(t.take(1, 0, t0 + SERVE).is_ok(), "renewed: serving again");
        t.renewed(t0 + Duration::from_secs(1));
        assert!(
            matches!(
                t.take(1, 0, t0 + Duration::from_secs(7)),
                Err(TermRefusal::Lapsed { .. })
            ),
            "an older renewal's answer arriving late does not move the bound back"
        );
    }

    #[test]
    fn rule12_min_skips_values_and_asks_for_a_reservation_above_it() {
        let (mut t, t0) = term(1, 100);
        assert_eq!(t.take(1, 50, t0).unwrap(), Block { start: 50, end: 51 });
        assert_eq!(
            t.take(1, 500, t0),
            Err(TermRefusal::NeedsMore(Need { want: 1, min: 500 }))
        );
    }

    #[test]
    fn rule16_a_min_above_the_raise_limit_and_the_terms_top_is_refused_and_skips_nothing() {
        let (mut t, t0) = term(1, 100);
        for min in [RAISE_LIMIT + 1, (1 << 63) - 1, u64::MAX] {
            assert_eq!(
                t.take(1, min, t0),
                Err(TermRefusal::AboveRaiseLimit { min, top: 100 })
            );
        }
        assert_eq!(t.remaining(), 99, "nothing skipped");
        assert_eq!(t.take(1, 0, t0).unwrap(), Block { start: 1, end: 2 });
        // Up to the limit, a min is served by raising the counter (a gap, by rule 12).
        assert_eq!(
            t.take(1, RAISE_LIMIT, t0),
            Err(TermRefusal::NeedsMore(Need {
                want: 1,
                min: RAISE_LIMIT
            }))
        );
        // Above it, only inside what the term reserved.
        let (mut high, t0) = term(RAISE_LIMIT + 10, RAISE_LIMIT + 20);
        let inside = RAISE_LIMIT + 15;
        assert_eq!(
            high.take(1, inside, t0).unwrap(),
            Block {
                start: inside,
                end: inside + 1
            }
        );
    }

    #[test]
    fn a_spare_block_is_used_after_the_window_and_a_short_remainder_is_a_gap() {
        let (mut t, t0) = term(1, 5);
        t.add(Block { start: 5, end: 8 });
        assert_eq!(t.remaining(), 7, "contiguous: one window");
        t.add(Block { start: 20, end: 30 });
        assert_eq!(t.top(), 30);
        assert_eq!(t.take(6, 0, t0).unwrap(), Block { start: 1, end: 7 });
        assert_eq!(
            t.take(5, 0, t0).unwrap(),
            Block { start: 20, end: 25 },
            "7 is a gap: the request needs 5 consecutive values"
        );
    }
}
