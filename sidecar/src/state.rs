//! The serving state: the one thing the HTTP layer, readiness and metrics answer from.
//!
//! Lifecycle code (standalone, [`crate::cluster`]) owns the transitions and publishes each
//! new state through a [`ServingCell`]; everything else holds a [`ServingReader`] and only
//! reads. Where cluster mode's transitions are: the table in `cluster/mod.rs`. The phases:
//!
//! ```text
//!            +--------------------------------------------+
//!            v                                            | slot lost / start failed
//! Waiting(reason) --slot taken--> Snowflake(generator) ---+
//!        |                               |
//!        +--counter found--> Segment ----+--shutdown, drained--> Stopping
//! ```
//!
//! Standalone starts in `Snowflake` or `Segment` directly. The phase is exported as
//! `kubeflake_sidecar_phase{phase}` (1 for the current phase) and shown by `/readyz`.

use std::fmt;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use prometheus::IntGaugeVec;
use tokio::sync::watch;

use crate::generator::Generator;
use crate::metrics::Metrics;
use crate::phase::Phase;
use crate::source::Source;

/// Why nothing is served yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitReason {
    /// The process has just started.
    Starting,
    /// The IdSequence cannot be read, does not exist or is invalid (the message says which).
    Sequence(String),
    /// Waiting for the operator to name this pod holder of a slot lease.
    SlotAssignment { sequence: String },
    /// The slot Leases cannot be watched: the API server refuses this pod's account (the
    /// message says what to check). Retried.
    LeaseWatch(String),
    /// A slot was assigned but serving it could not start (retried).
    SlotStart(String),
    /// The slot was given to another pod; waiting for a new one.
    SlotLost,
    /// Segment mode: the counter cannot be read yet.
    Counter(String),
}

impl WaitReason {
    /// A short, fixed label (for JSON and logs).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            WaitReason::Starting => "starting",
            WaitReason::Sequence(_) => "sequence",
            WaitReason::SlotAssignment { .. } => "slot_assignment",
            WaitReason::LeaseWatch(_) => "lease_watch",
            WaitReason::SlotStart(_) => "slot_start",
            WaitReason::SlotLost => "slot_lost",
            WaitReason::Counter(_) => "counter",
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Starting => f.write_str("starting"),
            WaitReason::Sequence(problem)
            | WaitReason::Counter(problem)
            | WaitReason::LeaseWatch(problem) => f.write_str(problem),
            WaitReason::SlotAssignment { sequence } => {
                write!(f, "waiting for the operator to assign a slot of {sequence}")
            }
            WaitReason::SlotStart(problem) => {
                write!(f, "could not start serving the slot ({problem}); retrying")
            }
            WaitReason::SlotLost => {
                f.write_str("the slot was given to another pod; waiting for a new one")
            }
        }
    }
}

/// What the sidecar serves now.
pub(crate) enum Serving {
    /// Nothing yet (503 `no_slot`).
    Waiting(WaitReason),
    /// Snowflake IDs from the generator of the slot held.
    Snowflake(Arc<Generator>),
    /// Segment values: from blocks, or one counter write per request when strict.
    Segment(Source),
    /// Shutting down for good: nothing is issued any more.
    Stopping,
}

impl Serving {
    pub(crate) fn phase(&self) -> Phase {
        match self {
            Serving::Waiting(_) => Phase::Waiting,
            Serving::Snowflake(_) => Phase::Snowflake,
            Serving::Segment(_) => Phase::Segment,
            Serving::Stopping => Phase::Stopping,
        }
    }
}

/// The writing side: owned by the lifecycle code, not cloneable.
pub(crate) struct ServingCell {
    current: Arc<ArcSwap<Serving>>,
    /// Told after every publish, so that a reader can wait for the next state instead of
    /// looking again on a timer ([`ServingReader::changes`]).
    changed: watch::Sender<()>,
    phase: IntGaugeVec,
}

/// The reading side: for the HTTP layer, readiness and metrics.
#[derive(Clone)]
pub(crate) struct ServingReader {
    current: Arc<ArcSwap<Serving>>,
    changed: watch::Receiver<()>,
}

impl ServingCell {
    pub(crate) fn new(initial: Serving, metrics: &Metrics) -> ServingCell {
        let cell = ServingCell {
            current: Arc::new(ArcSwap::from_pointee(Serving::Stopping)),
            changed: watch::Sender::new(()),
            phase: metrics.phase.clone(),
        };
        cell.publish(initial);
        cell
    }

    pub(crate) fn reader(&self) -> ServingReader {
        ServingReader {
            current: self.current.clone(),
            changed: self.changed.subscribe(),
        }
    }

    /// Makes `next` the state everyone reads from now on.
    pub(crate) fn publish(&self, next: Serving) {
        let phase = next.phase();
        match &next {
            Serving::Waiting(reason) => {
                tracing::debug!(phase = phase.label(), reason = reason.label(), %reason, "serving state")
            }
            _ => tracing::debug!(phase = phase.label(), "serving state"),
        }
        self.current.store(Arc::new(next));
        // After the store: a reader told of the change loads the new state.
        self.changed.send_replace(());
        for p in Phase::ALL {
            self.phase
                .with_label_values(&[p.label()])
                .set(i64::from(p == phase));
        }
    }

    /// The state published last (tests).
    #[cfg(test)]
    pub(crate) fn load(&self) -> Guard<Arc<Serving>> {
        self.current.load()
    }
}

impl ServingReader {
    /// The state now (cheap: no reference count is touched on the hot path).
    pub(crate) fn load(&self) -> Guard<Arc<Serving>> {
        self.current.load()
    }

    /// Completes at the first state published after this call (or never, once the writing
    /// side is gone). Take it before loading the state to decide on: a change published
    /// between the two is not missed.
    pub(crate) fn changes(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut changed = self.changed.clone();
        changed.mark_unchanged();
        async move {
            if changed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The generator in use, if serving Snowflake IDs.
    pub(crate) fn generator(&self) -> Option<Arc<Generator>> {
        match &**self.current.load() {
            Serving::Snowflake(g) => Some(g.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_gauge_shows_exactly_the_current_phase() {
        let metrics = Metrics::new();
        let cell = ServingCell::new(Serving::Waiting(WaitReason::Starting), &metrics);
        let reader = cell.reader();
        let shown = |p: Phase| metrics.phase.with_label_values(&[p.label()]).get();
        assert_eq!(shown(Phase::Waiting), 1);
        assert_eq!(shown(Phase::Stopping), 0);
        cell.publish(Serving::Stopping);
        assert_eq!(reader.load().phase(), Phase::Stopping);
        assert_eq!(
            Phase::ALL.iter().map(|p| shown(*p)).collect::<Vec<_>>(),
            [0, 0, 0, 1]
        );
        assert!(reader.generator().is_none());
    }
}
