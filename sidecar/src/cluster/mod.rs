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
//!   free the slot; the probe port answers until then (`/healthz` alive, `/readyz` 503).
//!
//! For a Segment-mode sequence no slot is needed: the sidecar claims blocks from the
//! sequence's counter Lease (see [`crate::segment`]) and, on SIGTERM, gives the unused top
//! of its blocks back when nobody claimed after it.
//!
//! Lease writes per second for N sidecars: `N * 3 / lease.durationSeconds` (5,000 pods at the
//! default 120 s: 125/s). The local fence file costs no API calls.
//!
//! ## States
//!
//! `Lifecycle` is the slot-holding state machine; each state owns its resources and hands
//! them on by value (nothing is shared, polled or left in an `Option`):
//!
//! ```text
//! Waiting(Unheld: fence file) --assigned, fences written--> Holding(Held: slot, generator,
//!     ^        |                                                 renewal task owning the file)
//!     |        +--Segment sequence--> Segment(buffer)                  |
//!     +------------- slot lost: generator stopped, file handed back ---+
//! any state --SIGTERM--> Done(Ending) --after the drain--> released / given back
//! ```
//!
//! What the HTTP layer serves follows from it ([`crate::state::Serving`]), published here.
//!
//! Where each state and its transitions live: the state's type and the steps that leave
//! it (`impl Ctx` blocks, since every step uses the shared [`Ctx`]) are in one module.
//!
//! | state | owns | its steps (`impl Ctx`) | in |
//! |---|---|---|---|
//! | `Waiting` | `Unheld` (the fence file) | `find_work`: read the sequence, wait for a slot or counter, then `acquire` | `waiting.rs` |
//! | `Holding` | `Held` (slot, generator, renewal task) | `acquire`, `keep` (renew), `lose`, `release`; `tell_unreadable_format` (both states use it) | `holder.rs` |
//! | `Segment` | the segment [`Source`], the counter | none: it serves until shutdown (`hold`), following the counter meanwhile (`LeaseCounter::follow`) | here |
//! | `Done` | `Ending` | `finish`: hand back what is held, after the drain | here |
//!
//! This module has the driver (`Ctx::hold`), the shutdown wiring (`run`) and what every
//! step shares (`Ctx`, its view of the shutdown token: `stopping`, `pause`, `stopped`).
//!
//! - [`config`]: the parsed command line.
//! - `waiting`: reading the sequence and waiting for a slot or counter (`Waiting`).
//! - `holder`: acquire, renew, lose and release a slot (`Holding`).
//! - [`events`]: Events on the pod and the clock-skew gate.

pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod holder;
pub(crate) mod waiting;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kubeflake_runtime::shutdown::{ShutdownToken, drain};

use crate::clock::Clock;
use crate::fence::{FenceFile, FenceFileError};
use crate::http::{Api as HttpApi, ApiListeners, ListenError, ProbeServer, serve_api};
use crate::metrics::Metrics;
use crate::renewer::RenewerError;
use crate::segment::lease::LeaseCounter;
use crate::source::Source;
use crate::state::{Serving, ServingCell, WaitReason};
use crate::watch::{Notify, spawn_clock_watch};

pub use config::ClusterConfig;
use holder::Held;
pub(crate) use waiting::Unheld;

/// How long after the servers' own drain (`--drain-timeout-secs`, counted from the
/// shutdown) they may take to return before they are given up on and the slot is handed
/// back anyway.
const SERVER_STOP_SLACK: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot listen on --probe-listen {addr}: {source}")]
    ProbeListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(transparent)]
    FenceFile(#[from] FenceFileError),
    /// The task that writes the local fence died (a panic): serving on would run into the
    /// fence with `/healthz` still 200, so the process ends instead and the kubelet
    /// restarts the container, which starts above its fence (docs/safety.md rules 4, 6).
    #[error(transparent)]
    Renewer(#[from] RenewerError),
    /// While waiting (holding nothing), the API server refused this pod's token: the pod
    /// was deleted. The kubelet cannot stop a pod whose postStart hook still runs (pods
    /// injected by 0.1.0 have one), so the process ends, which ends the hook
    /// (docs/install.md, "How a labelled pod starts").
    #[error(
        "the API server no longer accepts this pod's service account token ({0}) while the \
         sidecar waits for a slot: the pod was deleted (or its service account was); \
         exiting, so that the kubelet can finish the pod. Nothing was issued, nothing is held"
    )]
    TokenRefused(String),
}

impl ClusterError {
    /// The exit status: 2 for what is wrong from the start (flags, files), 1 for a failure
    /// while running.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClusterError::Renewer(_) | ClusterError::TokenRefused(_) => 1,
            _ => 2,
        }
    }
}

/// Where cluster mode is, with what it owns there.
pub(crate) enum Lifecycle {
    /// No slot: reading the sequence, waiting for the operator.
    Waiting(Unheld),
    /// A slot is served.
    Holding(Held),
    /// A Segment sequence is served; its counter is followed meanwhile.
    Segment(Source, Arc<LeaseCounter>),
    /// Shutdown began; what is left to hand back once the server has drained.
    Done(Ending),
}

/// What is handed back at shutdown.
#[allow(clippy::large_enum_variant)] // moved once, at shutdown
pub(crate) enum Ending {
    Unheld(Unheld),
    Held(Held),
    Segment(Source),
}

