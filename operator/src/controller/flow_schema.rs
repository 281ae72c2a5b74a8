//! The sidecars' FlowSchema (API Priority and Fairness, docs/install.md) lists exactly the
//! namespaces that have an IdSequence, when the chart leaves that list to the operator
//! (`flowControl.namespaces: []`, flag `--sidecar-flow-schema`). A FlowSchema cannot match
//! labels or object names, only service accounts, verbs, resources and namespaces; with
//! every namespace (`["*"]`, the chart's default before 0.2.0) it also took every other
//! service account's Lease traffic, other operators' leader election included, into
//! kubeflake's priority level. Listing only the sequences' namespaces narrows that to the
//! namespaces that run sidecars.
//!
//! After each pass the namespaces of the cached IdSequences are compared with what was
//! last seen in the FlowSchema; when they differ, or every [`RECHECK`] (a `helm upgrade`
//! puts back the chart's list), the FlowSchema is read and, if its namespaces differ,
//! replaced by a compare-and-swap on the version read, changing only the namespaces of its
//! resource rules. With no sequence at all the list is left as it is (a FlowSchema rule
//! needs at least one namespace). Failures are logged and tried again on a later pass;
//! they never stop a pass (only queueing depends on it, never an ID).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use kubeflake_crds::sequence::IdSequence;

/// How often the FlowSchema is read again although the sequences' namespaces did not
/// change.
pub const RECHECK: Duration = Duration::from_secs(60);

/// The FlowSchema the operator keeps, and what it last saw there.
pub struct FlowSchemaKeeper {
    name: String,
    seen: Mutex<Option<(Vec<String>, Instant)>>,
}

/// What [`keep`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to do now (same namespaces seen within [`RECHECK`], no sequence, or the
    /// cache not listed yet).
    Skipped,
    Unchanged,
    /// Replaced with these namespaces.
    Updated(Vec<String>),
    /// Logged; tried again on a later pass.
    Failed,
}

impl FlowSchemaKeeper {
    pub fn new(name: String) -> FlowSchemaKeeper {
        FlowSchemaKeeper {
            name,
            seen: Mutex::new(None),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Option<(Vec<String>, Instant)>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The namespaces of the cached sequences, sorted; `None` before the cache's first list.
fn wanted(sequences: &Store<IdSequence>) -> Option<Vec<String>> {
    let listed = futures::FutureExt::now_or_never(sequences.wait_until_ready());
    if !matches!(listed, Some(Ok(()))) {
        return None;
    }
    let namespaces: BTreeSet<String> = sequences
        .state()
        .iter()
        .filter_map(|s| s.namespace())
        .collect();
    Some(namespaces.into_iter().collect())
}

/// Makes the FlowSchema's resource rules name exactly the sequences' namespaces.
pub async fn keep(
    client: &Client,
    sequences: &Store<IdSequence>,
    keeper: &FlowSchemaKeeper,
) -> Outcome {
    let Some(wanted) = wanted(sequences) else {
        return Outcome::Skipped;
    };
    if wanted.is_empty() {
        return Outcome::Skipped;
    }
    if let Some((seen, at)) = keeper.seen().as_ref()
        && *seen == wanted
        && at.elapsed() < RECHECK
    {
        return Outcome::Skipped;
    }
    let api: Api<FlowSchema> = Api::all(client.clone());
    match write(&api, &keeper.name, &wanted).await {
        Ok(outcome) => {
            *keeper.seen() = Some((wanted, Instant::now()));
            outcome
        }
        Err(e) => {
            *keeper.seen() = None;
            tracing::warn!(flow_schema = %keeper.name, error = %e, "cannot keep the sidecars' FlowSchema to the namespaces that have an IdSequence (the operator needs get and update on it); sidecar requests of new namespaces are queued in the default levels until it works");
            Outcome::Failed
        }
    }
}

async fn write(
    api: &Api<FlowSchema>,
    name: &str,
    wanted: &[String],
) -> Result<Outcome, kube::Error> {
    let mut schema = api.get(name).await?;
    let mut changed = false;
    for rule in schema
        .spec
        .iter_mut()
        .flat_map(|s| s.rules.iter_mut().flatten())
    {
        for resources in rule.resource_rules.iter_mut().flatten() {
            if resources.namespaces.as_deref() != Some(wanted) {
                resources.namespaces = Some(wanted.to_vec());
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(Outcome::Unchanged);
    }
    api.replace(name, &PostParams::default(), &schema).await?;
    tracing::info!(flow_schema = name, namespaces = ?wanted, "the sidecars' FlowSchema now lists the namespaces that have an IdSequence");
    Ok(Outcome::Updated(wanted.to_vec()))
}

#[cfg(test)]
mod tests;
