//! Slot planning: a pure function from what the operator observed to what it should write.
//!
//! Keeping the decision free of I/O makes the rules easy to test (docs/safety.md rules 9, 10):
//! - a slot is released only when its holder pod is gone (to be confirmed by a direct read
//!   before the write) or when the operator saw the lease unchanged for a lease duration;
//! - waiting pods get free slots, oldest pod first; slots whose fence has passed come first,
//!   then never-used ones, then least recently released;
//! - a pod that somehow holds two slots keeps the lowest; the others are released;
//! - a slot whose Lease name a foreign Lease takes (rule 16) is never handed out;
//! - a sequence joined to an ID space hands out only slots of the blocks its cluster holds,
//!   each with the block's limits, and raises the caps of held Leases after the hub renewed
//!   their block (rule 17, [`crate::controller::id_spaces`]).
//!
//! The plan is only a proposal: every write is a compare-and-swap on the lease's
//! `resourceVersion`, so a stale view makes a write fail, never makes it wrong.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};

use kubeflake_crds::slot_lease::{BlockLimits, SlotLease};
use kubeflake_crds::{Slot, Tick};

use crate::controller::id_spaces::blocks::Blocks;

/// A pod that takes part in the sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub uid: String,
    /// When the pod was created, if known: waiting pods are served oldest first.
    pub created: Option<DateTime<Utc>>,
    /// Being deleted, or finished: it keeps a slot it holds but gets no new one.
    pub leaving: bool,
}

/// Why a slot is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The holder pod was not seen; confirm with a direct read before releasing.
    PodGone,
    /// The lease did not change for a full lease duration (judged on the operator's clock).
    Silent,
    /// The pod holds a lower slot too.
    Duplicate,
    /// A joined sequence's slot outside the blocks its member holds now (rule 17): the
    /// block was reclaimed or handed back while the holder was capped at its old bound. The
    /// holder stops (it stopped at its cap already); the slot is not given again here until
    /// the member holds its block, and then above the block's floor. The pod gets a slot in
    /// a block held now.
    OutsideBlocks,
}

impl ReleaseReason {
    pub fn label(self) -> &'static str {
        match self {
            ReleaseReason::PodGone => "pod_gone",
            ReleaseReason::Silent => "silent",
            ReleaseReason::Duplicate => "duplicate",
            ReleaseReason::OutsideBlocks => "outside_blocks",
        }
    }
}

/// One write the operator should attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Release {
        lease: SlotLease,
        reason: ReleaseReason,
    },
    /// `existing` is the free lease to take over, or `None` to create the slot's lease.
    /// `limits`: the slot's block grant, for a sequence joined to an ID space (rule 17).
    Assign {
        slot: Slot,
        pod: PodInfo,
        existing: Option<SlotLease>,
        limits: Option<BlockLimits>,
    },
    /// The held lease's fence cap raised to `cap`: the hub renewed its block (rule 17).
    RaiseCap { lease: SlotLease, cap: Tick },
}

/// The outcome of planning one sequence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Slots with a holder (before this plan's writes).
    pub assigned: u64,
    /// Pods that wait for a slot after this plan's assignments.
    pub still_waiting: u64,
    /// Creation time of the oldest of them (the next to get a slot), for the operator's
    /// waiting metrics; `None` when none waits.
    pub oldest_waiting_since: Option<DateTime<Utc>>,
}

/// Everything planning needs.
pub struct Observed<'a> {
    pub capacity: u64,
    pub leases: &'a [SlotLease],
    pub pods: &'a [PodInfo],
    /// Leases the operator has seen unchanged for a full lease duration, by name.
    pub silent: &'a BTreeSet<String>,
    /// The current tick on the operator's clock (used only to prefer slots, never for safety).
    pub now: Tick,
    /// Whether new slots may be handed out (not while the sequence is being deleted).
    pub assign: bool,
    /// Slots whose Lease name a foreign Lease takes (docs/safety.md rule 16): never handed
    /// out, so that a waiting pod gets the next free slot instead of this one forever.
    pub taken: &'a BTreeSet<Slot>,
    /// Which slots the sequence's ID space lets it hand out (all when it is lone).
    pub blocks: &'a Blocks,
}

