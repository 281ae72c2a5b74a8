//! The finalizer `kubeflake.io/slot-leases` that keeps a sequence until its slots are safe
//! to forget (docs/safety.md rule 10): added on the first pass, removed when deletion
//! finishes.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeflake_crds::sequence::IdSequence;
use kubeflake_crds::slot_lease::FINALIZER;
use serde_json::json;

use super::context::Context;
use super::error::Error;

/// Whether the sequence carries the finalizer.
pub fn has_finalizer(seq: &IdSequence) -> bool {
    seq.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the finalizer unless it is there.
pub async fn ensure(seq: &IdSequence, ctx: &Context) -> Result<(), Error> {
    if has_finalizer(seq) {
        return Ok(());
    }
    let mut finalizers = seq.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    write_finalizers(seq, ctx, finalizers).await
}

/// Removes the finalizer: the API server then deletes the sequence.
pub async fn remove(seq: &IdSequence, ctx: &Context) -> Result<(), Error> {
    let finalizers = seq
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    write_finalizers(seq, ctx, finalizers).await
}

/// Writes the sequence's finalizers. The resourceVersion in the merge patch makes it
/// conditional: a compare-and-swap like every other write (a conflict means someone else
/// changed the object; the pass repeats).
async fn write_finalizers(
    seq: &IdSequence,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<IdSequence> =
        Api::namespaced(ctx.client.clone(), &seq.namespace().unwrap_or_default());
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": seq.resource_version()}});
    api.patch(
        &seq.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
