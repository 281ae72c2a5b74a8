//! The fence raise after this cluster's records went back (issue 55; rule 21 of
//! docs/design/2026-11-29-multicluster.md, "A member's etcd restored from an older snapshot
//! while its pods run").
//!
//! When a contact finds the copy's generation behind the hub's (`check_hub` answers
//! `LocalBehind`), the slot Leases may have gone back with it: a Lease may show an older
//! fence, or no holder, while a pod still issues up to the fence it wrote after the
//! snapshot. The task then keeps the hub's view in the copy and, **in the same status
//! write**, sets the membership's condition `FencesRaised=False` (`RaisePending`,
//! [`mark_pending`]). While that condition is not `True` the controller assigns no slot of
//! the sequence (`controller/id_spaces/blocks.rs`, `Waiting::FencesNotRaised`). The task
//! then raises every slot Lease in the blocks the copy holds ([`plan`]:
//! `SlotLease::raise_after_restore`) to `now + lease duration + SKEW_BOUND`, no higher
//! than the block's bound on the hub: a running holder's fence is at most its own
//! `now + lease duration`, and never above its block's bound. A slot of those blocks with no
//! Lease at all (first used after the snapshot, while its pod may still issue) gets one,
//! free, at the same fence ([`plan_missing`]). Only when every write
//! succeeded does it set `FencesRaised=True` (`Raised`); a failed write leaves the
//! condition `False`, and the next round tries again ([`raise_if_pending`]).
//!
//! Held Leases are raised too, not only free ones: a restored Lease may name a pod that is
//! gone, which the controller then releases keeping the fence it shows (rule 9), so it
//! would be free with the old fence after the raise. A running holder's own renewals only
//! go up from the raised fence (the fence never goes down), and its cap is at the bound.
//! Running holders whose Lease now names another pod stop by themselves (rule 3).
//!
//! **Why a condition, not a status field.** The condition is in the membership's status,
//! so it survives an operator restart and is written atomically with the copy it guards:
//! the controller cannot see the hub's view without the condition. An operator built
//! before this module reads and writes the status through its own struct: a field it does
//! not know would be dropped by its next read-modify-replace of the status, and the
//! raise forgotten. The conditions list it keeps whole (it sets only `Ready` and
//! `BlocksLow`), so `FencesRaised=False` survives it, and no earlier release writes a
//! condition of that type, so none can set it `True`. (Such an operator's controller does
//! not read it either: it assigns as before; no release has shipped the ID space yet.)

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::membership::{BadCopy, IdSpaceMembership, IdSpaceMembershipStatus};
use kubeflake_crds::id_space::{LocalRecord, Space, SpaceSequence};
use kubeflake_crds::layout::{DatacenterId, Slot, Tick};
use kubeflake_crds::slot_lease::{self, SEQUENCE_LABEL, SlotLease, SlotLeaseError};

use super::conditions::{self, FENCES_RAISED, Reason};
use super::connect::CALL_TIMEOUT;

/// How far a running holder's clock may be ahead of this operator's, on top of the lease
/// duration: the sidecar's `--max-clock-skew-ms` default (10 s, docs/configuration.md) for
/// the holder's clock against the API server, and as much again for this operator's clock,
/// which no gate checks.
pub const SKEW_BOUND: Duration = Duration::from_secs(20);

/// Whether the membership's slot fences wait to be raised: `FencesRaised` present and not
/// `True`. Absent (the copy never went back): no.
pub fn pending(status: &IdSpaceMembershipStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == FENCES_RAISED && c.status != "True")
}

/// Sets `FencesRaised=False` (`RaisePending`): the copy went back. Written in the same
/// status write as the hub's view.
pub fn mark_pending(status: &mut IdSpaceMembershipStatus, generation: Option<i64>, now: Time) {
    conditions::set(
        &mut status.conditions,
        FENCES_RAISED,
        false,
        Reason::RaisePending,
        "this cluster's copy of its claims was behind the hub's (its etcd went back): no slot \
         of the sequence is assigned until the operator has raised the fences of the slot \
         Leases in its blocks (it retries every contact; if this lasts, see the operator's log \
         and its Events on this membership)",
        generation,
        now,
    );
}

