//! Foreign Leases (docs/safety.md rule 16): a Lease with the name of one of a sequence's
//! Leases that kubeflake did not make (`kubeflake_crds::ownership`). The operator never
//! adopts, writes or deletes one: it is someone else's, and the Lease policy, which guards
//! kubeflake's Leases by label, never guarded it. It reports each once, when first found:
//! a Warning Event `ForeignLease` saying which Lease and what to do (delete it), and
//! `kubeflake_operator_foreign_leases_found_total`; while any is known the sequence's
//! `ForeignLeases` condition is True and lists them, and `kubeflake_operator_foreign_leases`
//! counts them. What is known is kept in [`crate::metrics::ForeignBook`].
//!
//! - A foreign **segment counter** or **strict oracle Lease**: the sequence cannot work
//!   without its own, so it is `Ready=False ForeignLease` until the Lease is deleted; then the
//!   operator creates its own on the next pass.
//! - A foreign **slot Lease**: the planner skips its slot and gives waiting pods the next
//!   free ones. An unlabelled one is not in the operator's cache (selected by label): it is
//!   found when creating the slot's Lease fails because the name is taken, and read again by
//!   name every [`RECHECK`] to see whether it went.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kubeflake_crds::Slot;
use kubeflake_crds::conditions::{
    ConditionStatus, ConditionType, Reason, condition, not_ready_status, set_condition,
};
use kubeflake_crds::ownership::{self, Foreign, LeaseKind};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus};

use super::context::Context;
use super::error::Error;
use crate::metrics::Source;

/// How often a foreign slot Lease found by a read is read again.
pub const RECHECK: Duration = Duration::from_secs(30);

/// The sequence's UID, which owns its slot and oracle Leases ("" if it has none: then
/// no owned Lease is recognised, and nothing is adopted).
pub fn uid_of(seq: &IdSequence) -> String {
    seq.metadata.uid.clone().unwrap_or_default()
}

/// Whether `lease`, found by the name of `seq`'s Lease of `kind`, is kubeflake's.
pub fn check(seq: &IdSequence, lease: &Lease, kind: LeaseKind) -> Result<(), Foreign> {
    ownership::check(lease, kind, &seq.name_any(), &uid_of(seq))
}

/// Notes a foreign Lease of `seq`; the first time, logs it, records a Warning Event and
/// counts it. Never fails: an Event that cannot be recorded is logged.
pub async fn report(
    seq: &IdSequence,
    ctx: &Context,
    foreign: &Foreign,
    slot: Option<Slot>,
    source: Source,
) {
    let (ns, name) = (seq.namespace().unwrap_or_default(), seq.name_any());
    let new = ctx
        .metrics
        .foreign
        .note(&ns, &name, foreign, slot, source, Instant::now());
    if !new {
        return;
    }
    ctx.metrics
        .foreign_found
        .with_label_values(&[foreign.kind.metric_label()])
        .inc();
    tracing::error!(sequence = %name, namespace = %ns, lease = %foreign.name, kind = foreign.kind.metric_label(), message = %foreign, "a Lease with a kubeflake name was not made by kubeflake; it is neither used, changed nor deleted");
    let event = Event {
        type_: EventType::Warning,
        reason: Reason::ForeignLease.as_str().into(),
        note: Some(foreign.to_string().chars().take(1000).collect()),
        action: "CheckLeases".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &seq.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an Event");
    }
}

/// `status` with the `ForeignLeases` condition as the book says for `seq`: True listing
/// the foreign Leases, or False once none is left (only if it was ever set).
pub fn with_condition(
    mut status: IdSequenceStatus,
    seq: &IdSequence,
    ctx: &Context,
) -> IdSequenceStatus {
    let known = ctx
        .metrics
        .foreign
        .of(&seq.namespace().unwrap_or_default(), &seq.name_any());
    if known.is_empty() {
        if condition(Some(&status), ConditionType::ForeignLeases).is_some() {
            set_condition(
                &mut status.conditions,
                seq,
                ConditionType::ForeignLeases,
                ConditionStatus::False,
                Reason::NoForeignLease,
                "no Lease with a name of this sequence's Leases is foreign",
            );
        }
        return status;
    }
    let names: Vec<&str> = known.keys().map(String::as_str).collect();
    let first = known.values().next().map(|f| f.message.as_str());
    let message = format!(
        "{} Lease(s) with a name of this sequence's Leases were not made by kubeflake and are \
         neither used, changed nor deleted: {}. Delete them (kubectl delete lease -n {} NAME) \
         and find out who created them. {}",
        names.len(),
        names.join(", "),
        seq.namespace().unwrap_or_default(),
        first.unwrap_or_default(),
    );
    set_condition(
        &mut status.conditions,
        seq,
        ConditionType::ForeignLeases,
        ConditionStatus::True,
        Reason::ForeignLease,
        &message,
    );
    status
}

/// The status of a sequence whose counter or oracle Lease is foreign: Ready=False, and
/// the ForeignLeases condition.
pub fn refused_status(seq: &IdSequence, ctx: &Context, foreign: &Foreign) -> IdSequenceStatus {
    let message = format!(
        "the sequence cannot serve without its own {}: {foreign}",
        foreign.kind.what()
    );
    with_condition(
        not_ready_status(seq, Reason::ForeignLease, &message),
        seq,
        ctx,
    )
}

/// Reads again the foreign slot Leases of `seq` known by a read and not checked for
/// [`RECHECK`]: one that is gone, or that is kubeflake's after all, is forgotten (its slot
/// may be planned again).
pub async fn recheck_slots(seq: &IdSequence, ctx: &Context, ns: &str) -> Result<(), Error> {
    let name = seq.name_any();
    let due = ctx.metrics.foreign.due(ns, &name, Instant::now(), RECHECK);
    if due.is_empty() {
        return Ok(());
    }
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    for lease_name in due {
        match api.get_opt(&lease_name).await? {
            None => {
                tracing::info!(sequence = %name, namespace = ns, lease = %lease_name, "the foreign slot Lease is gone; its slot may be used again");
                ctx.metrics.foreign.clear(ns, &name, &lease_name);
            }
            Some(lease) => match check(seq, &lease, LeaseKind::Slot) {
                Ok(()) => ctx.metrics.foreign.clear(ns, &name, &lease_name),
                Err(foreign) => {
                    let slot = ownership::slot_of_name(&name, &lease_name);
                    report(seq, ctx, &foreign, slot, Source::Read).await;
                }
            },
        }
    }
    Ok(())
}
