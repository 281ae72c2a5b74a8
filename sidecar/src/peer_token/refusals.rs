//! Refused peers: counted (`kubeflake_strict_peer_refusals_total{side, reason}`) and logged
//! at most once per peer address per minute, so that a stranger cannot flood the log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;

/// How often at most one peer's refusals are logged.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(60);
/// Peers remembered for the log's rate limit; beyond it the oldest are forgotten.
const REMEMBERED: usize = 1024;

/// Which side refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// This oracle refused a forwarder.
    Forwarder,
    /// This forwarder did not believe what answered as the oracle.
    Oracle,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Forwarder => "forwarder",
            Side::Oracle => "oracle",
        }
    }
}

/// The refusals' counter and the log's rate limit.
#[derive(Default)]
pub(crate) struct RefusalLog {
    counter: Option<IntCounterVec>,
    logged: Mutex<HashMap<IpAddr, Instant>>,
}

impl RefusalLog {
    pub(crate) fn new(counter: IntCounterVec) -> RefusalLog {
        RefusalLog {
            counter: Some(counter),
            logged: Mutex::default(),
        }
    }

    /// Counts one refusal of `peer` and logs it unless that peer was logged within
    /// [`LOG_EVERY`].
    pub(crate) fn refused(
        &self,
        side: Side,
        peer: Option<IpAddr>,
        reason: &'static str,
        why: &str,
    ) {
        if let Some(counter) = &self.counter {
            counter.with_label_values(&[side.label(), reason]).inc();
        }
        if self.due(peer) {
            tracing::warn!(
                peer = ?peer,
                side = side.label(),
                reason,
                "strict oracle port: refused a peer: {why} (logged at most once a minute per peer)"
            );
        }
    }

    /// How many refusals of this side and reason were counted (0 without a counter; tests).
    #[cfg(test)]
    pub(crate) fn count(&self, side: Side, reason: &str) -> u64 {
        self.counter
            .as_ref()
            .map_or(0, |c| c.with_label_values(&[side.label(), reason]).get())
    }

    fn due(&self, peer: Option<IpAddr>) -> bool {
        let Some(peer) = peer else { return true };
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if logged
            .get(&peer)
            .is_some_and(|at| now.duration_since(*at) < LOG_EVERY)
        {
            return false;
        }
        if logged.len() >= REMEMBERED {
            logged.retain(|_, at| now.duration_since(*at) < LOG_EVERY);
            if logged.len() >= REMEMBERED {
                logged.clear();
            }
        }
        logged.insert(peer, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_is_counted_but_one_peer_is_logged_once_a_minute() {
        let counter =
            IntCounterVec::new(prometheus::Opts::new("t", "t"), &["side", "reason"]).unwrap();
        let log = RefusalLog::new(counter.clone());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(log.due(Some(a)));
        assert!(!log.due(Some(a)), "the same peer within a minute");
        assert!(log.due(Some(b)), "another peer");
        for _ in 0..3 {
            log.refused(Side::Forwarder, Some(a), "audience", "x");
        }
        assert_eq!(
            counter.with_label_values(&["forwarder", "audience"]).get(),
            3
        );
    }
}
