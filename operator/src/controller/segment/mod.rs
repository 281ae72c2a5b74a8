//! Segment-mode sequences: no slots. The operator creates the sequence's counter Lease
//! (`next = start`) for a sequence that never had one, raises it when `start` is raised
//! (never lowers it), lists the pods labelled for the sequence on it (`kubeflake.io/claimants`:
//! the API server lets only their sidecars claim, `crds::lease_policy`), and reports the
//! high-water mark and the claim rate in the status.
//! Sidecars claim blocks from the counter themselves, by compare-and-swap; the operator is
//! not on that path, so its restarts do not matter.
//!
//! The counter has no owner reference on purpose: deleting the IdSequence leaves it, so a
//! sequence re-created under the same name continues above every value issued instead of
//! starting again at `start`.
//!
//! **A lost counter is never re-created.** Once the status shows a counter (`status.segment`
//! is set), a missing Lease means it was deleted: creating it again at `start` would hand
//! out values already issued. The operator then sets `Ready=False` (`CounterLost`), records
//! a Warning Event and waits for a person to re-create it above every value issued
//! (docs/segment.md, "The counter was lost"). A counter whose claim count went down (an old
//! copy restored, or re-created by hand without the count) is `CounterWentBack`. The
//! operator does not touch it: the status keeps the last good observation, and every
//! sidecar, even one started since, refuses to claim from a counter with fewer claims than
//! `status.segment.blocksClaimed`. Raising it to the last `next` seen would not be enough
//! (that is only a lower bound: sidecars claim between two looks), so a person repairs it.
//!
//! A counter in a format this release does not understand (written by a newer kubeflake)
//! is `LeaseFormatUnsupported`: not raised, no claimants written, the pass fails (counted
//! as `bad_counter`).
//!
//! **A counter or oracle Lease kubeflake did not make is refused** (docs/safety.md rule 16):
//! one with the name but not the label (made by a tenant with Lease `create` rights before
//! the operator made its own) is never adopted, raised, given claimants or deleted; the
//! sequence is `Ready=False ForeignLease` until someone deletes it ([`super::foreign`]).
//!
//! A **strict** sequence's counter is in format 2 (served by an oracle) and the sequence has
//! an oracle Lease listing the same claimants: see [`oracle`].

pub mod counter;
pub mod oracle;

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kubeflake_crds::ownership::LeaseKind;
use kubeflake_crds::segment_counter::{
    CLAIMANTS_ANNOTATION, Counter, claimants, claimants_value, counter_name, new_counter,
};
use kubeflake_crds::sequence::{IdSequence, SegmentParams};
use kubeflake_crds::strict_oracle::oracle_name;
use serde_json::json;

use self::counter::{Trouble, segment_status};
use super::context::Context;
use super::error::{Error, is_conflict};
use super::update_status::{not_ready, update_status};
use crate::metrics::Source;

pub use self::counter::{LastSeen, counter_existed, observe, went_back};

/// How often a Segment sequence is looked at again (the counter is not watched).
const RESYNC: Duration = Duration::from_secs(15);

