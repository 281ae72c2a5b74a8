//! Clocks, injectable so tests can step them, and the one way a wall-clock step is found.
//!
//! A wall clock may step back or forward at any moment (NTP, an admin, a VM resumed); a
//! monotonic clock never does. So a step is how far the wall clock moved minus how far the
//! monotonic clock moved since a [`ClockSample`] of both: anything beyond noise is a step.
//! Every clock check of the binaries is that one comparison: the periodic step detector
//! ([`StepDetector`], reported as rollbacks and jumps, docs/safety.md rule 8) and the
//! sidecar's "no step since the last good skew check" before it raises a lease fence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of time. Both readings are in microseconds.
pub trait Clock: Send + Sync + 'static {
    /// Wall-clock time since the Unix epoch. May step back or forward at any moment.
    fn wall_micros(&self) -> u64;
    /// Time on a monotonic clock since an arbitrary origin. Never steps.
    fn monotonic_micros(&self) -> u64;
}

/// The operating system's clocks.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn wall_micros(&self) -> u64 {
        // A clock set before 1970 reads as 0, which the generator refuses as "before the epoch".
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }
    fn monotonic_micros(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }
}

/// A clock that moves only when told to. For tests.
#[derive(Debug)]
pub struct ManualClock {
    wall: AtomicU64,
    mono: AtomicU64,
}

impl ManualClock {
    /// Starts at `wall_ms` (Unix milliseconds).
    pub fn at_millis(wall_ms: u64) -> ManualClock {
        ManualClock {
            wall: AtomicU64::new(wall_ms * 1000),
            mono: AtomicU64::new(0),
        }
    }
    /// Real time passing: both clocks move forward.
    pub fn advance_millis(&self, ms: u64) {
        self.wall.fetch_add(ms * 1000, Ordering::SeqCst);
        self.mono.fetch_add(ms * 1000, Ordering::SeqCst);
    }
    /// The wall clock is stepped back (for example by an NTP correction); no time passes.
    pub fn step_back_millis(&self, ms: u64) {
        self.wall.fetch_sub(ms * 1000, Ordering::SeqCst);
    }
    /// The wall clock is stepped forward; no time passes.
    pub fn step_forward_millis(&self, ms: u64) {
        self.wall.fetch_add(ms * 1000, Ordering::SeqCst);
    }
    pub fn wall_millis(&self) -> u64 {
        self.wall.load(Ordering::SeqCst) / 1000
    }
}

impl Clock for ManualClock {
    fn wall_micros(&self) -> u64 {
        self.wall.load(Ordering::SeqCst)
    }
    fn monotonic_micros(&self) -> u64 {
        self.mono.load(Ordering::SeqCst)
    }
}

/// Both clocks read at one moment: the reference a later reading is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub wall_micros: u64,
    pub monotonic_micros: u64,
}

impl ClockSample {
    pub fn take(clock: &dyn Clock) -> ClockSample {
        ClockSample {
            wall_micros: clock.wall_micros(),
            monotonic_micros: clock.monotonic_micros(),
        }
    }

    /// How far the wall clock stepped from `self` to `later`, in microseconds: negative
    /// back, positive forward (time passing counts as no step).
    pub fn step_to(&self, later: &ClockSample) -> i128 {
        let wall_moved = i128::from(later.wall_micros) - i128::from(self.wall_micros);
        let real_moved = i128::from(later.monotonic_micros) - i128::from(self.monotonic_micros);
        wall_moved - real_moved
    }

    /// Whether the wall clock is still within `bound_micros` of where the monotonic clock
    /// says it should be since this sample.
    pub fn unstepped_within(&self, clock: &dyn Clock, bound_micros: u64) -> bool {
        self.step_to(&ClockSample::take(clock)).unsigned_abs() <= u128::from(bound_micros)
    }
}

