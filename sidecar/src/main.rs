//! `kubeflake-sidecar`: the command line. Parses flags, sets up logging, runs a mode.
//!
//! One piece (about 500 lines): the flags of every subcommand and the mode each one runs;
//! the modes themselves are in the library (`lib.rs` says where).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use kubeflake_crds::IdSequenceSpec;
use kubeflake_crds::contract;
use kubeflake_crds::sequence::{Mode, SegmentParams};
use kubeflake_runtime::log::LogFormat;
use kubeflake_runtime::shutdown::Shutdown;
use kubeflake_sidecar::clock::SystemClock;
use kubeflake_sidecar::cluster::{self, ClusterConfig};
use kubeflake_sidecar::http::{DEFAULT_MAX_BATCH, DEFAULT_MAX_RANGE, MAX_MAX_RANGE};
use kubeflake_sidecar::slot::PodIdentity;
use kubeflake_sidecar::standalone::{
    SegmentStandalone, SegmentStandaloneConfig, Standalone, StandaloneConfig, read_sequence_spec,
};

/// Serves 64-bit Snowflake IDs that never repeat, over HTTP on localhost.
///
/// Without a subcommand it runs standalone (no cluster needed).
#[derive(Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        global = true,
        env = contract::LOG_FORMAT_ENV
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    standalone: StandaloneArgs,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// Time-based 64-bit Snowflake IDs (the default).
    Snowflake,
    /// Dense counter values handed out in blocks, like a database SEQUENCE.
    Segment,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One worker with its fence in a local state directory: for local use and trials.
    Standalone(StandaloneArgs),
    /// In a pod: hold the worker slot the operator assigns to this pod, and serve IDs.
    Cluster(ClusterArgs),
    /// GET an http:// URL and exit 0 on a 2xx answer (1 otherwise): a health check for
    /// images without a shell, used by the chart's `helm test` pod.
    Check(CheckArgs),
    /// Wait until the sidecar at URL (its /readyz) is ready, then exit 0; exit 1 after
    /// --timeout-secs. The postStart hook 0.1.0 injected (the kubelet starts the app
    /// containers only after it returned); kept for the pods that carry it.
    #[command(name = contract::WAIT_READY_SUBCOMMAND)]
    WaitReady(WaitReadyArgs),
}

#[derive(clap::Args, Debug)]
struct WaitReadyArgs {
    /// The sidecar's readiness URL, e.g. http://127.0.0.1:7071/readyz.
    url: String,
    /// Give up after this many seconds (the kubelet then restarts the sidecar container).
    /// A pod may wait long for a free slot: the default is a day.
    #[arg(long, default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    timeout_secs: u64,
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// The URL to GET, e.g. http://kubeflake-metrics:8080/readyz.
    url: String,
    /// Also require the body to contain this text.
    #[arg(long)]
    contains: Option<String>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    timeout_secs: u64,
}

