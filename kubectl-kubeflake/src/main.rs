//! `kubectl-kubeflake`: the kubectl plugin for kubeflake (`kubectl kubeflake ...` once the
//! binary is on PATH).
//!
//! - [`cli`]: commands and flags; [`error`]: failures and their exit codes;
//! - [`source`]: the layout from flags, a manifest or the cluster; [`cluster`]: the client;
//! - [`decode`], [`compose`], [`plan`] ([`plan_clusters`]: `--clusters`), [`slots`]: one module per command, each building a
//!   serializable report that [`output`] renders as a table, json or yaml;
//! - [`check`]: `check` and `check --pre`, a checklist of the installation's health;
//! - [`hub`]: `hub ...`, an ID space shared by clusters, seen and steered on its hub;
//! - [`sql`]: SQL text for a sequence's layout ([`sql_name`] checks the names it writes).

mod check;
mod cli;
mod cluster;
mod complete;
mod compose;
mod decode;
mod error;
mod hub;
mod output;
mod plan;
mod plan_clusters;
mod slots;
mod source;
mod sql;
mod sql_name;

use std::io::Write;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::error::{CliError, EXIT_OK, EXIT_RUNTIME};
use crate::output::{Report, render};

fn main() {
    // Linked or copied as kubectl_complete-kubeflake, the binary answers kubectl's
    // completion requests for `kubectl kubeflake <TAB>`.
    let mut args = std::env::args();
    if args
        .next()
        .is_some_and(|argv0| complete::invoked_as_completer(&argv0))
    {
        let words: Vec<String> = args.collect();
        let code = match write_stdout(complete::answer(Cli::command(), &words).as_bytes()) {
            Ok(()) => EXIT_OK,
            Err(_) => EXIT_RUNTIME,
        };
        std::process::exit(code);
    }
    // Usage errors exit 2 here (clap's convention, which the documented codes follow).
    let cli = Cli::parse();
    if let Command::Sql(args) = &cli.command
        && let Err(e) = sql::check_flags(args, cli.output)
    {
        // The sql command's own usage line under the message, as clap's errors have.
        let mut command = Cli::command();
        command.build();
        if let Some(sql) = command.find_subcommand_mut("sql") {
            sql.error(clap::error::ErrorKind::ArgumentConflict, &e)
                .exit();
        }
        command
            .error(clap::error::ErrorKind::ArgumentConflict, e)
            .exit();
    }
    init_logging(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(EXIT_RUNTIME);
        }
    };
    let code = match runtime.block_on(run(&cli)) {
        Ok(code) => code,
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            errors.first().map_or(EXIT_RUNTIME, CliError::exit_code)
        }
    };
    std::process::exit(code);
}

/// Logs go to stderr, so they never mix with output meant for scripts.
fn init_logging(verbose: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) => EnvFilter::new(f),
        Err(_) if verbose => EnvFilter::new("kubectl_kubeflake=debug,kube=debug"),
        Err(_) => return,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn now_unix_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Runs one command; returns the exit code, or every error to report.
async fn run(cli: &Cli) -> Result<i32, Vec<CliError>> {
    let one = |e: CliError| vec![e];
    match &cli.command {
        Command::Decode(args) => {
            // Bad IDs are reported (exit 2) before the cluster is asked for the layout.
            let ids = decode::parse_ids(&args.ids, args.format)?;
            let source = source::resolve(&args.layout, &args.cluster)
                .await
                .map_err(one)?;
            let report = decode::decode(&ids, &source)?;
            print(cli, &report).map_err(one)?;
        }
        Command::Compose(args) => {
            let at = compose::parse_time(&args.time).map_err(one)?;
            let source = source::resolve(&args.layout, &args.cluster)
                .await
                .map_err(one)?;
            let report = compose::compose(at, &source)
                .map_err(one)?
                .in_form(args.format);
            print(cli, &report).map_err(one)?;
        }
        Command::Plan(args) => {
            let source = source::resolve(&args.layout, &args.cluster)
                .await
                .map_err(one)?;
            let mut report = plan::plan(&source, args.replicas, now_unix_ms());
            if let Some(n) = args.clusters {
                let (clusters, warnings) = plan_clusters::plan(&source.params, n);
                report.clusters = Some(clusters);
                report.warnings.extend(warnings);
            }
            print(cli, &report).map_err(one)?;
            warn(&report.warnings);
            if args.strict && !report.warnings.is_empty() {
                return Err(one(CliError::StrictWarnings {
                    count: report.warnings.len(),
                }));
            }
        }
        Command::Slots(args) => {
            let report = slots::fetch(args, now_unix_ms()).await.map_err(one)?;
            print(cli, &report).map_err(one)?;
            warn(&report.warnings);
        }
        Command::Check(args) => {
            let report = check::run(args, chrono::Utc::now()).await.map_err(one)?;
            print(cli, &report).map_err(one)?;
            return Ok(report.exit_code(args.strict));
        }
        Command::Sql(args) => {
            let source = source::resolve(&args.layout, &args.cluster)
                .await
                .map_err(one)?;
            let text = sql::generate(args, &source, &sql::command_line());
            write_stdout(text.as_bytes()).map_err(one)?;
        }
        Command::Hub(args) => {
            let now = u64::try_from(now_unix_ms()).unwrap_or(0);
            let text = hub::run(args, cli.output, now).await.map_err(one)?;
            write_stdout(text.as_bytes()).map_err(one)?;
        }
        Command::Completion { shell } => {
            write_stdout(completion_script(*shell).as_bytes()).map_err(one)?;
        }
    }
    Ok(EXIT_OK)
}

/// The completion script for `kubectl-kubeflake`.
///
/// clap_complete's bash script spells the state of a subcommand of a hyphenated binary two
/// ways (`kubectl__kubeflake__subcmd__plan` in the dispatch loop, but
/// `kubectl__subcmd__kubeflake__subcmd__plan` in the case arms; clap issue 6421), so no
/// subcommand flag would ever complete. Renaming the arms to the loop's spelling fixes it;
/// the cli test completes `plan --tim` through bash to prove it.
fn completion_script(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-kubeflake", &mut out);
    let script = String::from_utf8_lossy(&out).into_owned();
    match shell {
        clap_complete::Shell::Bash => {
            script.replace("kubectl__subcmd__kubeflake", "kubectl__kubeflake")
        }
        _ => script,
    }
}

fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

fn print<R: Report>(cli: &Cli, report: &R) -> Result<(), CliError> {
    write_stdout(render(cli.output, report)?.as_bytes())
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Write(e)),
        _ => Ok(()),
    }
}
