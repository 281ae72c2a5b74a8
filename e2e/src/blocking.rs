//! Async code called from blocking startup code (the control plane and the node start
//! from plain functions, which tests call from both plain and `#[tokio::test]` code).

use std::future::Future;

/// Runs `future` to completion on a new single-threaded runtime in a helper thread, so
/// that blocking startup code works both from plain and from `#[tokio::test]` code.
pub fn run_on_private_runtime<T: Send>(future: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("cannot build a tokio runtime")
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
