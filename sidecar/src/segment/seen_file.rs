//! The highest `next` a cluster Segment sidecar saw its counter at, kept in the pod's
//! `emptyDir` (the state directory): a container restarted in the same pod starts with
//! what the one before it saw, so it too refuses a counter restored below that
//! ([`super::claim::HighestSeen`], docs/safety.md rule 22). A new pod has an empty
//! directory, and sees the counter afresh.
//!
//! One small JSON record, `<sequence>.counter-seen`, naming the sequence it belongs to (a
//! record of another sequence is never used). Written as the fence record is
//! ([`crate::fence::write_durably`]), so a crash leaves the old or the new record, never a
//! torn one; at most once a second, so its sync costs little.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    sequence: String,
    highest_next: u64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SeenFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a record of the counter this sidecar saw ({source}); it is replaced \
         at the next write"
    )]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The record of one sequence in a state directory.
#[derive(Debug, Clone)]
pub(crate) struct SeenFile {
    path: PathBuf,
    sequence: String,
}

impl SeenFile {
    /// The record of `sequence` (its `namespace/name`) under `file_name` in `dir`.
    pub(crate) fn new(dir: &Path, file_name: &str, sequence: &str) -> SeenFile {
        SeenFile {
            path: dir.join(format!("{file_name}.counter-seen")),
            sequence: sequence.to_owned(),
        }
    }

    /// The highest `next` recorded for this sequence; 0 when there is no record (a new
    /// pod) or it belongs to another sequence.
    pub(crate) fn load(&self) -> Result<u64, SeenFileError> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(SeenFileError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let record: Record =
            serde_json::from_slice(&text).map_err(|source| SeenFileError::Malformed {
                path: self.path.clone(),
                source,
            })?;
        Ok(if record.sequence == self.sequence {
            record.highest_next
        } else {
            0
        })
    }

    /// Records `highest_next` (the caller writes only rises).
    pub(crate) fn store(&self, highest_next: u64) -> Result<(), SeenFileError> {
        let record = Record {
            sequence: self.sequence.clone(),
            highest_next,
        };
        let write = |source| SeenFileError::Write {
            path: self.path.clone(),
            source,
        };
        let text = serde_json::to_vec(&record).map_err(|e| write(e.into()))?;
        crate::fence::write_durably(&self.path, &text).map_err(write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// Rule 22: what one container saw, the next container of the pod starts from.
    #[test]
    fn rule22_a_restarted_container_starts_from_what_the_one_before_saw() {
        let d = dir();
        let before = SeenFile::new(d.path(), "orders", "shop/orders");
        assert_eq!(before.load().unwrap(), 0, "a new pod saw nothing");
        before.store(5_000).unwrap();
        before.store(7_000).unwrap();
        let after = SeenFile::new(d.path(), "orders", "shop/orders");
        assert_eq!(after.load().unwrap(), 7_000);
    }

    #[test]
    fn a_record_of_another_sequence_is_never_used() {
        let d = dir();
        SeenFile::new(d.path(), "orders", "shop/orders")
            .store(5_000)
            .unwrap();
        let other = SeenFile::new(d.path(), "orders", "other/orders");
        assert_eq!(other.load().unwrap(), 0);
    }

    #[test]
    fn a_malformed_record_is_an_error_naming_the_file() {
        let d = dir();
        let file = SeenFile::new(d.path(), "orders", "shop/orders");
        std::fs::write(d.path().join("orders.counter-seen"), "{not json").unwrap();
        let err = file.load().unwrap_err().to_string();
        assert!(err.contains("orders.counter-seen"), "{err}");
        file.store(10).unwrap();
        assert_eq!(file.load().unwrap(), 10, "replaced at the next rise");
    }
}
