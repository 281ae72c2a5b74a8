//! The fence cap: how a sequence joined to an ID space keeps every holder of its slots inside
//! the block grants its cluster holds on the hub (docs/safety.md rule 17;
//! docs/design/2026-11-29-multicluster.md, "Never waiting on the hub").
//!
//! A member cluster may issue on a slot of a block only at ticks `floor < t <= bound` of its
//! grant. The operator carries both ends into the slot's Lease, and nothing else changes for
//! the holder:
//! - **at assignment** ([`SlotLease::assign_in_block`]) the fence is raised to at least the
//!   block's floor, so the new holder starts above it (rule 4 does the rest), and the cap
//!   [`FENCE_CAP_ANNOTATION`] is set to the grant's bound;
//! - **when the hub renews the block**, the operator raises the cap of the block's Leases
//!   ([`SlotLease::raise_cap`]); a cap never goes down and never below the fence;
//! - **the holder** raises its fence only up to the cap ([`SlotLease::renew`] clamps it), so
//!   when the bound comes near and the hub cannot be reached, the holder stops at its fence
//!   exactly as when the API server cannot be reached (rule 3).
//!
//! The Lease policy (rule 14) enforces the same on the API server: only the operator writes
//! the cap, and no holder's write puts the fence above it. So a holder of an older release,
//! which does not know the annotation, is refused a fence above the cap, not trusted to
//! honour it; the Lease format stays 1 (a reader that ignores the cap cannot break it).
//!
//! A slot of a sequence that is not joined has no cap: [`SlotLease::assign`] removes one
//! left from an earlier assignment.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use super::{FENCE_ANNOTATION, Holder, SlotLease, SlotLeaseError, TransitionError, parse_tick};
use crate::IdSequenceSpec;
use crate::layout::Tick;

/// Annotation on a slot lease: the highest fence a holder may write, in ticks (the bound of
/// the ID-space block the slot lies in). Written by the operator only.
pub const FENCE_CAP_ANNOTATION: &str = "kubeflake.io/fence-cap";

/// What a block grant lets a new holder of one of its slots do: start above `start_above`
/// (the block's floor, or the slot's fence when that is higher) and write fences up to
/// `cap` (the grant's bound). There is room for at least one tick: `start_above < cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    start_above: Tick,
    cap: Tick,
}

/// A grant with no tick left for a new holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a new holder would start above tick {} and may issue up to tick {}: no tick \
     is left in the block's grant; the slot is not given until the hub renews the block",
    start_above.0,
    cap.0
)]
pub struct NoRoom {
    pub start_above: Tick,
    pub cap: Tick,
}

impl BlockLimits {
    pub fn new(start_above: Tick, cap: Tick) -> Result<BlockLimits, NoRoom> {
        if start_above < cap {
            Ok(BlockLimits { start_above, cap })
        } else {
            Err(NoRoom { start_above, cap })
        }
    }

    pub fn start_above(&self) -> Tick {
        self.start_above
    }

    pub fn cap(&self) -> Tick {
        self.cap
    }
}

/// Why the operator may not write a cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error(
        "slot lease {name} has fence {}, above the cap {} the operator would write: a \
         holder may already have issued past the block's bound, so the cap is not written; \
         this should not happen (the Lease policy refuses such a fence): report it, and keep \
         the slot's pods running until the block's bound has passed on the hub",
        fence.0,
        cap.0
    )]
    BelowFence {
        name: String,
        cap: Tick,
        fence: Tick,
    },
    #[error(
        "slot lease {name} has the cap {}; a cap never goes down, so {} is not \
         written (the block's bound on the hub only goes up during a term)",
        current.0,
        cap.0
    )]
    Lower {
        name: String,
        cap: Tick,
        current: Tick,
    },
    #[error(transparent)]
    BadLease(#[from] SlotLeaseError),
}

/// The cap a Lease's annotations carry, if any.
pub(super) fn parse(
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Tick>, SlotLeaseError> {
    annotations
        .and_then(|a| a.get(FENCE_CAP_ANNOTATION))
        .map(|v| {
            parse_tick(v).ok_or_else(|| SlotLeaseError::BadFenceCap {
                name: name.to_string(),
                value: v.clone(),
            })
        })
        .transpose()
}

impl SlotLease {
    /// [`SlotLease::assign`] of a slot in an ID-space block: the fence raised to at least
    /// `limits.start_above()` (the new holder starts above the block's floor), and the cap
    /// set to `limits.cap()`. Refused as `assign` refuses (a held slot).
    pub fn assign_in_block(
        &self,
        holder: Holder<'_>,
        sequence: &IdSequenceSpec,
        now: chrono::DateTime<chrono::Utc>,
        limits: BlockLimits,
    ) -> Result<Lease, TransitionError> {
        let mut next = self.assign(holder, sequence, now)?;
        let annotations = next.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let fence = self.fence.max(limits.start_above);
        annotations.insert(FENCE_ANNOTATION.to_string(), fence.0.to_string());
        annotations.insert(FENCE_CAP_ANNOTATION.to_string(), limits.cap.0.to_string());
        Ok(next)
    }

    /// The Lease with its cap raised to `cap` (the operator, after the hub renewed the
    /// block), held or free, holder unchanged. A Lease without a cap (a slot held since
    /// before its sequence joined) gets one. Refused below the fence or the current cap.
    pub fn raise_cap(&self, cap: Tick) -> Result<Lease, CapError> {
        if self.fence > cap {
            return Err(CapError::BelowFence {
                name: self.name.clone(),
                cap,
                fence: self.fence,
            });
        }
        if let Some(current) = self.fence_cap.filter(|c| *c > cap) {
            return Err(CapError::Lower {
                name: self.name.clone(),
                cap,
                current,
            });
        }
        let mut next = Lease::clone(&self.read);
        next.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(FENCE_CAP_ANNOTATION.to_string(), cap.0.to_string());
        Ok(next)
    }

    /// The Lease with its fence raised after the member's records went back (its etcd
    /// restored: `LocalBehind`, docs/design/2026-11-29-multicluster.md, "A member's etcd
    /// restored from an older snapshot while its pods run"), held or free, holder unchanged:
    /// the fence to `fence` (`now + lease duration + the skew bound`: no running holder can
    /// be above it) but not above `bound`, the block's bound on the hub, which no holder of
    /// the block can have passed either; the cap to at least `bound`, so the fence stays at
    /// or below it. Neither goes down. `None` when both are there already, and when the
    /// fence is at the bound or above (nothing to raise; no holder is given room there).
    pub fn raise_after_restore(&self, fence: Tick, bound: Tick) -> Option<Lease> {
        if self.fence >= bound {
            return None;
        }
        let fence = self.fence.max(fence.min(bound));
        let cap = self.fence_cap.map_or(bound, |c| c.max(bound)).max(fence);
        if fence == self.fence && self.fence_cap == Some(cap) {
            return None;
        }
        let mut next = Lease::clone(&self.read);
        let annotations = next.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(FENCE_ANNOTATION.to_string(), fence.0.to_string());
        annotations.insert(FENCE_CAP_ANNOTATION.to_string(), cap.0.to_string());
        Some(next)
    }
}

#[cfg(test)]
mod tests;