#[derive(clap::Args, Debug)]
struct ClusterArgs {
    /// Address to serve HTTP on.
    #[arg(long, default_value = "127.0.0.1:7070", env = contract::LISTEN_ENV)]
    listen: SocketAddr,
    /// Also serve the same API on a Unix socket at this path (in a volume shared with the
    /// app; a stale socket file is replaced, a live one is an error).
    #[arg(long, env = contract::LISTEN_UNIX_ENV)]
    listen_unix: Option<PathBuf>,
    /// Also serve /healthz, /readyz and /metrics (nothing else) here, for kubelet probes
    /// and Prometheus, which reach the pod IP rather than 127.0.0.1 (e.g. 0.0.0.0:7071).
    #[arg(long, env = contract::PROBE_LISTEN_ENV)]
    probe_listen: Option<SocketAddr>,
    /// The IdSequence to take part in (in the pod's namespace).
    #[arg(long, env = contract::SEQUENCE_ENV)]
    sequence: String,
    /// This pod's name (downward API: metadata.name).
    #[arg(long, env = contract::POD_NAME_ENV)]
    pod_name: String,
    /// This pod's namespace (downward API: metadata.namespace).
    #[arg(long, env = contract::POD_NAMESPACE_ENV)]
    pod_namespace: String,
    /// This pod's UID (downward API: metadata.uid): the holder identity in slot leases.
    #[arg(long, env = contract::POD_UID_ENV)]
    pod_uid: String,
    /// Directory for the pod-local fence file: an emptyDir, so it survives container
    /// restarts but not the pod. Default: /var/run/kubeflake. (`--fence-dir` and
    /// KUBEFLAKE_FENCE_DIR, its names in builds before release 0.1.0, still work.)
    #[arg(long, alias = "fence-dir", env = contract::STATE_DIR_ENV)]
    state_dir: Option<PathBuf>,
    /// Largest count accepted by GET /ids.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_batch: u64,
    /// Largest count accepted by GET /range (segment mode, not strict). A range is two
    /// numbers whatever its length; it never crosses the block the sidecar holds, so
    /// --max-block-size bounds it too.
    #[arg(long, default_value_t = DEFAULT_MAX_RANGE, value_parser = clap::value_parser!(u64).range(1..=MAX_MAX_RANGE))]
    max_range: u64,
    /// How far ahead of use the local fence is kept while IDs are asked, in milliseconds:
    /// a restarted container waits at most about this long. An idle sidecar writes none.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    local_fence_ahead_ms: u64,
    /// Seconds between lease renewals (default: a third of lease.durationSeconds). Each
    /// renewal is one API write: N pods make about N / this many writes per second.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    renew_every_secs: Option<u64>,
    /// Seconds in-flight requests may take to finish on SIGTERM.
    #[arg(long, default_value_t = 10)]
    drain_timeout_secs: u64,
    /// Largest skew between this clock and the API server's (milliseconds, measured from
    /// its Date header) at which the sidecar starts issuing or raises its lease fence.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1_000..=86_400_000))]
    max_clock_skew_ms: u64,
    /// This pod's IP (downward API: status.podIP). A strict sequence's oracle takes the
    /// requests the other sidecars forward on it (with --oracle-port); without it this
    /// sidecar forwards its strict requests but never serves as the oracle.
    #[arg(long, env = contract::POD_IP_ENV)]
    pod_ip: Option<std::net::IpAddr>,
    /// The port of the strict oracle's forwarding listener on --pod-ip.
    #[arg(long, default_value_t = contract::DEFAULT_ORACLE_PORT, env = contract::ORACLE_PORT_ENV)]
    oracle_port: u16,
    /// The file holding this pod's token for the strict oracle's audience (the webhook
    /// mounts a projected service-account token there), read each time it is shown to
    /// another sidecar of the sequence.
    #[arg(long, default_value = contract::ORACLE_TOKEN_PATH, env = contract::ORACLE_TOKEN_FILE_ENV)]
    oracle_token_file: PathBuf,
    /// Threads of the async runtime. One by default: a sidecar's work is many tiny
    /// requests, and on a busy node waking a second thread costs more than the work it
    /// takes over (docs/benchmarks.md section 8); under the chart's default CPU limit
    /// (200m) a second thread could not run in parallel anyway. More help only a strict
    /// oracle serving many sidecars from a pod with more than one CPU.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    runtime_threads: u16,
    /// TEST ONLY, breaks strict order (docs/safety.md rule 13): take the strict oracle
    /// lease over as soon as another pod holds it, without waiting for its term to lapse.
    /// The linearizability test's broken variant; never set it anywhere else.
    #[arg(long, hide = true)]
    unsafe_take_over_without_waiting: bool,
    /// Print every setting as cluster mode would use it (flags, environment, defaults and
    /// the legacy KUBEFLAKE_FENCE_DIR fallback resolved) as one JSON object on stdout and
    /// exit 0, without contacting the API server: checks the env and flags a webhook
    /// injected, without starting.
    #[arg(long)]
    print_config: bool,
}

