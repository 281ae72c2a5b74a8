//! `hub init`'s inputs and report: the shared sequence read from an IdSequence
//! (`--from-sequence NAMESPACE/NAME`), its checks, and one line per object made or found.

use kube::Client;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceError, SpaceSequenceSpec};
use kubeflake_crds::sequence::{IdSequenceSpec, Mode};
use serde::Serialize;

use super::setup::Applied;
use crate::cluster;
use crate::error::CliError;
use crate::output::{Report, table};

/// `NAMESPACE/NAME`, both non-empty.
pub fn parse_sequence_ref(text: &str) -> Result<(&str, &str), CliError> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(CliError::BadHubFlag {
            flag: "--from-sequence",
            reason: format!(
                "{text:?} is not NAMESPACE/NAME: give the IdSequence as, for example, shop/orders"
            ),
        }),
    }
}

/// What every member's sequence must match, in the words of an IdSequence: its layout,
/// time unit, epoch and mode (its datacenter ID is each member's own).
pub fn shared_part(spec: &IdSequenceSpec) -> SpaceSequenceSpec {
    SpaceSequenceSpec {
        layout: spec.layout.clone(),
        time_unit: spec.time_unit,
        epoch: spec.epoch.clone(),
        mode: spec.mode,
        strict: spec.segment.as_ref().is_some_and(|s| s.strict),
    }
}

/// The API crate's checks of the IdSpace `hub init` would write, before anything is
/// written: a Snowflake space's blocks (block slots, tolerance, renewal); a Segment space's
/// sequence, which hands out ranges of one counter instead of blocks (docs/safety.md rule
/// 22); a strict sequence cannot span clusters, in either mode.
pub fn check(spec: &IdSpaceSpec) -> Result<(), CliError> {
    if spec.sequence.mode != Mode::Segment {
        return spec.space().map(drop).map_err(CliError::BadSpaceFlags);
    }
    let sequence = spec.space_sequence().map_err(CliError::BadSpaceFlags)?;
    if sequence.strict {
        return Err(CliError::BadSpaceFlags(SpaceError::StrictCannotSpan.into()));
    }
    Ok(())
}

/// The shared part of the IdSequence `text` names.
pub async fn sequence_of(client: &Client, text: &str) -> Result<SpaceSequenceSpec, CliError> {
    let (namespace, name) = parse_sequence_ref(text)?;
    let sequence = cluster::get_sequence(client, namespace, name).await?;
    Ok(shared_part(&sequence.spec))
}

/// What `hub init` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitReport {
    pub space: String,
    pub namespace: String,
    pub objects: Vec<Applied>,
}

impl InitReport {
    pub fn new(space: &str, namespace: &str, objects: Vec<Applied>) -> InitReport {
        InitReport {
            space: space.to_string(),
            namespace: namespace.to_string(),
            objects,
        }
    }
}

impl Report for InitReport {
    fn table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .objects
            .iter()
            .map(|o| vec![o.kind.clone(), o.name.clone(), o.result.clone()])
            .collect();
        let mut out = table(&["KIND", "NAME", "RESULT"], &rows);
        out.push_str(&format!(
            "next: `kubectl kubeflake hub add-member {} <name> -n {}` for each member cluster\n",
            self.space, self.namespace
        ));
        out
    }
}
