//! A client for the hub, made from the kubeconfig an `IdSpaceMembership`'s `hubSecret`
//! names (docs/design/2026-11-29-multicluster.md, "How a member authenticates"): the
//! Secret is in the operator's own namespace, readable only by the operator, under the key
//! [`KUBECONFIG_KEY`] (what `kubectl kubeflake hub add-member` prints).
//!
//! The kubeconfig must carry everything inline (a server, its CA data and a token or a
//! client certificate): a path to a file or an exec or auth-provider plugin would make the
//! operator read files or run programs named by whoever can write that Secret, so they are
//! refused with what to put instead. Every call to the hub is bounded ([`CALL_TIMEOUT`],
//! [`bounded`]); a missing or malformed Secret and an unreachable hub are errors that name
//! the Secret or the server and say what to do.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The Secret key holding the hub kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// The longest any one call to the hub (or the read of the Secret) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the hub cannot be reached. The member keeps issuing from its copy meanwhile.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(
        "hub Secret {namespace}/{name} does not exist: create it in the operator's namespace \
         with the kubeconfig `kubectl kubeflake hub add-member` printed, under the key \
         {KUBECONFIG_KEY} (or fix the IdSpaceMembership's hubSecret)"
    )]
    SecretMissing { namespace: String, name: String },
    #[error(
        "cannot read hub Secret {namespace}/{name}: {reason}; the operator's ServiceAccount \
         needs get on it (with the chart: list it in idSpace.hubSecrets)"
    )]
    SecretUnreadable {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error(
        "hub Secret {namespace}/{name} has no key {KUBECONFIG_KEY}: store the kubeconfig \
         `kubectl kubeflake hub add-member` printed under that key"
    )]
    NoKubeconfig { namespace: String, name: String },
    #[error(
        "hub Secret {namespace}/{name}: the kubeconfig under {KUBECONFIG_KEY} cannot be used: \
         {reason}"
    )]
    Malformed {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error(
        "the hub at {server} did not answer {what} within {} s: the member keeps issuing \
         up to the bounds it holds; check the hub is up and reachable from this cluster",
        CALL_TIMEOUT.as_secs()
    )]
    Timeout { server: String, what: &'static str },
    #[error(
        "the hub at {server} refused or failed {what}: {reason}; the member keeps issuing \
         up to the bounds it holds"
    )]
    Call {
        server: String,
        what: &'static str,
        reason: String,
        /// The HTTP status of the refusal, if the hub answered.
        code: Option<u16>,
    },
}

impl HubError {
    /// The hub refused a compare-and-swap: someone wrote the object since it was read.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            HubError::Call {
                code: Some(409),
                ..
            }
        )
    }
}

/// A client of the hub, and the server it talks to (for messages).
#[derive(Clone)]
pub struct Hub {
    pub client: Client,
    pub server: String,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("server", &self.server).finish()
    }
}

/// Reads the Secret `namespace/name` from the member's own API server and makes the hub's
/// client from it.
pub async fn connect(local: &Client, namespace: &str, name: &str) -> Result<Hub, HubError> {
    let unreadable = |reason: String| HubError::SecretUnreadable {
        namespace: namespace.to_string(),
        name: name.to_string(),
        reason,
    };
    let secrets: Api<Secret> = Api::namespaced(local.clone(), namespace);
    let secret = tokio::time::timeout(CALL_TIMEOUT, secrets.get_opt(name))
        .await
        .map_err(|_| unreadable(format!("no answer within {} s", CALL_TIMEOUT.as_secs())))?
        .map_err(|e| unreadable(e.to_string()))?
        .ok_or_else(|| HubError::SecretMissing {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .map(|b| b.0.clone())
        .ok_or_else(|| HubError::NoKubeconfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    let malformed = |reason: String| HubError::Malformed {
        namespace: namespace.to_string(),
        name: name.to_string(),
        reason,
    };
    let text = String::from_utf8(bytes).map_err(|_| malformed("it is not UTF-8 text".into()))?;
    let (config, server) = hub_config(&text).await.map_err(malformed)?;
    let client = Client::try_from(config).map_err(|e| malformed(e.to_string()))?;
    Ok(Hub { client, server })
}

/// The client configuration of a hub kubeconfig, with every call bounded; refuses what
/// would read a file or run a program (the error is the reason, for [`HubError::Malformed`]).
pub async fn hub_config(text: &str) -> Result<(Config, String), String> {
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| format!("not a kubeconfig: {e}"))?;
    check_inline(&kubeconfig)?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    config.connect_timeout = Some(CALL_TIMEOUT);
    config.read_timeout = Some(CALL_TIMEOUT);
    config.write_timeout = Some(CALL_TIMEOUT);
    let server = config.cluster_url.to_string();
    Ok((config, server))
}

/// Refuses every field that names a file or a program: the Secret's writer must not
/// choose what the operator reads or runs.
fn check_inline(kubeconfig: &Kubeconfig) -> Result<(), String> {
    let inline = "put the credentials inline (token, client-certificate-data, \
                  certificate-authority-data), as `kubectl kubeflake hub add-member` prints them";
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let refused = [
            (user.exec.is_some(), "exec"),
            (user.auth_provider.is_some(), "auth-provider"),
            (user.token_file.is_some(), "tokenFile"),
            (user.client_certificate.is_some(), "client-certificate"),
            (user.client_key.is_some(), "client-key"),
        ];
        if let Some((_, field)) = refused.iter().find(|(set, _)| *set) {
            return Err(format!(
                "user {} sets {field}, which reads a file or runs a program: {inline}",
                named.name
            ));
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "cluster {} sets certificate-authority, a file: {inline}",
                named.name
            ));
        }
    }
    Ok(())
}

/// Runs one call to the hub within [`CALL_TIMEOUT`], naming the server and the call when
/// it fails.
pub async fn bounded<T>(
    hub: &Hub,
    what: &'static str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, HubError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Err(_) => Err(HubError::Timeout {
            server: hub.server.clone(),
            what,
        }),
        Ok(Err(e)) => Err(HubError::Call {
            server: hub.server.clone(),
            what,
            reason: e.to_string(),
            code: kubeflake_runtime::kube_error::status_code(&e),
        }),
        Ok(Ok(value)) => Ok(value),
    }
}
