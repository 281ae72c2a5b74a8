//! Cluster mode: the sidecar in a pod. It serves at once (503 until it holds a slot), waits
//! until the operator names the pod holder of a slot lease, then follows docs/safety.md:
//!
//! - rule 4/6: start above the lease's fence, or above the pod-local fence file (an
//!   `emptyDir`) written by an earlier container of this pod for the same acquisition;
//! - rule 2: the generator's fence is the lower of the two fences written, the lease fence
//!   (raised to `now + lease duration` every third of a duration, with jitter) and the local
//!   one (kept about a second ahead, so a container restart waits at most that long);
//! - rule 3: failed renewals simply let the generator run into its fence; a renewal that
//!   finds the slot given away stops issuing at once;
//! - rule 5: on SIGTERM, drain, stop, lower the lease fence to the highest tick issued and
//!   free the slot.
//!
//! For a Segment-mode sequence no slot is needed: the sidecar claims blocks from the
//! sequence's counter Lease (see [`crate::segment`]) and, on SIGTERM, gives the unused top
//! of its blocks back when nobody claimed after it.
//!
//! Lease writes per second for N sidecars: `N * 3 / lease.durationSeconds` (5,000 pods at the
//! default 120 s: 125/s). The local fence file costs no API calls.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use kubeflake_crds::sequence::SequenceParams;
use kubeflake_crds::{IdSequence, Tick};
use tokio::sync::watch;

use crate::clock::{Clock, StepDetector};
use crate::fence::{FenceFile, FenceFileError, FenceIdentity, FenceRecord, LocalFence};
use crate::generator::{Generator, WorkerConfig};
use crate::http::{Api as HttpApi, serve, serve_probes};
use crate::metrics::Metrics;
use crate::segment::lease::LeaseCounter;
use crate::segment::{CounterStore, DEFAULT_WAIT_LIMIT, Segment};
use crate::skew;
use crate::slot::{HeldSlot, PodIdentity, SlotError, wait_for_assignment};
use crate::watch::{Notify, watch_clock};
use kubeflake_crds::sequence::SegmentParams;

/// While the clock skew stays too large, at most one `ClockSkew` Warning Event per this
/// long (one is recorded at once when the skew becomes too large; the log says it each time).
pub const SKEW_EVENT_INTERVAL: Duration = Duration::from_secs(10 * 60);

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

/// Everything cluster mode needs, already parsed.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub listen: SocketAddr,
    /// Where `/healthz` and `/readyz` alone are also served (the pod IP, for kubelet).
    pub probe_listen: Option<SocketAddr>,
    pub pod: PodIdentity,
    /// The IdSequence's name (in the pod's namespace).
    pub sequence: String,
    /// Directory of the pod-local fence file (an emptyDir).
    pub fence_dir: PathBuf,
    pub max_batch: u64,
    /// How far ahead of use the local fence is kept.
    pub local_fence_ahead: Duration,
    /// Lease renewal interval; `None`: a third of the lease duration.
    pub renew_every: Option<Duration>,
    /// Largest clock skew against the API server at which the sidecar starts issuing or
    /// raises its lease fence.
    pub max_clock_skew: Duration,
    pub drain: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot listen on --probe-listen {addr}: {source}")]
    ProbeListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on --listen {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    FenceFile(#[from] FenceFileError),
}

/// Records Events on the pod.
struct PodEvents {
    recorder: Recorder,
    pod: k8s_openapi::api::core::v1::ObjectReference,
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

fn pod_reference(pod: &PodIdentity) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: Some(pod.uid.clone()),
        ..Default::default()
    }
}

