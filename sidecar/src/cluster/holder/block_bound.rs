//! Rule 17 (docs/safety.md) in the holder: telling a fence held at the bound of the
//! ID-space block its slot lies in (the slot Lease's fence cap, which
//! `SlotLease::renew` never writes past) from one that is merely renewed, and saying so.

use kubeflake_crds::Tick;

use crate::cluster::Ctx;
use crate::generator::Generator;
use crate::slot::HeldSlot;

impl Ctx {
    /// Rule 17: whether the fence written stopped at the Lease's fence cap, the bound of the
    /// block the slot lies in, short of the one asked for. Then the sidecar serves up to it
    /// and refuses past it (`block_bound_reached`), as at a fence it cannot renew (rule 3),
    /// and keeps renewing at its usual pace until the operator raises the cap. Logged when
    /// it starts and ends, and shown by `kubeflake_fence_at_block_bound`.
    pub(super) fn note_block_bound(
        &self,
        generator: &Generator,
        slot: &HeldSlot,
        written: Tick,
        target: Tick,
    ) {
        let at_bound = slot
            .slot
            .fence_cap
            .filter(|cap| written < target && written >= *cap);
        let before = generator.set_block_bound(at_bound);
        self.metrics
            .fence_at_block_bound
            .set(i64::from(at_bound.is_some()));
        match (before, at_bound) {
            (None, Some(bound)) => tracing::warn!(
                slot = slot.slot.slot.0,
                bound_tick = bound.0,
                wanted_tick = target.0,
                "the lease fence stopped at its ID-space block's bound (the Lease's fence cap): \
                 the cluster could not renew its ID-space block on the hub; serving up to the \
                 bound, then refusing (block_bound_reached) until the operator raises the cap"
            ),
            (Some(bound), None) => tracing::info!(
                slot = slot.slot.slot.0,
                old_bound_tick = bound.0,
                fence_tick = written.0,
                "the lease fence rises again: the operator raised the fence cap (the hub renewed the block)"
            ),
            _ => {}
        }
    }
}
