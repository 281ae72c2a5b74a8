//! What the operator was told about the IdSequences' NetworkPolicies
//! (`--sequence-network-policy`, `--sequence-network-policy-probe-from`), and what it
//! remembers between passes: the foreign policies it has reported. The policies
//! themselves are made by `controller/network_policy.rs`; this module sits below the
//! controller so that its context can hold it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;

/// What the policy allows besides kubeflake's own ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Every other port of the pods from anywhere: apps keep working, and a namespace's
    /// default-deny no longer closes these pods' other ports.
    AllowOtherPorts,
    /// Only kubeflake's ports: the app's own ports stay closed unless other policies
    /// allow them.
    KubeflakePortsOnly,
}

/// How the operator makes the policies.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub mode: Mode,
    /// The sidecars' probe port (`--sidecar-probe-port`).
    pub probe_port: u16,
    /// The strict oracle's port (`kubeflake_crds::contract::DEFAULT_ORACLE_PORT`).
    pub oracle_port: u16,
    /// Who may reach the probe port; empty: anyone.
    pub probe_from: Vec<NetworkPolicyPeer>,
}

/// Why `--sequence-network-policy-probe-from` cannot be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "--sequence-network-policy-probe-from must be a JSON list of NetworkPolicyPeer objects, \
     e.g. '[{{\"namespaceSelector\":{{\"matchLabels\":{{\"kubernetes.io/metadata.name\":\"monitoring\"}}}}}}]': {0}"
)]
pub struct BadPeers(#[from] serde_json::Error);

/// Reads the probe port's peers from their flag's JSON.
pub fn parse_peers(json: &str) -> Result<Vec<NetworkPolicyPeer>, BadPeers> {
    Ok(serde_json::from_str(json)?)
}

/// The configuration and what the operator remembers: the foreign policies it reported.
pub struct SequencePolicies {
    pub config: Config,
    foreign: Mutex<BTreeSet<String>>,
}

impl SequencePolicies {
    pub fn new(config: Config) -> SequencePolicies {
        SequencePolicies {
            config,
            foreign: Mutex::new(BTreeSet::new()),
        }
    }

    /// Notes `ns/name` as foreign (`true` the first time) or as not foreign.
    pub(crate) fn note_foreign(&self, key: &str, foreign: bool) -> bool {
        let mut known = self.foreign.lock().unwrap_or_else(|p| p.into_inner());
        if foreign {
            known.insert(key.to_string())
        } else {
            known.remove(key);
            false
        }
    }
}
