//! Standalone mode: one worker, no cluster. The fence lives in a file in the state
//! directory, so restarts (even after `kill -9`, even with the clock stepped back) never
//! repeat an ID, and a graceful stop hands over at once (docs/safety.md rules 2-5, 8).
//!
//! The serving state is fixed from the start (`Snowflake` or `Segment`, [`crate::state`])
//! and becomes `Stopping` after the drain. The fence is owned by value: by [`Standalone`]
//! until it runs, then by its renewal task ([`crate::renewer`]), which hands it back for
//! the final, lowering write.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubeflake_crds::sequence::{SequenceParams, SpecError};
use kubeflake_crds::{LayoutError, Tick};
use kubeflake_runtime::shutdown::ShutdownToken;

use crate::clock::Clock;
use crate::fence::{FenceFile, FenceFileError, FenceIdentity, LocalFence};
use crate::generator::{Generator, WorkerConfig};
use crate::http::{Api, ApiListeners, ListenError, serve_api};
use crate::metrics::Metrics;
use crate::renewer::{Renewer, RenewerError, off_worker};
use crate::segment::DEFAULT_WAIT_LIMIT;
use crate::segment::file::{FileCounter, FileCounterError};
use crate::source::Source;
use crate::state::{Serving, ServingCell};
use crate::watch::spawn_clock_watch;
use kubeflake_crds::sequence::{IdSequenceSpec, SegmentParams};

/// Everything standalone mode needs, already parsed.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    pub listen: SocketAddr,
    /// Also serve the API on this Unix socket.
    pub listen_unix: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub worker_id: u64,
    /// The sequence name (from the file's metadata.name, or "default").
    pub sequence_name: String,
    pub sequence: SequenceParams,
    pub max_batch: u64,
    /// How far ahead of the clock the fence is kept. A restart after `kill -9` may have to
    /// wait up to this long minus the drift limit; a graceful stop needs no wait.
    pub fence_ahead: Duration,
    /// How long in-flight requests may take to finish at shutdown.
    pub drain: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    #[error("--worker-id {worker_id} does not fit this layout: {source}")]
    WorkerId { worker_id: u64, source: LayoutError },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    FenceFile(#[from] FenceFileError),
    #[error(
        "fence file {path} belongs to {found:?}, but this run is {expected:?}; IDs could repeat. \
         Use another --state-dir, or the layout, epoch and time unit the file was written with"
    )]
    FenceMismatch {
        path: PathBuf,
        found: FenceIdentity,
        expected: FenceIdentity,
    },
    #[error("fence file {path}: {source}")]
    FenceBeyondLayout {
        path: PathBuf,
        source: crate::generator::StartError,
    },
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(transparent)]
    Counter(#[from] FileCounterError),
    #[error(transparent)]
    Renewer(#[from] RenewerError),
}

fn fence_identity(name: &str, slot: u32, p: &SequenceParams) -> FenceIdentity {
    let l = &p.layout;
    // A key form is named only when the layout has one, so fence files written before
    // key forms existed still match their (time-ordered) layout.
    let form = l
        .form_label()
        .map(|f| format!(" form {f}"))
        .unwrap_or_default();
    FenceIdentity {
        sequence: name.to_string(),
        slot,
        holder: "standalone".to_string(),
        acquisition: format!(
            "layout {}/{}/{}/{} epoch {} unit {}ms datacenter {}{form}",
            l.timestamp_bits(),
            l.datacenter_bits(),
            l.worker_bits(),
            l.sequence_bits(),
            p.timebase.epoch_unix_ms(),
            p.timebase.unit().millis(),
            p.datacenter.0
        ),
    }
}

/// Reads a sequence file's name and spec, unvalidated.
pub fn read_sequence_spec(path: &std::path::Path) -> Result<(String, IdSequenceSpec), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--sequence-file {}: cannot read it: {e}", path.display()))?;
    let seq = kubeflake_crds::manifest::parse(&text)
        .map_err(|e| format!("--sequence-file {}: {e}", path.display()))?;
    let name = seq.metadata.name.unwrap_or_else(|| "default".to_string());
    Ok((name, seq.spec))
}

/// Segment mode standalone: the counter is a file in the state directory.
#[derive(Debug, Clone)]
pub struct SegmentStandaloneConfig {
    pub listen: SocketAddr,
    /// Also serve the API on this Unix socket.
    pub listen_unix: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub sequence_name: String,
    pub segment: SegmentParams,
    pub max_batch: u64,
    /// Largest `count` of `GET /range` (`--max-range`).
    pub max_range: u64,
    pub drain: Duration,
}

/// A started segment-mode standalone sidecar.
pub struct SegmentStandalone {
    api: Arc<Api>,
    state: ServingCell,
    segment: Source,
    listeners: ApiListeners,
    drain: Duration,
}

