//! A hub for the test node's cluster (docs/design/2026-11-29-multicluster.md, plan step 4's
//! real-node test and start-up benchmark): a second control plane, started once per test
//! binary beside the node's, holds the IdSpace. The chart's operator runs in a pod on the
//! node, and a pod has no route to this machine's loopback, where the second control plane
//! listens: it reaches the hub through a [`Forwarder`] on the node's bridge address (the
//! hub's serving certificate names that address, as every e2e control plane's does). No
//! traffic leaves the machine, and the node's network rules stay as they are: a pod's
//! packets to the bridge address are the host's own input, as its API server calls are.

use std::net::IpAddr;
use std::sync::OnceLock;

use anyhow::Result;
use kubeflake_crds::id_space::IdSpaceSpec;
use kubeflake_e2e::addresses::BRIDGE_IP;
use kubeflake_e2e::{Cluster, TestNamespace};

use super::forwarder::Forwarder;
use super::{Hub, install_crds, secret};

/// The hub Secret's name in the member's release namespace (listed in the chart's
/// `idSpace.hubSecrets`).
pub const HUB_SECRET: &str = "kubeflake-hub-orders";

/// The chart value that lets the operator read [`HUB_SECRET`], as `helm --set` takes it.
pub fn hub_secrets_value() -> String {
    format!("idSpace.hubSecrets={{{HUB_SECRET}}}")
}

/// The hub's control plane, started on first use (blocking; start it on a thread beside
/// the node's to overlap the two) and stopped by the exit hook, as the shared one is.
pub fn hub_cluster() -> Result<&'static Cluster> {
    static HUB: OnceLock<Result<Cluster, String>> = OnceLock::new();
    Cluster::started_once(&HUB, "the hub")
}

/// The hub (its control plane, namespace and IdSpace) and the forwarder on the node's
/// bridge through which the node's operator pods reach it.
pub struct NodeHub {
    pub cluster: &'static Cluster,
    pub hub: Hub,
    pub forwarder: Forwarder,
}

impl NodeHub {
    /// The hub's CRDs, its namespace with the IdSpace `spec` and the forwarder to its API
    /// server on the bridge address (the node must be up: the bridge is its).
    pub async fn start(spec: IdSpaceSpec) -> Result<NodeHub> {
        let cluster = hub_cluster()?;
        install_crds(cluster).await?;
        let hub = Hub::create(cluster, "hub", spec).await?;
        let forwarder = Forwarder::start_on(IpAddr::V4(BRIDGE_IP), cluster.server()).await?;
        Ok(NodeHub {
            cluster,
            hub,
            forwarder,
        })
    }

    /// Member `member`'s account on the hub, and its kubeconfig (naming the forwarder) as
    /// the Secret [`HUB_SECRET`] in `namespace` of `member_cluster` (the chart's release
    /// namespace, where its operator reads hub Secrets).
    pub async fn add_node_member(
        &self,
        member_cluster: &Cluster,
        namespace: &str,
        member: &str,
    ) -> Result<()> {
        let kubeconfig = self
            .hub
            .add_member(member, Some(&self.forwarder.server()))
            .await?;
        let ns = TestNamespace {
            name: namespace.to_owned(),
            client: member_cluster.client()?,
        };
        secret(&ns, HUB_SECRET, &kubeconfig).await
    }
}
