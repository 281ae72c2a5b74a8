//! Before a live sequence's pass: nothing is handed out while the Lease policy is not in
//! force (docs/safety.md rule 14; the guard that reads it: [`crate::lease_policy_guard`]).
//! The sequence then shows `Ready=False LeasePolicyMissing`, with a Warning Event when that
//! reason is new; no Lease is read or written, so no slot is assigned or reclaimed and no
//! claimant listed.

#[cfg(test)]
mod tests;

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kubeflake_crds::conditions::Reason;
use kubeflake_crds::sequence::IdSequence;

use super::context::Context;
use super::error::Error;
use super::update_status::not_ready;

/// How soon a sequence held back is looked at again (a change of the policy's state wakes
/// every sequence sooner: `LeasePolicyGate::changes`).
pub const HELD_BACK: Duration = Duration::from_secs(15);

/// Called before a live sequence's pass: `Some` (the pass's result) when nothing may be
/// handed out now. The sequence then shows `Ready=False LeasePolicyMissing`, with a
/// Warning Event when that reason is new.
pub async fn hold_back(seq: &IdSequence, ctx: &Context) -> Result<Option<Action>, Error> {
    let Some(why) = ctx.lease_policy.state().refusal() else {
        return Ok(None);
    };
    let reason = Reason::LeasePolicyMissing;
    let message = format!(
        "no slot is assigned and no claimant listed while the Lease policy is not in force \
         (docs/safety.md rule 14): {why}"
    );
    tracing::warn!(sequence = %seq.name_any(), namespace = seq.namespace().unwrap_or_default(), reason = reason.as_str(), %message, "sequence held back");
    not_ready(seq, ctx, reason, "CheckLeasePolicy", &message).await?;
    Ok(Some(Action::requeue(HELD_BACK)))
}
