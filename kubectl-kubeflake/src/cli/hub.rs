//! The flags of `hub ...`: every command names the space (its IdSpace's name) and finds
//! the hub as the other commands find their cluster (`--kubeconfig`, `--context`, `-n` the
//! space's namespace on the hub).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::ClusterArgs;
use crate::error::EXIT_CODES_HELP;

/// Clock skew allowed for by `hub recover` unless `--skew-seconds` says otherwise.
pub const DEFAULT_SKEW_SECS: u64 = 60;

#[derive(Debug, Args)]
pub struct HubArgs {
    #[command(subcommand)]
    pub command: HubCommand,
}

#[derive(Debug, Subcommand)]
pub enum HubCommand {
    /// Each member of an ID space: name, cluster ID, generation, blocks held, nearest bound.
    #[command(after_help = EXIT_CODES_HELP)]
    Members(SpaceArgs),
    /// Each block of an ID space: its worker range, owner, floor and bound, lapsed or not.
    #[command(after_help = EXIT_CODES_HELP)]
    Blocks(BlocksArgs),
    /// Remove a member and hand back every block it holds, each with its floor raised to
    /// its bound (no ID can repeat, even while the member still runs; a Segment member holds
    /// none, and gives up its ranges if it still runs).
    #[command(after_help = EXIT_CODES_HELP)]
    Forget(ForgetArgs),
    /// Make the space on the hub: its namespace, IdSpace, the hub admission policy and
    /// binding, and the Role members are bound to (idempotent).
    #[command(after_help = EXIT_CODES_HELP)]
    Init(InitArgs),
    /// A member's ServiceAccount, RoleBinding and token on the hub; prints the Secret
    /// manifest (a kubeconfig) to apply in the member cluster.
    #[command(after_help = EXIT_CODES_HELP)]
    AddMember(AddMemberArgs),
    /// In a member cluster: the IdSpaceMembership that makes kubeflake's operator join a
    /// sequence to the space (after `add-member`'s Secret is applied there).
    #[command(after_help = EXIT_CODES_HELP)]
    Join(JoinArgs),
    /// After the hub's IdSpace was restored from a backup: free every block with its floor
    /// above any bound a member can hold (a Segment space: raise its counter above every
    /// range the member clusters named hold); memberships are kept.
    #[command(after_help = EXIT_CODES_HELP)]
    Recover(RecoverArgs),
}

/// The space, and where the hub is.
#[derive(Debug, Args)]
pub struct SpaceArgs {
    /// The IdSpace's name (in the namespace given by -n on the hub).
    pub space: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct BlocksArgs {
    #[command(flatten)]
    pub space: SpaceArgs,
    /// Also list blocks that were never used (they are not in the registry yet).
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub space: SpaceArgs,
    /// The member to forget: its name (or its cluster ID).
    pub member: String,
    /// Show what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub space: SpaceArgs,
    /// How far members' clocks may run behind this machine's, in seconds: added to every
    /// new floor.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_SKEW_SECS)]
    pub skew_seconds: u64,
    /// Segment spaces: a member cluster, as a context of the hub's kubeconfig; its
    /// memberships' counters bound the hub's counter (repeat for each member cluster).
    #[arg(long, value_name = "NAME")]
    pub member_context: Vec<String>,
    /// Segment spaces: a member cluster, as a kubeconfig file (its current context); repeat
    /// for each member cluster.
    #[arg(long, value_name = "PATH")]
    pub member_kubeconfig: Vec<PathBuf>,
    /// Segment spaces: also raise the counter above this value (the highest value your data
    /// holds, for a member that left after the backup).
    #[arg(long, value_name = "VALUE")]
    pub above: Option<u64>,
    /// Show what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Token lifetime `hub add-member` asks for unless `--token-duration-hours` says otherwise
/// (one year; the API server may cap it).
pub const DEFAULT_TOKEN_HOURS: i64 = 8760;

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub space: SpaceArgs,
    /// The IdSequence whose layout, epoch, time unit and mode the space shares, as
    /// NAMESPACE/NAME, read through the same kubeconfig and context (default: the
    /// IdSequence defaults).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub from_sequence: Option<String>,
    /// Worker IDs per block: a power of two, at most 2^workerBits.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub block_slots: i64,
    /// How long a member keeps issuing without the hub (60 s to 30 days).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 3600,
        allow_negative_numbers = true
    )]
    pub tolerance_seconds: i64,
    /// How often members renew their claims (10 s to half the tolerance).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 300,
        allow_negative_numbers = true
    )]
    pub renew_every_seconds: i64,
}

#[derive(Debug, Args)]
pub struct AddMemberArgs {
    #[command(flatten)]
    pub space: SpaceArgs,
    /// The member's name (a DNS label such as prod-eu): its ServiceAccount on the hub is
    /// member-<name>, and its IdSpaceMembership must carry the same memberName.
    pub member: String,
    /// The hub's address as members reach it (default: the server of the kubeconfig used).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The namespace of kubeflake's operator in the member cluster, where the Secret goes.
    #[arg(long, value_name = "NAMESPACE", default_value = "kubeflake-system")]
    pub member_namespace: String,
    /// How long the token lasts, in hours (the API server may cap it; run the command again
    /// to rotate it).
    #[arg(long, value_name = "HOURS", default_value_t = DEFAULT_TOKEN_HOURS)]
    pub token_duration_hours: i64,
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The IdSpace's name on the hub.
    pub space: String,
    /// This cluster's member name (the one given to `hub add-member`).
    pub member: String,
    /// The IdSequence to join (in the namespace given by -n in this, the member, cluster).
    #[arg(long, value_name = "NAME")]
    pub sequence: String,
    /// The space's namespace on the hub.
    #[arg(long, value_name = "NAMESPACE")]
    pub space_namespace: String,
    /// The Secret holding the hub kubeconfig, in the operator's namespace (default
    /// kubeflake-hub-<space>, as `hub add-member` prints it).
    #[arg(long, value_name = "NAME")]
    pub hub_secret: Option<String>,
    /// The member cluster: -n is the sequence's namespace.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}
