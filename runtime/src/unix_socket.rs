//! Binding a Unix domain socket at a path: a stale socket file from a crashed run is
//! replaced, a socket another process still serves is an error, and anything that is not
//! a socket is never removed.

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Why a socket could not be bound; each message names the path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "--listen-unix {path}: the directory {dir} does not exist; mount a volume there or choose another path"
    )]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error(
        "--listen-unix {path}: another process is serving this socket; stop it or choose another path"
    )]
    Occupied { path: PathBuf },
    #[error(
        "--listen-unix {path}: the path exists and is not a socket; it is left alone: remove it or choose another path"
    )]
    NotASocket { path: PathBuf },
    #[error(
        "--listen-unix {path}: the path is longer than a Unix socket address allows (at most 107 bytes); choose a shorter path"
    )]
    TooLong { path: PathBuf },
    #[error("--listen-unix {path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The longest path a `sockaddr_un` holds (108 bytes with the terminating NUL).
const MAX_PATH_BYTES: usize = 107;

/// Binds a listening socket at `path` with permission bits `mode` (e.g. `0o666` so an
/// app container running as another user can connect; the directory decides who can
/// reach the socket at all).
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, SocketError> {
    let io = |action: &'static str| {
        move |source: std::io::Error| SocketError::Io {
            path: path.to_path_buf(),
            action,
            source,
        }
    };
    if path.as_os_str().len() > MAX_PATH_BYTES {
        return Err(SocketError::TooLong {
            path: path.to_path_buf(),
        });
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(SocketError::NoDirectory {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        });
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("reading what is at the path")(e)),
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(SocketError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(SocketError::Occupied {
                    path: path.to_path_buf(),
                });
            }
            // Nobody accepts on it: the file of a process that is gone.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "replacing a stale socket file");
                std::fs::remove_file(path).map_err(io("removing the stale socket file"))?;
            }
            Err(e) => return Err(io("checking whether the existing socket is served")(e)),
        },
    }
    let listener = UnixListener::bind(path).map_err(io("binding"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io("setting the socket's permissions"))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[tokio::test]
    async fn a_new_socket_gets_the_requested_mode() {
        let d = dir();
        let path = d.path().join("kubeflake.sock");
        let _listener = bind(&path, 0o666).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);
    }

    #[tokio::test]
    async fn a_stale_socket_file_from_a_crashed_run_is_replaced() {
        let d = dir();
        let path = d.path().join("kubeflake.sock");
        // A socket file nobody listens on any more, as a killed process leaves it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let _listener = bind(&path, 0o600).unwrap();
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    }

    #[tokio::test]
    async fn a_socket_another_process_serves_is_refused_and_left_working() {
        let d = dir();
        let path = d.path().join("kubeflake.sock");
        let _other = bind(&path, 0o600).unwrap();
        let err = bind(&path, 0o600).unwrap_err();
        assert!(matches!(err, SocketError::Occupied { .. }), "{err}");
        assert!(err.to_string().contains("another process"), "{err}");
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    }

    #[tokio::test]
    async fn a_path_that_is_not_a_socket_is_never_removed() {
        let d = dir();
        let path = d.path().join("fence");
        std::fs::write(&path, b"precious").unwrap();
        let err = bind(&path, 0o600).unwrap_err();
        assert!(matches!(err, SocketError::NotASocket { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    }

    #[tokio::test]
    async fn a_missing_directory_or_an_overlong_path_is_a_clear_error() {
        let d = dir();
        let err = bind(&d.path().join("no/such/dir/kubeflake.sock"), 0o600).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let long = d.path().join("x".repeat(200));
        let err = bind(&long, 0o600).unwrap_err();
        assert!(matches!(err, SocketError::TooLong { .. }), "{err}");
    }
}
