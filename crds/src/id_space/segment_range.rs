//! A Segment space's ranges: a shared Segment sequence takes ranges of values from one
//! counter on the hub (`IdSpace.spec.segment.next`, written by compare-and-swap) into each
//! member's own counter. A range is never handed out twice and never taken back (a gone
//! member's rest is a gap), so ranges need no bounds; a member whose records went back
//! abandons its range and takes a fresh one: a gap, never a duplicate. Values are unique
//! across members, not ordered (docs/design/2026-11-29-multicluster.md, "Segment sequences
//! across clusters").

use std::ops::Range;

use super::resource::SpaceCounterRecord;

/// The largest range one claim may take (defined beside the local counter's ranges, which
/// the operator sizes with it).
pub use crate::segment_counter::range::MAX_RANGE;
/// The counter never goes beyond this (what an `i64` field holds).
pub const COUNTER_LIMIT: u64 = i64::MAX as u64;

/// Why a range cannot be taken. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("a range of {0} values cannot be taken: ask for 1 to {MAX_RANGE} values")]
    BadSize(u64),
    #[error(
        "the space's counter is at {next}: {size} more values would pass {COUNTER_LIMIT}, the \
         last value an IdSpace holds; this space cannot hand out more (make a new one)"
    )]
    Exhausted { next: u64, size: u64 },
    #[error("IdSpace segment.next is {0}, below 0: the counter is broken; repair it by hand")]
    Broken(i64),
}

/// Takes the next `size` values: the counter to write back (by compare-and-swap on the
/// IdSpace's resourceVersion) and the values `[start, end)` the member now owns.
pub fn take(
    counter: &SpaceCounterRecord,
    size: u64,
) -> Result<(SpaceCounterRecord, Range<u64>), RangeError> {
    if size == 0 || size > MAX_RANGE {
        return Err(RangeError::BadSize(size));
    }
    let next = u64::try_from(counter.next).map_err(|_| RangeError::Broken(counter.next))?;
    let end = next
        .checked_add(size)
        .filter(|end| *end <= COUNTER_LIMIT)
        .ok_or(RangeError::Exhausted { next, size })?;
    let written = SpaceCounterRecord {
        next: i64::try_from(end).map_err(|_| RangeError::Exhausted { next, size })?,
    };
    Ok((written, next..end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(next: i64) -> SpaceCounterRecord {
        SpaceCounterRecord { next }
    }

    #[test]
    fn ranges_taken_one_after_another_never_overlap_and_the_counter_only_goes_up() {
        let (c1, r1) = take(&at(0), 1000).unwrap();
        let (c2, r2) = take(&c1, 500).unwrap();
        assert_eq!(r1, 0..1000);
        assert_eq!(r2, 1000..1500);
        assert!(c2.next > c1.next && c1.next > 0);
    }

    #[test]
    fn a_range_past_the_counters_limit_or_of_no_values_is_refused_with_what_to_do() {
        let near_end = at(i64::MAX - 10);
        assert!(matches!(
            take(&near_end, 11),
            Err(RangeError::Exhausted { .. })
        ));
        assert_eq!(take(&near_end, 10).unwrap().1.end, COUNTER_LIMIT);
        assert_eq!(take(&at(0), 0), Err(RangeError::BadSize(0)));
        assert!(take(&at(-1), 1).unwrap_err().to_string().contains("repair"));
    }
}
