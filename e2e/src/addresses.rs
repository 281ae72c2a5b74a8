//! The test node's fixed names and addresses (docs/e2e-node.md), shared by the
//! certificates ([`crate::certs`] names them), the control plane ([`crate::cluster`] binds
//! the API server there) and the node itself ([`crate::node`]). Change an address here.

use std::net::Ipv4Addr;

/// The node's name (and the kubelet's user `system:node:<name>`).
pub const NODE_NAME: &str = "kubeflake-node";
/// The bridge's address: the node's InternalIP, where the API server and kubelet listen.
pub const BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The pods' range, on the bridge.
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The Services' range, routed to the bridge.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The `kubernetes` Service's address (the first of [`SERVICE_CIDR`]).
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
/// The API server's port on the bridge address.
pub const APISERVER_PORT: u16 = 6443;
/// The port of the test registry ([`crate::registry`]) on the bridge address.
pub const REGISTRY_PORT: u16 = 5000;

/// `host:port` of the test registry, as image references name it: `10.244.0.1:5000`.
pub fn registry_host() -> String {
    format!("{BRIDGE_IP}:{REGISTRY_PORT}")
}
