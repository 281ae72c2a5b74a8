//! What every long-running kubeflake binary (the operator and the sidecar) runs on, so
//! it is written once and behaves the same everywhere:
//!
//! - [`log`]: structured logs (text or JSON) filtered by `RUST_LOG`.
//! - [`shutdown`]: the process's one shutdown: SIGTERM/SIGINT (handlers installed at
//!   once) fan out to every task as a cloneable token; `drain` waits for tasks, bounded.
//!   Change how a binary stops here, not in the binary.
//! - [`clock`]: injectable clocks and the one wall-clock step check (wall against
//!   monotonic since a sample), used by the sidecar's step detector and skew gate.
//! - [`cpu`]: the calling thread's CPU time, to measure work on a busy machine.
//! - [`serve`]: the one HTTP/1 serve loop: a connection cap per listener, small header
//!   buffers, header, idle and body timeouts, accept back-off, graceful drain.
//! - [`limits`]: the process's open-file limit, raised to its hard limit at start.
//! - [`reply`]: JSON and text replies, and the JSON error body every endpoint uses.
//! - [`metrics`]: registering Prometheus metrics and rendering them.
//! - [`kube_error`]: what a Kubernetes API error means for the caller (conflict, gone).
//! - [`unix_socket`]: binding a Unix domain socket (stale files replaced, live ones refused).
//! - [`backoff`]: how long a failed watch waits before it tries again.
//! - [`watch`]: following one named object with a watch (quorum lists, that back-off).
//! - `fake_api` (cargo feature `fake-api`, for the binaries' unit tests): a fake
//!   Kubernetes API server behind a real `kube::Client`, scripted or answered by a closure.
//!
//! Nothing here knows about IDs, slots or sequences: dependencies point from the
//! binaries to this crate, never back.

pub mod backoff;
pub mod clock;
pub mod cpu;
#[cfg(feature = "fake-api")]
pub mod fake_api;
pub mod kube_error;
pub mod limits;
pub mod log;
pub mod metrics;
pub mod reply;
pub mod serve;
pub mod shutdown;
pub mod unix_socket;
pub mod watch;
