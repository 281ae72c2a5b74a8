//! The webhook certificate from a directory (`--webhook-cert-dir`, cert-manager's mounted
//! Secret): `tls.crt` and `tls.key`, re-read when they change. Change how the pair is read
//! here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{CertError, ServingCert};

/// Serves `tls.crt`/`tls.key` from `dir` (cert-manager's mounted Secret), re-reading them
/// every 30 seconds so a renewal is picked up.
pub async fn keep_from_dir(dir: PathBuf, serving: Arc<ServingCert>) {
    let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
    loop {
        match read_dir_pair(&dir) {
            Ok(pair) if last.as_ref() != Some(&pair) => {
                match serving.load_pem(&pair.0, &pair.1, &dir.display().to_string()) {
                    Ok(()) => {
                        tracing::info!(dir = %dir.display(), "webhook certificate loaded");
                        last = Some(pair);
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

fn read_dir_pair(dir: &std::path::Path) -> Result<(Vec<u8>, Vec<u8>), CertError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| CertError::Read { path, source })
    };
    Ok((read("tls.crt")?, read("tls.key")?))
}
