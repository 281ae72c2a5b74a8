//! The shutdown signal.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Installs the SIGTERM and SIGINT handlers now and returns a future that completes on
/// either. Installing eagerly matters: a handler installed only when the future is first
/// polled leaves a window in which SIGTERM kills the process without a graceful stop.
///
/// Fails only when the process cannot install signal handlers at all (startup error).
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}
