//! The kubeflake operator: reconciles `IdSequence`s and hands worker slots to pods through
//! slot Leases (docs/safety.md rules 1, 9, 10).
//!
//! Where things are:
//!
//! | To change | Look in |
//! |---|---|
//! | what a reconcile pass does, in order | [`controller`] (`controller/mod.rs`: validate -> finalizer -> mode -> status) |
//! | spec validation, `InvalidSpec` | `controller/validate.rs` |
//! | slot reclaim and assignment (which slot, when) | `controller/snowflake/plan.rs` (pure; rule 9) |
//! | silence (a holder that stopped renewing) | `controller/silence.rs` |
//! | the slot-Lease writes, the direct pod read | `controller/snowflake/apply.rs` |
//! | Events of a pass | `controller/snowflake/events.rs` |
//! | deletion (finalizer, rule 10) | `controller/snowflake/mod.rs` `tear_down`, `controller/finalizer.rs` |
//! | Segment mode (the counter Lease) | `controller/segment/` |
//! | add a status condition or reason | `crds/src/conditions.rs` (types, reasons, part of the API), then the mode's builder (`snowflake/status.rs`, `segment/counter.rs`) |
//! | how the status is written | `controller/update_status.rs` (server-side apply, only when changed) |
//! | controller errors and their metric label | `controller/error.rs` |
//! | watches, leader election, readiness wiring | `run.rs` |
//! | how the process stops (SIGTERM, drain) | `main.rs` creates the one token, `kubeflake_runtime::shutdown`; change the mechanism there |
//! | what the caches keep of pods and leases, which changes wake the controller | [`watches`] |
//! | the caches' index by sequence (what a pass reads) | [`index`] |
//! | metrics, `/healthz`, `/readyz` | [`metrics`], [`http`] (a pass's own CPU: `kubeflake_operator_pass_cpu_seconds`, measured in `controller/snowflake/mod.rs`) |
//! | an alert on these metrics | `charts/kubeflake/files/alerts.yaml` (the only list), its test in `charts/kubeflake/tests/alerts_test.yaml`, its runbook in `docs/alerts.md` ("Adding an alert") |
//! | the sidecar-injecting webhook | [`inject`] (pure), [`webhook`] (HTTPS), [`certs`] |
//! | no slot or claim without the Lease policy (fail closed, rule 14) | [`lease_policy_guard`] (checked by name; consulted in `controller/mod.rs`) |
//! | the NetworkPolicy of each sequence (sidecar ports) | `controller/network_policy.rs`; its flags: [`network_policies`] |
//! | the sidecars' RoleBindings | [`rbac`] (`rbac/mod.rs`: what they grant, the plan; `rbac/keep.rs`: watches and writes) |
//! | one ID space across clusters: the hub client, the membership task (issue 55) | [`hub`] |
//!
//! Tests of the code that writes to the API server run against a scripted fake API server
//! (`kubeflake_runtime::fake_api`, `runtime/src/fake_api.rs`, shared with the sidecar's
//! tests) in `controller/tests.rs` and `rbac/tests.rs`.
//!
//! Correctness never depends on being the only operator: every write is a compare-and-swap.

pub mod certs;
pub mod controller;
pub mod http;
pub mod hub;
pub mod index;
pub mod inject;
pub mod lease_policy_guard;
pub mod metrics;
pub mod network_policies;
pub mod rbac;
pub mod watches;
pub mod webhook;

mod run;

pub use run::run;

use std::net::SocketAddr;
use std::time::Duration;

/// How the operator runs.
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    /// Watch only this namespace (default: all).
    pub namespace: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// This replica's name in Events and in the leader-election Lease (the pod name).
    pub instance: String,
    /// Namespace of the leader-election Lease; `None` runs without election.
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease ([`LEADER_LEASE`] unless set). The chart creates
    /// it as part of the release, so `helm uninstall` removes it; when absent the
    /// operator creates it.
    pub leader_lease: String,
    /// The injection webhook; `None` serves none.
    pub webhook: Option<WebhookConfig>,
    /// The ClusterRole bound for sidecars in each namespace with IdSequences; `None`
    /// leaves sidecar RBAC to the cluster's administrator.
    pub sidecar_cluster_role: Option<String>,
    /// How long after the shutdown signal the webhook keeps being served (and `/readyz`
    /// reports not ready), so that the API server, which may still hold this replica's
    /// endpoint, is answered rather than refused. Zero, or no webhook: exit at once.
    pub shutdown_drain: Duration,
    /// The Lease policy and binding without which no slot or claim is handed out
    /// ([`lease_policy_guard`]); `None` only with `--unsafe-without-lease-policy`.
    pub lease_policy: Option<lease_policy_guard::PolicyNames>,
    /// The NetworkPolicy made for each IdSequence; `None` makes none
    /// (`controller/network_policy.rs`).
    pub network_policies: Option<network_policies::Config>,
    /// The sidecars' FlowSchema whose namespaces the operator keeps to those that have an
    /// IdSequence (`controller/flow_schema.rs`); `None` leaves it alone.
    pub sidecar_flow_schema: Option<String>,
    /// The task keeping each `IdSpaceMembership` in touch with its hub ([`hub`]); `None`
    /// (no namespace for the hub Secrets) runs none.
    pub id_spaces: Option<hub::task::Config>,
}

/// Where the webhook listens, what it injects, and where its certificate comes from.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub addr: SocketAddr,
    pub template: inject::SidecarTemplate,
    pub certs: CertSource,
}

/// The webhook certificate's source.
#[derive(Debug, Clone)]
pub enum CertSource {
    /// The operator's own CA and certificate in a Secret (see [`certs`]).
    SelfManaged(certs::SelfManaged),
    /// `tls.crt` and `tls.key` in a directory kept by cert-manager.
    Dir(std::path::PathBuf),
}

/// Default name of the leader-election Lease.
pub const LEADER_LEASE: &str = "kubeflake-operator-leader";
