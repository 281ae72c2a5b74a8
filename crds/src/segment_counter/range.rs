//! Format 3 of the segment counter: a counter whose values come in ranges its operator
//! took from an ID space's hub (`IdSpace.spec.segment.next`, [`crate::id_space::segment_range`]),
//! so that clusters sharing one Segment sequence never hand out one value twice
//! (docs/safety.md rule 22).
//!
//! | annotation                     | meaning                                                         |
//! |--------------------------------|-----------------------------------------------------------------|
//! | [`RANGE_LIMIT_ANNOTATION`]     | one past the last value of the first range: while `next <= limit` a claim ends at or below it |
//! | [`QUEUED_START_ANNOTATION`], [`QUEUED_LIMIT_ANNOTATION`] | optional: the next range `[start, limit)`, queued by the operator |
//!
//! A claim takes values below the limit; one that finds the range used up moves to the
//! queued range **inside its own compare-and-swap**: it raises `next` into the queued
//! range, and that alone makes the queued range the one in use ([`Ranged::in_use`]), so a
//! pod never waits on the hub or the operator at a range boundary, and a claim writes only
//! `next` and `claims`, as in every earlier format. With no queued range the claim is
//! refused ([`TakeError::RangeUsedUp`]) and nothing changes. The operator later writes the
//! range in use as the limit and queues the next one. The Lease policy holds every writer
//! but the exempt groups to the same ([`crate::lease_policy`]): a limit never removed,
//! `next` at or below it or inside the queued range, a queued range above the limit.
//!
//! Only format 3 has these annotations, and only format 3 is read with them: a counter in
//! format 1 or 2 that carries one was written by hand, and is refused whole
//! ([`super::CounterError::BadRange`]), like a format 3 counter without a limit. Releases
//! that read formats up to 2 refuse format 3 (rule 11); 0.1.0 knows no format at all, and
//! only the Lease policy stops its claims at the limit.

use std::collections::BTreeMap;

use super::{Counter, CounterError, LIMIT};

pub mod plan;

/// The largest range one claim from the hub may take (`id_space::segment_range`): a
/// member sizes its ranges to last the tolerance at its recent rate; this keeps one
/// mistake from using up the hub's counter (its hub policy holds members to it).
pub const MAX_RANGE: u64 = 1 << 40;
/// The counter's format when its values come in ranges from an ID space's hub.
pub const COUNTER_FORMAT_RANGED: u64 = 3;
/// Annotation: one past the last value of the range in use.
pub const RANGE_LIMIT_ANNOTATION: &str = "kubeflake.io/limit";
/// Annotation: the first value of the queued range.
pub const QUEUED_START_ANNOTATION: &str = "kubeflake.io/queued-start";
/// Annotation: one past the last value of the queued range.
pub const QUEUED_LIMIT_ANNOTATION: &str = "kubeflake.io/queued-limit";

/// The ranges of a format 3 counter, as its annotations say them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranged {
    /// One past the last value of the first range (at most [`LIMIT`]).
    pub limit: u64,
    /// The range a claim moves to once the first is used up.
    pub queued: Option<Queued>,
}

impl Ranged {
    /// The range in use when the counter reads `next`, and the one queued after it: the
    /// first range while `next` is at or below its limit, else the queued range (a claim
    /// moved there), with nothing queued after it. `None`: `next` is in neither (the
    /// counter is refused whole).
    pub fn in_use(&self, next: u64) -> Option<(u64, Option<Queued>)> {
        if next <= self.limit {
            return Some((self.limit, self.queued));
        }
        self.queued
            .filter(|q| q.start <= next && next <= q.limit)
            .map(|q| (q.limit, None))
    }
}

/// A queued range `[start, limit)`: above the range in use, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    pub start: u64,
    pub limit: u64,
}

/// What a claim takes and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The counter to write back, by compare-and-swap on the version read.
    pub counter: Counter,
    /// The values `[start, end)` handed out once that write succeeded.
    pub start: u64,
    pub end: u64,
    /// The claim moved the counter to its queued range.
    pub moved: bool,
}

/// Why a claim takes nothing. Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    #[error(
        "the sequence is exhausted: every value up to 2^63-1 was claimed; create a new IdSequence"
    )]
    Exhausted,
    #[error(
        "the range this cluster holds of the ID space's values is used up (limit {limit}) and \
         no next range is queued{after}: the operator takes the next range from the hub; until \
         it has, no value is handed out (docs/safety.md rule 22)"
    )]
    RangeUsedUp {
        limit: u64,
        /// Said when an `after` request asked for values above every range held.
        after: AfterNote,
    },
}

/// The `min_start` of a refused claim, when it played a part (for the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfterNote(pub Option<u64>);

impl std::fmt::Display for AfterNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(min) if min > 0 => write!(f, " at or above {min} (the request's `after`)"),
            _ => Ok(()),
        }
    }
}

