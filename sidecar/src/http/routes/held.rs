//! Requests held open instead of answered at once: `/readyz?wait=` until the sidecar is
//! ready (the startup probe's long poll), and `/id` or `/ids` over a refusal that clears by
//! itself ([`ID_HOLD`]). The first wakes when a new serving state is published (and looks
//! again on a timer only at a state that serves but is not ready yet); the second looks
//! again when its refusal may have cleared. Both end within a bound; neither changes what
//! may be issued (the generator decides every answer).

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use kubeflake_crds::contract::{READYZ_MAX_WAIT_MS, READYZ_WAIT_PARAM};
use tokio::time::Instant;

use super::{Api, HttpError, Planned, Reply, Serving, Wanted};
use crate::generator::{Generator, Refusal};

/// How often a held `/readyz?wait=` looks again at a state that serves but is not ready
/// (the fence or the clock, which change without a new state being published). A waiting
/// sidecar (no slot yet, the usual case while the startup probe holds the app) becomes
/// ready only by a new state, which wakes the held request at once: it is not looked at on
/// a timer. (Looking every 5 ms, as before, cost a held probe about 9 ms of CPU in its
/// second, 15 times an answered probe's; under a burst of pods, on CPU the node lacked.)
const READYZ_RECHECK: Duration = Duration::from_millis(50);
/// How long `/id` and `/ids` hold a request whose IDs are refused for a reason that clears
/// by itself (the fence not yet raised by a late renewal, the clock behind the generator:
/// [`Refusal::clears_after`]) before answering the 503. Apps that take their first ID at
/// start and do not retry then see a slow answer instead of an error when the node is
/// starved for a moment; a sidecar whose renewals have stopped still refuses within this
/// bound, well inside a client's usual time-out.
pub(super) const ID_HOLD: Duration = Duration::from_millis(1000);
/// At most this many `/readyz?wait=` requests are held open at once (the startup probe,
/// or a 0.1.0 pod's postStart hook, holds one); further ones are answered at once, as without `wait`, so the probe port,
/// reachable on the pod IP, cannot be made to keep many timers running.
pub(super) const READYZ_WAITERS: usize = 4;

/// An `/id` or `/ids` request held over a refusal: what to ask the generator again, after
/// `pause`, until `until`.
pub(super) struct HeldIds {
    generator: Arc<Generator>,
    wanted: Wanted,
    many: bool,
    json: bool,
    pause: Duration,
    until: Instant,
}

/// How long to pause before asking again for IDs refused with `refusal`, if it clears by
/// itself and could clear before `until`.
fn hold_pause(refusal: &Refusal, until: Instant) -> Option<Duration> {
    refusal
        .clears_after()
        .filter(|pause| Instant::now() + *pause < until)
}

/// The `wait` of `/readyz?wait=<ms>`, 0 to [`READYZ_MAX_WAIT_MS`]; None without it.
/// Other query parameters are ignored, as `/readyz` always did.
pub(super) fn readyz_wait(query: Option<&str>) -> Result<Option<Duration>, HttpError> {
    let Some(raw) = query.unwrap_or("").split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == READYZ_WAIT_PARAM).then_some(value)
    }) else {
        return Ok(None);
    };
    match raw.parse::<u64>() {
        Ok(ms) if ms <= READYZ_MAX_WAIT_MS => Ok(Some(Duration::from_millis(ms))),
        _ => Err(HttpError::BadRequest(format!(
            "{READYZ_WAIT_PARAM} must be a whole number of milliseconds from 0 to \
             {READYZ_MAX_WAIT_MS}, got {raw:?}"
        ))),
    }
}

impl Api {
    /// `/readyz?wait=`: the `/readyz` answer as soon as it is 200 (or the sidecar stops),
    /// else the 503 at `until`. Beyond [`READYZ_WAITERS`] held at once, the answer now.
    pub(super) async fn readyz_when_ready(&self, until: Instant) -> Reply {
        let permit = self.readyz_waiters.try_acquire();
        let hold = permit.is_ok();
        loop {
            // Before the load: a state published after it wakes this request.
            let changed = self.state.changes();
            let (reply, done, timed) = {
                let state = self.state.load();
                let reply = Api::readyz(&state);
                let done = reply.status() == StatusCode::OK || matches!(**state, Serving::Stopping);
                (reply, done, !matches!(**state, Serving::Waiting(_)))
            };
            let now = Instant::now();
            if done || !hold || now >= until {
                return reply;
            }
            let look_again = if timed {
                now + READYZ_RECHECK.min(until - now)
            } else {
                until
            };
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(look_again) => {}
            }
        }
    }

    /// `/id` and `/ids` in Snowflake mode: the answer now, or the request held (counted in
    /// `kubeflake_held_requests_total`) when it is refused for a reason that clears by itself.
    pub(super) fn snowflake_planned(
        &self,
        generator: &Arc<Generator>,
        wanted: Wanted,
        many: bool,
        json: bool,
    ) -> Result<Planned, HttpError> {
        let refusal = match self.snowflake_ids(generator, wanted, many, json) {
            Err(HttpError::Refused(refusal)) => refusal,
            answered => return answered.map(Planned::Reply),
        };
        let until = Instant::now() + ID_HOLD;
        let Some(pause) = hold_pause(&refusal, until) else {
            return Err(HttpError::Refused(refusal));
        };
        self.metrics
            .held
            .with_label_values(&[refusal.reason()])
            .inc();
        Ok(Planned::SnowflakeHeld(HeldIds {
            generator: generator.clone(),
            wanted,
            many,
            json,
            pause,
            until,
        }))
    }

    /// A held request asked again after each pause while refused for a reason that clears
    /// by itself and can clear before its end; else the last answer.
    pub(super) async fn snowflake_ids_held(&self, held: HeldIds) -> Result<Reply, HttpError> {
        let HeldIds {
            generator,
            wanted,
            many,
            json,
            mut pause,
            until,
        } = held;
        let raised = generator.fence_raised();
        loop {
            // Look again after the pause, or as soon as the fence goes up (a write the
            // refused request asked for); a raise just before this wait costs one pause.
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = raised.notified() => {}
            }
            match self.snowflake_ids(&generator, wanted, many, json) {
                Err(HttpError::Refused(refusal)) => match hold_pause(&refusal, until) {
                    Some(next) => pause = next,
                    None => return Err(HttpError::Refused(refusal)),
                },
                answered => return answered,
            }
        }
    }
}
