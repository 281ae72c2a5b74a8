//! The writes of a Snowflake pass: each planned step as a compare-and-swap on a slot Lease
//! (docs/safety.md rule 1), the direct pod read that confirms a "pod gone" release
//! (rule 9), and the conditional deletes of the leases once deletion may finish (rule 10).
//! A conflict is normal (another writer was first): it is counted and the pass repeats.
//!
//! Each write is the API crate's transition applied to the Lease the plan read
//! ([`SlotLease::read`]), so fields kubeflake does not model are written back as read;
//! the transition also checks the holder on that Lease ([`TransitionError`]). A refusal
//! means the plan's view no longer allows the step: like a conflict, the pass repeats.
//!
//! A slot of a sequence joined to an ID space is assigned with its block's limits
//! (`SlotLease::assign_in_block`), and a held one's cap follows its block's renewals
//! (`SlotLease::raise_cap`; docs/safety.md rule 17).

use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kubeflake_crds::ownership::{Foreign, LeaseKind};
use kubeflake_crds::sequence::{IdSequence, SequenceParams};
use kubeflake_crds::slot_lease::BlockLimits;
use kubeflake_crds::slot_lease::fence_cap::CapError;
use kubeflake_crds::slot_lease::{self, Holder, Releaser, SlotLease, TransitionError};
use kubeflake_crds::{Slot, Tick};

use super::plan::{PodInfo, ReleaseReason, Step};
use crate::controller::context::Context;
use crate::controller::error::{Error, is_conflict, is_not_found};
use crate::controller::expectations::Written;
use crate::controller::foreign;

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
    /// A held lease's fence cap raised after the hub renewed its block.
    CapRaised {
        slot: Slot,
        cap: Tick,
    },
    /// Nothing to do after all (the "gone" pod exists).
    Skipped,
    /// Another writer changed the lease first (counted in
    /// `kubeflake_operator_write_conflicts_total`).
    Conflict,
    /// The slot's Lease name is taken by a Lease kubeflake did not make (rule 16): nothing
    /// was written; the slot is skipped from now on, and the pod gets another.
    Foreign {
        slot: Slot,
        foreign: Foreign,
    },
}

/// The lease a planned step of sequence `sequence` writes, and the version it replaces
/// (what the next pass waits to see in the cache).
pub fn written_by(sequence: &str, step: &Step) -> Written {
    match step {
        Step::Release { lease, .. }
        | Step::RaiseCap { lease, .. }
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
/// plan holds releases only); a slot is assigned only with them, so the spec noted on the
/// Lease for the pod's sidecar is one that validated.
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
            // The plan releases held slots only: a free one has nothing to release.
            let Some(holder) = lease.holder.as_deref() else {
                return Ok(Outcome::Skipped);
            };
            if *reason == ReleaseReason::PodGone && holder_pod_exists(ctx, ns, lease).await? {
                return Ok(Outcome::Skipped);
            }
            let next = match released(lease, holder) {
                Ok(next) => next,
                Err(e) => return refused(ctx, e),
            };
            leases
                .replace(&lease.name, &PostParams::default(), &next)
                .await
        }
        (Step::RaiseCap { lease, cap }, _) => {
            let next = match lease.raise_cap(*cap) {
                Ok(next) => next,
                Err(e) => return cap_refused(ctx, e),
            };
            leases
                .replace(&lease.name, &PostParams::default(), &next)
                .await
        }
        // The plan hands out no slot without params (deletion); nothing to write.
        (Step::Assign { .. }, None) => return Ok(Outcome::Skipped),
        (
            Step::Assign {
                slot,
                pod,
                existing: Some(lease),
                limits,
            },
            Some(_),
        ) => {
            let next = match assigned(seq, *slot, pod, Some(lease), *limits) {
                Ok(next) => next,
                Err(e) => return refused(ctx, e),
            };
            leases
                .replace(&lease.name, &PostParams::default(), &next)
                .await
        }
        (
            Step::Assign {
                slot,
                pod,
                existing: None,
                limits,
            },
            Some(_),
        ) => {
            let next = match assigned(seq, *slot, pod, None, *limits) {
                Ok(next) => next,
                Err(e) => return refused(ctx, e),
            };
            match leases.create(&PostParams::default(), &next).await {
                // The name is taken: by our own Lease the cache does not show yet (a
                // conflict), or by someone else's, which the cache never shows.
                Err(e) if is_conflict(&e) => return name_taken(ctx, &leases, seq, *slot).await,
                written => written,
            }
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
            Step::RaiseCap { lease, cap } => Outcome::CapRaised {
                slot: lease.slot,
                cap,
            },
        }),
        Err(e) if is_conflict(&e) => {
            ctx.metrics.conflicts.inc();
            Ok(Outcome::Conflict)
        }
        Err(e) => Err(e.into()),
    }
}

