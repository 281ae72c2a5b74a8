//! Standalone mode: one worker, no cluster. The fence lives in a file in the state
//! directory, so restarts (even after `kill -9`, even with the clock stepped back) never
//! repeat an ID, and a graceful stop hands over at once (docs/safety.md rules 2-5, 8).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubeflake_crds::sequence::{SequenceParams, SpecError};
use kubeflake_crds::{IdSequence, LayoutError, Tick};

use crate::clock::{Clock, StepDetector};
use crate::fence::{FenceFile, FenceFileError, FenceIdentity, LocalFence};
use crate::generator::{Generator, WorkerConfig};
use crate::http::{Api, serve};
use crate::metrics::Metrics;
use crate::segment::file::{FileCounter, FileCounterError};
use crate::segment::{DEFAULT_WAIT_LIMIT, Segment};
use crate::watch::watch_clock;
use kubeflake_crds::sequence::{IdSequenceSpec, SegmentParams};

/// Everything standalone mode needs, already parsed.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    pub listen: SocketAddr,
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
    #[error("cannot listen on --listen {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Counter(#[from] FileCounterError),
}

fn fence_identity(name: &str, slot: u32, p: &SequenceParams) -> FenceIdentity {
    let l = &p.layout;
    FenceIdentity {
        sequence: name.to_string(),
        slot,
        holder: "standalone".to_string(),
        acquisition: format!(
            "layout {}/{}/{}/{} epoch {} unit {}ms datacenter {}",
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

/// Reads a sequence file (the same YAML a user would `kubectl apply`).
pub fn read_sequence_file(path: &std::path::Path) -> Result<(String, SequenceParams), String> {
    let (name, spec) = read_sequence_spec(path)?;
    let params = spec
        .params()
        .map_err(|e| format!("--sequence-file {}: {e}", path.display()))?;
    Ok((name, params))
}

/// Reads a sequence file's name and spec, unvalidated.
pub fn read_sequence_spec(path: &std::path::Path) -> Result<(String, IdSequenceSpec), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--sequence-file {}: cannot read it: {e}", path.display()))?;
    let seq: IdSequence = serde_yaml::from_str(&text)
        .map_err(|e| format!("--sequence-file {}: not an IdSequence: {e}", path.display()))?;
    let name = seq.metadata.name.unwrap_or_else(|| "default".to_string());
    Ok((name, seq.spec))
}

/// Segment mode standalone: the counter is a file in the state directory.
#[derive(Debug, Clone)]
pub struct SegmentStandaloneConfig {
    pub listen: SocketAddr,
    pub state_dir: PathBuf,
    pub sequence_name: String,
    pub segment: SegmentParams,
    pub max_batch: u64,
    pub drain: Duration,
}

/// A started segment-mode standalone sidecar.
pub struct SegmentStandalone {
    api: Arc<Api>,
    segment: Arc<Segment>,
    listener: tokio::net::TcpListener,
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
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| StandaloneError::Listen {
                addr: config.listen,
                source,
            })?;
        let metrics = Arc::new(Metrics::new());
        let segment = Segment::start(
            Arc::new(counter.clone()),
            config.segment,
            DEFAULT_WAIT_LIMIT,
            metrics.segment.clone(),
        );
        tracing::info!(
            listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            sequence = %config.sequence_name,
            mode = "Segment",
            counter_next = next,
            block_size = config.segment.block_size,
            max_block_size = config.segment.max_block_size,
            counter_file = %counter.path().display(),
            "standalone sidecar started"
        );
        let api = Arc::new(Api::new(None, metrics, config.max_batch));
        api.install_segment(segment.clone());
        Ok(SegmentStandalone {
            api,
            segment,
            listener,
            drain: config.drain,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `shutdown`; then drains, stops, and gives the unused top of its blocks
    /// back to the counter when nobody claimed after it (so a clean restart leaves no gap).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), StandaloneError> {
        serve(self.listener, self.api.clone(), shutdown, self.drain).await;
        self.segment.stop();
        if let Some((unused, given)) = self.segment.give_back().await {
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
        Ok(())
    }
}

/// A started standalone sidecar: listening, with its fence written.
pub struct Standalone {
    api: Arc<Api>,
    fencer: Arc<LocalFence>,
    listener: tokio::net::TcpListener,
    config: StandaloneConfig,
    clock: Arc<dyn Clock>,
}

impl Standalone {
    /// Takes the state-file lock, starts above the fence found there, writes a new fence
    /// and binds the listener. Fails with an error naming the flag or file to fix.
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
        let worker = WorkerConfig {
            layout: p.layout,
            timebase: p.timebase,
            datacenter: p.datacenter,
            slot,
            max_drift_ms: p.max_drift_ms,
        };
        let generator = Arc::new(Generator::start_above(
            worker,
            Tick(found_fence),
            clock.clone(),
        ));
        let metrics = Arc::new(Metrics::new());
        let ahead_ticks = p
            .timebase
            .ticks_in_ms(config.fence_ahead.as_millis() as u64);
        let writes = Some(metrics.fence_writes.clone());
        let fencer = Arc::new(LocalFence::new(
            file,
            identity,
            generator.clone(),
            ahead_ticks,
            Tick(found_fence),
            None,
            writes,
        ));
        fencer.renew()?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| StandaloneError::Listen {
                addr: config.listen,
                source,
            })?;
        tracing::info!(
            listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            sequence = %config.sequence_name,
            worker = slot.0,
            start_above_tick = found_fence,
            fence_file = %fencer.path().display(),
            "standalone sidecar started"
        );
        let api = Arc::new(Api::new(Some(generator), metrics, config.max_batch));
        Ok(Standalone {
            api,
            fencer,
            listener,
            config,
            clock,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    pub fn generator(&self) -> Arc<Generator> {
        self.api
            .generator()
            .expect("standalone always has a generator")
    }

    /// Serves until `shutdown` completes; then drains, stops issuing, and lowers the fence
    /// to the exact highest tick issued (rule 5) so the next start is ready at once.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), StandaloneError> {
        let Standalone {
            api,
            fencer,
            listener,
            config,
            clock,
        } = self;
        let renewer = tokio::spawn(renew_loop(fencer.clone(), config.fence_ahead / 4));
        // The first sample is taken now, so a step right after start-up is seen.
        let mut detector = StepDetector::new(1_000, 100_000);
        detector.observe(clock.as_ref());
        let watcher = tokio::spawn(watch_clock(api.clone(), clock, detector, None));
        serve(listener, api.clone(), shutdown, config.drain).await;
        renewer.abort();
        watcher.abort();
        let high_water = tokio::task::spawn_blocking(move || fencer.stop_and_lower())
            .await
            .expect("fence write task does not panic")?;
        tracing::info!(
            fence_tick = high_water.0,
            "stopped: fence lowered to the highest tick issued"
        );
        Ok(())
    }
}

async fn renew_loop(fencer: Arc<LocalFence>, every: Duration) {
    let mut interval = tokio::time::interval(every.max(Duration::from_millis(10)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let f = fencer.clone();
        match tokio::task::spawn_blocking(move || f.renew()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "fence renewal failed; serving only up to the current fence")
            }
            Err(e) => tracing::error!(error = %e, "fence renewal task failed"),
        }
    }
}
