//! The background watch both modes run: wall-clock steps and readiness changes, reported
//! in metrics and logs (and, in a cluster, as Events on the pod).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::clock::{Clock, ClockStep, StepDetector};
use crate::metrics::Metrics;
use crate::state::ServingReader;

/// Something that wants to hear about clock steps and refusals (the pod's Events).
pub(crate) trait Notify: Send + Sync + 'static {
    fn notify(&self, warning: bool, reason: &'static str, note: String);
}

/// Steps back beyond this are reported (ms-sized NTP corrections included).
const BACK_THRESHOLD_MICROS: u64 = 1_000;
/// Steps forward beyond this are reported.
const FORWARD_THRESHOLD_MICROS: u64 = 100_000;

/// Starts the watch: the first sample is taken now, so a step right after start-up is
/// seen. It runs until the task is aborted (after the server drained: clock steps are
/// still reported while in-flight requests finish).
pub(crate) fn spawn_clock_watch(
    state: ServingReader,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    notify: Option<Arc<dyn Notify>>,
) -> JoinHandle<()> {
    let mut detector = StepDetector::new(BACK_THRESHOLD_MICROS, FORWARD_THRESHOLD_MICROS);
    detector.observe(clock.as_ref());
    tokio::spawn(watch_clock(state, metrics, clock, detector, notify))
}

/// How often the clocks are sampled. A step is measured whatever the interval (wall time
/// against monotonic time between two samples); the interval only sets how soon it is
/// reported. The generator does not depend on it: it never goes back (docs/safety.md).
/// Once a second keeps an idle sidecar's wake-ups few (100 pods on a node).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Samples the clocks every [`SAMPLE_EVERY`].
async fn watch_clock(
    state: ServingReader,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    mut detector: StepDetector,
    notify: Option<Arc<dyn Notify>>,
) {
    let mut was_ready = true;
    let mut interval = tokio::time::interval(SAMPLE_EVERY);
    let say = |warning: bool, reason: &'static str, note: String| {
        if let Some(n) = &notify {
            n.notify(warning, reason, note);
        }
    };
    loop {
        interval.tick().await;
        let generator = state.generator();
        let ahead_ms = generator
            .as_ref()
            .map(|g| g.ahead_of_clock_ms())
            .unwrap_or(0);
        match detector.observe(clock.as_ref()) {
            Some(ClockStep::Back { micros }) => {
                metrics.clock_rollbacks.inc();
                metrics.clock_rollback_last_seconds.set(micros as f64 / 1e6);
                tracing::warn!(
                    step_back_ms = micros / 1000,
                    ahead_of_clock_ms = ahead_ms,
                    "wall clock stepped back; the generator keeps its own tick"
                );
                say(
                    true,
                    "ClockRollback",
                    format!(
                        "wall clock stepped back {} ms; generator {} ms ahead of it",
                        micros / 1000,
                        ahead_ms
                    ),
                );
            }
            Some(ClockStep::Forward { micros }) => {
                metrics.clock_forward_jumps.inc();
                metrics
                    .clock_forward_jump_last_seconds
                    .set(micros as f64 / 1e6);
                tracing::warn!(jump_ms = micros / 1000, "wall clock jumped forward");
                say(
                    true,
                    "ClockJump",
                    format!("wall clock jumped forward {} ms", micros / 1000),
                );
            }
            None => {}
        }
        let Some(generator) = generator else { continue };
        let readiness = generator.check_ready();
        if readiness.is_ok() != was_ready {
            was_ready = readiness.is_ok();
            match readiness {
                Ok(()) => tracing::info!("ready: issuing IDs again"),
                Err(refusal) => {
                    tracing::warn!(reason = refusal.reason(), %refusal, "not ready");
                    say(true, "Refusing", refusal.to_string());
                }
            }
        }
    }
}
