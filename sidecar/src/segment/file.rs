//! The counter standalone: a JSON file `<state-dir>/<sequence>.segment`. A claim takes an
//! exclusive lock on `<file>.lock`, checks the counter is still what was read, and writes
//! the new one durably (temporary file, fsync, rename, fsync of the directory) before the
//! block is handed out. So a restart, even after `kill -9`, starts above every value
//! issued, and several processes on one machine may share one counter.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use kubeflake_crds::segment_counter::{Counter, LIMIT};
use serde::{Deserialize, Serialize};

use super::claim::{Block, ClaimError, CounterStore, StoreError, block_from};
use crate::fence::write_durably;

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CounterRecord {
    pub(crate) sequence: String,
    /// The first value not yet claimed.
    pub(crate) next: u64,
    pub(crate) claims: u64,
}

/// A counter file.
#[derive(Debug, Clone)]
pub(crate) struct FileCounter {
    inner: Arc<Paths>,
}

#[derive(Debug)]
struct Paths {
    path: PathBuf,
    lock: PathBuf,
    sequence: String,
}

/// Why the counter file cannot be used; each message names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileCounterError {
    #[error("segment counter {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "segment counter {path} is unreadable ({reason}); it is left untouched. Fix it by hand \
         (next must stay above every value issued) or use another --state-dir"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "segment counter {path} belongs to sequence {found:?}, not {expected:?}; use another --state-dir"
    )]
    OtherSequence {
        path: PathBuf,
        found: String,
        expected: String,
    },
}

impl Paths {
    fn io(&self, source: std::io::Error) -> FileCounterError {
        FileCounterError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn locked(&self) -> Result<File, FileCounterError> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(|e| self.io(e))?;
        lock.lock().map_err(|e| self.io(e))?;
        Ok(lock)
    }

    fn read(&self) -> Result<Option<CounterRecord>, FileCounterError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io(e)),
        };
        let record: CounterRecord =
            serde_json::from_slice(&bytes).map_err(|e| FileCounterError::Corrupt {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
        if record.next > LIMIT {
            return Err(FileCounterError::Corrupt {
                path: self.path.clone(),
                reason: format!("next {} is above 2^63", record.next),
            });
        }
        if record.sequence != self.sequence {
            return Err(FileCounterError::OtherSequence {
                path: self.path.clone(),
                found: record.sequence,
                expected: self.sequence.clone(),
            });
        }
        Ok(Some(record))
    }

    fn write(&self, record: &CounterRecord) -> Result<(), FileCounterError> {
        let body = serde_json::to_vec_pretty(record).map_err(|e| FileCounterError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        write_durably(&self.path, &body).map_err(|e| self.io(e))
    }
}

impl FileCounter {
    /// Opens (creating the directory and the file if needed) the counter of `sequence`.
    /// A new counter starts at `start`; an existing one below `start` is raised to it,
    /// never lowered.
    pub(crate) fn open(
        dir: &Path,
        sequence: &str,
        start: u64,
    ) -> Result<(FileCounter, u64), FileCounterError> {
        std::fs::create_dir_all(dir).map_err(|source| FileCounterError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let paths = Paths {
            path: dir.join(format!("{sequence}.segment")),
            lock: dir.join(format!("{sequence}.segment.lock")),
            sequence: sequence.to_string(),
        };
        let _lock = paths.locked()?;
        let found = paths.read()?;
        let next = match &found {
            Some(r) if r.next >= start => r.next,
            _ => {
                let record = CounterRecord {
                    sequence: sequence.to_string(),
                    next: start.min(LIMIT),
                    claims: found.as_ref().map_or(0, |r| r.claims),
                };
                paths.write(&record)?;
                record.next
            }
        };
        Ok((
            FileCounter {
                inner: Arc::new(paths),
            },
            next,
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.inner.path
    }
}

fn as_counter(record: &CounterRecord) -> Counter {
    Counter {
        next: record.next,
        claims: record.claims,
        format: 1,
        resource_version: Some(format!("{}/{}", record.next, record.claims)),
        range: None,
    }
}

fn blocking_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Unavailable(format!("counter file task failed: {e}"))
}

impl CounterStore for FileCounter {
    fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>> {
        let paths = self.inner.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let _lock = paths
                    .locked()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                match paths.read() {
                    Ok(Some(record)) => Ok(as_counter(&record)),
                    Ok(None) => Err(StoreError::NotFound(format!(
                        "segment counter {} was removed while in use",
                        paths.path.display()
                    ))),
                    Err(e) => Err(StoreError::Corrupt(e.to_string())),
                }
            })
            .await
            .map_err(blocking_error)?
        })
    }

    fn compare_and_swap<'a>(
        &'a self,
        seen: &'a Counter,
        new: Counter,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let paths = self.inner.clone();
        let seen_version = seen.resource_version.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let _lock = paths
                    .locked()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                let now = paths
                    .read()
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                if now
                    .as_ref()
                    .map(as_counter)
                    .and_then(|c| c.resource_version)
                    != seen_version
                {
                    return Err(StoreError::Conflict);
                }
                let record = CounterRecord {
                    sequence: paths.sequence.clone(),
                    next: new.next,
                    claims: new.claims,
                };
                paths
                    .write(&record)
                    .map_err(|e| StoreError::Unavailable(e.to_string()))
            })
            .await
            .map_err(blocking_error)?
        })
    }

    fn claim_at_once(
        &self,
        size: u64,
        floor: u64,
        min_start: u64,
    ) -> Option<BoxFuture<'_, Result<Block, ClaimError>>> {
        let paths = self.inner.clone();
        Some(Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                FileCounter::claim_locked(&paths, size, floor, min_start)
            })
            .await
            .map_err(|e| ClaimError::Store(blocking_error(e)))?
        }))
    }
}

impl FileCounter {
    /// One claim under one lock: read, check, write durably (the same arithmetic as the
    /// compare-and-swap claim, [`block_from`]).
    fn claim_locked(
        paths: &Paths,
        size: u64,
        floor: u64,
        min_start: u64,
    ) -> Result<Block, ClaimError> {
        let _lock = paths
            .locked()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let record = match paths.read() {
            Ok(Some(record)) => record,
            Ok(None) => {
                return Err(StoreError::NotFound(format!(
                    "segment counter {} was removed while in use",
                    paths.path.display()
                ))
                .into());
            }
            Err(e) => return Err(StoreError::Corrupt(e.to_string()).into()),
        };
        if record.next < floor {
            return Err(ClaimError::CounterBehind {
                next: record.next,
                floor,
            });
        }
        let Some(block) = block_from(record.next, min_start, size) else {
            return Err(ClaimError::Exhausted);
        };
        let written = CounterRecord {
            sequence: paths.sequence.clone(),
            next: block.end,
            claims: record.claims.saturating_add(1),
        };
        paths
            .write(&written)
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(block)
    }
}

#[cfg(test)]
mod tests;
