//! `kubeflake-operator`: the command line. Parses flags, sets up logging, runs the controller.

use kubeflake_runtime::log::LogFormat;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubeflake_operator::certs::SelfManaged;
use kubeflake_operator::inject::SidecarTemplate;
use kubeflake_operator::lease_policy_guard::PolicyNames;
use kubeflake_operator::network_policies::{self as network_policy, Mode as NetworkPolicyMode};
use kubeflake_operator::{CertSource, OperatorConfig, WebhookConfig, run};

/// Reconciles kubeflake IdSequences: assigns worker slots to labelled pods through Leases.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "KUBEFLAKE_NAMESPACE")]
    namespace: Option<String>,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:8080", env = "KUBEFLAKE_METRICS_ADDR")]
    metrics_addr: SocketAddr,
    /// This replica's name, shown in Events (defaults to $POD_NAME, else the host name).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// Elect a leader through a Lease in this namespace, so that only one replica
    /// reconciles at a time (default: no election; correctness never depends on it).
    #[arg(long, env = "KUBEFLAKE_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease; used as it is when it exists (the chart creates
    /// it with the release), created otherwise.
    #[arg(long, default_value = kubeflake_operator::LEADER_LEASE, env = "KUBEFLAKE_LEADER_ELECTION_LEASE")]
    leader_election_lease: String,
    /// Log format.
    #[arg(long, value_enum, default_value = "text", env = "KUBEFLAKE_LOG_FORMAT")]
    log_format: LogFormat,
    /// Keep a RoleBinding to this ClusterRole for the service accounts of every namespace
    /// that has an IdSequence, so sidecars may renew their Leases (default: none).
    #[arg(long, env = "KUBEFLAKE_SIDECAR_CLUSTER_ROLE")]
    sidecar_cluster_role: Option<String>,
    /// Seconds to keep serving the webhook after SIGTERM (readiness turns false at once),
    /// so that the API server, which may still send admission requests to this replica
    /// until its endpoint is removed, is answered. Keep it below the pod's
    /// terminationGracePeriodSeconds.
    #[arg(long, default_value_t = 5, env = "KUBEFLAKE_SHUTDOWN_DRAIN_SECONDS")]
    shutdown_drain_seconds: u64,
    /// The ValidatingAdmissionPolicy that guards kubeflake's Leases (the chart's
    /// "<fullname>-leases"): no slot is assigned and no claimant listed while it or its
    /// binding is missing or not as the chart installs it.
    #[arg(
        long,
        default_value = "kubeflake-leases",
        env = "KUBEFLAKE_LEASE_POLICY"
    )]
    lease_policy: String,
    /// The ValidatingAdmissionPolicyBinding that puts that policy in force.
    #[arg(
        long,
        default_value = "kubeflake-leases",
        env = "KUBEFLAKE_LEASE_POLICY_BINDING"
    )]
    lease_policy_binding: String,
    /// UNSAFE: hand out slots and claims without checking that the Lease policy is in force.
    /// Without the policy any account the sidecar Role is bound to may write every kubeflake
    /// Lease of its namespace, and IDs can repeat (docs/safety.md rule 14). The chart sets it
    /// only with leasePolicy.enabled=false and leasePolicy.unsafeAssignWithoutPolicy=true.
    #[arg(long, conflicts_with_all = ["lease_policy", "lease_policy_binding"])]
    unsafe_without_lease_policy: bool,
    /// Make a NetworkPolicy per IdSequence, in its namespace, for the sidecars' ports on
    /// the pod IP (docs/install.md, "Network policies"): the strict oracle's port only from
    /// the sequence's pods, the probe port from --sequence-network-policy-probe-from, and
    /// with allow-other-ports every other port from anywhere (which also opens them where a
    /// default-deny policy closed them); kubeflake-ports-only leaves the app's ports closed
    /// unless other policies allow them. Default: no policy.
    #[arg(long, value_enum, env = "KUBEFLAKE_SEQUENCE_NETWORK_POLICY")]
    sequence_network_policy: Option<NetworkPolicyMode>,
    /// Who may reach the sidecars' probe port under those policies: a JSON list of
    /// NetworkPolicyPeer objects. Empty list: anyone.
    #[arg(long, default_value = "[]", requires = "sequence_network_policy")]
    sequence_network_policy_probe_from: String,
    /// Keep this FlowSchema (the chart's "<fullname>-sidecars") to the namespaces that have
    /// an IdSequence, so that it does not take other service accounts' Lease traffic
    /// (docs/install.md, "API Priority and Fairness"). Default: leave it alone.
    #[arg(long, env = "KUBEFLAKE_SIDECAR_FLOW_SCHEMA")]
    sidecar_flow_schema: Option<String>,
    /// Namespace of the Secrets holding the hub kubeconfigs of IdSpaceMemberships (the
    /// operator's own). Without it no membership is kept in touch with its hub.
    #[arg(long, env = "POD_NAMESPACE")]
    hub_secret_namespace: Option<String>,
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// The sidecar-injecting admission webhook.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Webhook")]
struct WebhookArgs {
    /// Serve the injection webhook over HTTPS on this address (default: no webhook).
    #[arg(long, env = "KUBEFLAKE_WEBHOOK_ADDR")]
    webhook_addr: Option<SocketAddr>,
    /// Read tls.crt and tls.key from this directory (cert-manager) instead of keeping
    /// a self-managed certificate.
    #[arg(long, env = "KUBEFLAKE_WEBHOOK_CERT_DIR")]
    webhook_cert_dir: Option<PathBuf>,
    /// Secret holding the self-managed CA and certificate.
    #[arg(
        long,
        default_value = "kubeflake-webhook-tls",
        env = "KUBEFLAKE_WEBHOOK_SECRET"
    )]
    webhook_secret: String,
    /// Namespace of that Secret (the operator's own).
    #[arg(long, env = "POD_NAMESPACE")]
    webhook_namespace: Option<String>,
    /// The webhook's Service; its DNS names go into the certificate.
    #[arg(long, default_value = "kubeflake-webhook")]
    webhook_service: String,
    /// The MutatingWebhookConfiguration whose caBundle is kept equal to the CA.
    #[arg(long, default_value = "kubeflake")]
    webhook_config: String,
    /// More names or IP addresses for the certificate (repeatable).
    #[arg(long)]
    webhook_extra_san: Vec<String>,
    /// Image of the injected sidecar.
    #[arg(long, default_value = concat!("kubeflake-sidecar:", env!("CARGO_PKG_VERSION")), env = "KUBEFLAKE_SIDECAR_IMAGE")]
    sidecar_image: String,
    /// Pull policy of the injected sidecar.
    #[arg(long, default_value = "IfNotPresent", value_parser = ["Always", "IfNotPresent", "Never"])]
    sidecar_image_pull_policy: String,
    /// Port of the ID API on 127.0.0.1 in the pod (apps get KUBEFLAKE_URL).
    #[arg(long, default_value_t = 7070, value_parser = clap::value_parser!(u16).range(1..))]
    sidecar_port: u16,
    /// Port of the sidecar's /healthz and /readyz for kubelet probes.
    #[arg(long, default_value_t = 7071, value_parser = clap::value_parser!(u16).range(1..))]
    sidecar_probe_port: u16,
    /// CPU request of the sidecar (a Kubernetes quantity; empty for none).
    #[arg(long, default_value = "20m", value_parser = quantity)]
    sidecar_cpu_request: String,
    /// Memory request of the sidecar.
    #[arg(long, default_value = "16Mi", value_parser = quantity)]
    sidecar_memory_request: String,
    /// CPU limit of the sidecar (empty for none).
    #[arg(long, default_value = "", value_parser = quantity)]
    sidecar_cpu_limit: String,
    /// Memory limit of the sidecar.
    #[arg(long, default_value = "64Mi", value_parser = quantity)]
    sidecar_memory_limit: String,
}

