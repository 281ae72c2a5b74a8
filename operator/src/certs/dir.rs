//! The webhook certificate from a directory (`--webhook-cert-dir`, cert-manager's mounted
//! Secret): `tls.crt` and `tls.key`, re-read when they change. Change how the pair is read
//! here.
//!
//! Why both files are read from one resolved directory: the kubelet writes a Secret volume
//! atomically: the files go into a new timestamped directory (`..2026_01_01_00_00_00.1`),
//! a `..data` link is swapped to point at it, and `tls.crt` and `tls.key` are links through
//! `..data`. Reading the two top-level links one after the other can straddle a swap and
//! pair the old certificate with the new key. So `..data` is resolved once and both files
//! are read from the directory it names (a directory without `..data`, files put there by
//! hand, is read as it is); if that directory is removed before both are read (the kubelet
//! deletes the old one after the swap), the read starts again from the new `..data`. The
//! reads run on the blocking pool, and [`ServingCert::load_pem`] refuses a pair whose key
//! does not match its certificate anyway.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{CertError, PairOrigin, ServingCert};

/// The kubelet's link to the current version of a Secret or ConfigMap volume.
const DATA_LINK: &str = "..data";
const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";
/// Reads of a pair whose directory vanished under them (rotations in a row) before the
/// error is reported; the keeper tries again at its next look anyway.
const READ_ATTEMPTS: u32 = 3;

/// A certificate and its key, read from one version of the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PemPair {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub origin: PairOrigin,
}

/// Serves `tls.crt`/`tls.key` from `dir` (cert-manager's mounted Secret), re-reading them
/// every 30 seconds so a renewal is picked up.
pub async fn keep_from_dir(dir: PathBuf, serving: Arc<ServingCert>) {
    let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
    loop {
        match read_pair(&dir).await {
            Ok(pair) if last.as_ref() != Some(&(pair.cert.clone(), pair.key.clone())) => {
                match serving.load_pem(&pair.cert, &pair.key, &pair.origin) {
                    Ok(()) => {
                        tracing::info!(dir = %dir.display(), cert = %pair.origin.cert, "webhook certificate loaded");
                        last = Some((pair.cert, pair.key));
                    }
                    Err(e) => tracing::warn!(error = %e, "webhook certificate not loaded"),
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "webhook certificate not readable"),
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
}

/// The directory to read the pair from: where `dir/..data` points, or `dir` itself when it
/// has no `..data`.
pub(crate) fn resolve(dir: &Path) -> Result<PathBuf, CertError> {
    let link = dir.join(DATA_LINK);
    match std::fs::read_link(&link) {
        // A relative target is relative to `dir`; `join` keeps an absolute one as it is.
        Ok(target) => Ok(dir.join(target)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(dir.to_path_buf()),
        // `..data` is a directory, not a link: read from it.
        Err(e) if e.kind() == ErrorKind::InvalidInput => Ok(link),
        Err(source) => Err(CertError::Read { path: link, source }),
    }
}

/// Reads the pair from one version of `dir`, off the async workers.
pub(crate) async fn read_pair(dir: &Path) -> Result<PemPair, CertError> {
    read_pair_with(dir, || {}).await
}

/// [`read_pair`], calling `between` after the certificate is read and before the key is
/// (tests rotate the directory there).
pub(crate) async fn read_pair_with(
    dir: &Path,
    between: impl Fn() + Send + 'static,
) -> Result<PemPair, CertError> {
    let dir = dir.to_path_buf();
    let shown = dir.clone();
    tokio::task::spawn_blocking(move || read_pair_blocking(&dir, &between))
        .await
        .map_err(|e| CertError::Read {
            path: shown,
            source: std::io::Error::other(format!("the read task failed: {e}")),
        })?
}

fn read_pair_blocking(dir: &Path, between: &dyn Fn()) -> Result<PemPair, CertError> {
    let mut attempt = 1;
    loop {
        let from = resolve(dir)?;
        match read_from(&from, between) {
            // The version resolved was removed meanwhile: a newer one is in place.
            Err(CertError::Read { source, .. })
                if source.kind() == ErrorKind::NotFound
                    && from != dir
                    && attempt < READ_ATTEMPTS =>
            {
                attempt += 1;
            }
            read => return read,
        }
    }
}

fn read_from(from: &Path, between: &dyn Fn()) -> Result<PemPair, CertError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| CertError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let (cert_path, key_path) = (from.join(CERT_FILE), from.join(KEY_FILE));
    let cert = read(&cert_path)?;
    between();
    let key = read(&key_path)?;
    Ok(PemPair {
        cert,
        key,
        origin: PairOrigin::files(&cert_path, &key_path),
    })
}