/// Runs until `shutdown` completes.
pub async fn run(
    client: Client,
    config: ClusterConfig,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ClusterError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ClusterError::Listen {
            addr: config.listen,
            source,
        })?;
    let probe_listener = match config.probe_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ClusterError::ProbeListen { addr, source })?,
        ),
        None => None,
    };
    let (fence_file, found) =
        FenceFile::open(&config.fence_dir, &format!("{}.fence", config.sequence))?;
    let fence_file = fence_file.with_record(found);
    let api = Arc::new(HttpApi::new(
        None,
        Arc::new(Metrics::new()),
        config.max_batch,
    ));
    let events: Arc<dyn Notify> = Arc::new(PodEvents {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "kubeflake-sidecar".into(),
                instance: Some(config.pod.name.clone()),
            },
        ),
        pod: pod_reference(&config.pod),
    });
    tracing::info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), pod = %config.pod.name, sequence = %config.sequence, "cluster sidecar started");

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    if let Some(probe_listener) = probe_listener {
        let mut probe_stop = stop_rx.clone();
        let stop = async move {
            let _ = probe_stop.wait_for(|s| *s).await;
        };
        tokio::spawn(serve_probes(
            probe_listener,
            api.clone(),
            stop,
            config.drain,
        ));
    }
    let mut serve_stop = stop_rx.clone();
    let server = tokio::spawn(serve(
        listener,
        api.clone(),
        async move {
            let _ = serve_stop.wait_for(|s| *s).await;
        },
        config.drain,
    ));
    let mut detector = StepDetector::new(1_000, 100_000);
    detector.observe(clock.as_ref());
    let watcher = tokio::spawn(watch_clock(
        api.clone(),
        clock.clone(),
        detector,
        Some(events.clone()),
    ));

    let mut holder = Holder {
        client,
        config,
        clock,
        api: api.clone(),
        fence_file: Some(fence_file),
        found_local: None,
        events,
        stop: stop_rx,
        sane_at: Default::default(),
        skew_event_at: Default::default(),
        segment: None,
    };
    let last = holder.hold_slots().await;
    // Shutting down: let in-flight requests finish, then stop and hand the slot back.
    let _ = server.await;
    watcher.abort();
    if let Some(segment) = holder.segment.take() {
        segment.stop();
        if let Some((unused, given)) = segment.give_back().await {
            tracing::info!(
                unused_start = unused.start,
                unused_end = unused.end,
                given_back = given,
                "stopped: unused values {}",
                if given {
                    "given back to the counter"
                } else {
                    "left as a gap"
                }
            );
        }
    }
    if let Some(mut held) = last {
        if let Some(renewer) = held.renewer.take() {
            renewer.abort();
        }
        let high_water = match held.local.stop_and_lower() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "could not lower the local fence");
                held.generator.stop()
            }
        };
        match held.slot.release(high_water).await {
            Ok(()) => tracing::info!(
                fence_tick = high_water.0,
                slot = held.slot.slot.slot.0,
                "released the slot; fence lowered to the highest tick issued"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "could not release the slot; the operator reclaims it when the pod is gone")
            }
        }
    }
    Ok(())
}

/// The state of the slot-holding loop.
struct Holder {
    client: Client,
    config: ClusterConfig,
    clock: Arc<dyn Clock>,
    api: Arc<HttpApi>,
    /// The local fence file while no slot is held (a held slot's `LocalFence` owns it).
    fence_file: Option<FenceFile>,
    found_local: Option<FenceRecord>,
    events: Arc<dyn Notify>,
    stop: watch::Receiver<bool>,
    /// Wall and monotonic clock (ms) when the skew was last found acceptable.
    sane_at: std::sync::Mutex<Option<(u64, u64)>>,
    /// Monotonic clock (ms) of the last `ClockSkew` Event while the skew is too large;
    /// `None` while it is fine.
    skew_event_at: std::sync::Mutex<Option<u64>>,
    /// The segment source, for a Segment-mode sequence.
    segment: Option<Arc<Segment>>,
}

/// A slot being served. The generator may use ticks up to the lower of the lease fence
/// and the local fence file's (the `LocalFence` caps one by the other).
struct Held {
    generator: Arc<Generator>,
    slot: HeldSlot,
    local: Arc<LocalFence>,
    /// Renews the local fence; runs until the slot is lost or the server has drained.
    renewer: Option<tokio::task::JoinHandle<()>>,
}

/// The fence to start above (rules 4 and 6): the local file's, only if it was written for
/// this very sequence, slot, holder and acquisition; otherwise the lease's. Returns whether
/// the local one was used.
fn start_fence(
    local: Option<&FenceRecord>,
    identity: &FenceIdentity,
    lease_fence: Tick,
) -> (Tick, bool) {
    match local {
        Some(record) if record.identity == *identity => (Tick(record.fence_tick), true),
        _ => (lease_fence, false),
    }
}

