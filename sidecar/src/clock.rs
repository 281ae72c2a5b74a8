//! Clocks, injectable so tests can step them, and detection of wall-clock steps.
//!
//! The generator reads only the wall clock: IDs carry wall time. Steps of the wall clock
//! are found by comparing how far it moved with how far a monotonic clock moved over the
//! same interval; a monotonic clock never steps, so any difference beyond noise is a step.

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

/// A manual clock that panics once armed: for tests of code that must not survive a
/// panic silently (a fence renewal reads the clock on the blocking pool).
#[cfg(test)]
pub struct PanickingClock {
    pub inner: ManualClock,
    pub armed: std::sync::atomic::AtomicBool,
}

#[cfg(test)]
impl PanickingClock {
    pub fn at_millis(wall_ms: u64) -> PanickingClock {
        PanickingClock {
            inner: ManualClock::at_millis(wall_ms),
            armed: std::sync::atomic::AtomicBool::new(false),
        }
    }
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
impl Clock for PanickingClock {
    fn wall_micros(&self) -> u64 {
        assert!(
            !self.armed.load(Ordering::SeqCst),
            "the clock exploded (test)"
        );
        self.inner.wall_micros()
    }
    fn monotonic_micros(&self) -> u64 {
        self.inner.monotonic_micros()
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
    last: Option<(u64, u64)>,
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
        let sample = (clock.wall_micros(), clock.monotonic_micros());
        let previous = self.last.replace(sample);
        let (wall0, mono0) = previous?;
        let (wall1, mono1) = sample;
        let wall_moved = i128::from(wall1) - i128::from(wall0);
        let real_moved = i128::from(mono1) - i128::from(mono0);
        let step = wall_moved - real_moved;
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
    fn system_clock_reads_now() {
        let c = SystemClock::new();
        assert!(c.wall_micros() > 1_700_000_000_000_000);
        let m0 = c.monotonic_micros();
        assert!(c.monotonic_micros() >= m0);
    }
}
