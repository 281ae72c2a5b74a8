//! The operator's side of format 3 (docs/safety.md rule 22), as pure functions: what a
//! member's operator writes to its local counter. The membership task makes these decisions
//! (`operator/src/hub/segment.rs`); they are kept here beside the claim they must agree with
//! ([`super::take`]).
//!
//! - [`into_ranged`]: a sequence that joins gets format 3 with an empty range (the limit at
//!   `next`), so its sidecars claim nothing (503 `range_used_up`) until a range from the hub
//!   is queued: never from the plain counter.
//! - [`queue`]: a range taken from the hub is queued behind the range in use, the limit
//!   rewritten to the range in use (so a counter a claim moved is put back in its plain
//!   form); refused when a range is already queued or it lies below the limit.
//! - [`need`]: when to take the next range, and how large: when nothing is queued and what
//!   is left would last less than `lead_secs` at the recent rate.
//! - [`take_size`] and [`usable`]: the join-time rule. A range from the hub is queued only
//!   from the limit of the range in use up (for a counter that has not joined yet, its
//!   `next`: above every value it may have issued alone); the part of a hub range below it
//!   is skipped (a gap). So a member whose counter is ahead of the hub's takes enough to
//!   pass it (at most [`MAX_RANGE`] per write).
//! - [`abandon`]: a ranged counter the membership did not record (restored or copied from
//!   another cluster), or whose records went back (its etcd restored), gives up its ranges
//!   before anything is taken; [`lift`]: the range queued next is then moved to at once.
//! - [`pending`]: what to do with a range taken from the hub and kept in the membership's
//!   status but perhaps not queued yet (the task crashed in between).

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

/// `counter` with its ranges given up: an empty range at its `next`, nothing queued, so
/// nothing more is claimed from them. For a ranged counter its membership did not record
/// (made by another cluster and restored or copied here, or left behind by a membership
/// deleted and made again): its ranges may be another cluster's, and only ranges this
/// membership takes from the hub are used. `None` for a counter without a range.
pub fn abandon(counter: &Counter) -> Option<Counter> {
    counter.range?;
    Some(Counter {
        range: Some(Ranged {
            limit: counter.next,
            queued: None,
        }),
        ..counter.clone()
    })
}

/// `counter` (as [`queue`] wrote it) with its `next` moved into the queued range when the
/// range in use is empty, as the next claim would move it: no value is skipped that the
/// counter could hand out. Written with the queue when ranges were given up (an etcd
/// restore brings the counter back below the blocks running sidecars claimed since, and
/// they refuse a counter below their own top: `next` must pass it before any of them
/// claims again). Unchanged otherwise.
pub fn lift(counter: &Counter) -> Counter {
    let Some(ranged) = counter.range else {
        return counter.clone();
    };
    match ranged.queued {
        Some(q) if counter.next == ranged.limit && counter.next <= q.start => Counter {
            next: q.start,
            ..counter.clone()
        },
        _ => counter.clone(),
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

/// The values below which a range from the hub is of no use to `counter`: the limit of the
/// range in use (for a counter without a range, its `next`: every value it issued alone
/// lies below), or the end of the queued range when one is queued.
pub fn floor(counter: &Counter) -> u64 {
    match counter.range.and_then(|r| r.in_use(counter.next)) {
        Some((limit, Some(q))) => limit.max(q.limit),
        Some((limit, None)) => limit,
        None => counter.next,
    }
}

/// How many values to take from the hub at `hub_next` so that `want` of them lie at or
/// above [`floor`] of `counter` (join-time rule): `want` plus the part of the hub's counter
/// still below the floor, at most [`MAX_RANGE`] (the hub's policy admits no more per write;
/// a member far ahead of the hub passes it in several takes).
pub fn take_size(counter: &Counter, hub_next: u64, want: u64) -> u64 {
    floor(counter)
        .saturating_sub(hub_next)
        .saturating_add(want.max(1))
        .min(MAX_RANGE)
}

/// The part of `taken` (a range from the hub) that `counter` may use: at or above its
/// [`floor`]. `None` when nothing is left (the whole range is a gap).
pub fn usable(counter: &Counter, taken: Range<u64>) -> Option<Range<u64>> {
    let start = taken.start.max(floor(counter));
    (start < taken.end).then_some(start..taken.end)
}

/// What a range kept in the membership's status (taken from the hub, perhaps not queued
/// yet) means for the counter as read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// Queue this (the part of the range still usable) by one compare-and-swap: the
    /// counter written back, a counter without a range first put in format 3.
    Queue(Counter),
    /// The range is queued already, in use, or wholly below what the counter may use (a
    /// gap): forget it.
    Done,
    /// Another range is queued: wait until claims move to it.
    Wait,
}

/// Decides what to do with `pending`, never queueing a value twice: a range equal to the
/// queued one is done; otherwise only its part at or above [`floor`] is queued (a range
/// already queued and moved to has its end at the limit in use, so nothing of it is left).
pub fn pending(counter: &Counter, pending: Range<u64>) -> Pending {
    let ranged = into_ranged(counter);
    let queued = ranged
        .range
        .and_then(|r| r.in_use(ranged.next))
        .and_then(|(_, q)| q);
    if let Some(q) = queued {
        // The same range, or one wholly below the queued end: queued already, or a gap.
        return if pending.end <= q.limit {
            Pending::Done
        } else {
            Pending::Wait
        };
    }
    match usable(&ranged, pending) {
        None => Pending::Done,
        Some(range) => match queue(&ranged, range) {
            Ok(written) => Pending::Queue(written),
            // Cannot happen (nothing queued, the range at or above the limit); never
            // queued then.
            Err(_) => Pending::Done,
        },
    }
}

#[cfg(test)]
mod tests;
