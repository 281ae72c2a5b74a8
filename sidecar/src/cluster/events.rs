//! What the sidecar tells about itself from a pod: Kubernetes Events on the pod, and the
//! clock-skew gate (measured against the API server, reported as metric, log and a
//! rate-limited `ClockSkew` Event).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::clock::{Clock, ClockSample};
use crate::metrics::Metrics;
use crate::skew;
use crate::slot::PodIdentity;
use crate::watch::Notify;

/// While the clock skew stays too large, at most one `ClockSkew` Warning Event per this
/// long (one is recorded at once when the skew becomes too large; the log says it each time).
pub(crate) const SKEW_EVENT_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// Records Events on the pod.
pub(crate) struct PodEvents {
    recorder: Recorder,
    pod: ObjectReference,
}

impl PodEvents {
    pub(crate) fn new(client: Client, pod: &PodIdentity) -> PodEvents {
        PodEvents {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "kubeflake-sidecar".into(),
                    instance: Some(pod.name.clone()),
                },
            ),
            pod: pod_reference(pod),
        }
    }
}

impl Notify for PodEvents {
    fn notify(&self, warning: bool, reason: &'static str, note: String) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: "IssueIds".into(),
            secondary: None,
        };
        let (recorder, pod) = (self.recorder.clone(), self.pod.clone());
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &pod).await {
                tracing::debug!(error = %e, "could not record an Event");
            }
        });
    }
}

fn pod_reference(pod: &PodIdentity) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: Some(pod.uid.clone()),
        ..Default::default()
    }
}

/// Whether to record a `ClockSkew` Event now (monotonic ms), given when the last one of the
/// current too-large stretch was recorded (`None`: the skew was fine at the last check).
fn skew_event_due(last_event_ms: Option<u64>, now_ms: u64, interval: Duration) -> bool {
    match last_event_ms {
        None => true,
        // A clock that went back must not silence the warning for good.
        Some(last) => {
            now_ms < last
                || now_ms - last >= u64::try_from(interval.as_millis()).unwrap_or(u64::MAX)
        }
    }
}

/// Decides whether the lease fence may be raised as far as the clock says: not while the
/// clock is too far off the API server's, nor after a step since the last good check.
pub(crate) struct SkewGate {
    max: Duration,
    /// Both clocks when the skew was last found acceptable.
    sane_at: Mutex<Option<ClockSample>>,
    /// Monotonic clock (ms) of the last `ClockSkew` Event while the skew is too large;
    /// `None` while it is fine.
    event_at: Mutex<Option<u64>>,
}

impl SkewGate {
    pub(crate) fn new(max: Duration) -> SkewGate {
        SkewGate {
            max,
            sane_at: Mutex::new(None),
            event_at: Mutex::new(None),
        }
    }

    /// Measures the clock skew against the API server; an error says why it is too large.
    /// When it cannot be measured (API server unreachable) nothing is blocked: the fences
    /// bound what can be issued anyway.
    pub(crate) async fn check(
        &self,
        client: &Client,
        clock: &dyn Clock,
        metrics: &Metrics,
        events: &Arc<dyn Notify>,
    ) -> Result<(), String> {
        let skew = match skew::measure(client, clock).await {
            Ok(skew) => skew,
            Err(e) => {
                tracing::debug!(error = %e, "clock skew not measured");
                return Ok(());
            }
        };
        metrics
            .clock_skew_seconds
            .set(skew.local_minus_server_ms as f64 / 1000.0);
        if !skew.exceeds(self.max) {
            let sample = ClockSample::take(clock);
            *self.sane_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(sample);
            *self.event_at.lock().unwrap_or_else(|p| p.into_inner()) = None;
            return Ok(());
        }
        let problem = format!(
            "this clock is {} ms off the API server's (+/- {} ms), beyond --max-clock-skew-ms {}; fix the node's time sync",
            skew.local_minus_server_ms,
            skew.uncertainty_ms,
            self.max.as_millis()
        );
        tracing::warn!(%problem, "clock skew too large: not issuing past the current fence");
        let now_ms = clock.monotonic_micros() / 1000;
        let event_due = {
            let mut last = self.event_at.lock().unwrap_or_else(|p| p.into_inner());
            let due = skew_event_due(*last, now_ms, SKEW_EVENT_INTERVAL);
            if due {
                *last = Some(now_ms);
            }
            due
        };
        if event_due {
            events.notify(true, "ClockSkew", problem.clone());
        }
        Err(problem)
    }

    /// Whether the wall clock still agrees with where the monotonic clock says it should be
    /// since the last acceptable skew check, within the skew bound (a step in between must
    /// not move the fence). The same wall-against-monotonic check as the step detector's.
    pub(crate) fn clock_unstepped_since_check(&self, clock: &dyn Clock) -> bool {
        let Some(sane) = *self.sane_at.lock().unwrap_or_else(|p| p.into_inner()) else {
            return true;
        };
        let bound_micros = u64::try_from(self.max.as_micros()).unwrap_or(u64::MAX);
        sane.unstepped_within(clock, bound_micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_wall_clock_step_beyond_the_bound_since_the_last_good_check_blocks_the_fence_raise() {
        let gate = SkewGate::new(Duration::from_secs(10));
        let clock = ManualClock::at_millis(1_800_000_000_000);
        assert!(
            gate.clock_unstepped_since_check(&clock),
            "no good check yet: nothing to compare with"
        );
        *gate.sane_at.lock().unwrap() = Some(ClockSample::take(&clock));
        clock.advance_millis(3_600_000);
        assert!(gate.clock_unstepped_since_check(&clock), "time passing");
        clock.step_forward_millis(10_000);
        assert!(gate.clock_unstepped_since_check(&clock), "within the bound");
        clock.step_forward_millis(3_600_000);
        assert!(!gate.clock_unstepped_since_check(&clock), "1 h forward");
        clock.step_back_millis(3_600_000 + 10_000 + 10_001);
        assert!(
            !gate.clock_unstepped_since_check(&clock),
            "10 s back and 1 ms more"
        );
    }

    #[test]
    fn a_persisting_clock_skew_is_reported_on_entry_then_at_most_once_per_interval() {
        let every = SKEW_EVENT_INTERVAL;
        let every_ms = every.as_millis() as u64;
        assert!(
            skew_event_due(None, 5_000, every),
            "at once when the skew becomes too large"
        );
        assert!(
            !skew_event_due(Some(5_000), 7_000, every),
            "not at the next check 2 s later"
        );
        assert!(!skew_event_due(Some(5_000), 5_000 + every_ms - 1, every));
        assert!(skew_event_due(Some(5_000), 5_000 + every_ms, every));
        assert!(
            skew_event_due(Some(5_000), 1_000, every),
            "a monotonic clock that went back never silences it for good"
        );
        // An hour of checks every 2 s with the skew too large throughout.
        let (mut last, mut events) = (None, 0u64);
        for now in (0..3_600_000u64).step_by(2_000) {
            if skew_event_due(last, now, every) {
                last = Some(now);
                events += 1;
            }
        }
        assert!(
            (1..=3_600_000u64.div_ceil(every_ms)).contains(&events),
            "{events} Events in an hour"
        );
    }
}
