//! The command line: subcommands and flags (clap derive).
//!
//! Flags shared by several commands are grouped ([`ClusterArgs`], [`LayoutArgs`]) so that
//! every command spells them the same way. kubectl passes everything after
//! `kubectl kubeflake` through unchanged, so `-n`, `--context` and `--kubeconfig` are ours.

pub mod hub;

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use kubeflake_crds::{TextForm, TimeUnit};

use crate::error::{CHECK_EXIT_CODES_HELP, EXIT_CODES_HELP};

/// kubeflake at the terminal: decode and compose Snowflake IDs, plan layouts, inspect slots.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-kubeflake",
    version,
    after_help = EXIT_CODES_HELP,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Output format: a table for people, json or yaml for scripts (shapes documented in
    /// docs/kubectl-plugin.md).
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,

    /// Log details (Kubernetes requests) on stderr; RUST_LOG overrides the filter.
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Split IDs into time, datacenter, worker and sequence.
    #[command(after_help = EXIT_CODES_HELP)]
    Decode(DecodeArgs),
    /// The smallest and largest ID an instant can produce (bounds for range queries).
    #[command(after_help = EXIT_CODES_HELP)]
    Compose(ComposeArgs),
    /// What a layout gives: workers, IDs per second, lifetime, JavaScript safety.
    #[command(after_help = EXIT_CODES_HELP)]
    Plan(PlanArgs),
    /// Every slot of a sequence with its holder pod, node, fence and renewal, and the
    /// pods waiting for a slot.
    #[command(after_help = EXIT_CODES_HELP)]
    Slots(SlotsArgs),
    /// Is kubeflake healthy? A checklist of the CRD, the operator and its leader, the Lease
    /// policy, the webhook and its certificate, each sequence and the sidecars' versions;
    /// with --pre, whether the chart can be installed here (Kubernetes version, API kinds,
    /// your rights).
    #[command(after_help = CHECK_EXIT_CODES_HELP)]
    Check(CheckArgs),
    /// SQL functions that decode IDs and bound them by time (docs/sql.md): PostgreSQL and
    /// MySQL/MariaDB functions, or for SQLite a view and range queries over one table.
    #[command(after_help = EXIT_CODES_HELP)]
    Sql(SqlArgs),
    /// An ID space shared by clusters, on its hub: make it and its members' credentials,
    /// list its members and blocks, forget a member, recover a restored registry.
    Hub(hub::HubArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The IDs to decode, in the form --format names (decimal by default).
    #[arg(required = true, value_name = "ID", allow_negative_numbers = true)]
    pub ids: Vec<String>,
    /// The text form the IDs are given in: decimal, base32 (Crockford, any case) or base62.
    /// The output shows them in decimal.
    #[arg(long, value_name = "FORM", default_value = "decimal", value_parser = text_form())]
    pub format: TextForm,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct ComposeArgs {
    /// The instant, in RFC 3339 (2025-06-01T12:00:00Z, 2025-06-01T14:00:00+02:00) or "now".
    #[arg(long, value_name = "RFC3339")]
    pub time: String,
    /// The text form to print the smallest and largest ID in: decimal, or base32 or base62
    /// (fixed width; they sort byte by byte like the IDs, for keys stored as text).
    #[arg(long, value_name = "FORM", default_value = "decimal", value_parser = text_form())]
    pub format: TextForm,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Replicas of the workload that will take part: warns when they exceed or near (80% or
    /// more) the number of slots.
    #[arg(long, value_name = "N")]
    pub replicas: Option<u64>,
    /// Clusters that will share the layout through a hub (`hub init`): suggests the block
    /// size and the slots each cluster gets; warns when they do not fit.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub clusters: Option<u64>,
    /// Exit with code 4 when a warning is raised (warnings always go to stderr).
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct SlotsArgs {
    /// The IdSequence's name.
    pub sequence: String,
    /// Also list slots that were never used (they have no lease yet).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Before `helm install`: check the Kubernetes version, that the API kinds the chart
    /// creates are served, and that you may create them.
    #[arg(long)]
    pub pre: bool,
    /// The namespace the chart is (or will be) installed in.
    #[arg(long, value_name = "NAMESPACE", default_value = "kubeflake-system")]
    pub operator_namespace: String,
    /// Exit with code 4 when a check warns and none fails.
    #[arg(long)]
    pub strict: bool,
    /// -n NAMESPACE checks the IdSequences and pods of that namespace only (default: all
    /// namespaces).
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// A count of at least 1 (`plan --clusters`).
fn at_least_one(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number of clusters: give 1 or more"
        )),
    }
}

/// `--format`: one of [`TextForm::names`], listed in `--help`, completions and errors.
fn text_form() -> impl TypedValueParser<Value = TextForm> {
    PossibleValuesParser::new(TextForm::names()).try_map(|name| name.parse::<TextForm>())
}

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// The database: postgresql, mysql (also for MariaDB) or sqlite.
    #[arg(long, value_enum)]
    pub dialect: Dialect,
    /// Start of every function name (lowercase letters, digits, _): `kf` gives kf_time(id),
    /// kf_min_id(t), ... Use one per sequence when a database holds IDs of several.
    #[arg(long, value_name = "NAME", default_value = "kf", value_parser = crate::sql_name::prefix)]
    pub prefix: String,
    /// SQLite only (required there): the table whose IDs the view decodes and the range
    /// queries select from.
    #[arg(long, value_name = "NAME", required_if_eq("dialect", "sqlite"), value_parser = crate::sql_name::identifier)]
    pub table: Option<String>,
    /// SQLite only (required there): the ID column of --table.
    #[arg(long, value_name = "NAME", required_if_eq("dialect", "sqlite"), value_parser = crate::sql_name::identifier)]
    pub column: Option<String>,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The SQL dialects `sql` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dialect {
    /// PostgreSQL 14 or later: IMMUTABLE SQL functions.
    Postgresql,
    /// MySQL 8 or MariaDB 10.5 or later: DETERMINISTIC stored functions.
    #[value(alias = "mariadb")]
    Mysql,
    /// SQLite 3.31 or later (no stored functions): a view and range queries.
    Sqlite,
}

/// Where the cluster is: kubeconfig, context and namespace (kubectl's defaults otherwise).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Namespace of the IdSequence (default: the kubeconfig context's namespace; `check`:
    /// every namespace).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

/// Where the layout comes from: a sequence in the cluster, a manifest, or flags. Flags not
/// given take the IdSequence defaults (41/0/10/12, 1ms, 2025-01-01T00:00:00Z).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Layout (one of --sequence, -f, or the bit flags)")]
pub struct LayoutArgs {
    /// Read the layout from this IdSequence in the cluster.
    #[arg(long, value_name = "NAME", conflicts_with_all = LAYOUT_FLAGS)]
    pub sequence: Option<String>,
    /// Read the layout from an IdSequence manifest (YAML or JSON; "-" for stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with_all = LAYOUT_FLAGS, conflicts_with = "sequence")]
    pub file: Option<PathBuf>,
    /// Bits of the tick count (30-55) [default: 41]
    #[arg(long, value_name = "BITS", allow_negative_numbers = true)]
    pub timestamp_bits: Option<i32>,
    /// Bits of the datacenter ID (0-10) [default: 0]
    #[arg(long, value_name = "BITS", allow_negative_numbers = true)]
    pub datacenter_bits: Option<i32>,
    /// Bits of the worker slot (1-16) [default: 10]
    #[arg(long, value_name = "BITS", allow_negative_numbers = true)]
    pub worker_bits: Option<i32>,
    /// Bits of the per-tick counter (0-22) [default: 12]
    #[arg(long, value_name = "BITS", allow_negative_numbers = true)]
    pub sequence_bits: Option<i32>,
    /// What the four fields add up to: 63, or 53 for JavaScript-safe IDs [default: 63]
    #[arg(long, value_name = "BITS", allow_negative_numbers = true)]
    pub total_bits: Option<i32>,
    /// Length of one tick: 1ms, 10ms, 100ms or 1s [default: 1ms]
    #[arg(long, value_name = "UNIT")]
    pub time_unit: Option<TimeUnit>,
    /// Tick 0, in RFC 3339 [default: 2025-01-01T00:00:00Z]
    #[arg(long, value_name = "RFC3339")]
    pub epoch: Option<String>,
    /// The datacenter field of the sequence [default: 0]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub datacenter_id: Option<i64>,
    /// Key form: shard bits on top of each ID (1-10, taken from the total; docs/layouts.md)
    #[arg(long, value_name = "BITS", allow_negative_numbers = true)]
    pub shard_bits: Option<i32>,
    /// Key form: IDs stored with their bits reversed (docs/layouts.md)
    #[arg(long)]
    pub bit_reversed: bool,
    /// Key form: where each tick's sequence numbers start (docs/layouts.md) [default: zero]
    #[arg(long, value_name = "START", value_enum)]
    pub sequence_start: Option<SequenceStartArg>,
}

/// `--sequence-start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SequenceStartArg {
    /// Every tick starts at 0 (the classic Snowflake).
    Zero,
    /// Every tick starts at an offset derived from the tick.
    Rotating,
}

/// The flags that describe a layout directly (they conflict with --sequence and -f).
const LAYOUT_FLAGS: [&str; 11] = [
    "timestamp_bits",
    "datacenter_bits",
    "worker_bits",
    "sequence_bits",
    "total_bits",
    "time_unit",
    "epoch",
    "datacenter_id",
    "shard_bits",
    "bit_reversed",
    "sequence_start",
];

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn time_units_are_parsed_with_the_idsequence_spelling_and_others_name_the_choices() {
        for unit in TimeUnit::ALL {
            let cli =
                Cli::try_parse_from(["kubectl-kubeflake", "plan", "--time-unit", unit.as_str()])
                    .unwrap();
            let Command::Plan(args) = cli.command else {
                panic!("plan parsed as another command");
            };
            assert_eq!(args.layout.time_unit, Some(unit));
        }
        let err = Cli::try_parse_from(["kubectl-kubeflake", "plan", "--time-unit", "5ms"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("1ms, 10ms, 100ms or 1s"), "{err}");
    }

    #[test]
    fn format_takes_the_text_form_names_defaults_to_decimal_and_names_the_flag_otherwise() {
        let decode = |extra: &[&str]| {
            let args = [&["kubectl-kubeflake", "decode", "1"], extra].concat();
            Cli::try_parse_from(args).map(|cli| match cli.command {
                Command::Decode(args) => args.format,
                other => panic!("decode parsed as {other:?}"),
            })
        };
        assert_eq!(decode(&[]).unwrap(), TextForm::Decimal);
        for form in TextForm::ALL {
            assert_eq!(decode(&["--format", form.name()]).unwrap(), form);
        }
        let err = decode(&["--format", "hex"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        let message = err.to_string();
        assert!(message.contains("'--format <FORM>'"), "{message}");
        assert!(
            message.contains("[possible values: decimal, base32, base62]"),
            "{message}"
        );
        let cli = Cli::try_parse_from([
            "kubectl-kubeflake",
            "compose",
            "--time",
            "now",
            "--format",
            "base62",
        ])
        .unwrap();
        let Command::Compose(args) = cli.command else {
            panic!("compose parsed as another command");
        };
        assert_eq!(args.format, TextForm::Base62);
    }

    #[test]
    fn a_sequence_and_layout_flags_cannot_be_mixed() {
        let err = Cli::try_parse_from([
            "kubectl-kubeflake",
            "decode",
            "1",
            "--sequence",
            "orders",
            "--worker-bits",
            "8",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}
