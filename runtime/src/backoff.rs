//! How long a failed watch waits before it tries again.
//!
//! kube-runtime's default waits up to 30 s and starts over only after 120 s without an
//! error. During an API server outage the wait grows to its maximum, and after the outage
//! every watch still waits that long once or twice (the first answer is often a 410
//! "resource version too old", which means "list again"). The operator then acted on
//! stale caches for up to two minutes: pods whose slots had run out waited that long for
//! new ones (e2e `outage`). Here the wait is capped at a few seconds and starts over at the
//! first success; a handful of watches retrying every few seconds costs the API server
//! nothing.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// First wait after a success.
const FIRST: Duration = Duration::from_millis(200);
/// Longest wait, however long the API server has been unreachable.
const MAX: Duration = Duration::from_secs(4);

/// Doubling waits from [`FIRST`] up to [`MAX`], each one jittered down by up to half so
/// that watches do not retry in step; back to [`FIRST`] after any success.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next.mul_f64(0.5 + fastrand::f64() / 2.0);
        self.next = self.next.saturating_mul(2).min(MAX);
        Some(wait)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_a_few_seconds_never_more_and_start_over_after_a_success() {
        let mut b = WatchBackoff::default();
        let waits: Vec<Duration> = (&mut b).take(50).collect();
        assert!(waits[0] <= FIRST);
        assert!(waits.iter().all(|w| *w <= MAX), "{waits:?}");
        assert!(
            waits[40..].iter().all(|w| *w >= MAX / 2),
            "it keeps retrying: {waits:?}"
        );
        b.reset();
        assert!(b.next().is_some_and(|w| w <= FIRST));
    }
}
