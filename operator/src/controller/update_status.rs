//! The one status writer. A status equal to the stored one is not written, so a steady
//! sequence costs no write per pass.
//!
//! The status is written by server-side apply under the field manager [`FIELD_MANAGER`],
//! forced: the operator is the status's only rightful writer, and every replica applies
//! under the same manager, so during a leader handover the newer write simply replaces the
//! older one field by field instead of two anonymous merge patches interleaving. The
//! status is not a compare-and-swap (no `resourceVersion`): it is a report derived from
//! the slot Leases, which are (docs/safety.md rule 1), and the next pass corrects it.

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kubeflake_crds::conditions::{ConditionType, Reason, condition, not_ready_status};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus};
use serde_json::json;

use super::context::Context;
use super::error::Error;

/// The field manager of the operator's status writes.
pub const FIELD_MANAGER: &str = "kubeflake-operator";

/// Ready=False for `reason` with `message`, and a Warning Event (action `action`) when that
/// reason is new on the sequence: how a pass that hands nothing out says why. Everything
/// else in the status is kept as it is.
pub async fn not_ready(
    seq: &IdSequence,
    ctx: &Context,
    reason: Reason,
    action: &str,
    message: &str,
) -> Result<(), Error> {
    let was = condition(seq.status.as_ref(), ConditionType::Ready).map(|c| c.reason.clone());
    if was.as_deref() != Some(reason.as_str()) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.as_str().into(),
            note: Some(message.chars().take(1000).collect()),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &seq.object_ref(&())).await {
            tracing::warn!(error = %e, "could not record an Event");
        }
    }
    update_status(seq, ctx, not_ready_status(seq, reason, message)).await
}

/// Writes `status` when it differs from what `seq` holds.
pub async fn update_status(
    seq: &IdSequence,
    ctx: &Context,
    status: IdSequenceStatus,
) -> Result<(), Error> {
    if seq.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<IdSequence> =
        Api::namespaced(ctx.client.clone(), &seq.namespace().unwrap_or_default());
    api.patch_status(
        &seq.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&apply_body(status)),
    )
    .await?;
    Ok(())
}

/// The server-side apply body: type and status only (the whole status, so fields the
/// operator no longer sets are dropped).
fn apply_body(status: IdSequenceStatus) -> serde_json::Value {
    json!({
        "apiVersion": IdSequence::api_version(&()),
        "kind": IdSequence::kind(&()),
        "status": status,
    })
}
