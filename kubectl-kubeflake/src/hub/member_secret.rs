//! What `hub add-member` prints: the Secret the member cluster applies, holding a
//! kubeconfig for the member's ServiceAccount on the hub. Its credentials are inline (a
//! token, the hub's CA), as the operator requires (exec plugins and file paths are
//! refused there): the server and CA come from the hub kubeconfig used to run the
//! command, or `--server` when members reach the hub at another address.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::config::Kubeconfig;
use serde::Serialize;
use serde_json::json;

use crate::cli::ClusterArgs;
use crate::error::CliError;
use crate::output::Report;

/// Where members reach the hub, and the CA that signs its serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubAddress {
    pub server: String,
    /// base64 of the PEM CA bundle, as `certificate-authority-data` holds it.
    pub ca_data: Option<String>,
}

/// The hub's address from the kubeconfig `args` select (`server` overrides its URL).
pub fn hub_address(args: &ClusterArgs, server: Option<&str>) -> Result<HubAddress, CliError> {
    let config = match &args.kubeconfig {
        Some(path) => Kubeconfig::read_from(path)
            .map_err(|e| CliError::Kubeconfig(format!("--kubeconfig {}: {e}", path.display()))),
        None => Kubeconfig::read().map_err(|e| CliError::Kubeconfig(e.to_string())),
    }?;
    address_in(&config, args.context.as_deref(), server)
}

/// The cluster of `context` (else the current context) in `config`.
pub fn address_in(
    config: &Kubeconfig,
    context: Option<&str>,
    server: Option<&str>,
) -> Result<HubAddress, CliError> {
    let missing = |what: String| CliError::Kubeconfig(format!("{what}; pass --context NAME"));
    let context_name = context
        .map(str::to_string)
        .or_else(|| config.current_context.clone())
        .ok_or_else(|| missing("the kubeconfig has no current context".to_string()))?;
    let cluster_name = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(|| missing(format!("context {context_name:?} is not in the kubeconfig")))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| missing(format!("cluster {cluster_name:?} is not in the kubeconfig")))?;
    let server = server
        .map(str::to_string)
        .or_else(|| cluster.server.clone())
        .ok_or_else(|| missing(format!("cluster {cluster_name:?} has no server")))?;
    let ca_data = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(data.clone()),
        (None, Some(path)) => {
            let pem = std::fs::read(path)
                .map_err(|e| CliError::Kubeconfig(format!("certificate-authority {path}: {e}")))?;
            serde_json::to_value(ByteString(pem))
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
        }
        (None, None) => None,
    };
    Ok(HubAddress { server, ca_data })
}

/// The name of the Secret in the member cluster (the design's `kubeflake-hub-<space>`).
pub fn secret_name(space: &str) -> String {
    format!("kubeflake-hub-{space}")
}

/// The Secret manifest the member cluster applies (in the operator's namespace).
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct MemberSecret(pub Secret);

/// The kubeconfig for `account` with `token`, and the Secret holding it.
pub fn member_secret(
    hub: &HubAddress,
    (space, account): (&str, &str),
    token: &str,
    member_namespace: &str,
) -> MemberSecret {
    let mut cluster = json!({ "server": hub.server });
    if let Some(ca) = &hub.ca_data {
        cluster["certificate-authority-data"] = json!(ca);
    }
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "hub", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": account}}],
        "current-context": "hub",
    });
    MemberSecret(Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(space)),
            namespace: Some(member_namespace.to_string()),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        string_data: Some(BTreeMap::from([(
            "kubeconfig".to_string(),
            kubeconfig.to_string(),
        )])),
        ..Default::default()
    })
}

impl Report for MemberSecret {
    /// The manifest in YAML, ready for `kubectl apply -f -` in the member cluster.
    fn table(&self) -> String {
        kubeflake_crds::to_yaml(&self.0).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}
