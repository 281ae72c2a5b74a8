//! kubeflake-sidecar: serves Snowflake IDs that never repeat over localhost HTTP.
//!
//! Read `docs/safety.md` (the safety contract) before changing any module; comments cite
//! its rules by number.
//!
//! What is served follows one value, [`state::Serving`] (`Waiting(reason)`, `Snowflake`,
//! `Segment`, `Stopping`): the lifecycle code of each mode writes it, the HTTP layer,
//! readiness and metrics only read it.
//!
//! - [`state`]: the serving state, its cell (writer) and readers, the phase gauge.
//!   [`phase`]: the phase alone (add a phase there), below both `state` and `metrics`.
//! - [`http`]: the HTTP API. `http::routes` answers a request from the state (add an HTTP
//!   route there), `http::serve` is the connection loop (header-read timeout, drain; it
//!   knows no routes), `http::reply` builds JSON and text replies.
//! - [`standalone`]: one worker without a cluster; its fence is a file in `--state-dir`.
//! - [`cluster`]: the sidecar in a pod, a state machine (`Waiting -> Holding -> Waiting |
//!   Done`) that passes the fence file and the held slot by value; each state's type and
//!   steps are in one module (the table in `cluster/mod.rs`). `cluster::holder` acquires,
//!   renews, loses and releases a slot (change slot renewal or release there),
//!   `cluster::waiting` reads the sequence and waits for a slot or counter,
//!   `cluster::events` records pod Events and gates on clock skew, `cluster::config`.
//! - Shutdown: both modes stop on the runtime's token (`kubeflake_runtime::shutdown`,
//!   created once in `main.rs`); `cluster::run` drains the ID API with a bound before it
//!   hands the slot back, and closes the probe port only after that (`http::ProbeServer`).
//! - [`slot`]: every write to a slot lease (compare-and-swap, rule 1).
//! - [`fence`]: the durable fence file and the local fence of rule 6.
//! - [`renewer`]: the task that keeps a fence file ahead, owning it by value, and the one
//!   way async code writes a fence (on the blocking pool).
//! - [`generator`]: the lock-free ID generator, its fence and drift limit.
//! - [`clock`]: the runtime's clocks and wall-clock step check (`kubeflake_runtime::clock`;
//!   change step detection there), plus a test clock; [`skew`]: clock skew against the API
//!   server; [`watch`]: clock-step and readiness reporting of both modes.
//! - [`metrics`]: Prometheus metrics. Alerts on them: `charts/kubeflake/files/alerts.yaml`
//!   (the only list; `docs/alerts.md` "Adding an alert" says what else a new one touches).
//! - One room per mode: [`generator`] (Snowflake), [`segment`] (dense counter values
//!   claimed in blocks; strict sequences standalone), [`oracle`] (strict sequences in a
//!   cluster: one elected sidecar serves, the others forward to it; built on `segment`).
//!   [`source`]: which of the segment and oracle sources serves, as the HTTP layer and
//!   the lifecycle see it (above both rooms).
//! - [`peer_token`]: the tokens a strict sequence's sidecars show each other on the
//!   oracle port, checked against the API server's keys (rule 16).
//! - Unit tests of code that writes to the API server (`cluster::holder`, `segment::lease`,
//!   `slot`, `oracle::store`) run against the fake API server shared with the operator's
//!   tests, `kubeflake_runtime::fake_api` (`runtime/src/fake_api.rs`), answered by a closure.
//! - [`check`]: the `check` subcommand (an HTTP health check for images without a shell).
//! - [`wait_ready`]: the `wait-ready` subcommand, the postStart hook 0.1.0 injected to hold
//!   the app containers until the sidecar is ready (kept for the pods that carry it).

// The public surface is only what `main.rs`, the benches, the integration tests, `bench/`
// and `e2e/` use; the rest is `pub(crate)`, so the compiler flags code nothing uses.
#![warn(unreachable_pub)]

pub mod check;
pub mod clock;
pub mod cluster;
pub(crate) mod fence;
pub mod generator;
pub mod http;
pub mod metrics;
pub(crate) mod oracle;
pub(crate) mod peer_token;
pub(crate) mod phase;
pub(crate) mod renewer;
pub(crate) mod segment;
pub(crate) mod skew;
pub mod slot;
pub(crate) mod source;
pub mod standalone;
pub(crate) mod state;
pub mod wait_ready;
pub(crate) mod watch;

// The types the public errors (`StandaloneError`, `ClusterError`, `SlotError`) carry.
pub use fence::{FenceFileError, FenceIdentity};
pub use renewer::RenewerError;
pub use segment::file::FileCounterError;
