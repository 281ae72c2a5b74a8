//! The flags of `hub ...`: every command names the space (its IdSpace's name) and finds
//! the hub as the other commands find their cluster (`--kubeconfig`, `--context`, `-n` the
//! space's namespace on the hub).

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
    /// its bound (no ID can repeat, even while the member still runs).
    #[command(after_help = EXIT_CODES_HELP)]
    Forget(ForgetArgs),
    /// After the hub's IdSpace was restored from a backup: free every block with its floor
    /// above any bound a member can hold; memberships are kept.
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
    /// Show what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}
