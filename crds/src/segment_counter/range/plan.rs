//! The operator's side of format 3 (docs/safety.md rule 22), as pure functions: what a
//! member's operator writes to its local counter. **Not wired yet**: no operator calls these
//! (known-limits.md); they are the decisions the membership task will make, kept here beside
//! the claim they must agree with ([`super::take`]).
//!
//! - [`into_ranged`]: a sequence that joins gets format 3 with an empty range (the limit at
//!   `next`), so its sidecars claim nothing (503 `range_used_up`) until a range from the hub
//!   is queued: never from the plain counter.
//! - [`queue`]: a range taken from the hub is queued behind the range in use, the limit
//!   rewritten to the range in use (so a counter a claim moved is put back in its plain
//!   form); refused when a range is already queued or it lies below the limit.
//! - [`need`]: when to take the next range, and how large: when nothing is queued and what
//!   is left would last less than `lead_secs` at the recent rate.

use std::ops::Range;

use super::super::{Counter, LIMIT};
use super::{COUNTER_FORMAT_RANGED, MAX_RANGE, Queued, Ranged};

/// Why a range cannot be queued. Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error(
        "the counter has no range (format {0}): a joined sequence's counter is first written in \
         format 3 with an empty range"
    )]
    NotRanged(u64),
    #[error("a range is already queued ({start}..{limit}): queue the next one once it is in use")]
    AlreadyQueued { start: u64, limit: u64 },
    #[error(
        "the range {start}..{end} does not lie at or above the range in use (limit {limit}), or \
         is empty, or passes 2^63: take a range from the hub that starts at or above it"
    )]
    NotAbove { start: u64, end: u64, limit: u64 },
}

/// The counter in format 3 with an empty range at its `next`: nothing can be claimed until
/// a range is queued. A counter already in format 3 is returned as it is.
pub fn into_ranged(counter: &Counter) -> Counter {
    if counter.range.is_some() {
        return counter.clone();
    }
    Counter {
        format: COUNTER_FORMAT_RANGED,
        range: Some(Ranged {
            limit: counter.next,
            queued: None,
        }),
        ..counter.clone()
    }
}

/// `counter` with `range` queued behind the range in use, the limit the one in use.
pub fn queue(counter: &Counter, range: Range<u64>) -> Result<Counter, QueueError> {
    let ranged = counter.range.ok_or(QueueError::NotRanged(counter.format))?;
    let (limit, queued) = ranged
        .in_use(counter.next)
        .unwrap_or((counter.next, ranged.queued));
    if let Some(q) = queued {
        return Err(QueueError::AlreadyQueued {
            start: q.start,
            limit: q.limit,
        });
    }
    if range.start < limit || range.end <= range.start || range.end > LIMIT {
        return Err(QueueError::NotAbove {
            start: range.start,
            end: range.end,
            limit,
        });
    }
    Ok(Counter {
        range: Some(Ranged {
            limit,
            queued: Some(Queued {
                start: range.start,
                limit: range.end,
            }),
        }),
        ..counter.clone()
    })
}

/// How many values to take from the hub now, if any: when nothing is queued and the values
/// left in the range in use would last less than `lead_secs` at `values_per_sec`, a range
/// that lasts `lead_secs` at that rate (at least `min`, at most [`MAX_RANGE`]).
pub fn need(counter: &Counter, values_per_sec: f64, lead_secs: u64, min: u64) -> Option<u64> {
    let ranged = counter.range?;
    let (limit, queued) = ranged.in_use(counter.next)?;
    if queued.is_some() {
        return None;
    }
    let lasting = values_per_sec.max(0.0) * lead_secs as f64;
    // Saturating: a float beyond u64 becomes u64::MAX, then capped.
    let want = (lasting.ceil() as u64).clamp(min.clamp(1, MAX_RANGE), MAX_RANGE);
    (limit - counter.next < want).then_some(want)
}

#[cfg(test)]
mod tests;
