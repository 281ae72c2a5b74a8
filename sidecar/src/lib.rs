//! kubeflake-sidecar: serves Snowflake IDs that never repeat over localhost HTTP.
//!
//! - [`clock`]: injectable clocks and wall-clock step detection.
//! - [`generator`]: the lock-free ID generator, its fence and drift limit.
//! - [`fence`]: the durable fence file (standalone state, and the pod-local fence).
//! - [`http`]: the HTTP API.
//! - [`metrics`]: Prometheus metrics.
//! - [`segment`]: segment mode: dense counter values claimed in blocks.
//! - [`standalone`]: one worker without a cluster.
//! - [`slot`], [`cluster`]: holding a slot lease in a pod, and the mode built on it.
//! - [`skew`]: clock skew against the API server.
//! - [`watch`]: clock-step and readiness reporting shared by both modes.
//!
//! Read `docs/safety.md` (the safety contract) before changing any of them.

pub mod check;
pub mod clock;
pub mod cluster;
pub mod fence;
pub mod generator;
pub mod http;
pub mod metrics;
pub mod renewer;
pub mod segment;
pub mod skew;
pub mod slot;
pub mod standalone;
pub mod state;
pub mod watch;