impl SegmentStandalone {
    /// Opens the counter file and binds the listener; the first block is claimed in the
    /// background at once.
    pub async fn start(
        config: SegmentStandaloneConfig,
    ) -> Result<SegmentStandalone, StandaloneError> {
        let (counter, next) = FileCounter::open(
            &config.state_dir,
            &config.sequence_name,
            config.segment.start,
        )?;
        let listeners = ApiListeners::bind(config.listen, config.listen_unix.as_deref()).await?;
        let metrics = Arc::new(Metrics::new());
        let segment = Source::start(
            Arc::new(counter.clone()),
            config.segment,
            DEFAULT_WAIT_LIMIT,
            metrics.segment.clone(),
        );
        tracing::info!(
            listen = %listeners.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            sequence = %config.sequence_name,
            mode = "Segment",
            strict = config.segment.strict,
            counter_next = next,
            block_size = config.segment.block_size,
            max_block_size = config.segment.max_block_size,
            counter_file = %counter.path().display(),
            "standalone sidecar started"
        );
        let state = ServingCell::new(Serving::Segment(segment.clone()), &metrics);
        let api = Arc::new(
            Api::new(state.reader(), metrics, config.max_batch).with_max_range(config.max_range),
        );
        Ok(SegmentStandalone {
            api,
            state,
            segment,
            listeners,
            drain: config.drain,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listeners.local_addr()
    }

    /// Serves until `shutdown` is triggered; then drains, stops, and gives the unused top of
    /// its blocks back to the counter when nobody claimed after it (so a clean restart
    /// leaves no gap).
    pub async fn run(self, shutdown: ShutdownToken) -> Result<(), StandaloneError> {
        serve_api(self.listeners, self.api.clone(), shutdown, self.drain).await;
        self.state.publish(Serving::Stopping);
        self.segment.stop_and_log().await;
        Ok(())
    }
}

/// A started standalone sidecar: listening, with its fence written.
pub struct Standalone {
    api: Arc<Api>,
    state: ServingCell,
    generator: Arc<Generator>,
    fence: LocalFence,
    listeners: ApiListeners,
    config: StandaloneConfig,
    clock: Arc<dyn Clock>,
}

impl Standalone {
    /// Takes the state-file lock, binds the listeners, starts above the fence found there
    /// and writes a new fence. Fails with an error naming the flag or file to fix.
    pub async fn start(
        config: StandaloneConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Standalone, StandaloneError> {
        let p = config.sequence;
        let slot =
            p.layout
                .check_slot(config.worker_id)
                .map_err(|source| StandaloneError::WorkerId {
                    worker_id: config.worker_id,
                    source,
                })?;
        let identity = fence_identity(&config.sequence_name, slot.0, &p);
        let file_name = format!("{}-worker-{}.fence", config.sequence_name, slot.0);
        let (file, found) = FenceFile::open(&config.state_dir, &file_name)?;
        let found_fence = match found {
            None => 0,
            Some(record) if record.identity == identity => record.fence_tick,
            Some(record) => {
                return Err(StandaloneError::FenceMismatch {
                    path: file.path().to_path_buf(),
                    found: record.identity,
                    expected: identity,
                });
            }
        };
        // Listeners before the first fence write: a start that fails on a flag leaves
        // the fence where it was, so the next start need not wait for it (rule 4).
        let listeners = ApiListeners::bind(config.listen, config.listen_unix.as_deref()).await?;
        let worker = WorkerConfig {
            layout: p.layout,
            timebase: p.timebase,
            datacenter: p.datacenter,
            slot,
            max_drift_ms: p.max_drift_ms,
        };
        let generator = Arc::new(
            Generator::start_above(worker, Tick(found_fence), clock.clone()).map_err(|source| {
                StandaloneError::FenceBeyondLayout {
                    path: file.path().to_path_buf(),
                    source,
                }
            })?,
        );
        let metrics = Arc::new(Metrics::new());
        let ahead_ticks = p
            .timebase
            .ticks_in_ms(config.fence_ahead.as_millis() as u64);
        let writes = Some(metrics.fence_writes.clone());
        let fence = LocalFence::new(
            file,
            identity,
            generator.clone(),
            ahead_ticks,
            Tick(found_fence),
            None,
            writes,
        );
        // The first write, off the async worker (it ends in an fsync).
        let (fence, written) = off_worker(fence, LocalFence::renew).await?;
        written?;
        tracing::info!(
            listen = %listeners.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            sequence = %config.sequence_name,
            worker = slot.0,
            start_above_tick = found_fence,
            fence_file = %fence.path().display(),
            "standalone sidecar started"
        );
        let state = ServingCell::new(Serving::Snowflake(generator.clone()), &metrics);
        let api = Arc::new(Api::new(state.reader(), metrics, config.max_batch));
        Ok(Standalone {
            api,
            state,
            generator,
            fence,
            listeners,
            config,
            clock,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listeners.local_addr()
    }

    #[cfg(test)]
    pub(crate) fn generator(&self) -> Arc<Generator> {
        self.generator.clone()
    }

    /// Serves until `shutdown` is triggered; then drains, stops issuing, and lowers the fence
    /// to the exact highest tick issued (rule 5) so the next start is ready at once. If the
    /// fence renewal dies (a panic), stops issuing at once and returns the error: the
    /// caller exits non-zero rather than serve on without a renewed fence.
    pub async fn run(self, shutdown: ShutdownToken) -> Result<(), StandaloneError> {
        let Standalone {
            api,
            state,
            generator,
            fence,
            listeners,
            config,
            clock,
        } = self;
        let mut renewer = Renewer::spawn(fence, LocalFence::renewal_period(config.fence_ahead));
        let watcher = spawn_clock_watch(api.state().clone(), api.metrics.clone(), clock, None);
        let died = tokio::select! {
            () = serve_api(listeners, api.clone(), shutdown, config.drain) => None,
            died = renewer.died() => Some(died),
        };
        watcher.abort();
        state.publish(Serving::Stopping);
        if let Some(died) = died {
            let high_water = generator.stop();
            tracing::error!(error = %died, high_water_tick = high_water.0, "fence renewal died: stopped issuing");
            return Err(died.into());
        }
        let fence = renewer.stop().await?;
        let (_, lowered) = off_worker(fence, LocalFence::stop_and_lower).await?;
        let high_water = lowered?;
        tracing::info!(
            fence_tick = high_water.0,
            "stopped: fence lowered to the highest tick issued"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests;