/// Accepts a Kubernetes quantity such as `50m`, `64Mi`, `1.5`, `1e3` (or empty), so a
/// typo is a startup error naming the flag instead of every pod being rejected later.
fn quantity(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(String::new());
    }
    const SUFFIXES: [&str; 16] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E", "",
    ];
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let exponent_ok = suffix.strip_prefix(['e', 'E']).is_some_and(|e| {
        !e.is_empty()
            && e.trim_start_matches(['+', '-'])
                .chars()
                .all(|c| c.is_ascii_digit())
    });
    let number_ok = number
        .trim_start_matches('+')
        .parse::<f64>()
        .is_ok_and(|n| n >= 0.0);
    if number_ok && (SUFFIXES.contains(&suffix) || exponent_ok) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a Kubernetes quantity (examples: 50m, 0.5, 64Mi, 1Gi)"
        ))
    }
}

impl WebhookArgs {
    fn config(self) -> Result<Option<WebhookConfig>, String> {
        let Some(addr) = self.webhook_addr else {
            return Ok(None);
        };
        let certs = match self.webhook_cert_dir {
            Some(dir) => CertSource::Dir(dir),
            None => {
                let namespace = self.webhook_namespace.ok_or(
                    "--webhook-addr without --webhook-cert-dir needs --webhook-namespace \
                     (or POD_NAMESPACE) for the certificate Secret",
                )?;
                CertSource::SelfManaged(SelfManaged {
                    dns_names: SelfManaged::service_names(
                        &self.webhook_service,
                        &namespace,
                        &self.webhook_extra_san,
                    ),
                    namespace,
                    secret: self.webhook_secret,
                    webhook_config: self.webhook_config,
                })
            }
        };
        let resources = |pairs: [(&str, String); 2]| -> BTreeMap<String, Quantity> {
            pairs
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), Quantity(v)))
                .collect()
        };
        let template = SidecarTemplate {
            image: self.sidecar_image,
            image_pull_policy: self.sidecar_image_pull_policy,
            port: self.sidecar_port,
            probe_port: self.sidecar_probe_port,
            requests: resources([
                ("cpu", self.sidecar_cpu_request),
                ("memory", self.sidecar_memory_request),
            ]),
            limits: resources([
                ("cpu", self.sidecar_cpu_limit),
                ("memory", self.sidecar_memory_limit),
            ]),
        };
        if template.port == template.probe_port {
            return Err("--sidecar-port and --sidecar-probe-port must differ".into());
        }
        Ok(Some(WebhookConfig {
            addr,
            template,
            certs,
        }))
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    kubeflake_runtime::log::init(args.log_format);
    kubeflake_runtime::limits::raise_open_files_logged("kubeflake-operator");
    // First, so that a SIGTERM during start-up is a graceful stop too.
    let shutdown = match kubeflake_runtime::shutdown::Shutdown::on_signals() {
        Ok(shutdown) => shutdown,
        Err(e) => {
            eprintln!("kubeflake-operator: error: {e}");
            std::process::exit(1);
        }
    };
    let network_policies = match args.sequence_network_policy.map(|mode| {
        network_policy::parse_peers(&args.sequence_network_policy_probe_from).map(|probe_from| {
            network_policy::Config {
                mode,
                probe_port: args.webhook.sidecar_probe_port,
                oracle_port: kubeflake_crds::contract::DEFAULT_ORACLE_PORT,
                probe_from,
            }
        })
    }) {
        None => None,
        Some(Ok(config)) => Some(config),
        Some(Err(e)) => {
            eprintln!("kubeflake-operator: error: {e}");
            std::process::exit(2);
        }
    };
    let webhook = match args.webhook.config() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("kubeflake-operator: error: {e}");
            std::process::exit(2);
        }
    };
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "kubeflake-operator: error: cannot reach the Kubernetes API (set KUBECONFIG or run in a pod): {e}"
            );
            std::process::exit(1);
        }
    };
    let instance = args.instance.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "kubeflake-operator".into())
    });
    let config = OperatorConfig {
        namespace: args.namespace.clone(),
        metrics_addr: args.metrics_addr,
        instance,
        leader_election_namespace: args.leader_election_namespace,
        leader_lease: args.leader_election_lease,
        webhook,
        sidecar_cluster_role: args.sidecar_cluster_role,
        shutdown_drain: std::time::Duration::from_secs(args.shutdown_drain_seconds),
        network_policies,
        sidecar_flow_schema: args.sidecar_flow_schema,
        id_spaces: args
            .hub_secret_namespace
            .map(|ns| kubeflake_operator::hub::task::Config::new(ns, args.namespace.clone())),
        lease_policy: (!args.unsafe_without_lease_policy).then(|| PolicyNames {
            policy: args.lease_policy,
            binding: args.lease_policy_binding,
            namespace: args.namespace.clone(),
        }),
    };
    if let Err(e) = run(client, config, shutdown.token()).await {
        eprintln!("kubeflake-operator: error: {e:#}");
        std::process::exit(1);
    }
}
