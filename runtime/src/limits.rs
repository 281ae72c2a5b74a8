//! The process's own resource limits: the number of open files (sockets included) a
//! server may hold.
//!
//! Every accepted connection is a file descriptor. A container's soft limit is often
//! 1,024 while its hard limit is far higher; at the soft limit `accept()` fails with
//! EMFILE and a fresh request waits in the listen backlog until some connection ends (a
//! review measured 35 s for a fresh `/id` under 2,000 idle connections). So each binary
//! raises its soft limit to the hard one at start ([`raise_open_files`]); the connection
//! caps of the serve loop ([`crate::serve::Limits`]) then keep well under it.

/// The open-file limits of the process: before and after the raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit found at start.
    pub was: u64,
    /// The soft limit now (the hard limit, when the raise worked).
    pub soft: u64,
    /// The hard limit (only root may raise it; kubeflake does not try).
    pub hard: u64,
}

/// Why the open-file limit could not be read or raised.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("cannot read the open-file limit (getrlimit RLIMIT_NOFILE): {0}")]
    Read(std::io::Error),
    #[error(
        "cannot raise the open-file soft limit from {soft} to the hard limit {hard} \
         (setrlimit RLIMIT_NOFILE): {source}; connections beyond {soft} wait in the listen \
         backlog; raise the container runtime's nofile limit"
    )]
    Raise {
        soft: u64,
        hard: u64,
        source: std::io::Error,
    },
}

/// The soft and hard RLIMIT_NOFILE of this process.
pub fn open_files() -> Result<(u64, u64), LimitError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only writes the `rlimit` it is given, which lives for the whole
    // call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc != 0 {
        return Err(LimitError::Read(std::io::Error::last_os_error()));
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Raises the soft RLIMIT_NOFILE of this process to its hard limit (no-op when it is
/// there already), and says what it got.
pub fn raise_open_files() -> Result<OpenFiles, LimitError> {
    let (was, hard) = open_files()?;
    if was >= hard {
        return Ok(OpenFiles {
            was,
            soft: was,
            hard,
        });
    }
    let limit = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: `setrlimit` only reads the `rlimit` it is given, which lives for the whole
    // call; raising the soft limit up to the hard one needs no privilege.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    if rc != 0 {
        return Err(LimitError::Raise {
            soft: was,
            hard,
            source: std::io::Error::last_os_error(),
        });
    }
    let (soft, hard) = open_files()?;
    Ok(OpenFiles { was, soft, hard })
}

/// [`raise_open_files`] at a binary's start, logged: info with the limits got, warn when
/// they could not be raised (the binary still runs; its connection caps and the accept
/// loop's eviction on EMFILE keep it answering).
pub fn raise_open_files_logged(binary: &'static str) {
    match raise_open_files() {
        Ok(files) => tracing::info!(
            binary,
            open_files_soft = files.soft,
            open_files_hard = files.hard,
            open_files_was = files.was,
            "open-file limit"
        ),
        Err(e) => tracing::warn!(binary, reason = %e, "open-file limit not raised"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
        let files = raise_open_files().expect("raising up to the hard limit needs no privilege");
        assert_eq!(files.soft, files.hard);
        assert!(files.was <= files.soft);
        assert_eq!(open_files().expect("readable"), (files.hard, files.hard));
    }
}
