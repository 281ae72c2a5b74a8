//! Knowing that the earlier process of this pod's sidecar has ended, so that a restarted
//! oracle takes its own Lease back at once instead of waiting `D·(1+ρ)` (docs/safety.md
//! rule 13, "a restart in the same pod").
//!
//! A sidecar that may serve as a strict sequence's oracle holds an exclusive `flock` on
//! `<state dir>/<sequence>.oracle-lock` from its start until its process ends: the kernel
//! drops the lock when the process dies, however it dies (`kill -9`, OOM, a crash), and a
//! stopped process (SIGSTOP) keeps it. Before it serves a term, it writes in that file
//! which term it took: the Lease's UID and its `leaseTransitions`.
//!
//! A new process of the same pod (the kubelet restarted the container; the state dir is the
//! pod's `emptyDir`, which outlives containers) that gets the lock and reads a record naming
//! the term the oracle Lease is in, held by this pod, knows the process that served that
//! term is gone: nothing can serve from that term any more, so waiting for it to lapse
//! protects nothing. Anything less certain waits, as a take-over from another pod does:
//! the lock busy (the earlier process lives), no record or one naming another term (the
//! term was taken by a process that wrote none: a sidecar of an older release, after an
//! in-place image change), a Lease re-created since (another UID), or no state dir.
//!
//! The lock file is never replaced (a rename would leave the lock on a file nobody opens
//! again); the record is rewritten in place and ends with a newline, so a write cut short
//! is no record.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use kubeflake_crds::strict_oracle::OracleLease;

/// Why this process holds no pod lock (it then waits for its own Lease like any other pod).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodLockError {
    #[error(
        "{path} is locked by another process of this pod: an earlier sidecar process still \
         runs (stopped?), so this one waits for the oracle Lease to lapse before serving"
    )]
    Busy { path: PathBuf },
    #[error("cannot open or lock {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The term a holder of the lock took: which Lease (its UID) and which term of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TermRecord {
    pub(crate) lease_uid: String,
    pub(crate) term: i32,
}

impl TermRecord {
    /// The term `lease` is in, if the Lease has a UID (every Lease the API server stored has).
    pub(crate) fn of(lease: &OracleLease) -> Option<TermRecord> {
        Some(TermRecord {
            lease_uid: lease.read.metadata.uid.clone()?,
            term: lease.term,
        })
    }

    fn encode(&self) -> String {
        format!("{} {}\n", self.term, self.lease_uid)
    }

    fn decode(text: &str) -> Option<TermRecord> {
        let line = text.strip_suffix('\n')?;
        let (term, lease_uid) = line.split_once(' ')?;
        Some(TermRecord {
            term: term.parse().ok()?,
            lease_uid: lease_uid.to_string(),
        })
    }
}

/// The exclusive lock of this pod's oracle file, held until the process ends, and the
/// record the process before it left.
#[derive(Debug)]
pub(crate) struct PodLock {
    file: File,
    /// What the earlier holder recorded (read once, when the lock was taken).
    earlier: Option<TermRecord>,
}

impl PodLock {
    /// Takes the lock of `<dir>/<sequence>.oracle-lock` without waiting.
    pub(crate) fn acquire(dir: &Path, sequence: &str) -> Result<PodLock, PodLockError> {
        let path = dir.join(format!("{sequence}.oracle-lock"));
        let io = |source| PodLockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(PodLockError::Busy { path }),
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let mut text = String::new();
        // Unreadable (not UTF-8, say) is no record: the next restart waits, nothing worse.
        let earlier = match file.read_to_string(&mut text) {
            Ok(_) => TermRecord::decode(&text),
            Err(_) => None,
        };
        Ok(PodLock { file, earlier })
    }

    /// Whether `lease`'s current term was taken by the process that held this lock before
    /// this one, in this pod (`uid`): that process has ended, so the term serves no more.
    pub(crate) fn earlier_process_held(&self, lease: &OracleLease, uid: &str) -> bool {
        lease.holder.as_deref() == Some(uid)
            && self.earlier.is_some()
            && self.earlier == TermRecord::of(lease)
    }

    /// Records the term this process took; call it before serving from the term.
    pub(crate) fn record(&self, term: &TermRecord) -> std::io::Result<()> {
        let mut file = &self.file;
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(term.encode().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::strict_oracle::new_oracle_lease;

    fn lease(uid: Option<&str>, holder: Option<&str>, term: i32) -> OracleLease {
        let mut lease = new_oracle_lease("s", "ns");
        lease.metadata.uid = uid.map(str::to_string);
        let spec = lease.spec.as_mut().unwrap();
        spec.holder_identity = holder.map(str::to_string);
        spec.lease_transitions = Some(term);
        OracleLease::parse(lease).unwrap()
    }

    #[test]
    fn rule13_a_record_left_by_the_earlier_process_of_this_pod_names_only_its_own_term() {
        let dir = tempfile::tempdir().unwrap();
        let held = lease(Some("lease-1"), Some("pod-a"), 3);
        {
            let first = PodLock::acquire(dir.path(), "s").unwrap();
            assert!(
                !first.earlier_process_held(&held, "pod-a"),
                "no record yet: a first start waits"
            );
            first.record(&TermRecord::of(&held).unwrap()).unwrap();
        } // the process ends: the lock is dropped with the file
        let next = PodLock::acquire(dir.path(), "s").unwrap();
        assert!(next.earlier_process_held(&held, "pod-a"));
        assert!(
            !next.earlier_process_held(&held, "pod-b"),
            "another pod's restart knows nothing of this pod's process"
        );
        for (other, why) in [
            (lease(Some("lease-1"), Some("pod-a"), 4), "a later term"),
            (
                lease(Some("lease-2"), Some("pod-a"), 3),
                "a re-created Lease",
            ),
            (lease(Some("lease-1"), None, 3), "released"),
            (lease(None, Some("pod-a"), 3), "a Lease without a UID"),
        ] {
            assert!(!next.earlier_process_held(&other, "pod-a"), "{why}");
        }
    }

    #[test]
    fn rule13_the_lock_is_refused_while_the_earlier_process_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let _alive = PodLock::acquire(dir.path(), "s").unwrap();
        let err = PodLock::acquire(dir.path(), "s").unwrap_err();
        assert!(matches!(err, PodLockError::Busy { .. }), "{err}");
        assert!(err.to_string().contains("still runs"), "{err}");
        assert!(
            PodLock::acquire(dir.path(), "other").is_ok(),
            "one lock per sequence"
        );
    }

    #[test]
    fn a_record_cut_short_or_garbled_is_no_record() {
        for text in ["12 lease-1", "", "x lease-1\n", "12\n", "\u{0}\u{0}"] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("s.oracle-lock"), text).unwrap();
            let lock = PodLock::acquire(dir.path(), "s").unwrap();
            assert!(lock.earlier.is_none(), "{text:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let lock = PodLock::acquire(dir.path(), "s").unwrap();
        lock.record(&TermRecord {
            lease_uid: "a-much-longer-lease-uid".into(),
            term: 1234,
        })
        .unwrap();
        lock.record(&TermRecord {
            lease_uid: "u".into(),
            term: 5,
        })
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("s.oracle-lock")).unwrap(),
            "5 u\n",
            "rewritten whole, nothing of the longer record left"
        );
    }
}