/// Takes the fence file back from a `LocalFence` once no renewal holds it (a blocking write
/// may still be finishing after its task was aborted).
async fn reclaim_file(mut local: Arc<LocalFence>) -> Option<FenceFile> {
    for _ in 0..500 {
        match Arc::try_unwrap(local) {
            Ok(l) => return Some(l.into_file()),
            Err(shared) => local = shared,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::error!("the local fence file is still in use; restart the container to serve again");
    None
}

/// `d` plus or minus up to 10%, so that sidecars started together do not renew together.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.9 + fastrand::f64() * 0.2)
}

impl Holder {
    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps `d`, or less when shutdown begins.
    async fn pause(&self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    /// Acquires and holds slots until shutdown; returns the slot held at that moment.
    async fn hold_slots(&mut self) -> Option<Held> {
        // A record left by an earlier container of this pod (rule 6), used if it names the
        // acquisition this pod gets.
        self.found_local = self.fence_file.as_ref().and_then(|f| f.record().cloned());
        while !self.stopping() {
            let Some((params, segment)) = self.read_sequence().await else {
                continue;
            };
            if let Some(segment) = segment {
                self.serve_segment(segment).await;
                return None;
            }
            let Some(lease) = self.wait_for_slot().await else {
                continue;
            };
            match self.start_serving(&params, lease).await {
                Ok(held) => {
                    if let Some(held) = self.keep(&params, held).await {
                        return Some(held);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not start serving the slot; retrying");
                    self.pause(Duration::from_secs(1)).await;
                }
            }
        }
        None
    }

    /// Measures the clock skew against the API server; an error says why it is too large.
    /// When it cannot be measured (API server unreachable) nothing is blocked: the fences
    /// bound what can be issued anyway.
    async fn check_skew(&self) -> Result<(), String> {
        let skew = match skew::measure(&self.client, self.clock.as_ref()).await {
            Ok(skew) => skew,
            Err(e) => {
                tracing::debug!(error = %e, "clock skew not measured");
                return Ok(());
            }
        };
        self.api
            .metrics
            .clock_skew_seconds
            .set(skew.local_minus_server_ms as f64 / 1000.0);
        if !skew.exceeds(self.config.max_clock_skew) {
            let sample = (
                self.clock.wall_micros() / 1000,
                self.clock.monotonic_micros() / 1000,
            );
            *self.sane_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(sample);
            *self.skew_event_at.lock().unwrap_or_else(|p| p.into_inner()) = None;
            return Ok(());
        }
        let problem = format!(
            "this clock is {} ms off the API server's (+/- {} ms), beyond --max-clock-skew-ms {}; fix the node's time sync",
            skew.local_minus_server_ms,
            skew.uncertainty_ms,
            self.config.max_clock_skew.as_millis()
        );
        tracing::warn!(%problem, "clock skew too large: not issuing past the current fence");
        let now_ms = self.clock.monotonic_micros() / 1000;
        let event_due = {
            let mut last = self.skew_event_at.lock().unwrap_or_else(|p| p.into_inner());
            let due = skew_event_due(*last, now_ms, SKEW_EVENT_INTERVAL);
            if due {
                *last = Some(now_ms);
            }
            due
        };
        if event_due {
            self.events.notify(true, "ClockSkew", problem.clone());
        }
        Err(problem)
    }

    /// Segment mode: waits for the counter Lease (the operator creates it), then serves
    /// values from blocks claimed from it until shutdown.
    async fn serve_segment(&mut self, params: SegmentParams) {
        let store = Arc::new(LeaseCounter::new(
            self.client.clone(),
            &self.config.pod.namespace,
            &self.config.sequence,
        ));
        while !self.stopping() {
            match store.read().await {
                Ok(counter) => {
                    tracing::info!(
                        counter = store.name(),
                        next = counter.next,
                        block_size = params.block_size,
                        max_block_size = params.max_block_size,
                        "segment mode: claiming blocks from the counter"
                    );
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for the segment counter");
                    self.api.set_waiting_for(e.to_string());
                    self.pause(Duration::from_secs(1)).await;
                }
            }
        }
        if self.stopping() {
            return;
        }
        let segment = Segment::start(
            store,
            params,
            DEFAULT_WAIT_LIMIT,
            self.api.metrics.segment.clone(),
        );
        self.api.install_segment(segment.clone());
        self.events.notify(
            false,
            "SegmentServing",
            format!(
                "serving values of segment sequence {} in blocks",
                self.config.sequence
            ),
        );
        self.segment = Some(segment);
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    async fn read_sequence(&self) -> Option<(SequenceParams, Option<SegmentParams>)> {
        let api: Api<IdSequence> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let name = &self.config.sequence;
        let problem = match api.get_opt(name).await {
            Ok(Some(seq)) => match (seq.spec.params(), seq.spec.segment_params()) {
                (Ok(p), Ok(segment)) => return Some((p, segment)),
                (Err(e), _) | (_, Err(e)) => format!("IdSequence {name} is invalid: {e}"),
            },
            Ok(None) => format!(
                "IdSequence {name} does not exist in namespace {}",
                self.config.pod.namespace
            ),
            Err(e) => format!("cannot read IdSequence {name}: {e}"),
        };
        tracing::warn!(%problem, "waiting for the sequence");
        self.api.set_waiting_for(problem);
        self.pause(Duration::from_secs(2)).await;
        None
    }

    async fn wait_for_slot(&self) -> Option<Lease> {
        self.api.set_waiting_for(format!(
            "waiting for the operator to assign a slot of {}",
            self.config.sequence
        ));
        tracing::info!("waiting for a slot lease naming this pod");
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let mut stop = self.stop.clone();
        tokio::select! {
            found = wait_for_assignment(&leases, &self.config.sequence, &self.config.pod.uid) => match found {
                Ok(lease) => Some(lease),
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for a slot failed; retrying");
                    self.pause(Duration::from_secs(1)).await;
                    None
                }
            },
            _ = stop.wait_for(|s| *s) => None,
        }
    }

    /// Rules 4 and 6: picks the fence to start above, writes the first fences, installs
    /// the generator.
    async fn start_serving(
        &mut self,
        params: &SequenceParams,
        lease: Lease,
    ) -> Result<Held, SlotError> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let slot = HeldSlot::new(leases, &self.config.pod.uid, lease)?;
        let identity = FenceIdentity {
            sequence: format!("{}/{}", self.config.pod.namespace, self.config.sequence),
            slot: slot.slot.slot.0,
            holder: self.config.pod.uid.clone(),
            acquisition: slot.slot.acquisition(),
        };
        let local = self.found_local.take();
        let (start, from_local) = start_fence(local.as_ref(), &identity, slot.slot.fence);
        let worker = WorkerConfig {
            layout: params.layout,
            timebase: params.timebase,
            datacenter: params.datacenter,
            slot: params
                .layout
                .check_slot(u64::from(slot.slot.slot.0))
                .map_err(|_| SlotError::Lost)?,
            max_drift_ms: params.max_drift_ms,
        };
        let generator = Arc::new(Generator::start_above(worker, start, self.clock.clone()));
        let ahead = params
            .timebase
            .ticks_in_ms(self.config.local_fence_ahead.as_millis() as u64);
        let file = self.fence_file.take().ok_or(SlotError::Lost)?;
        let local_fence = Arc::new(LocalFence::new(
            file,
            identity,
            generator.clone(),
            ahead,
            start,
            Some(start),
            None,
        ));
        let mut held = Held {
            generator,
            slot,
            local: local_fence,
            renewer: None,
        };
        let renewed = self.renew_lease(&mut held, params).await;
        if let Err(e) = renewed.and_then(|()| held.local.renew().map_err(SlotError::from)) {
            held.generator.stop();
            self.fence_file = reclaim_file(held.local).await;
            return Err(e);
        }
        tracing::info!(
            slot = held.slot.slot.slot.0,
            start_above_tick = start.0,
            from = if from_local {
                "local fence file"
            } else {
                "lease fence"
            },
            "holding the slot"
        );
        self.events.notify(
            false,
            "SlotAcquired",
            format!(
                "serving IDs as worker {} of {}",
                held.slot.slot.slot.0, self.config.sequence
            ),
        );
        self.api.install(held.generator.clone());
        Ok(held)
    }

    /// Whether the wall clock still agrees with where the monotonic clock says it should be
    /// since the last acceptable skew check (a step in between must not move the fence).
    fn clock_unstepped_since_check(&self) -> bool {
        let Some((wall0, mono0)) = *self.sane_at.lock().unwrap_or_else(|p| p.into_inner()) else {
            return true;
        };
        let expected = wall0 + (self.clock.monotonic_micros() / 1000).saturating_sub(mono0);
        let wall = self.clock.wall_micros() / 1000;
        wall.abs_diff(expected) <= self.config.max_clock_skew.as_millis() as u64
    }

    /// Raises the lease fence to a lease duration past the clock (or the generator).
    async fn renew_lease(&self, held: &mut Held, params: &SequenceParams) -> Result<(), SlotError> {
        if !self.clock_unstepped_since_check() {
            return Err(SlotError::ClockStepped);
        }
        let g = &held.generator;
        let now = g.now_tick().map(|t| t.0).unwrap_or(0);
        let ahead = params
            .timebase
            .ticks_in_ms(params.lease_duration_secs * 1000);
        let target = Tick(now.max(g.high_water_tick().0) + ahead);
        let result = held.slot.raise_fence(target).await;
        let label = if result.is_ok() { "ok" } else { "error" };
        self.api
            .metrics
            .fence_writes
            .with_label_values(&[label])
            .inc();
        held.local.set_cap(result?);
        Ok(())
    }

    /// Renews both fences until shutdown (returns the slot) or until the slot is lost
    /// (stops issuing at once and returns `None`). The local fence is renewed by its own
    /// task, so a slow or failing lease write never holds it up.
    async fn keep(&mut self, params: &SequenceParams, mut held: Held) -> Option<Held> {
        let renew_every = self
            .config
            .renew_every
            .unwrap_or(Duration::from_secs(params.lease_duration_secs) / 3);
        let mut next_renewal = tokio::time::Instant::now() + jittered(renew_every);
        let local = held.local.clone();
        held.renewer = Some(tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(250));
            loop {
                every.tick().await;
                let l = local.clone();
                if let Ok(Err(e)) = tokio::task::spawn_blocking(move || l.renew()).await {
                    tracing::warn!(error = %e, "local fence write failed; serving up to the last one");
                }
            }
        }));
        let mut stop = self.stop.clone();
        let outcome = loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_renewal) => match self.check_skew().await {
                    // A clock far off would push the fence far ahead: let it run out instead.
                    Err(_) => next_renewal = tokio::time::Instant::now() + Duration::from_secs(2),
                    Ok(()) => match self.renew_lease(&mut held, params).await {
                    Ok(()) => next_renewal = tokio::time::Instant::now() + jittered(renew_every),
                    Err(SlotError::Lost) => break false,
                    Err(e) => {
                        let lease_headroom_ms = held.slot.slot.fence.0.saturating_sub(held.generator.now_tick().map(|t| t.0).unwrap_or(0)) * params.timebase.unit().millis();
                        tracing::warn!(error = %e, lease_headroom_ms, "lease renewal failed; serving within the fence, retrying");
                        next_renewal = tokio::time::Instant::now() + Duration::from_secs(2);
                    }
                    },
                },
                _ = stop.wait_for(|s| *s) => break true,
            }
        };
        if outcome {
            return Some(held); // in-flight requests still drain: keep the local fence renewed
        }
        if let Some(renewer) = held.renewer.take() {
            renewer.abort();
        }
        let high_water = held.generator.stop();
        self.api
            .uninstall("the slot was given to another pod; waiting for a new one");
        tracing::error!(
            slot = held.slot.slot.slot.0,
            high_water_tick = high_water.0,
            "slot lost: stopped issuing at once"
        );
        self.events.notify(
            true,
            "SlotLost",
            format!(
                "worker {} was given to another pod; stopped issuing",
                held.slot.slot.slot.0
            ),
        );
        // Wait for the local task to let go of the file, then keep it for the next slot.
        let _ = held.local.stop_and_lower();
        self.fence_file = reclaim_file(held.local).await;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(acquisition: &str) -> FenceIdentity {
        FenceIdentity {
            sequence: "ns/orders".into(),
            slot: 0,
            holder: "uid-p".into(),
            acquisition: acquisition.into(),
        }
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

    #[test]
    fn rule6_a_restarted_container_starts_above_its_local_fence_for_the_same_acquisition() {
        let record = FenceRecord {
            identity: identity("orders-slot-0#1"),
            fence_tick: 500,
        };
        assert_eq!(
            start_fence(Some(&record), &identity("orders-slot-0#1"), Tick(9_000)),
            (Tick(500), true)
        );
    }

    #[test]
    fn rule6_a_local_fence_from_another_acquisition_is_never_used() {
        // The pod held slot 0 (acquisition #1), lost it; another pod issued up to tick 9000
        // (acquisition #2); the slot came back (#3). The old file must not be used.
        let record = FenceRecord {
            identity: identity("orders-slot-0#1"),
            fence_tick: 500,
        };
        assert_eq!(
            start_fence(Some(&record), &identity("orders-slot-0#3"), Tick(9_000)),
            (Tick(9_000), false)
        );
        let other_holder = FenceRecord {
            identity: FenceIdentity {
                holder: "uid-q".into(),
                ..identity("orders-slot-0#3")
            },
            fence_tick: 500,
        };
        assert_eq!(
            start_fence(
                Some(&other_holder),
                &identity("orders-slot-0#3"),
                Tick(9_000)
            )
            .0,
            Tick(9_000)
        );
        assert_eq!(
            start_fence(None, &identity("orders-slot-0#3"), Tick(9_000)),
            (Tick(9_000), false)
        );
    }
}