/// Creating slot `slot`'s Lease found its name taken: reads it. Foreign (rule 16): reported
/// by the caller, and the slot is skipped from now on. Kubeflake's (the cache is behind) or
/// gone again: a conflict, the pass repeats.
async fn name_taken(
    ctx: &Context,
    leases: &Api<Lease>,
    seq: &IdSequence,
    slot: Slot,
) -> Result<Outcome, Error> {
    let name = slot_lease::lease_name(&seq.name_any(), slot);
    if let Some(lease) = leases.get_opt(&name).await?
        && let Err(foreign) = foreign::check(seq, &lease, LeaseKind::Slot)
    {
        return Ok(Outcome::Foreign { slot, foreign });
    }
    ctx.metrics.conflicts.inc();
    Ok(Outcome::Conflict)
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

/// A transition refused the Lease as read. An unreadable Lease fails the pass (it says
/// what to do); a holder other than the plan's means the plan is out of date: counted as a
/// conflict, so the pass repeats on a fresh read (docs/safety.md rule 1).
fn refused(ctx: &Context, e: TransitionError) -> Result<Outcome, Error> {
    match e {
        TransitionError::BadLease(e) => Err(e.into()),
        e @ (TransitionError::NotHolder { .. } | TransitionError::Held { .. }) => {
            tracing::warn!(error = %e, "a planned slot write was refused on the lease as read; reading again");
            ctx.metrics.conflicts.inc();
            Ok(Outcome::Conflict)
        }
    }
}

/// A cap the plan wanted is refused on the lease as read. Lower than the one there: the
/// plan is out of date (another writer raised it), a conflict, read again. Below the
/// fence: a holder may have issued past its block's bound, which the Lease policy should
/// have refused: an error the pass returns (and logs), never written over.
fn cap_refused(ctx: &Context, e: CapError) -> Result<Outcome, Error> {
    match e {
        CapError::BadLease(e) => Err(e.into()),
        e @ CapError::Lower { .. } => {
            tracing::warn!(error = %e, "a planned fence cap was refused on the lease as read; reading again");
            ctx.metrics.conflicts.inc();
            Ok(Outcome::Conflict)
        }
        e @ CapError::BelowFence { .. } => Err(Error::FenceAboveCap(e)),
    }
}

/// The lease with the slot given to `pod`: the API crate's one assignment transition on
/// the free lease as read (or on a new vacant one), which keeps the fence (rule 9) and
/// every field it does not own, counts the acquisition and notes the sequence's spec for
/// the pod's sidecar. With `limits` (a joined sequence, rule 17) the fence starts at the
/// block's floor at least and the cap is the grant's bound; without, no cap is left.
fn assigned(
    seq: &IdSequence,
    slot: Slot,
    pod: &PodInfo,
    existing: Option<&SlotLease>,
    limits: Option<BlockLimits>,
) -> Result<Lease, TransitionError> {
    let holder = Holder {
        uid: &pod.uid,
        pod: &pod.name,
    };
    let vacant;
    let lease = match existing {
        Some(lease) => lease,
        None => {
            vacant = SlotLease::parse_shared(std::sync::Arc::new(slot_lease::vacant(seq, slot)))
                .map_err(TransitionError::BadLease)?;
            &vacant
        }
    };
    match limits {
        Some(limits) => lease.assign_in_block(holder, &seq.spec, Utc::now(), limits),
        None => lease.assign(holder, &seq.spec, Utc::now()),
    }
}

/// The lease as read with its slot freed by the operator from `holder`, the pod the plan
/// saw holding it: the fence is kept (rule 9), and so is every field the release does not
/// own.
fn released(lease: &SlotLease, holder: &str) -> Result<Lease, TransitionError> {
    lease.release(Releaser::Operator { holder }, Utc::now())
}
