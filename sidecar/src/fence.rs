//! The fence file: a durable record of the highest tick a worker may have used.
//!
//! Standalone, this file *is* the fence (there is no lease): a restart, even after
//! `kill -9` and with the wall clock stepped back, starts above it (docs/safety.md rule 4).
//! In a pod it is the local fence of rule 6, kept in an `emptyDir`.
//!
//! The file names what it fences (sequence, slot, holder, acquisition); a record written
//! for anything else is never used. Writes go to a temporary file (`<name>.tmp`) that is
//! synced and then renamed over the old one, so a crash leaves either the old or the new
//! record, never a torn one. An exclusive lock keeps two processes from serving the same slot from one
//! directory.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kubeflake_crds::Tick;
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};

use crate::generator::Generator;

/// What a fence file belongs to. A record is only used if all of it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FenceIdentity {
    /// The sequence (namespace/name in a cluster, the name standalone).
    pub(crate) sequence: String,
    pub(crate) slot: u32,
    /// The pod UID in a cluster; "standalone" otherwise.
    pub(crate) holder: String,
    /// The lease acquisition in a cluster; the layout, epoch and time unit standalone.
    pub(crate) acquisition: String,
}

/// One durable fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FenceRecord {
    #[serde(flatten)]
    pub(crate) identity: FenceIdentity,
    /// The highest tick that may have been used.
    pub(crate) fence_tick: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum FenceFileError {
    #[error(
        "another kubeflake-sidecar already serves from {0} (its lock is held); give each \
         process its own --state-dir or --worker-id"
    )]
    Locked(PathBuf),
    #[error("cannot use fence file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "fence file {path} is unreadable ({reason}); it is left untouched. Remove it only if you \
         are sure no IDs were issued from it, or use another --state-dir"
    )]
    Corrupt { path: PathBuf, reason: String },
}

