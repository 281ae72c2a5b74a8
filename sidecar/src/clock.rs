//! The sidecar's clocks: the runtime's ([`kubeflake_runtime::clock`]: the [`Clock`] trait,
//! the system and manual clocks, and the one wall-clock step check, [`StepDetector`] and
//! [`ClockSample`]), named here once so the generator, the fences and their tests say
//! `crate::clock`. Change how a step is detected there. What is sidecar-only is the test
//! clock that panics, for code that must not survive a panic silently.
//!
//! The generator reads only the wall clock: IDs carry wall time.

pub use kubeflake_runtime::clock::{Clock, ManualClock, SystemClock};
pub(crate) use kubeflake_runtime::clock::{ClockSample, ClockStep, StepDetector};

#[cfg(test)]
use std::sync::atomic::Ordering;

/// A manual clock that panics once armed: for tests of code that must not survive a
/// panic silently (a fence renewal reads the clock on the blocking pool).
#[cfg(test)]
pub(crate) struct PanickingClock {
    pub(crate) inner: ManualClock,
    pub(crate) armed: std::sync::atomic::AtomicBool,
}

#[cfg(test)]
impl PanickingClock {
    pub(crate) fn at_millis(wall_ms: u64) -> PanickingClock {
        PanickingClock {
            inner: ManualClock::at_millis(wall_ms),
            armed: std::sync::atomic::AtomicBool::new(false),
        }
    }
    pub(crate) fn arm(&self) {
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
