//! The writes of a Snowflake pass: each planned step as a compare-and-swap on a slot Lease
//! (docs/safety.md rule 1), the direct pod read that confirms a "pod gone" release
//! (rule 9), and the conditional deletes of the leases once deletion may finish (rule 10).
//! A conflict is normal (another writer was first): it is counted and the pass repeats.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use kubeflake_crds::sequence::{IdSequence, SequenceParams};
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, HOLDER_POD_ANNOTATION, RELEASED_AT_ANNOTATION, SlotLease, lease_labels,
    lease_name,
};
use kubeflake_crds::{Slot, Tick};

use super::plan::{PodInfo, ReleaseReason, Step};
use crate::controller::context::Context;
use crate::controller::error::{Error, is_conflict, is_not_found};

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

/// Performs one planned step. `params` is `None` while the sequence is deleted (then the
/// plan holds releases only).
pub async fn execute(
    step: Step,
    seq: &IdSequence,
    ns: &str,
    name: &str,
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
                .replace(
                    &lease.name,
                    &PostParams::default(),
                    &released(seq, name, lease),
                )
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
                    &assigned(seq, name, *slot, pod, Some(lease), params),
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
                    &assigned(seq, name, *slot, pod, None, params),
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
                if let Ok(created) = DateTime::parse_from_rfc3339(&pod.created) {
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

fn owner_meta(
    seq: &IdSequence,
    lease_name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    resource_version: Option<String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(lease_name),
        namespace: seq.namespace(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: seq.controller_owner_ref(&()).map(|o| vec![o]),
        resource_version,
        ..Default::default()
    }
}

/// The lease with the slot given to `pod`; the fence is kept (rule 9).
fn assigned(
    seq: &IdSequence,
    name: &str,
    slot: Slot,
    pod: &PodInfo,
    existing: Option<&SlotLease>,
    params: &SequenceParams,
) -> Lease {
    let fence = existing.map(|l| l.fence).unwrap_or(Tick(0));
    let mut annotations = BTreeMap::from([
        (FENCE_ANNOTATION.to_string(), fence.0.to_string()),
        (HOLDER_POD_ANNOTATION.to_string(), pod.name.clone()),
    ]);
    if let Some(released) = existing.and_then(|l| l.released_at.clone()) {
        annotations.insert(RELEASED_AT_ANNOTATION.to_string(), released);
    }
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    Lease {
        metadata: owner_meta(
            seq,
            lease_name(name, slot),
            lease_labels(name, slot, Some(&pod.uid)),
            annotations,
            existing.and_then(|l| l.resource_version.clone()),
        ),
        spec: Some(LeaseSpec {
            holder_identity: Some(pod.uid.clone()),
            lease_duration_seconds: Some(params.lease_duration_secs as i32),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(existing.map(|l| l.transitions).unwrap_or(0) + 1),
            ..Default::default()
        }),
    }
}

/// The lease with its slot freed; the fence is kept (rule 9).
fn released(seq: &IdSequence, name: &str, lease: &SlotLease) -> Lease {
    let annotations = BTreeMap::from([
        (FENCE_ANNOTATION.to_string(), lease.fence.0.to_string()),
        (
            RELEASED_AT_ANNOTATION.to_string(),
            Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
        ),
    ]);
    Lease {
        metadata: owner_meta(
            seq,
            lease.name.clone(),
            lease_labels(name, lease.slot, None),
            annotations,
            lease.resource_version.clone(),
        ),
        spec: Some(LeaseSpec {
            lease_transitions: Some(lease.transitions),
            ..Default::default()
        }),
    }
}