/// An open, locked fence file.
#[derive(Debug)]
pub(crate) struct FenceFile {
    path: PathBuf,
    _lock: File,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> FenceFileError + '_ {
    move |source| FenceFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl FenceFile {
    /// Opens (creating the directory if needed) and locks `dir/name`, returning the record
    /// found there, if any.
    pub(crate) fn open(
        dir: &Path,
        name: &str,
    ) -> Result<(FenceFile, Option<FenceRecord>), FenceFileError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let path = dir.join(name);
        let lock_path = dir.join(format!("{name}.lock"));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(FenceFileError::Locked(path)),
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error(&lock_path)(e)),
        }
        let record = match std::fs::read(&path) {
            Ok(bytes) => {
                Some(
                    serde_json::from_slice(&bytes).map_err(|e| FenceFileError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?,
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&path)(e)),
        };
        Ok((FenceFile { path, _lock: lock }, record))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Durably replaces the record: when this returns `Ok`, the record survives a crash.
    pub(crate) fn write(&self, record: &FenceRecord) -> Result<(), FenceFileError> {
        let body = serde_json::to_vec_pretty(record).map_err(|e| FenceFileError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        write_durably(&self.path, &body).map_err(io_error(&self.path))
    }
}

/// Replaces `path` with `body` so that a crash leaves the old or the new content, never a
/// torn one, and the new content survives a crash once this returns: a temporary file is
/// written and synced, renamed over `path`, and the directory synced.
pub(crate) fn write_durably(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let mut file = File::create(&tmp)?;
    file.write_all(body)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The temporary file [`write_durably`] uses for `path`: `<file name>.tmp` in the same
/// directory, so targets that differ only in their extension (`x.fence`, `x.segment`)
/// never share one. Writers of one target are serialized by its lock.
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Keeps a fence file ahead of a generator while IDs are asked, and lets the generator use
/// only ticks that are both in the file and under a `cap` (the lease fence in a pod; none
/// standalone).
///
/// The target is `max(now + drift limit, last tick issued) + ahead`, written once less than
/// half of `ahead` is left ([`LocalFence::due`]): a generator can run ahead of the clock by
/// at most its drift limit, so between two renewals a busy generator never reaches the
/// file's fence. A restart after a crash therefore waits at most `ahead`.
///
/// Only while IDs are asked: a write falls due only if IDs were issued since the last write,
/// or a reservation met the fence and asked for one ([`Generator::fence_asked`], which wakes
/// the renewal task at once), or the last write failed (retried on every renewal). An idle
/// sidecar writes nothing, and its fence falls behind the clock; the first ID asked then
/// waits for one write, held by the HTTP API meanwhile. Until a write fails, the generator
/// counts the cap as reachable ([`Generator::set_reachable`]), so an idle sidecar stays ready.
/// Safety does not depend on when writes happen: the generator uses only what was written.
///
/// Writes take `&mut self`: one owner writes at a time (the renewal task, which hands the
/// fence back by value before the final, lowering write; [`crate::renewer`]), so a renewal
/// never races with shutdown. The cap is raised through a shared [`FenceGate`].
pub(crate) struct LocalFence {
    file: FenceFile,
    identity: FenceIdentity,
    ahead_ticks: u64,
    gate: Arc<FenceGate>,
    /// Counts writes by result, when this file is the fence that matters (standalone).
    writes: Option<IntCounterVec>,
    /// The generator's last tick issued when the fence was last written; `None` before
    /// the first write (which is always due, to record this acquisition).
    high_water_at_write: Option<u64>,
}

/// What the generator may use: the lower of the fence written to the file and the cap
/// (docs/safety.md rule 2). Shared by the owner of the file and whoever raises the cap
/// (the lease holder in a pod).
pub(crate) struct FenceGate {
    generator: Arc<Generator>,
    written: AtomicU64,
    cap: AtomicU64,
    /// Whether the last write of the file failed: then nothing beyond what is written is
    /// reachable, and every renewal tries again.
    failing: AtomicBool,
}

impl FenceGate {
    /// Lets the generator use ticks up to the lower of the two fences written, and tells it
    /// how far one more write of the file could take it.
    fn allow(&self) {
        let cap = self.cap.load(Ordering::Acquire);
        let fence = self.written.load(Ordering::Acquire).min(cap);
        self.generator.raise_fence(Tick(fence));
        let failing = self.failing.load(Ordering::Acquire);
        self.generator
            .set_reachable(Tick(if failing { fence } else { cap }));
    }

    /// Sets the upper bound from the other fence, once written (it only goes up, rule 5).
    pub(crate) fn set_cap(&self, cap: Tick) {
        self.cap.fetch_max(cap.0, Ordering::AcqRel);
        self.allow();
    }
}

impl LocalFence {
    /// How often a fence kept `ahead` of its generator is renewed (both modes): a quarter of
    /// the margin, so a write falls due every second or third renewal ([`Self::due`]).
    pub(crate) fn renewal_period(ahead: std::time::Duration) -> std::time::Duration {
        ahead / 4
    }

    /// `found` is the fence the generator started above (the file's, or the lease's).
    /// `cap` is the other fence already written (the lease's in a pod; nothing above it is
    /// allowed until [`set_cap`](Self::set_cap) raises it), or `None` when there is none.
    pub(crate) fn new(
        file: FenceFile,
        identity: FenceIdentity,
        generator: Arc<Generator>,
        ahead_ticks: u64,
        found: Tick,
        cap: Option<Tick>,
        writes: Option<IntCounterVec>,
    ) -> LocalFence {
        LocalFence {
            file,
            identity,
            ahead_ticks: ahead_ticks.max(1),
            gate: Arc::new(FenceGate {
                generator,
                written: AtomicU64::new(found.0),
                cap: AtomicU64::new(cap.map_or(u64::MAX, |t| t.0)),
                failing: AtomicBool::new(false),
            }),
            writes,
            high_water_at_write: None,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.file.path()
    }

    /// The handle that raises the cap while the fence itself is owned elsewhere.
    pub(crate) fn gate(&self) -> Arc<FenceGate> {
        self.gate.clone()
    }

    /// Gives the file back (for the next acquisition).
    pub(crate) fn into_file(self) -> FenceFile {
        self.file
    }

    fn write(&self, fence_tick: u64) -> Result<(), FenceFileError> {
        let record = FenceRecord {
            identity: self.identity.clone(),
            fence_tick,
        };
        let result = self.file.write(&record);
        if let Some(writes) = &self.writes {
            writes
                .with_label_values(&[if result.is_ok() { "ok" } else { "error" }])
                .inc();
        }
        result
    }

    /// Sets the upper bound from the other fence (it only goes up).
    #[cfg(test)]
    pub(crate) fn set_cap(&self, cap: Tick) {
        self.gate.set_cap(cap);
    }

    /// The fence to write now, if a write is due: IDs are asked (issued since the last
    /// write, or a reservation asked for a fence above the one written), or the last write
    /// failed; and the file holds less than half of `ahead` beyond the highest tick the
    /// generator could reach (the clock plus the drift limit, or the last tick issued), and
    /// the cap leaves room above what is written. Otherwise `None`: the generator is idle,
    /// or still has at least `ahead / 2` of room, which outlasts the next renewal (renewals
    /// come every `ahead / 4`, [`Self::renewal_period`], so a busy sidecar writes every
    /// second or third one and its room never falls below `ahead / 4`; an ID at the clock
    /// has the drift limit on top). The target is the same however the write fell due, so
    /// a restart still waits at most `ahead` (rule 6).
    pub(crate) fn due(&self) -> Option<u64> {
        let gate = &self.gate;
        let g = &gate.generator;
        if g.is_stopped() || !self.asked_since_write() {
            return None;
        }
        let written = gate.written.load(Ordering::Acquire);
        let high_water = g.high_water_tick().0;
        let drift = g.config().timebase.ticks_in_ms(g.config().max_drift_ms);
        let now = g.now_tick().map(|t| t.0).unwrap_or(0);
        let reach = now.saturating_add(drift).max(high_water);
        if written >= reach.saturating_add(self.ahead_ticks / 2) {
            return None;
        }
        let target = reach
            .saturating_add(self.ahead_ticks)
            .min(gate.cap.load(Ordering::Acquire));
        (target > written).then_some(target)
    }

    /// Whether IDs were asked since the last write: issued, or a reservation asked for a
    /// fence above the one written, or the last write failed (or none was made yet).
    fn asked_since_write(&self) -> bool {
        let (gate, g) = (&self.gate, &self.gate.generator);
        self.high_water_at_write.is_none_or(|at_write| {
            g.high_water_tick().0 > at_write
                || g.wanted_tick().0 > gate.written.load(Ordering::Acquire)
                || gate.failing.load(Ordering::Acquire)
        })
    }

    /// Whether only being [`asked`](Self::asked) can make a write due: nothing asked since
    /// the last write, and the clock has passed the fence written, so the next ID must ask.
    /// Before that an ID may be issued below the fence unasked, and the renewal task keeps
    /// looking every period to write ahead of such a flow.
    pub(crate) fn quiet_until_asked(&self) -> bool {
        let g = &self.gate.generator;
        let passed = || {
            g.now_tick()
                .is_ok_and(|now| self.gate.written.load(Ordering::Acquire) <= now.0)
        };
        g.is_stopped() || (!self.asked_since_write() && passed())
    }

    /// What a reservation that meets the fence wakes: the renewal task waits on it besides
    /// its period, so an ID asked of an idle sidecar waits for one write, not for a period.
    pub(crate) fn asked(&self) -> Arc<tokio::sync::Notify> {
        self.gate.generator.fence_asked()
    }

    /// Writes a new fence when [`due`](Self::due); only after the write may the generator
    /// use it (rules 2, 6). Blocks on an fsync: call it off the async workers
    /// ([`crate::renewer`]).
    pub(crate) fn renew(&mut self) -> Result<(), FenceFileError> {
        let high_water = self.gate.generator.high_water_tick().0;
        let mut result = Ok(());
        if let Some(target) = self.due() {
            result = self.write(target);
            if result.is_ok() {
                self.gate.written.store(target, Ordering::Release);
                self.high_water_at_write = Some(high_water);
            }
            self.gate.failing.store(result.is_err(), Ordering::Release);
        }
        self.gate.allow();
        result
    }

    /// Stops the generator for good and lowers the fence file to the exact highest tick it
    /// issued (rule 5). Blocks on an fsync, like [`renew`](Self::renew).
    pub(crate) fn stop_and_lower(&mut self) -> Result<Tick, FenceFileError> {
        let high_water = self.gate.generator.stop();
        self.write(high_water.0)?;
        self.gate.written.store(high_water.0, Ordering::Release);
        Ok(high_water)
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