#[derive(clap::Args, Debug)]
struct StandaloneArgs {
    /// Address to serve HTTP on.
    #[arg(long, default_value = "127.0.0.1:7070", env = contract::LISTEN_ENV)]
    listen: SocketAddr,
    /// Also serve the same API on a Unix socket at this path (a stale socket file is
    /// replaced, a live one is an error).
    #[arg(long, env = contract::LISTEN_UNIX_ENV)]
    listen_unix: Option<PathBuf>,
    /// Directory for the fence file. Default: $XDG_STATE_HOME/kubeflake or
    /// ~/.local/state/kubeflake.
    #[arg(long, env = contract::STATE_DIR_ENV)]
    state_dir: Option<PathBuf>,
    /// The worker slot, 0 to 2^workerBits - 1. Processes sharing one sequence need
    /// different worker IDs.
    #[arg(long, default_value_t = 0, env = "KUBEFLAKE_WORKER_ID")]
    worker_id: u64,
    /// An IdSequence YAML file (the same file you would kubectl apply) for the layout,
    /// epoch and time unit. Default: the IdSequence defaults (41/0/10/12 bits, 1 ms).
    #[arg(long, env = "KUBEFLAKE_SEQUENCE_FILE")]
    sequence_file: Option<PathBuf>,
    /// Largest count accepted by GET /ids.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_batch: u64,
    /// Largest count accepted by GET /range (segment mode, not strict). A range is two
    /// numbers whatever its length; it never crosses the block the sidecar holds, so
    /// --max-block-size bounds it too.
    #[arg(long, default_value_t = DEFAULT_MAX_RANGE, value_parser = clap::value_parser!(u64).range(1..=MAX_MAX_RANGE))]
    max_range: u64,
    /// How far ahead of the clock the durable fence is kept while IDs are asked, in
    /// milliseconds (an idle sidecar writes none). After a kill -9, a restart waits at
    /// most this long minus the drift limit.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    fence_ahead_ms: u64,
    /// Seconds in-flight requests may take to finish on SIGTERM.
    #[arg(long, default_value_t = 10)]
    drain_timeout_secs: u64,
    /// snowflake (time-based IDs) or segment (dense counter values claimed in blocks from
    /// a counter file in --state-dir). Default: the --sequence-file's spec.mode, else
    /// snowflake.
    #[arg(long, value_enum, env = "KUBEFLAKE_MODE")]
    mode: Option<ModeArg>,
    /// Segment mode: the first value of a new counter (default: the file's segment.start,
    /// else 1). An existing counter below it is raised; one above it is kept.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    segment_start: Option<u64>,
    /// Segment mode: values per claimed block (default: the file's segment.blockSize, else
    /// 1000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    block_size: Option<u64>,
    /// Segment mode: enables adaptive sizing up to this block size (at least --block-size).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    max_block_size: Option<u64>,
    /// Segment mode: claim the next block when this share (1-90 %) of the current one is
    /// used (default 10).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=90))]
    prefetch_percent: Option<u8>,
    /// Segment mode: a strict sequence (docs/segment.md): every request is one fsynced
    /// write of the counter file, with no blocks held in memory, so values strictly
    /// increase across every process sharing the counter file. Default: the file's
    /// segment.strict, else off.
    #[arg(long)]
    strict: bool,
}

