//! The IdSequence controller (kube-rs style: a [`Context`], [`reconcile`],
//! [`error_policy`], one [`Error`] type with a metric label).
//!
//! A pass is a short pipeline, one module per step; imports only point down the list
//! (no module imports one above it):
//!
//! 1. [`validate`]: spec -> parameters (pure); an invalid spec gets `Ready=False
//!    InvalidSpec`. A sequence being deleted is read leniently instead, so it can go.
//! 2. [`finalizer`]: added on the first pass, removed when deletion finishes; then
//!    [`network_policy`]: the sequence's NetworkPolicy, when the operator makes them.
//! 3. By mode: [`snowflake`] (observe -> plan -> apply -> events -> status; also deletion)
//!    or [`segment`] (the counter Lease).
//! 4. [`update_status`](mod@update_status): the one status writer; an unchanged status is not written.
//!    Condition types and reasons are part of the API: `kubeflake_crds::conditions`.
//!
//! Below them: [`silence`] (rule 9's
//! clock), [`expectations`] (a pass waits for the cache to see the last pass's writes),
//! [`foreign`] (Leases with a kubeflake name that kubeflake did not make: rule 16),
//! [`flow_schema`] (after every pass: the sidecars' FlowSchema lists the sequences'
//! namespaces),
//! [`context`], [`error`].
//! Every write is a compare-and-swap (docs/safety.md rule 1): a conflict is normal, the
//! pass is repeated.

pub mod context;
pub mod error;
pub mod expectations;
pub mod finalizer;
pub mod flow_schema;
pub mod foreign;
pub mod id_spaces;
pub mod injected;
pub mod network_policy;
pub mod policy_gate;
pub mod segment;
pub mod silence;
pub mod snowflake;
pub mod update_status;
pub mod validate;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kubeflake_crds::sequence::IdSequence;

pub use self::context::Context;
pub use self::error::Error;
use self::update_status::update_status;
use self::validate::Valid;
use kubeflake_crds::conditions::{Reason, not_ready_status};

/// The `result` label of `kubeflake_operator_reconciles_total` for one pass.
fn result_label(result: &Result<Action, Error>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.metric_label(),
    }
}

/// Reconciles one IdSequence.
pub async fn reconcile(seq: Arc<IdSequence>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    // Sequences that vanished without a last pass of their own leave nothing behind.
    ctx.forget_gone();
    let result = reconcile_inner(&seq, &ctx).await;
    // Only queueing depends on it: whatever the pass did, and never failing it.
    if let Some(keeper) = &ctx.flow_schema {
        flow_schema::keep(&ctx.client, &ctx.sequences, keeper).await;
    }
    ctx.metrics
        .reconciles
        .with_label_values(&[result_label(&result)])
        .inc();
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Backs off after a failed pass; conflicts and API errors are retried soon.
pub fn error_policy(seq: Arc<IdSequence>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(sequence = %seq.name_any(), namespace = seq.namespace().unwrap_or_default(), %error, "reconcile failed");
    match error {
        Error::Kube(_) => Action::requeue(Duration::from_secs(2)),
        _ => Action::requeue(Duration::from_secs(30)),
    }
}

async fn reconcile_inner(seq: &IdSequence, ctx: &Context) -> Result<Action, Error> {
    let ns = seq.namespace().ok_or(Error::NoNamespace)?;
    if seq.metadata.deletion_timestamp.is_some() {
        // Whatever the spec says now: a spec that turned invalid after the finalizer was
        // added must not keep the sequence forever (rule 10 still holds, see tear_down).
        return snowflake::tear_down(seq, ctx, &ns, &validate::teardown(&seq.spec)).await;
    }
    let valid = match validate::validate(&seq.spec) {
        Ok(valid) => valid,
        Err(e) => {
            let status = not_ready_status(seq, Reason::InvalidSpec, &e.to_string());
            update_status(seq, ctx, status).await?;
            return Err(e.into());
        }
    };
    finalizer::ensure(seq, ctx).await?;
    // The sidecars' ports, when the operator makes NetworkPolicies; never stops the pass.
    network_policy::keep(seq, ctx).await;
    // Fail closed: nothing is handed out while the Lease policy is not in force (rule 14).
    if let Some(action) = policy_gate::hold_back(seq, ctx).await? {
        return Ok(action);
    }
    match valid {
        Valid::Segment(params) => segment::reconcile(seq, ctx, &ns, &seq.name_any(), &params).await,
        Valid::Snowflake(params) => snowflake::reconcile(seq, ctx, &ns, &params).await,
    }
}