/// What every state's steps use.
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) config: ClusterConfig,
    pub(crate) clock: Arc<dyn Clock>,
    /// The serving state: only the lifecycle writes it.
    pub(crate) state: ServingCell,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) events: Arc<dyn Notify>,
    /// Triggered when shutdown begins.
    pub(crate) shutdown: ShutdownToken,
    pub(crate) skew: events::SkewGate,
    /// The last refusal of a Lease in a format this release does not understand that was
    /// recorded as an Event: a sidecar retrying every few seconds records it once (the log
    /// says it every time).
    pub(crate) format_told: std::sync::Mutex<Option<String>>,
}

/// What every state's steps share; the steps themselves are next to their state (the
/// table in this module's documentation).
impl Ctx {
    /// Whether shutdown began.
    pub(crate) fn stopping(&self) -> bool {
        self.shutdown.is_triggered()
    }

    /// Sleeps `d`, or less when shutdown begins.
    pub(crate) async fn pause(&self, d: Duration) {
        self.shutdown.sleep(d).await
    }

    /// Completes when shutdown begins.
    pub(crate) async fn stopped(&self) {
        self.shutdown.triggered().await
    }

    /// Runs the state machine from `start` until shutdown; an error is fatal.
    pub(crate) async fn hold(&self, start: Lifecycle) -> Result<Ending, ClusterError> {
        let mut now = start;
        loop {
            now = match now {
                Lifecycle::Waiting(unheld) => self.find_work(unheld).await?,
                Lifecycle::Holding(held) => self.keep(held).await?,
                Lifecycle::Segment(segment, counter) => {
                    tokio::select! {
                        () = self.stopped() => {}
                        () = counter.follow() => {}
                    }
                    Lifecycle::Done(Ending::Segment(segment))
                }
                Lifecycle::Done(ending) => return Ok(ending),
            };
        }
    }

    /// After the drain: nothing more is issued; hand back what is held.
    pub(crate) async fn finish(&self, ending: Ending) -> Result<(), ClusterError> {
        self.state.publish(Serving::Stopping);
        match ending {
            Ending::Unheld(unheld) => {
                // Nothing was issued since the last slot: the file keeps its record.
                drop(unheld.file);
                Ok(())
            }
            Ending::Segment(segment) => {
                segment.stop_and_log().await;
                Ok(())
            }
            Ending::Held(held) => self.release(held).await,
        }
    }
}

/// Runs until `shutdown` is triggered, then drains the servers and hands back what it
/// holds.
pub async fn run(
    client: Client,
    config: ClusterConfig,
    clock: Arc<dyn Clock>,
    shutdown: ShutdownToken,
) -> Result<(), ClusterError> {
    let listeners = ApiListeners::bind(config.listen, config.listen_unix.as_deref()).await?;
    if !config.listen.ip().is_loopback() {
        tracing::warn!(listen = %config.listen, "--listen is not a loopback address: the ID API is reachable from outside the pod");
    }
    let probe_listener = match config.probe_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ClusterError::ProbeListen { addr, source })?,
        ),
        None => None,
    };
    let (file, found) = FenceFile::open(&config.state_dir, &format!("{}.fence", config.sequence))?;
    let metrics = Arc::new(Metrics::new());
    let state = ServingCell::new(Serving::Waiting(WaitReason::Starting), &metrics);
    let api = Arc::new(
        HttpApi::new(state.reader(), metrics.clone(), config.max_batch)
            .with_max_range(config.max_range),
    );
    let events: Arc<dyn Notify> = Arc::new(events::PodEvents::new(client.clone(), &config.pod));
    tracing::info!(listen = %listeners.local_addr().map(|a| a.to_string()).unwrap_or_default(), pod = %config.pod.name, sequence = %config.sequence, "cluster sidecar started");

    let servers = vec![(
        "API server",
        tokio::spawn(serve_api(
            listeners,
            api.clone(),
            shutdown.clone(),
            config.drain,
        )),
    )];
    // Not among the servers drained at the shutdown: the probe port answers until the slot
    // is handed back (the kubelet probes until the container ends; see `ProbeServer`).
    let probes = probe_listener.map(|listener| ProbeServer::spawn(listener, api.clone()));
    let watcher = spawn_clock_watch(
        api.state().clone(),
        metrics.clone(),
        clock.clone(),
        Some(events.clone()),
    );

    let ctx = Ctx {
        skew: events::SkewGate::new(config.max_clock_skew),
        client,
        config,
        clock,
        state,
        metrics,
        events,
        shutdown: shutdown.clone(),
        format_told: std::sync::Mutex::new(None),
    };
    let ending = ctx.hold(Lifecycle::Waiting(Unheld { file, found })).await?;
    // Shutting down: let in-flight requests finish (each server drains for up to
    // `config.drain` from the shutdown), then stop and hand the slot back.
    let began = shutdown
        .triggered_at()
        .unwrap_or_else(tokio::time::Instant::now);
    drain(servers, began + ctx.config.drain + SERVER_STOP_SLACK).await;
    watcher.abort();
    let handed_back = ctx.finish(ending).await;
    if let Some(probes) = probes {
        probes.close().await;
    }
    handed_back
}
