//! The one status writer. A status equal to the stored one is not written, so a steady
//! sequence costs no write per pass.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus};
use serde_json::json;

use super::context::Context;
use super::error::Error;

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
    let patch = json!({"status": status});
    api.patch_status(
        &seq.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