/// Takes up to `size` (at least 1) values at or above `min_start` (an `after` request,
/// docs/safety.md rule 12) from `counter`. Without a range: from `max(next, min_start)`,
/// cut at 2^63. With one (rule 22): only below the limit of the range in use (fewer
/// values when fewer are left); once none is left there, from the queued range; with none
/// queued, refused. The written `next` is the end of the values taken, so it only goes
/// up, the claim count goes up by one, and the range annotations stay as they were.
pub fn take(counter: &Counter, size: u64, min_start: u64) -> Result<Taken, TakeError> {
    let size = size.max(1);
    let cut = |start: u64, limit: u64| start.saturating_add(size).min(limit);
    let written = |next: u64, range: Option<Ranged>| Counter {
        next,
        claims: counter.claims.saturating_add(1),
        format: counter.format,
        resource_version: counter.resource_version.clone(),
        range,
    };
    let start = counter.next.max(min_start);
    let Some(range) = counter.range else {
        if start >= LIMIT {
            return Err(TakeError::Exhausted);
        }
        let end = cut(start, LIMIT);
        return Ok(Taken {
            counter: written(end, None),
            start,
            end,
            moved: false,
        });
    };
    // Parsed counters always have `next` in a range; one built otherwise is used up.
    let (limit, queued) = range.in_use(counter.next).unwrap_or((counter.next, None));
    if start < limit {
        let end = cut(start, limit);
        return Ok(Taken {
            counter: written(end, Some(range)),
            start,
            end,
            moved: false,
        });
    }
    let used_up = TakeError::RangeUsedUp {
        limit,
        after: AfterNote(Some(min_start)),
    };
    let Some(queued) = queued else {
        return Err(used_up);
    };
    let start = queued.start.max(min_start);
    if start >= queued.limit {
        return Err(used_up);
    }
    // `next` raised into the queued range: that alone moves the counter there.
    let end = cut(start, queued.limit);
    Ok(Taken {
        counter: written(end, Some(range)),
        start,
        end,
        moved: true,
    })
}

/// Reads the range annotations of a counter in `format` whose `next` was read.
pub(super) fn read(
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
    format: u64,
    next: u64,
) -> Result<Option<Ranged>, CounterError> {
    let bad = |problem: String| CounterError::BadRange {
        name: name.to_string(),
        problem,
    };
    let get = |a: &'static str| annotations.and_then(|m| m.get(a));
    let number = |a: &'static str| -> Result<Option<u64>, CounterError> {
        match get(a) {
            None => Ok(None),
            Some(text) => text
                .parse::<u64>()
                .ok()
                .filter(|n| *n <= LIMIT && text.bytes().all(|b| b.is_ascii_digit()))
                .map(Some)
                .ok_or_else(|| bad(format!("{a} is {text:?}, not a whole number up to 2^63"))),
        }
    };
    if format < COUNTER_FORMAT_RANGED {
        return match [
            RANGE_LIMIT_ANNOTATION,
            QUEUED_START_ANNOTATION,
            QUEUED_LIMIT_ANNOTATION,
        ]
        .into_iter()
        .find(|a| get(a).is_some())
        {
            Some(a) => Err(bad(format!(
                "{a} is set on a counter in format {format}, which has no ranges (only format \
                 {COUNTER_FORMAT_RANGED} has)"
            ))),
            None => Ok(None),
        };
    }
    let Some(limit) = number(RANGE_LIMIT_ANNOTATION)? else {
        return Err(bad(format!(
            "format {COUNTER_FORMAT_RANGED} without {RANGE_LIMIT_ANNOTATION}"
        )));
    };
    let queued = match (
        number(QUEUED_START_ANNOTATION)?,
        number(QUEUED_LIMIT_ANNOTATION)?,
    ) {
        (None, None) => None,
        (Some(start), Some(end)) if start >= limit && end > start => {
            Some(Queued { start, limit: end })
        }
        (start, end) => {
            return Err(bad(format!(
                "the queued range {start:?}..{end:?} is not a non-empty range at or above \
                 {RANGE_LIMIT_ANNOTATION} {limit}"
            )));
        }
    };
    let range = Ranged { limit, queued };
    if range.in_use(next).is_none() {
        return Err(bad(format!(
            "next {next} is above {RANGE_LIMIT_ANNOTATION} {limit} and not inside the queued \
             range"
        )));
    }
    Ok(Some(range))
}

/// Writes `range` into `annotations`: the format (3: only format 3 has ranges, so a counter
/// the operator puts in it, [`plan::into_ranged`], says so in the same write), the limit
/// and the queued range (removed when there is none). A counter without a range keeps its
/// annotations as they are.
pub(super) fn write(annotations: &mut BTreeMap<String, String>, range: Option<&Ranged>) {
    let Some(range) = range else {
        return;
    };
    annotations.insert(
        crate::slot_lease::FORMAT_ANNOTATION.to_string(),
        COUNTER_FORMAT_RANGED.to_string(),
    );
    annotations.insert(RANGE_LIMIT_ANNOTATION.to_string(), range.limit.to_string());
    match range.queued {
        Some(q) => {
            annotations.insert(QUEUED_START_ANNOTATION.to_string(), q.start.to_string());
            annotations.insert(QUEUED_LIMIT_ANNOTATION.to_string(), q.limit.to_string());
        }
        None => {
            annotations.remove(QUEUED_START_ANNOTATION);
            annotations.remove(QUEUED_LIMIT_ANNOTATION);
        }
    }
}

#[cfg(test)]
mod tests;
