//! The writes of a Snowflake pass: each planned step as a compare-and-swap on a slot Lease
//! (docs/safety.md rule 1), the direct pod read that confirms a "pod gone" release
//! (rule 9), and the conditional deletes of the leases once deletion may finish (rule 10).
//! A conflict is normal (another writer was first): it is counted and the pass repeats.

use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kubeflake_crds::Slot;
use kubeflake_crds::sequence::{IdSequence, SequenceParams};
use kubeflake_crds::slot_lease::{self, Holder, Releaser, SlotLease};

use super::plan::{PodInfo, ReleaseReason, Step};
use crate::controller::context::Context;
use crate::controller::error::{Error, is_conflict, is_not_found};
use crate::controller::expectations::Written;

/// What happened to one attempted write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Assigned {
        slot: Slot,
        pod: PodInfo,
    },
    Released {
        slot: Slot,
        pod: Option<String>,
        reason: ReleaseReason,
    },
    /// Nothing to do after all (the "gone" pod exists).
    Skipped,
    /// Another writer changed the lease first (counted in
    /// `kubeflake_operator_write_conflicts_total`).
    Conflict,
}

/// The lease a planned step of sequence `sequence` writes, and the version it replaces
/// (what the next pass waits to see in the cache).
pub fn written_by(sequence: &str, step: &Step) -> Written {
    match step {
        Step::Release { lease, .. }
        | Step::Assign {
            existing: Some(lease),
            ..
        } => Written {
            lease: lease.name.clone(),
            replaced: lease.resource_version.clone(),
        },
        Step::Assign {
            slot,
            existing: None,
            ..
        } => Written {
            lease: slot_lease::lease_name(sequence, *slot),
            replaced: None,
        },
    }
}

/// Performs one planned step. `params` is `None` while the sequence is deleted (then the
/// plan holds releases only).
pub async fn execute(
    step: Step,
    seq: &IdSequence,
    ns: &str,
    params: Option<&SequenceParams>,
    ctx: &Context,
) -> Result<Outcome, Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let write = match (&step, params) {
        (Step::Release { lease, reason }, _) => {
            if *reason == ReleaseReason::PodGone && holder_pod_exists(ctx, ns, lease).await? {
                return Ok(Outcome::Skipped);
            }
            leases
                .replace(&lease.name, &PostParams::default(), &released(seq, lease)?)
                .await
        }
        // The plan hands out no slot without params (deletion); nothing to write.
        (Step::Assign { .. }, None) => return Ok(Outcome::Skipped),
        (
            Step::Assign {
                slot,
                pod,
                existing: Some(lease),
            },
            Some(params),
        ) => {
            leases
                .replace(
                    &lease.name,
                    &PostParams::default(),
                    &assigned(seq, *slot, pod, Some(lease), params)?,
                )
                .await
        }
        (
            Step::Assign {
                slot,
                pod,
                existing: None,
            },
            Some(params),
        ) => {
            leases
                .create(
                    &PostParams::default(),
                    &assigned(seq, *slot, pod, None, params)?,
                )
                .await
        }
    };
    match write {
        Ok(_) => Ok(match step {
            Step::Release { lease, reason } => {
                ctx.metrics
                    .reclaims
                    .with_label_values(&[reason.label()])
                    .inc();
                Outcome::Released {
                    slot: lease.slot,
                    pod: lease.holder_pod,
                    reason,
                }
            }
            Step::Assign { slot, pod, .. } => {
                ctx.metrics.assignments.inc();
                if let Some(created) = pod.created {
                    let waited = Utc::now()
                        .signed_duration_since(created)
                        .num_milliseconds()
                        .max(0);
                    ctx.metrics.pod_to_slot.observe(waited as f64 / 1000.0);
                }
                Outcome::Assigned { slot, pod }
            }
        }),
        Err(e) if is_conflict(&e) => {
            ctx.metrics.conflicts.inc();
            Ok(Outcome::Conflict)
        }
        Err(e) => Err(e.into()),
    }
}

/// Confirms with a direct read (not the cache) whether the holder pod still exists.
async fn holder_pod_exists(ctx: &Context, ns: &str, lease: &SlotLease) -> Result<bool, Error> {
    let Some(pod_name) = lease.holder_pod.as_deref() else {
        return Ok(false);
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match pods.get_opt(pod_name).await? {
        Some(pod) => Ok(pod.uid().as_deref() == lease.holder.as_deref()),
        None => Ok(false),
    }
}

/// Whether every lease was deleted (each conditionally on its version; one already gone
/// counts as deleted). `false` on a conflict: the pass repeats.
pub async fn delete_leases(ctx: &Context, ns: &str, leases: &[SlotLease]) -> Result<bool, Error> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    for lease in leases {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.resource_version.clone(),
                uid: None,
            }),
            ..Default::default()
        };
        match api.delete(&lease.name, &params).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) if is_conflict(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The lease with the slot given to `pod`: the API crate's one assignment transition,
/// which keeps the fence (rule 9) and counts the acquisition.
fn assigned(
    seq: &IdSequence,
    slot: Slot,
    pod: &PodInfo,
    existing: Option<&SlotLease>,
    params: &SequenceParams,
) -> Result<Lease, Error> {
    let base = match existing {
        Some(lease) => lease.to_lease(seq),
        None => slot_lease::vacant(seq, slot),
    };
    let holder = Holder {
        uid: &pod.uid,
        pod: &pod.name,
    };
    Ok(slot_lease::assign(
        &base,
        holder,
        params.lease_duration_secs as i32,
        Utc::now(),
    )?)
}

/// The lease with its slot freed by the operator: the fence is kept (rule 9).
fn released(seq: &IdSequence, lease: &SlotLease) -> Result<Lease, Error> {
    Ok(slot_lease::release(
        &lease.to_lease(seq),
        Releaser::Operator,
        Utc::now(),
    )?)
}