/// The segment settings from the sequence file overridden by the flags; `None` in
/// snowflake mode. Errors name the flag to fix.
fn segment_settings(
    args: &StandaloneArgs,
    spec: &mut IdSequenceSpec,
) -> Result<Option<SegmentParams>, String> {
    if let Some(mode) = args.mode {
        spec.mode = match mode {
            ModeArg::Snowflake => Mode::Snowflake,
            ModeArg::Segment => Mode::Segment,
        };
    }
    let flags = [
        ("--segment-start", args.segment_start.is_some()),
        ("--block-size", args.block_size.is_some()),
        ("--max-block-size", args.max_block_size.is_some()),
        ("--prefetch-percent", args.prefetch_percent.is_some()),
        ("--strict", args.strict),
    ];
    if spec.mode == Mode::Snowflake {
        if let Some((flag, _)) = flags.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{flag} applies only to segment mode; add --mode segment (or mode: Segment in the --sequence-file)"
            ));
        }
        if spec.segment.is_some() {
            // A Snowflake file with a segment section is what the API server rejects too.
            return Err("--sequence-file: segment is set but mode is Snowflake; add --mode segment or set mode: Segment".into());
        }
        return Ok(None);
    }
    let mut segment = spec.segment.clone().unwrap_or_default();
    if let Some(v) = args.segment_start {
        segment.start = v as i64;
    }
    if let Some(v) = args.block_size {
        segment.block_size = v as i64;
    }
    if let Some(v) = args.max_block_size {
        segment.max_block_size = Some(v as i64);
    }
    if let Some(v) = args.prefetch_percent {
        segment.prefetch_percent = v.into();
    }
    if args.strict {
        segment.strict = true;
    }
    if segment.strict
        && let Some((flag, _)) = flags[1..4].iter().find(|(_, set)| *set)
    {
        return Err(format!(
            "{flag} has no effect with --strict (or segment.strict in the --sequence-file): a strict sequence claims no blocks, every request is one write of the counter; remove {flag}"
        ));
    }
    if let Some(max) = segment.max_block_size.filter(|m| *m < segment.block_size) {
        return Err(format!(
            "--max-block-size {max} is below --block-size {}: raise --max-block-size or lower --block-size",
            segment.block_size
        ));
    }
    spec.segment = Some(segment);
    spec.segment_params()
        .map_err(|e| format!("--sequence-file: {e}"))
}

fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("kubeflake");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/state/kubeflake"),
        None => PathBuf::from(".kubeflake-state"),
    }
}

/// The process's shutdown: SIGTERM or SIGINT (handlers installed now, before anything
/// else starts, so a stop during start-up is graceful too).
fn shutdown_on_signals() -> Shutdown {
    Shutdown::on_signals().unwrap_or_else(|e| fail(1, e))
}

/// Cluster mode's state directory: `--state-dir`/KUBEFLAKE_STATE_DIR, else the variable
/// operators before release 0.1.0 injected, else the state volume's mount path.
fn cluster_state_dir(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os(contract::LEGACY_FENCE_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(contract::STATE_DIR))
}

/// The settings cluster mode runs with: the one place flags, environment and defaults
/// become a [`ClusterConfig`], for both `run_cluster` and `--print-config`.
fn cluster_config(args: ClusterArgs) -> ClusterConfig {
    ClusterConfig {
        listen: args.listen,
        probe_listen: args.probe_listen,
        pod: PodIdentity {
            name: args.pod_name,
            namespace: args.pod_namespace,
            uid: args.pod_uid,
        },
        sequence: args.sequence,
        state_dir: cluster_state_dir(args.state_dir),
        listen_unix: args.listen_unix,
        max_batch: args.max_batch,
        max_range: args.max_range,
        local_fence_ahead: Duration::from_millis(args.local_fence_ahead_ms),
        renew_every: args.renew_every_secs.map(Duration::from_secs),
        max_clock_skew: Duration::from_millis(args.max_clock_skew_ms),
        drain: Duration::from_secs(args.drain_timeout_secs),
        oracle_listen: args.pod_ip.map(|ip| SocketAddr::new(ip, args.oracle_port)),
        oracle_token_file: args.oracle_token_file,
        unsafe_take_over_without_waiting: args.unsafe_take_over_without_waiting,
    }
}

