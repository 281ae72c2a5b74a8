//! One contact of a member with the hub, decided from what was read alone (pure, so the
//! decisions are tested without an API server): the checks that refuse a copy or a hub
//! that cannot be trusted, the join, renewals of due blocks, reclaims of lapsed ones and
//! claims until a spare block is held (docs/design/2026-11-29-multicluster.md, rules
//! 17-21). Each decision is at most one transition of `registry.rs` (the join, one
//! renewal, one reclaim or one claim, in that order), as the hub's admission policy admits
//! one per write. The caller writes the returned registry on the hub by compare-and-swap,
//! decides again from what it wrote, up to [`MAX_WRITES_PER_CONTACT`] times, and only then
//! keeps the copy in the membership's status: a grant is used only once the hub holds it.

use kubeflake_crds::id_space::join::{JoinRequest, SlotUse, join};
use kubeflake_crds::id_space::local::{HubCheck, LocalRecord, check_cluster, check_hub};
use kubeflake_crds::id_space::membership::{IdSpaceMembershipStatus, check_space_uid};
use kubeflake_crds::id_space::registry::{BlockState, Registry, RegistryError};
use kubeflake_crds::id_space::space::{Space, SpaceSequence};
use kubeflake_crds::id_space::{MemberId, MemberName};
use kubeflake_crds::layout::{DatacenterId, Tick};

use super::conditions::Reason;

/// The most registry writes one contact makes (each decision is one transition, one
/// compare-and-swap: the hub's policy admits a revision counted up by exactly 1). A member
/// that finds only blocks whose floor is still ahead does not take the whole space at once.
pub const MAX_WRITES_PER_CONTACT: usize = 6;

/// What the member brings to a contact.
#[derive(Debug, Clone)]
pub struct Contact<'a> {
    pub this: &'a MemberId,
    pub name: &'a MemberName,
    /// The membership's status as read (the copy).
    pub copy: &'a IdSpaceMembershipStatus,
    /// The hub IdSpace's `metadata.uid`.
    pub space_uid: &'a str,
    pub space: &'a Space,
    pub registry: &'a Registry,
    /// The member's IdSequence, as the space compares it.
    pub sequence: SpaceSequence,
    pub datacenter: DatacenterId,
    /// The sequence's slot Leases (for the join).
    pub used: Vec<SlotUse>,
    /// Slots held by pods now.
    pub in_use: u64,
    /// The member's tick.
    pub now: Tick,
    /// Ticks a lapsed bound must be behind `now` before this member reclaims the block
    /// (room for clocks that disagree; safety never depends on it).
    pub reclaim_grace: u64,
}

/// Why a contact wrote nothing on the hub: the condition reason and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

/// What a contact decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The registry to write by compare-and-swap, when anything changed.
    pub write: Option<Registry>,
    /// The copy to keep once `write` succeeded (or at once, when nothing is written).
    pub copy: LocalRecord,
    /// The member's copy had gone back (its etcd restored): free slots' fences must be
    /// raised before slots are assigned again.
    pub local_went_back: bool,
    /// Claims wanted but refused: no free block (`BlocksLow`), with the hub's message.
    pub blocks_low: Option<String>,
}

/// Decides one contact: a refusal (nothing is written, the copy is kept as it is), or the
/// registry to write and the copy to keep.
pub fn decide(c: &Contact<'_>) -> Result<Decision, Refusal> {
    if let Some(copy_of) = &c.copy.member_id {
        let copy_of = MemberId::new(copy_of).map_err(|e| refusal(Reason::BadRecord, e))?;
        check_cluster(&copy_of, c.this)
            .map_err(|e| refusal(Reason::MembershipOfAnotherCluster, e))?;
    }
    check_space_uid(c.copy.id_space_uid.as_deref(), c.space_uid)
        .map_err(|e| refusal(Reason::HubWentBack, e))?;
    let local = c
        .copy
        .local_record(c.space)
        .map_err(|e| refusal(Reason::BadRecord, e))?;
    let went_back = |hub: u64| {
        refusal(
            Reason::HubWentBack,
            format!(
                "the hub's registry is at revision {hub}, behind revision {} this cluster saw: \
                 it was restored from a backup. Nothing is claimed or renewed there; this \
                 cluster keeps issuing up to the bounds it holds. Recover the hub (`kubectl \
                 kubeflake hub recover`)",
                local.revision_seen
            ),
        )
    };
    if c.registry.revision() < local.revision_seen {
        return Err(went_back(c.registry.revision()));
    }
    // Every contact joins: a member already listed under this name is a no-op, one listed
    // under another name, or a sequence that no longer matches, is refused.
    let request = JoinRequest {
        id: c.this.clone(),
        name: c.name.clone(),
        sequence: c.sequence,
        datacenter: c.datacenter,
        used: c.used.clone(),
        now: c.now,
    };
    let joined =
        join(c.space, c.registry, &request).map_err(|e| refusal(Reason::JoinRefused, e))?;
    if !joined.already {
        return written(joined.registry, c.this, false, None);
    }
    let mut local_went_back = false;
    let view = c
        .registry
        .view_of(c.this)
        .map_err(|e| refusal(Reason::JoinRefused, e))?;
    match check_hub(&local, &view) {
        HubCheck::HubWentBack { hub, .. } => return Err(went_back(hub)),
        HubCheck::LocalBehind { .. } => local_went_back = true,
        HubCheck::Current => {}
    }
    let registry = c.registry;
    // The hub's view is the truth: blocks reclaimed from this member are dropped.
    let copy = LocalRecord::from_view(&view);
    for (block, term) in copy.due(c.space, c.now) {
        match registry.renew(c.space, c.this, block, term, c.now) {
            Ok((next, _)) => return written(next, c.this, local_went_back, None),
            Err(RegistryError::NotOwner { .. }) => {}
            Err(e) => return Err(refusal(Reason::BadRecord, e)),
        }
    }
    let reclaim_before = Tick(c.now.0.saturating_sub(c.reclaim_grace));
    let lapsed = c.space.blocks().find(|b| {
        matches!(registry.block(*b), BlockState::Held(claim)
            if claim.owner() != c.this && claim.bound() < reclaim_before)
    });
    if let Some(block) = lapsed
        && let Ok(next) = registry.reclaim(block, reclaim_before)
    {
        return written(next, c.this, local_went_back, None);
    }
    if copy.wants_spare(c.space, c.datacenter, c.now, c.in_use) {
        match registry.claim(c.space, c.this, c.now) {
            Ok((next, _)) => return written(next, c.this, local_went_back, None),
            Err(e) => {
                return Ok(Decision {
                    write: None,
                    copy,
                    local_went_back,
                    blocks_low: Some(e.to_string()),
                });
            }
        }
    }
    Ok(Decision {
        write: None,
        copy,
        local_went_back,
        blocks_low: None,
    })
}

/// A decision to write `next`: the copy is what `next` grants this member.
fn written(
    next: Registry,
    this: &MemberId,
    local_went_back: bool,
    blocks_low: Option<String>,
) -> Result<Decision, Refusal> {
    let copy = view_of(&next, this)?;
    Ok(Decision {
        write: Some(next),
        copy,
        local_went_back,
        blocks_low,
    })
}

fn view_of(registry: &Registry, this: &MemberId) -> Result<LocalRecord, Refusal> {
    registry
        .view_of(this)
        .map(|view| LocalRecord::from_view(&view))
        .map_err(|e| refusal(Reason::JoinRefused, e))
}

fn refusal(reason: Reason, e: impl ToString) -> Refusal {
    Refusal {
        reason,
        message: e.to_string(),
    }
}