/// A detected step of the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockStep {
    /// The wall clock went back by this many microseconds relative to real time.
    Back { micros: u64 },
    /// The wall clock jumped forward by this many microseconds beyond real time.
    Forward { micros: u64 },
}

/// Finds wall-clock steps from periodic samples of both clocks.
#[derive(Debug)]
pub struct StepDetector {
    last: Option<ClockSample>,
    back_threshold_micros: u64,
    forward_threshold_micros: u64,
}

impl StepDetector {
    /// Steps back of more than `back_threshold_micros`, or forward of more than
    /// `forward_threshold_micros`, are reported. Slewing by NTP (at most 500 ppm) is allowed
    /// for on top of the thresholds.
    pub fn new(back_threshold_micros: u64, forward_threshold_micros: u64) -> StepDetector {
        StepDetector {
            last: None,
            back_threshold_micros,
            forward_threshold_micros,
        }
    }

    /// Takes a sample; returns the step since the previous sample, if there was one.
    pub fn observe(&mut self, clock: &dyn Clock) -> Option<ClockStep> {
        let sample = ClockSample::take(clock);
        let previous = self.last.replace(sample)?;
        let step = previous.step_to(&sample);
        let real_moved =
            i128::from(sample.monotonic_micros) - i128::from(previous.monotonic_micros);
        let slew_allowance = real_moved / 2000; // 500 ppm
        if step < -(i128::from(self.back_threshold_micros) + slew_allowance) {
            Some(ClockStep::Back {
                micros: (-step) as u64,
            })
        } else if step > i128::from(self.forward_threshold_micros) + slew_allowance {
            Some(ClockStep::Forward {
                micros: step as u64,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_detector_reports_rollbacks_and_forward_jumps_but_not_time_passing() {
        let clock = ManualClock::at_millis(1_800_000_000_000);
        let mut detector = StepDetector::new(1_000, 100_000);
        assert_eq!(
            detector.observe(&clock),
            None,
            "first sample has nothing to compare"
        );
        clock.advance_millis(100);
        assert_eq!(detector.observe(&clock), None);
        clock.advance_millis(100);
        clock.step_back_millis(5);
        assert_eq!(
            detector.observe(&clock),
            Some(ClockStep::Back { micros: 5_000 })
        );
        clock.advance_millis(3_600_000);
        assert_eq!(
            detector.observe(&clock),
            None,
            "an hour passing is not a step"
        );
        clock.step_forward_millis(3_600_000);
        assert_eq!(
            detector.observe(&clock),
            Some(ClockStep::Forward {
                micros: 3_600_000_000
            })
        );
        clock.step_forward_millis(50);
        assert_eq!(
            detector.observe(&clock),
            None,
            "below the forward threshold"
        );
    }

    #[test]
    fn a_sample_tells_time_passing_from_a_step_either_way_within_a_bound() {
        let clock = ManualClock::at_millis(1_800_000_000_000);
        let sample = ClockSample::take(&clock);
        clock.advance_millis(60_000);
        assert!(
            sample.unstepped_within(&clock, 10_000_000),
            "a minute passing is no step"
        );
        clock.step_forward_millis(10_000);
        assert!(
            sample.unstepped_within(&clock, 10_000_000),
            "a step of exactly the bound is within it"
        );
        clock.step_forward_millis(1);
        assert!(!sample.unstepped_within(&clock, 10_000_000));
        clock.step_back_millis(20_001);
        assert!(
            sample.unstepped_within(&clock, 10_000_000),
            "10 s back is within"
        );
        clock.step_back_millis(1);
        assert!(
            !sample.unstepped_within(&clock, 10_000_000),
            "a step back counts too"
        );
    }

    #[test]
    fn system_clock_reads_now() {
        let c = SystemClock::new();
        assert!(c.wall_micros() > 1_700_000_000_000_000);
        let m0 = c.monotonic_micros();
        assert!(c.monotonic_micros() >= m0);
    }
}
