//! `check --pre` (can kubeflake be installed here?) and `check` (is the installation
//! healthy?): a checklist, one finding per check, each warn or fail saying what to do.
//!
//! - [`model`]: findings, the report, its table and exit code;
//! - [`pre`] and [`fetch_pre`]: the cluster's version, API kinds and the installer's rights;
//! - [`operator`], [`webhook`], [`sequences`] (judgements, pure) and [`fetch_installed`]
//!   (the reads): the CRD, the operator and its leader, the Lease policy, the webhook and its
//!   CA certificate ([`cert`] reads its dates), each IdSequence, the sidecars' versions.

mod cert;
mod fetch_installed;
mod fetch_pre;
mod model;
mod operator;
mod pre;
mod sequences;
mod webhook;

use chrono::{DateTime, Utc};

pub use self::model::CheckReport;
use crate::cli::CheckArgs;
use crate::cluster;
use crate::error::CliError;

/// This plugin's release: the one whose CRD it reads and whose skew policy it applies.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// Runs the checks `args` asks for.
pub async fn run(args: &CheckArgs, now: DateTime<Utc>) -> Result<CheckReport, CliError> {
    let (client, _) = cluster::connect(&args.cluster).await?;
    if args.pre {
        let findings = fetch_pre::run(&client, &args.operator_namespace).await?;
        return Ok(CheckReport::new("pre", findings));
    }
    let scope = fetch_installed::Scope {
        operator_namespace: &args.operator_namespace,
        sequence_namespace: args.cluster.namespace.as_deref(),
        release: RELEASE,
    };
    let findings = fetch_installed::run(&client, &scope, now).await?;
    Ok(CheckReport::new("installed", findings))
}
