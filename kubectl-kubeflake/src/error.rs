//! Every way a command can fail, each with the exit code scripts can rely on.
//!
//! Exit codes are part of the plugin's interface (documented in `--help` and
//! `docs/kubectl-plugin.md`), so they live in one place: [`CliError::exit_code`].

use kubeflake_crds::TextFormError;
use kubeflake_crds::sequence::SpecError;

/// Success.
pub const EXIT_OK: i32 = 0;
/// The cluster could not be reached or answered with an error; output could not be written.
pub const EXIT_RUNTIME: i32 = 1;
/// Bad input: a flag, an ID, a time, a layout or a file (clap uses 2 for usage errors too).
pub const EXIT_USAGE: i32 = 2;
/// The named IdSequence (or IdSpace, or member of it) does not exist.
pub const EXIT_NOT_FOUND: i32 = 3;
/// `plan --strict` raised at least one warning.
pub const EXIT_WARNINGS: i32 = 4;

/// What `--help` says about exit codes.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success (warnings, if any, went to stderr)
  1  runtime error: the cluster could not be reached or refused a request
  2  bad input: unknown flag, bad ID, bad time, a layout whose bits do not add up, bad file,
     decode/compose/plan of a Segment sequence
  3  the IdSequence was not found in the namespace; hub: the IdSpace or the member was not
     found
  4  plan --strict: a warning was raised";