/// `cluster --print-config`: `config` as one JSON object, keyed like the flags (durations
/// in the flags' units; an unset optional setting is `null`).
fn config_json(config: &ClusterConfig, log_format: LogFormat) -> serde_json::Value {
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    serde_json::json!({
        "listen": config.listen.to_string(),
        "listen_unix": config.listen_unix.as_deref().map(path),
        "probe_listen": config.probe_listen.map(|a| a.to_string()),
        "sequence": config.sequence,
        "pod_name": config.pod.name,
        "pod_namespace": config.pod.namespace,
        "pod_uid": config.pod.uid,
        "state_dir": path(&config.state_dir),
        "max_batch": config.max_batch,
        "max_range": config.max_range,
        "local_fence_ahead_ms": config.local_fence_ahead.as_millis() as u64,
        "renew_every_secs": config.renew_every.map(|d| d.as_secs()),
        "max_clock_skew_ms": config.max_clock_skew.as_millis() as u64,
        "drain_timeout_secs": config.drain.as_secs(),
        "oracle_listen": config.oracle_listen.map(|a| a.to_string()),
        "oracle_token_file": path(&config.oracle_token_file),
        "log_format": log_format
            .to_possible_value()
            .map(|v| v.get_name().to_string()),
    })
}

fn print_cluster_config(args: ClusterArgs, log_format: LogFormat) {
    let threads = args.runtime_threads;
    let mut config = config_json(&cluster_config(args), log_format);
    config["runtime_threads"] = threads.into();
    match serde_json::to_string_pretty(&config) {
        Ok(text) => println!("{text}"),
        Err(e) => fail(1, format!("cannot print the settings as JSON: {e}")),
    }
}

fn fail(code: i32, message: impl std::fmt::Display) -> ! {
    eprintln!("kubeflake-sidecar: error: {message}");
    std::process::exit(code);
}

async fn run_standalone(args: StandaloneArgs) {
    let shutdown = shutdown_on_signals();
    let (sequence_name, mut spec) = match &args.sequence_file {
        Some(path) => read_sequence_spec(path).unwrap_or_else(|e| fail(2, e)),
        None => ("default".to_string(), IdSequenceSpec::default()),
    };
    if let Some(segment) = segment_settings(&args, &mut spec).unwrap_or_else(|e| fail(2, e)) {
        let config = SegmentStandaloneConfig {
            listen: args.listen,
            listen_unix: args.listen_unix.clone(),
            state_dir: args.state_dir.unwrap_or_else(default_state_dir),
            sequence_name,
            segment,
            max_batch: args.max_batch,
            max_range: args.max_range,
            drain: Duration::from_secs(args.drain_timeout_secs),
        };
        let sidecar = SegmentStandalone::start(config)
            .await
            .unwrap_or_else(|e| fail(2, e));
        if let Err(e) = sidecar.run(shutdown.token()).await {
            fail(1, e);
        }
        return;
    }
    let sequence = spec.params().unwrap_or_else(|e| match &args.sequence_file {
        Some(path) => fail(2, format!("--sequence-file {}: {e}", path.display())),
        None => fail(2, e),
    });
    let config = StandaloneConfig {
        listen: args.listen,
        listen_unix: args.listen_unix,
        state_dir: args.state_dir.unwrap_or_else(default_state_dir),
        worker_id: args.worker_id,
        sequence_name,
        sequence,
        max_batch: args.max_batch,
        fence_ahead: Duration::from_millis(args.fence_ahead_ms),
        drain: Duration::from_secs(args.drain_timeout_secs),
    };
    let sidecar = Standalone::start(config, Arc::new(SystemClock::new()))
        .await
        .unwrap_or_else(|e| fail(2, e));
    if let Err(e) = sidecar.run(shutdown.token()).await {
        fail(1, e);
    }
}

async fn run_cluster(args: ClusterArgs) {
    let shutdown = shutdown_on_signals();
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => fail(
            1,
            format!("cannot reach the Kubernetes API (set KUBECONFIG or run in a pod): {e}"),
        ),
    };
    let config = cluster_config(args);
    let clock = Arc::new(SystemClock::new());
    if let Err(e) = cluster::run(client, config, clock, shutdown.token()).await {
        fail(e.exit_code(), e);
    }
}

