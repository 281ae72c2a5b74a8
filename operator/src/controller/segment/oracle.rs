//! A strict sequence's share of the operator's work for its oracle (issue 24,
//! `kubeflake_crds::strict_oracle`): the sidecars elect and run the oracle themselves, the
//! operator only prepares what they may not create or change.
//!
//! - **The counter says format 2** ([`COUNTER_FORMAT_ORACLE`]): a new strict counter is
//!   created in it, an existing one in format 1 is moved to it by a compare-and-swap that
//!   changes nothing else. Sidecars of releases without the oracle refuse format 2, so they
//!   never write one-value-per-write values above an oracle's window. `segment.strict` is
//!   immutable, so a counter never goes back (and the operator never lowers a format).
//! - **The oracle Lease** `<sequence>-strict-oracle` exists ([`new_oracle_lease`]; sidecars
//!   never create Leases), owned by the IdSequence so that it goes with it (unlike the
//!   counter, it holds nothing that must outlive the sequence). It carries no
//!   `kubeflake.io/sequence` label, so slot code and deletion never wait for it.
//! - **Its claimants** are the counter's: the same pods, written by the same compare-and-swap
//!   ([`super::sync_claimants`]); the API server lets only them take it
//!   (`kubeflake_crds::lease_policy`). Pods injected by 0.1.0, whose strict sidecars write
//!   one value per compare-and-set and do not read the format, are not listed
//!   ([`crate::controller::injected::before_0_2`]): the API server refuses their writes (503 to their apps)
//!   until they are re-created with this release's sidecar.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeflake_crds::ownership::{Foreign, LeaseKind};
use kubeflake_crds::segment_counter::{CLAIMANTS_ANNOTATION, Counter};
use kubeflake_crds::sequence::IdSequence;
use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
use kubeflake_crds::strict_oracle::{
    COUNTER_FORMAT_ORACLE, OracleLease, OracleLeaseError, new_oracle_lease, oracle_name,
};
use serde_json::json;

use super::super::error::{Error, is_conflict};
use super::sync_claimants;

/// A new counter Lease `counter` (as `new_counter` builds it) marked as served by an oracle.
pub fn in_oracle_format(mut counter: Lease) -> Lease {
    counter
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            FORMAT_ANNOTATION.to_string(),
            COUNTER_FORMAT_ORACLE.to_string(),
        );
    counter
}

/// Moves a strict sequence's counter to format 2 when it says less: a merge patch of the
/// format annotation alone, conditional on the version read. `None` when the counter moved
/// on meanwhile (a sidecar claimed): the pass is retried.
pub async fn ensure_oracle_format(api: &Api<Lease>, lease: Lease) -> Result<Option<Lease>, Error> {
    let counter = Counter::parse(&lease)?;
    if counter.format >= COUNTER_FORMAT_ORACLE {
        return Ok(Some(lease));
    }
    let patch = json!({"metadata": {
        "resourceVersion": lease.metadata.resource_version,
        "annotations": {FORMAT_ANNOTATION: COUNTER_FORMAT_ORACLE.to_string()},
    }});
    let name = lease.name_any();
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => {
            tracing::info!(counter = %name, from = counter.format, to = COUNTER_FORMAT_ORACLE, "marked the strict sequence's counter as served by an oracle");
            Ok(Some(written))
        }
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What [`sync_oracle`] found.
#[derive(Debug)]
pub enum Synced {
    /// The oracle Lease exists and lists the claimants.
    Done,
    /// A write lost a race (the Lease was created or changed meanwhile): retry the pass.
    Retry,
    /// A Lease with the oracle Lease's name that kubeflake did not make (rule 16): not
    /// written; the caller reports it.
    Foreign(Foreign),
}

/// Creates the sequence's oracle Lease when it does not exist (owned by `seq`, listing
/// `uids`), or lists `uids` on it when it lists others. An oracle Lease in a format this
/// release does not understand, or one kubeflake did not make, is never written.
pub async fn sync_oracle(
    api: &Api<Lease>,
    seq: &IdSequence,
    ns: &str,
    uids: &str,
) -> Result<Synced, Error> {
    let sequence = seq.name_any();
    let name = oracle_name(&sequence);
    match api.get_opt(&name).await? {
        None => {
            let lease = oracle_lease_for(seq, ns, uids);
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    tracing::info!(sequence = %sequence, namespace = ns, oracle = %name, "created the strict oracle Lease");
                    Ok(Synced::Done)
                }
                Err(e) if is_conflict(&e) => Ok(Synced::Retry),
                Err(e) => Err(e.into()),
            }
        }
        Some(lease) => {
            // Found by name, but kubeflake's only with its label and owner (rule 16).
            if let Err(foreign) = super::super::foreign::check(seq, &lease, LeaseKind::StrictOracle)
            {
                return Ok(Synced::Foreign(foreign));
            }
            if let Err(e @ OracleLeaseError::UnsupportedFormat { .. }) =
                OracleLease::parse(lease.clone())
            {
                return Err(e.into());
            }
            Ok(match sync_claimants(api, lease, uids).await? {
                Some(_) => Synced::Done,
                None => Synced::Retry,
            })
        }
    }
}

/// The oracle Lease the operator creates for `seq`: nobody holds it, `uids` may take it,
/// and it is deleted with the sequence (a controller owner reference, without
/// `blockOwnerDeletion`: deleting the sequence never waits for it).
pub fn oracle_lease_for(seq: &IdSequence, ns: &str, uids: &str) -> Lease {
    let mut lease = new_oracle_lease(&seq.name_any(), ns);
    lease.metadata.owner_references = seq.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = None;
        vec![o]
    });
    lease
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CLAIMANTS_ANNOTATION.to_string(), uids.to_string());
    lease
}