/// Reconciles one Segment-mode sequence that is not being deleted.
pub async fn reconcile(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    name: &str,
    params: &SegmentParams,
) -> Result<Action, Error> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let lease_name = counter_name(name);
    let found = api.get_opt(&lease_name).await?;
    if found.is_none() {
        // Judge on the freshest status, not the cache: the status written right after the
        // counter was created must not be missed.
        let sequences: Api<IdSequence> = Api::namespaced(ctx.client.clone(), ns);
        let fresh = sequences.get(name).await?;
        if let Some(last) = counter_existed(fresh.status.as_ref()) {
            return counter_trouble(&fresh, ctx, &Trouble::Lost { last }).await;
        }
    }
    if let Some(lease) = &found {
        // Found by name, but kubeflake's only with its label (rule 16): a Lease a tenant
        // made before the operator did is never adopted, written or deleted.
        if let Err(foreign) = super::foreign::check(seq, lease, LeaseKind::SegmentCounter) {
            return refuse(seq, ctx, &foreign).await;
        }
        let counter = match Counter::parse(lease) {
            Ok(counter) => counter,
            Err(e) if e.is_format() => {
                // Refused as a whole (no guess at what its fields mean), never written.
                counter_trouble(seq, ctx, &Trouble::Format(e.clone())).await?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(last) = went_back(seq.status.as_ref(), &counter) {
            let found = counter.next;
            return counter_trouble(seq, ctx, &Trouble::WentBack { last, found }).await;
        }
    }
    // Not foreign (or gone): no longer reported.
    ctx.metrics.foreign.clear(ns, name, &lease_name);
    let lease = match found {
        None => match api
            .create(&PostParams::default(), &new_counter_for(name, ns, params))
            .await
        {
            Ok(created) => {
                tracing::info!(sequence = name, namespace = ns, counter = %lease_name, start = params.start, "created the segment counter");
                created
            }
            Err(e) if is_conflict(&e) => return Ok(Action::requeue(Duration::from_millis(500))),
            Err(e) => return Err(e.into()),
        },
        Some(lease) => {
            let counter = Counter::parse(&lease)?;
            // A ranged counter (format 3, rule 22) is never raised: its `next` stays inside
            // the ranges its membership took from the hub (a raise could leave them, or
            // skip into values another cluster holds); `start` is for a lone counter.
            if counter.next >= params.start || counter.range.is_some() {
                lease
            } else {
                // start was raised: move the counter up to it (a CAS; never down).
                let raised = Counter {
                    next: params.start,
                    ..counter
                };
                match api
                    .replace(
                        &lease_name,
                        &PostParams::default(),
                        &raised.write_into(lease),
                    )
                    .await
                {
                    Ok(written) => {
                        tracing::info!(
                            sequence = name,
                            namespace = ns,
                            next = params.start,
                            "raised the segment counter to spec.segment.start"
                        );
                        written
                    }
                    Err(e) if is_conflict(&e) => {
                        return Ok(Action::requeue(Duration::from_millis(500)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    // Claimants before the format: a counter of 0.1.0 lists nobody, which lets any pod
    // claim; a strict sequence's list leaves out pods whose sidecar has no oracle, so the
    // API server refuses their one-value writes before any oracle serves (format 2).
    let ranged = Counter::parse(&lease)?.range.is_some();
    let joined = ranged || ctx.id_spaces.as_ref().is_some_and(|s| s.names(ns, name));
    let ours = match (&ctx.id_spaces, ranged) {
        (_, false) => true,
        (Some(spaces), true) => spaces.ranges_are_ours(&ctx.client, ns, name).await,
        (None, true) => false,
    };
    let mut held_back = 0;
    let uids = if ours {
        let every = claimant_uids(ctx, ns, name, params.strict || joined);
        // The membership is read from the API server only when a pod would be added.
        let (kept, new) = only_listed(&lease, &every);
        match &ctx.id_spaces {
            Some(spaces)
                if ranged
                    && new > 0
                    && !spaces.new_claimants_allowed(&ctx.client, ns, name).await =>
            {
                held_back = new;
                kept
            }
            _ => every,
        }
    } else {
        // Rule 22: its ranges may be another cluster's (no membership of this cluster
        // recorded them); nobody claims until its membership has given them up.
        tracing::warn!(
            sequence = name,
            namespace = ns,
            "the segment counter holds ranges no IdSpaceMembership of this cluster recorded: no pod claims from it"
        );
        String::new()
    };
    if held_back > 0 {
        tracing::info!(
            sequence = name,
            namespace = ns,
            pods = held_back,
            "new pods are not listed as claimants of the ranged counter until the membership task has compared this cluster's copy with the hub (since this operator started or its watch listed again, as after an etcd restore)"
        );
    }
    let Some(lease) = sync_claimants(&api, lease, &uids).await? else {
        return Ok(Action::requeue(Duration::from_millis(500)));
    };
    let lease = if params.strict {
        match oracle::ensure_oracle_format(&api, lease).await? {
            Some(lease) => lease,
            None => return Ok(Action::requeue(Duration::from_millis(500))),
        }
    } else {
        lease
    };
    if params.strict {
        match oracle::sync_oracle(&api, seq, ns, &uids).await? {
            oracle::Synced::Done => {
                ctx.metrics.foreign.clear(ns, name, &oracle_name(name));
            }
            oracle::Synced::Retry => return Ok(Action::requeue(Duration::from_millis(500))),
            oracle::Synced::Foreign(foreign) => return refuse(seq, ctx, &foreign).await,
        }
    }
    let counter = Counter::parse(&lease)?;
    let status = segment_status(seq, &counter, Utc::now());
    let status = super::foreign::with_condition(status, seq, ctx);
    update_status(seq, ctx, status).await?;
    if held_back > 0 {
        // A contact changes nothing this pass watches when the copy was current: look again soon.
        return Ok(Action::requeue(HELD_BACK_RETRY));
    }
    Ok(Action::requeue(RESYNC))
}

/// How soon a pass that held new claimants back looks again (one contact is 10 s apart).
const HELD_BACK_RETRY: Duration = Duration::from_secs(2);

/// Of the claimants `every`, those `lease` already lists (new pods wait: rule 22,
/// `IdSpaces::new_claimants_allowed`), and how many were left out.
fn only_listed(lease: &Lease, every: &str) -> (String, usize) {
    let listed = claimants(lease);
    let all: Vec<&str> = every.split(',').filter(|u| !u.is_empty()).collect();
    let kept: Vec<&str> = all
        .iter()
        .copied()
        .filter(|u| listed.iter().any(|l| l == u))
        .collect();
    (
        claimants_value(kept.iter().copied()),
        all.len() - kept.len(),
    )
}

/// A new counter for the sequence: in format 2 when strict (an oracle serves it).
fn new_counter_for(name: &str, ns: &str, params: &SegmentParams) -> Lease {
    let counter = new_counter(name, ns, params.start);
    if params.strict {
        oracle::in_oracle_format(counter)
    } else {
        counter
    }
}

/// The UIDs of the pods labelled for the sequence (from the cache's index by sequence)
/// that may still run (finished pods are left out): the only pods whose sidecars the API
/// server lets claim from the counter (`crds::lease_policy`). For a strict sequence, pods
/// injected by a release whose sidecar has no oracle ([`super::injected::before_0_2`])
/// are left out too: their sidecars write one value per compare-and-set, above the
/// oracle's window, which would break the strict order (docs/safety.md rule 13). So are
/// they for a sequence joined (or joining) an ID space (`no_0_1`: its counter is ranged, or
/// a membership names it): they know no ranges, and a claim of theirs that jumps from the
/// limit into the queued range would hand out the values between, which the hub gave to
/// other clusters (docs/safety.md rule 22).
fn claimant_uids(ctx: &Context, ns: &str, name: &str, no_0_1: bool) -> String {
    let pods = ctx.pods.of(ns, name);
    claimants_value(
        pods.iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
            })
            .filter(|p| !(no_0_1 && super::injected::before_0_2(p)))
            .filter_map(|p| p.metadata.uid.as_deref()),
    )
}

/// Writes `uids` as the claimants of `lease` (the counter, or a strict sequence's oracle
/// Lease) when they differ from what it lists: a merge patch conditional on the version
/// read. `None` when the Lease moved on meanwhile (a sidecar claimed, or took the oracle
/// Lease): the pass is retried.
async fn sync_claimants(
    api: &Api<Lease>,
    lease: Lease,
    uids: &str,
) -> Result<Option<Lease>, Error> {
    if claimants_value(claimants(&lease).iter().map(String::as_str)) == uids {
        return Ok(Some(lease));
    }
    let patch = json!({"metadata": {
        "resourceVersion": lease.metadata.resource_version,
        "annotations": {CLAIMANTS_ANNOTATION: uids},
    }});
    let name = lease.name_any();
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => {
            tracing::debug!(lease = %name, claimants = uids.split(',').filter(|u| !u.is_empty()).count(), "listed the pods that may claim");
            Ok(Some(written))
        }
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The sequence's counter or oracle Lease is foreign (rule 16): reported once, Ready=False,
/// nothing written to it; looked at again like any Segment sequence.
async fn refuse(
    seq: &IdSequence,
    ctx: &Context,
    foreign: &kubeflake_crds::ownership::Foreign,
) -> Result<Action, Error> {
    super::foreign::report(seq, ctx, foreign, None, Source::Read).await;
    update_status(seq, ctx, super::foreign::refused_status(seq, ctx, foreign)).await?;
    Ok(Action::requeue(RESYNC))
}

/// Ready=False with the trouble's reason, a Warning Event when it is new, and the last good
/// `status.segment` kept as it is (it is the evidence).
async fn counter_trouble(
    seq: &IdSequence,
    ctx: &Context,
    trouble: &Trouble,
) -> Result<Action, Error> {
    let name = seq.name_any();
    let message = trouble.message(&name);
    tracing::error!(sequence = %name, namespace = seq.namespace().unwrap_or_default(), reason = trouble.reason().as_str(), %message, "segment counter cannot be trusted");
    let reason = trouble.reason();
    not_ready(seq, ctx, reason, "CheckCounter", &message).await?;
    Ok(Action::requeue(RESYNC))
}