fn run_check(args: CheckArgs) {
    let timeout = Duration::from_secs(args.timeout_secs);
    match kubeflake_sidecar::check::check(&args.url, args.contains.as_deref(), timeout) {
        Ok(_) => println!("kubeflake-sidecar: {} is healthy", args.url),
        Err(e) => fail(1, e),
    }
}

fn run_wait_ready(args: WaitReadyArgs) {
    use kubeflake_sidecar::wait_ready::{WaitPolicy, wait_ready};
    let policy = WaitPolicy::hook(Duration::from_secs(args.timeout_secs));
    match wait_ready(&args.url, policy) {
        Ok(took) => eprintln!(
            "kubeflake-sidecar: ready after {} ms; the app containers may start",
            took.as_millis()
        ),
        Err(e) => fail(1, e),
    }
}

fn main() {
    let cli = Cli::parse();
    let command = match cli.command {
        Some(Command::Check(args)) => return run_check(args),
        Some(Command::WaitReady(args)) => return run_wait_ready(args),
        Some(Command::Cluster(args)) if args.print_config => {
            return print_cluster_config(args, cli.log_format);
        }
        Some(Command::Standalone(args)) => Run::Standalone(args),
        Some(Command::Cluster(args)) => Run::Cluster(args),
        None => Run::Standalone(cli.standalone),
    };
    kubeflake_runtime::log::init(cli.log_format);
    kubeflake_runtime::limits::raise_open_files_logged("kubeflake-sidecar");
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Run::Cluster(args) = &command {
        builder.worker_threads(usize::from(args.runtime_threads));
    }
    let runtime = builder
        .enable_all()
        .build()
        .expect("can start the tokio runtime");
    match command {
        Run::Standalone(args) => runtime.block_on(run_standalone(args)),
        Run::Cluster(args) => runtime.block_on(run_cluster(args)),
    }
}

/// The long-running modes (the ones that need a runtime and logging).
enum Run {
    Standalone(StandaloneArgs),
    Cluster(ClusterArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::collections::BTreeSet;

    #[test]
    fn runtime_threads_outside_1_to_256_is_refused_naming_the_flag() {
        let base = [
            "kubeflake-sidecar",
            contract::CLUSTER_SUBCOMMAND,
            "--sequence=s",
            "--pod-name=p",
            "--pod-namespace=n",
            "--pod-uid=u",
        ];
        for bad in ["0", "257", "many"] {
            let arg = format!("--runtime-threads={bad}");
            let err = Cli::try_parse_from(base.iter().copied().chain([arg.as_str()]))
                .expect_err(&arg)
                .to_string();
            assert!(err.contains("--runtime-threads"), "{arg}: {err}");
        }
        let ok = Cli::try_parse_from(base.iter().copied().chain(["--runtime-threads=2"]));
        assert!(ok.is_ok(), "{:?}", ok.err());
    }

    #[test]
    fn the_contract_lists_exactly_the_variables_cluster_mode_reads() {
        let cli = Cli::command();
        let cluster = cli
            .find_subcommand(contract::CLUSTER_SUBCOMMAND)
            .expect("the cluster subcommand");
        let mut read: BTreeSet<String> = cluster
            .get_arguments()
            .chain(cli.get_arguments().filter(|a| a.is_global_set()))
            .filter_map(|a| a.get_env())
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        // Read by cluster_state_dir, not by clap.
        read.insert(contract::LEGACY_FENCE_DIR_ENV.to_string());
        let listed: BTreeSet<String> = contract::SIDECAR_ENV_NAMES
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(
            read, listed,
            "crds::contract::SIDECAR_ENV_NAMES must name every variable `kubeflake-sidecar cluster` reads, and nothing else"
        );
    }
}
