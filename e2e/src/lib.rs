//! End-to-end test harness for kubeflake: a real Kubernetes control plane (etcd,
//! kube-apiserver, kube-controller-manager) built from Go modules and run on 127.0.0.1.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use kubeflake_e2e::Cluster;
//! let cluster = Cluster::shared(); // one per test binary, started on first use
//! let ns = cluster.namespace("my-test").await?; // a fresh namespace + client
//! let pods = cluster.kubectl(&["get", "pods", "-n", &ns.name]).await?.ok()?;
//! # Ok(()) }
//! ```
//!
//! Modules, in the order things happen:
//! - [`addresses`]: the test node's fixed names and addresses (change an address there).
//! - [`bin_dir`]: builds or locates the binaries (`e2e/controlplane/build.sh`).
//! - [`certs`]: a fresh CA, serving and client certificates, service-account keys.
//! - [`kubeconfig`]: kubeconfig files for the admin, the controller manager and tokens.
//! - [`process`]: child processes that cannot outlive the test binary, and what a finished
//!   command printed ([`CommandOutput`]).
//! - [`cluster`]: starts, waits for, hands out and stops the control plane;
//!   [`control_plane`]: each process's flags and readiness wait (change a flag there);
//!   [`blocking`]: runs async code from that blocking startup code.
//! - [`node`]: a real node beside it (kubelet, containerd, kube-proxy, CoreDNS), on request.
//! - [`release`]: the previous release (`releases.txt`), its images and its chart.
//! - [`registry`]: an OCI registry on the node's bridge; [`signing`]: cosign, verifying the
//!   release's image signatures in it.
//! - [`prometheus`]: a real Prometheus on loopback with the chart's rules, and its HTTP API;
//!   [`exposition`]: reading a `/metrics` answer; [`dashboard`]: the chart's dashboard
//!   queries, each waited for until it returns a series.
//! - [`linearizability`]: a history recorder and two checkers (its own, porcupine's) for
//!   values that must increase in real-time order across every sidecar.
//!
//! See `e2e/README.md` for building the binaries and running the tests.

pub mod addresses;
pub mod bin_dir;
pub mod blocking;
pub mod certs;
pub mod cluster;
pub mod control_plane;
pub mod dashboard;
pub mod exposition;
pub mod kubeconfig;
pub mod linearizability;
pub mod node;
pub mod process;
pub mod prometheus;
pub mod registry;
pub mod release;
pub mod signing;

pub use cluster::snapshot::EtcdSnapshot;
pub use cluster::{Cluster, ClusterOptions, TestNamespace};
pub use process::CommandOutput;
