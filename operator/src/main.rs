//! `kubeflake-operator`: the command line. Parses flags, sets up logging, runs the controller.

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};
use kubeflake_operator::{OperatorConfig, run};

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
    /// Log format.
    #[arg(long, value_enum, default_value = "text", env = "KUBEFLAKE_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("can install a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("can install a SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: finishing in-flight reconciles"),
        _ = int.recv() => tracing::info!("SIGINT: finishing in-flight reconciles"),
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    init_logging(args.log_format);
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
        namespace: args.namespace,
        metrics_addr: args.metrics_addr,
        instance,
        leader_election_namespace: args.leader_election_namespace,
    };
    if let Err(e) = run(client, config, shutdown_signal()).await {
        eprintln!("kubeflake-operator: error: {e:#}");
        std::process::exit(1);
    }
}
