//! What the membership task hands its metrics: the membership a series names, what a
//! contact left held, how a hub call ended, which record went back, and the reclaims a
//! registry write makes.

use kube::ResourceExt;
use kubeflake_crds::id_space::MemberId;
use kubeflake_crds::id_space::local::LocalRecord;
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::registry::{BlockState, Registry};
use kubeflake_crds::id_space::space::Space;
use kubeflake_crds::layout::Tick;
use kubeflake_crds::segment_counter::Counter;

/// How one call to the hub ended (`kubeflake_operator_id_space_hub_calls_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// Answered and done.
    Ok,
    /// A compare-and-swap lost to another writer (HTTP 409): read again next contact.
    Conflict,
    /// No answer in time, no connection, or the hub failed (5xx).
    Unreachable,
    /// The hub answered with a refusal (another 4xx: its admission policy, RBAC, a
    /// missing IdSpace).
    Refused,
}

impl CallOutcome {
    pub const ALL: [CallOutcome; 4] = [
        CallOutcome::Ok,
        CallOutcome::Conflict,
        CallOutcome::Unreachable,
        CallOutcome::Refused,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Conflict => "conflict",
            CallOutcome::Unreachable => "unreachable",
            CallOutcome::Refused => "refused",
        }
    }
}

/// An error of a call to the hub, as its outcome (implemented by `hub::connect::HubError`).
pub trait CallError {
    fn outcome(&self) -> CallOutcome;
}

/// Which record was found gone back (`kubeflake_operator_id_space_went_back_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WentBack {
    /// The member's copy was behind the hub (`LocalBehind`: its etcd restored).
    Copy,
    /// The hub's registry was behind the copy, or its IdSpace re-created (`HubWentBack`).
    Registry,
}

impl WentBack {
    pub fn label(self) -> &'static str {
        match self {
            WentBack::Copy => "copy",
            WentBack::Registry => "registry",
        }
    }
}

/// One membership, as its series are labelled.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub namespace: String,
    pub name: String,
    /// The hub IdSpace, `namespace/name`.
    pub space: String,
}

impl Member {
    pub fn of(membership: &IdSpaceMembership) -> Member {
        let space = &membership.spec.space;
        Member {
            namespace: membership.namespace().unwrap_or_default(),
            name: membership.name_any(),
            space: format!("{}/{}", space.namespace, space.name),
        }
    }

    pub(super) fn labels(&self) -> [&str; 3] {
        [&self.namespace, &self.name, &self.space]
    }

    pub(super) fn with<'a>(&'a self, extra: &'a str) -> [&'a str; 4] {
        [&self.namespace, &self.name, &self.space, extra]
    }
}

/// What a successful contact left the member holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub blocks: u64,
    /// Blocks held beyond those the slots in use need (negative when pods hold slots the
    /// blocks no longer cover, which the controller then stops).
    pub spare: i64,
    /// When the nearest bound passes (the start of the tick after it, Unix ms); `None`
    /// without a block.
    pub nearest_bound_ms: Option<u64>,
    pub tolerance_secs: u64,
}

impl Holding {
    /// What `copy` holds in `space` while pods hold `in_use` slots.
    pub fn of(copy: &LocalRecord, space: &Space, in_use: u64) -> Holding {
        let timebase = space.sequence().timebase;
        let blocks = copy.grants().count() as u64;
        let needed = in_use.div_ceil(space.block_slots().max(1));
        Holding {
            blocks,
            spare: blocks as i64 - needed as i64,
            nearest_bound_ms: copy
                .grants()
                .map(|g| timebase.start_of(Tick(g.bound.0.saturating_add(1))))
                .min(),
            tolerance_secs: space.tolerance_secs(),
        }
    }
}

/// What a Segment sequence's counter holds of the ranges taken from the hub (docs/safety.md
/// rule 22): read from its counter Lease, so also while the hub is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangesHeld {
    /// Values its sidecars can still claim: the rest of the range in use and the queued
    /// range. At 0 they answer 503 until a range from the hub is queued.
    pub values_left: u64,
    /// Whether a range is queued behind the one in use (a spare: no claim waits on the hub).
    pub spare: bool,
}

impl RangesHeld {
    /// What `counter` holds; `None` for a counter without ranges (not in format 3 yet).
    pub fn of(counter: &Counter) -> Option<RangesHeld> {
        let ranged = counter.range?;
        let Some((limit, queued)) = ranged.in_use(counter.next) else {
            // Claims are outside both ranges: the counter is refused whole.
            return Some(RangesHeld {
                values_left: 0,
                spare: false,
            });
        };
        let queued_left = queued.map_or(0, |q| q.limit.saturating_sub(q.start));
        Some(RangesHeld {
            values_left: limit
                .saturating_sub(counter.next)
                .saturating_add(queued_left),
            spare: queued.is_some(),
        })
    }
}

/// Blocks another member held in `before` that `after` no longer lists as theirs: the
/// reclaims a write makes.
pub fn reclaims(space: &Space, before: &Registry, after: &Registry, this: &MemberId) -> u64 {
    space
        .blocks()
        .filter(|b| match (before.block(*b), after.block(*b)) {
            (BlockState::Held(was), BlockState::Held(now)) => {
                was.owner() != this && now.owner() != was.owner()
            }
            (BlockState::Held(was), _) => was.owner() != this,
            _ => false,
        })
        .count() as u64
}