/// What `check --help` says about exit codes.
pub const CHECK_EXIT_CODES_HELP: &str = "\
Exit codes:
  0  every check passed (warnings, if any, are in the checklist)
  1  a check failed, or the cluster could not be reached
  2  bad usage: unknown or bad flag
  4  --strict: a check warned and none failed";

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{text:?} is not an ID: expected a decimal number such as 250096622069874688")]
    NotAnId { text: String },
    #[error(
        "{text} is above the largest 63-bit ID, 9223372036854775807: no kubeflake ID sets bit 63"
    )]
    IdAboveLargest { text: String },
    /// An ID given in base32 or base62 (`decode --format`) that is not one.
    #[error("{0}")]
    NotATextId(#[from] TextFormError),
    #[error(
        "ID {id} does not fit the layout of {source_name}: its IDs have {total_bits} bits, so the largest is {max_id}"
    )]
    IdOutsideLayout {
        id: u64,
        source_name: String,
        total_bits: u32,
        max_id: String,
    },
    #[error("ID {id} is not an ID of {source_name}: {reason}")]
    IdNotOfSequence {
        id: u64,
        source_name: String,
        reason: String,
    },
    #[error("--time {text:?} is not an RFC 3339 time such as 2025-06-01T12:00:00Z (or \"now\")")]
    NotATime { text: String },
    #[error("{time} is before the epoch {epoch} of {source_name}: no ID carries it")]
    TimeBeforeEpoch {
        time: String,
        epoch: String,
        source_name: String,
    },
    #[error(
        "{time} is at or after {exhausts_at}, when the {bits} timestamp bits of {source_name} run out: no ID carries it"
    )]
    TimeBeyondLayout {
        time: String,
        exhausts_at: String,
        bits: u8,
        source_name: String,
    },
    #[error("invalid layout given by {source_name}: {reason}")]
    BadLayout {
        source_name: String,
        reason: SpecError,
    },
    #[error("invalid layout flags: {0}")]
    BadLayoutFlags(String),
    #[error(
        "{source_name} is a Segment sequence: its values are plain counter values with no time, \
         datacenter, worker or sequence fields, so they cannot be decoded, composed or planned \
         as Snowflake IDs; `kubectl kubeflake slots {name}` shows its counter"
    )]
    SegmentSequence { source_name: String, name: String },
    #[error("-f {path}: {reason}")]
    BadFile { path: String, reason: String },
    #[error(
        "idsequence {name} not found in namespace {namespace}; list them with `kubectl get idsequences -n {namespace}` or pass -n NAMESPACE"
    )]
    SequenceNotFound { name: String, namespace: String },
    #[error(
        "cannot load the kubeconfig: {0}; set KUBECONFIG, or pass --kubeconfig PATH and --context NAME"
    )]
    Kubeconfig(String),
    #[error(
        "cannot {what}: {source}; check that the cluster is reachable (kubectl cluster-info) and that you may read it"
    )]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("idsequence {name} in the cluster has an unusable spec: {reason}")]
    BadSequenceInCluster { name: String, reason: SpecError },
    #[error(
        "idspace {name} not found in namespace {namespace}; list them with `kubectl get idspaces -n {namespace}` (on the hub) or pass -n NAMESPACE"
    )]
    SpaceNotFound { name: String, namespace: String },
    #[error("idspace {namespace}/{name} cannot be used: {reason}; nothing was changed")]
    BadSpace {
        name: String,
        namespace: String,
        reason: kubeflake_crds::id_space::RecordError,
    },
    #[error(
        "{member:?} is not a member of idspace {space} (by name or cluster ID); its members are: {known}; `kubectl kubeflake hub members {name} -n {namespace}` lists them"
    )]
    UnknownMember {
        member: String,
        space: String,
        name: String,
        namespace: String,
        known: String,
    },
    #[error(
        "idspace {space} changed under every one of {attempts} attempts (members write it too): nothing was changed; run the command again"
    )]
    Contended { space: String, attempts: u32 },
    #[error(
        "idspace {space} exists with other parameters ({fields}); they are immutable: use these values, or another space name"
    )]
    SpaceDiffers { space: String, fields: String },
    #[error(
        "invalid space flags (--block-slots, --tolerance-seconds, --renew-every-seconds, --from-sequence): {0}"
    )]
    BadSpaceFlags(kubeflake_crds::id_space::RecordError),
    #[error("{flag}: {reason}")]
    BadHubFlag { flag: &'static str, reason: String },
    #[error(
        "the API server returned no token for serviceaccount {account}; check that it serves TokenRequest (serviceaccounts/token)"
    )]
    NoToken { account: String },
    #[error(
        "idspacemembership {membership} exists with other values ({found}); its fields are immutable: delete it first (the operator then stops using the space for that sequence), or join with the same values"
    )]
    MembershipDiffers { membership: String, found: String },
    #[error("idspace {space} (Segment): {reason}; nothing was changed")]
    SegmentRefused { space: String, reason: String },
    #[error("the registry refused the change: {0}")]
    Registry(kubeflake_crds::id_space::RegistryError),
    #[error("{count} warning(s) and --strict was given")]
    StrictWarnings { count: usize },
    #[error("cannot render the output: {0}")]
    Render(String),
    #[error("cannot write the output: {0}")]
    Write(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this error (see [`EXIT_CODES_HELP`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::NotAnId { .. }
            | CliError::IdAboveLargest { .. }
            | CliError::NotATextId(_)
            | CliError::IdOutsideLayout { .. }
            | CliError::IdNotOfSequence { .. }
            | CliError::NotATime { .. }
            | CliError::TimeBeforeEpoch { .. }
            | CliError::TimeBeyondLayout { .. }
            | CliError::BadLayout { .. }
            | CliError::BadLayoutFlags(_)
            | CliError::SegmentSequence { .. }
            | CliError::BadFile { .. }
            | CliError::SpaceDiffers { .. }
            | CliError::MembershipDiffers { .. }
            | CliError::BadSpaceFlags(_)
            | CliError::BadHubFlag { .. }
            | CliError::SegmentRefused { .. } => EXIT_USAGE,
            CliError::SequenceNotFound { .. }
            | CliError::SpaceNotFound { .. }
            | CliError::UnknownMember { .. } => EXIT_NOT_FOUND,
            CliError::StrictWarnings { .. } => EXIT_WARNINGS,
            CliError::Kubeconfig(_)
            | CliError::Api { .. }
            | CliError::BadSequenceInCluster { .. }
            | CliError::BadSpace { .. }
            | CliError::Contended { .. }
            | CliError::Registry(_)
            | CliError::NoToken { .. }
            | CliError::Render(_)
            | CliError::Write(_) => EXIT_RUNTIME,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_2_not_found_is_3_strict_warnings_are_4_and_cluster_trouble_is_1() {
        assert_eq!(
            CliError::NotAnId { text: "x".into() }.exit_code(),
            EXIT_USAGE
        );
        assert_eq!(
            CliError::SequenceNotFound {
                name: "a".into(),
                namespace: "b".into()
            }
            .exit_code(),
            EXIT_NOT_FOUND
        );
        assert_eq!(
            CliError::StrictWarnings { count: 1 }.exit_code(),
            EXIT_WARNINGS
        );
        assert_eq!(
            CliError::Kubeconfig("none".into()).exit_code(),
            EXIT_RUNTIME
        );
    }

    #[test]
    fn not_found_names_the_sequence_and_the_namespace() {
        let text = CliError::SequenceNotFound {
            name: "orders".into(),
            namespace: "shop".into(),
        }
        .to_string();
        assert!(
            text.starts_with("idsequence orders not found in namespace shop"),
            "{text}"
        );
    }
}