/// The tick the fences are raised to: `now + lease duration + SKEW_BOUND`.
pub fn target(now: Tick, lease_duration_secs: u64, ticks_in_ms: impl Fn(u64) -> u64) -> Tick {
    let ms = lease_duration_secs
        .saturating_mul(1000)
        .saturating_add(SKEW_BOUND.as_millis() as u64);
    Tick(now.0.saturating_add(ticks_in_ms(ms)))
}

/// The Leases to write (pure): every slot Lease in a block the copy holds, raised to
/// `target` but not above the block's bound. Leases outside the blocks are left alone: a
/// block claimed later starts above its floor, which is at or above any bound of before.
pub fn plan(
    leases: &[SlotLease],
    copy: &LocalRecord,
    space: &Space,
    datacenter: DatacenterId,
    target: Tick,
) -> Vec<(String, Lease)> {
    leases
        .iter()
        .filter_map(|lease| {
            let bound = copy.fence_cap(space, datacenter, lease.slot)?;
            let next = lease.raise_after_restore(target, bound)?;
            Some((lease.name.clone(), next))
        })
        .collect()
}

/// The Leases to create (pure): one for every slot of the blocks the copy holds that has
/// no Lease at all, free, its fence at `target` but not above the block's bound. A slot
/// first used after the snapshot has no Lease in the restored store while its pod may still
/// issue there; without one at a raised fence the controller would create one at fence 0 and
/// hand the slot out from the block's floor. Slots outside the sequence's datacenter are
/// not the sequence's.
pub fn plan_missing(
    leases: &[SlotLease],
    copy: &LocalRecord,
    space: &Space,
    sequence: &IdSequence,
    datacenter: DatacenterId,
    target: Tick,
) -> Result<Vec<Lease>, SlotLeaseError> {
    let present: std::collections::BTreeSet<u32> = leases.iter().map(|l| l.slot.0).collect();
    let mut created = Vec::new();
    for grant in copy.grants() {
        let (dc, slots) = space.slots_of(grant.block);
        if dc != datacenter {
            continue;
        }
        for slot in slots.filter(|s| !present.contains(s)) {
            let Some(bound) = copy.fence_cap(space, datacenter, Slot(slot)) else {
                continue;
            };
            let vacant = SlotLease::parse(&slot_lease::vacant(sequence, Slot(slot)))?;
            if let Some(next) = vacant.raise_after_restore(target, bound) {
                created.push(next);
            }
        }
    }
    Ok(created)
}

