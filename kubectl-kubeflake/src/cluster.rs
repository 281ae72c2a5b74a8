//! Talking to the cluster: a client from the kubeconfig (as kubectl would pick it), and
//! reading an IdSequence with a clear "not found" (and a clear "this is a Segment
//! sequence" where a Snowflake layout is needed).
//!
//! Timeouts are short because a person is waiting at the terminal: an unreachable API
//! server should be reported in seconds, not after kube's default of several minutes.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use kubeflake_crds::IdSequence;
use kubeflake_crds::sequence::{Mode, SequenceParams};

use crate::cli::ClusterArgs;
use crate::error::CliError;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A client and the namespace to use (`-n`, else the context's namespace).
pub async fn connect(args: &ClusterArgs) -> Result<(Client, String), CliError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        cluster: None,
        user: None,
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| {
                CliError::Kubeconfig(format!("--kubeconfig {}: {e}", path.display()))
            })?;
            Config::from_custom_kubeconfig(file, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    };
    let mut config = config.map_err(|e| CliError::Kubeconfig(e.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    tracing::debug!(server = %config.cluster_url, %namespace, "connecting");
    let client = Client::try_from(config).map_err(|e| CliError::Kubeconfig(e.to_string()))?;
    Ok((client, namespace))
}

/// Reads an IdSequence; a missing one is [`CliError::SequenceNotFound`] (exit code 3).
pub async fn get_sequence(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<IdSequence, CliError> {
    let api: Api<IdSequence> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(seq)) => Ok(seq),
        Ok(None) => Err(CliError::SequenceNotFound {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }),
        // Without the CRD installed the resource itself is unknown: for the user that is
        // the same answer, the sequence is not there.
        Err(kube::Error::Api(status)) if status.is_not_found() => Err(CliError::SequenceNotFound {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }),
        Err(source) => Err(CliError::Api {
            what: format!("read idsequence {name} in namespace {namespace}"),
            source,
        }),
    }
}

/// The Snowflake parameters of a sequence read from the cluster. A Segment sequence is
/// refused (exit 2): its values are counter values with no fields to decode.
pub fn snowflake_params(
    seq: &IdSequence,
    namespace: &str,
    name: &str,
) -> Result<SequenceParams, CliError> {
    if seq.spec.mode == Mode::Segment {
        return Err(CliError::SegmentSequence {
            source_name: format!("idsequence {namespace}/{name}"),
            name: format!("{name} -n {namespace}"),
        });
    }
    seq.spec
        .params()
        .map_err(|reason| CliError::BadSequenceInCluster {
            name: format!("{namespace}/{name}"),
            reason,
        })
}