/// Decides releases and assignments.
pub fn plan(o: &Observed<'_>) -> Plan {
    let live: HashMap<&str, &PodInfo> = o.pods.iter().map(|p| (p.uid.as_str(), p)).collect();
    let mut steps = Vec::new();
    let mut holding: BTreeMap<&str, Vec<&SlotLease>> = BTreeMap::new();
    for lease in o.leases {
        if let Some(holder) = lease.holder.as_deref() {
            holding.entry(holder).or_default().push(lease);
        }
    }
    let assigned = holding.values().map(|v| v.len() as u64).sum();
    for (holder, leases) in &mut holding {
        leases.sort_by_key(|l| l.slot);
        for (i, lease) in leases.iter().enumerate() {
            // Silence first: it needs no confirmation, while "pod gone" is skipped when a
            // direct read finds the pod (e.g. one whose sequence label was removed: out of
            // the cache, but alive). A silent holder is reclaimed either way.
            let reason = if o.silent.contains(&lease.name) {
                Some(ReleaseReason::Silent)
            } else if !live.contains_key(holder) {
                Some(ReleaseReason::PodGone)
            } else if i > 0 {
                Some(ReleaseReason::Duplicate)
            } else if o.blocks.held_outside(lease) {
                Some(ReleaseReason::OutsideBlocks)
            } else {
                None
            };
            if let Some(reason) = reason {
                steps.push(Step::Release {
                    lease: (*lease).clone(),
                    reason,
                });
            }
        }
    }

    // Rule 17: held leases follow their block's renewals (not those released just now: one
    // write per lease and pass).
    let releasing: HashSet<String> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Release { lease, .. } => Some(lease.name.clone()),
            _ => None,
        })
        .collect();
    for lease in o.leases.iter().filter(|l| l.holder.is_some()) {
        if releasing.contains(&lease.name) {
            continue;
        }
        if let Some(cap) = o.blocks.cap_to_raise(lease) {
            steps.push(Step::RaiseCap {
                lease: lease.clone(),
                cap,
            });
        }
    }

    let mut waiting: Vec<&PodInfo> = o
        .pods
        .iter()
        .filter(|p| !p.leaving && !holding.contains_key(p.uid.as_str()))
        .collect();
    waiting.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));

    // Free slots are looked for only when a pod waits, and only as many as wait.
    let want = if o.assign { waiting.len() } else { 0 };
    let free = if want > 0 {
        free_slots(o, want)
    } else {
        Vec::new()
    };
    let handed_out = free.len();
    for (pod, (slot, existing, limits)) in waiting.iter().zip(free) {
        steps.push(Step::Assign {
            slot,
            pod: (*pod).clone(),
            existing,
            limits,
        });
    }
    // Waiting pods are served oldest first: those left over are the younger ones.
    let left: &[&PodInfo] = waiting.get(handed_out..).unwrap_or_default();
    Plan {
        steps,
        assigned,
        still_waiting: left.len() as u64,
        oldest_waiting_since: left.first().and_then(|p| p.created),
    }
}

/// The first `want` free slots in order of preference: fence already passed (never-used
/// slots have fence 0) first, then least recently released, then lowest number.
///
/// Costs O(L log L + want) for L leases, not O(slots): the free leases are sorted, and
/// never-used slot numbers (a layout has up to 65,536) are walked lazily in ascending
/// order and merged in, as they all share the key (fence passed, never released). Only
/// slots [`Blocks::room`] lets go are taken, each with its block's limits.
pub(super) fn free_slots(o: &Observed<'_>, want: usize) -> Vec<Free> {
    // (fence not passed yet, released at): the order of preference before the slot number.
    type Key = (bool, Option<DateTime<Utc>>);
    let key = |lease: Option<&SlotLease>| -> Key {
        let fence = lease.map(|l| l.fence).unwrap_or(Tick(0));
        // Parsed times: older versions wrote released-at with other precisions, which do
        // not sort as text.
        let released = lease.and_then(SlotLease::released_time);
        (fence >= o.now, released)
    };
    let used: HashSet<Slot> = o.leases.iter().map(|l| l.slot).collect();
    let mut released: Vec<(Key, &SlotLease, Option<BlockLimits>)> = o
        .leases
        .iter()
        .filter(|l| l.holder.is_none() && u64::from(l.slot.0) < o.capacity)
        .filter(|l| !o.taken.contains(&l.slot))
        .filter_map(|l| Some((key(Some(l)), l, o.blocks.room(l.slot, l.fence)?)))
        .collect();
    released.sort_by(|(a_key, a, _), (b_key, b, _)| (a_key, a.slot).cmp(&(b_key, b.slot)));
    let never_used_key = key(None);
    let mut never_used = o
        .blocks
        .candidates(o.capacity)
        .filter(|slot| !used.contains(slot) && !o.taken.contains(slot))
        .filter_map(|slot| Some((slot, o.blocks.room(slot, Tick(0))?)))
        .peekable();
    let mut released = released.into_iter().peekable();
    let mut free = Vec::with_capacity(want.min(o.capacity as usize));
    while free.len() < want {
        let take_released = match (released.peek(), never_used.peek()) {
            (Some((k, lease, _)), Some((slot, _))) => (k, lease.slot) < (&never_used_key, *slot),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_released {
            released
                .next()
                .map(|(_, l, limits)| (l.slot, Some(l.clone()), limits))
        } else {
            never_used.next().map(|(slot, limits)| (slot, None, limits))
        };
        free.extend(next);
    }
    free
}

/// A free slot, the free lease to take over (`None`: create it), and its block's limits.
pub(super) type Free = (Slot, Option<SlotLease>, Option<BlockLimits>);

#[cfg(test)]
mod rule17_tests;
#[cfg(test)]
mod tests;