/// Why a raise did not finish. The condition stays `False`; the next round tries again.
#[derive(Debug, thiserror::Error)]
pub enum RaiseError {
    #[error(
        "cannot read IdSequence {namespace}/{name} to raise its slot fences: {reason}; no slot \
         of it is assigned until it is read"
    )]
    Sequence {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error(transparent)]
    Copy(#[from] BadCopy),
    #[error(
        "the membership's status holds no ID space parameters (blockSlots), so the blocks \
         cannot be mapped to slots; the next contact with the hub writes them"
    )]
    NoSpace,
    #[error(transparent)]
    Lease(#[from] SlotLeaseError),
    #[error(
        "cannot raise the fence of slot Lease {name}: {source}; no slot of the sequence is \
         assigned until every Lease of its blocks is raised (retried every contact)"
    )]
    Write {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "cannot create slot Lease {name} at a raised fence: {source}; no slot of the sequence \
         is assigned until every slot of its blocks has one (retried every contact)"
    )]
    Create {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what} timed out; retried at the next contact")]
    Timeout { what: &'static str },
    #[error("cannot list the sequence's slot Leases: {0}")]
    List(#[source] kube::Error),
    #[error("cannot write the membership's status (FencesRaised): {0}")]
    Status(#[source] kube::Error),
}

/// When `membership` (as stored) waits for its fences to be raised: raises them, then sets
/// `FencesRaised=True`. Returns how many Leases were written, or `None` when nothing
/// waited.
pub async fn raise_if_pending(
    client: &Client,
    membership: &IdSpaceMembership,
) -> Result<Option<usize>, RaiseError> {
    let Some(status) = membership.status.as_ref().filter(|s| pending(s)) else {
        return Ok(None);
    };
    let namespace = membership.namespace().unwrap_or_default();
    let name = &membership.spec.sequence;
    let seq_error = |reason: String| RaiseError::Sequence {
        namespace: namespace.clone(),
        name: name.clone(),
        reason,
    };
    let sequences: Api<IdSequence> = Api::namespaced(client.clone(), &namespace);
    let seq = tokio::time::timeout(CALL_TIMEOUT, sequences.get(name))
        .await
        .map_err(|_| RaiseError::Timeout {
            what: "reading the IdSequence",
        })?
        .map_err(|e| seq_error(e.to_string()))?;
    let params = seq.spec.params().map_err(|e| seq_error(e.to_string()))?;
    let space_sequence = SpaceSequence {
        layout: params.layout,
        timebase: params.timebase,
        mode: seq.spec.mode,
        strict: seq.spec.segment.as_ref().is_some_and(|s| s.strict),
    };
    let space = status
        .space(space_sequence)
        .ok_or(RaiseError::NoSpace)?
        .map_err(|e| seq_error(e.to_string()))?;
    let copy = status.local_record(&space)?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let list = tokio::time::timeout(
        CALL_TIMEOUT,
        leases.list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}={name}"))),
    )
    .await
    .map_err(|_| RaiseError::Timeout {
        what: "listing the slot Leases",
    })?
    .map_err(RaiseError::List)?;
    let parsed = list
        .items
        .iter()
        .map(SlotLease::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    let now = params.timebase.tick_at(now_ms).unwrap_or(Tick(0));
    let to = target(now, params.lease_duration_secs, |ms| {
        params.timebase.ticks_in_ms(ms)
    });
    let writes = plan(&parsed, &copy, &space, params.datacenter, to);
    let missing = plan_missing(&parsed, &copy, &space, &seq, params.datacenter, to)?;
    for next in &missing {
        let lease_name = next.metadata.name.clone().unwrap_or_default();
        tokio::time::timeout(CALL_TIMEOUT, leases.create(&PostParams::default(), next))
            .await
            .map_err(|_| RaiseError::Timeout {
                what: "creating a slot Lease",
            })?
            .map_err(|source| RaiseError::Create {
                name: lease_name,
                source,
            })?;
    }
    for (lease_name, next) in &writes {
        tokio::time::timeout(
            CALL_TIMEOUT,
            leases.replace(lease_name, &PostParams::default(), next),
        )
        .await
        .map_err(|_| RaiseError::Timeout {
            what: "writing a slot Lease",
        })?
        .map_err(|source| RaiseError::Write {
            name: lease_name.clone(),
            source,
        })?;
    }
    let mut raised = status.clone();
    conditions::set(
        &mut raised.conditions,
        FENCES_RAISED,
        true,
        Reason::Raised,
        &format!(
            "the fences of {} slot Lease(s) in this cluster's blocks were raised, and {} created, \
             at tick {} (now + lease duration + {} s) after its copy was found behind the \
             hub's; slots are assigned again",
            writes.len(),
            missing.len(),
            to.0,
            SKEW_BOUND.as_secs()
        ),
        membership.metadata.generation,
        Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let mut object = membership.clone();
    object.status = Some(raised);
    let api: Api<IdSpaceMembership> = Api::namespaced(client.clone(), &namespace);
    tokio::time::timeout(
        CALL_TIMEOUT,
        api.replace_status(&membership.name_any(), &PostParams::default(), &object),
    )
    .await
    .map_err(|_| RaiseError::Timeout {
        what: "writing the membership's status",
    })?
    .map_err(RaiseError::Status)?;
    Ok(Some(writes.len() + missing.len()))
}

/// [`raise_if_pending`], its outcome logged, and a failure also a Warning Event on the
/// membership (the condition stays `False`; the next round tries again).
pub async fn raise_logged(client: &Client, recorder: &Recorder, membership: &IdSpaceMembership) {
    match raise_if_pending(client, membership).await {
        Ok(None) => {}
        Ok(Some(written)) => {
            tracing::info!(membership = %membership.name_any(), written, "slot fences raised after the copy went back; slots are assigned again");
        }
        Err(e) => {
            tracing::warn!(membership = %membership.name_any(), error = %e, "cannot raise the slot fences after the copy went back");
            let event = Event {
                type_: EventType::Warning,
                reason: "FenceRaiseFailed".into(),
                note: Some(e.to_string().chars().take(1000).collect()),
                action: "RaiseFences".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &membership.object_ref(&())).await {
                tracing::warn!(error = %e, "could not record an Event");
            }
        }
    }
}

#[cfg(test)]
mod tests;
