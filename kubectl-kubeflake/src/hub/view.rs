//! `hub members` and `hub blocks`: the registry of an IdSpace as people and scripts read
//! it. Pure: built from the stored spec (read whole and checked by the API crate's
//! `IdSpaceSpec::registry`) and the time the report is made.

use kubeflake_crds::Tick;
use kubeflake_crds::id_space::{BlockState, IdSpaceSpec, MemberId, Registry, Space};
use kubeflake_crds::timebase::{Timebase, rfc3339};
use serde::Serialize;

use crate::output::{Report, age, table};

/// A tick as people read it: when it ends (nothing is issued in it after that instant),
/// and how far that is from the report's time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickTime {
    pub tick: u64,
    /// The instant the tick ends, RFC 3339 UTC.
    pub ends: String,
    /// Whole seconds from the report's time to `ends`, rounded down (negative: in the
    /// past).
    pub in_seconds: i64,
}

impl TickTime {
    pub fn new(timebase: &Timebase, tick: Tick, now_ms: u64) -> TickTime {
        let ends = timebase.start_of(Tick(tick.0.saturating_add(1)));
        let diff = i128::from(ends) - i128::from(now_ms);
        TickTime {
            tick: tick.0,
            ends: rfc3339(ends),
            in_seconds: i64::try_from(diff.div_euclid(1000)).unwrap_or(i64::MAX),
        }
    }
    /// "2026-11-30T02:13:00.000Z (in 43m)", or "(5m ago)".
    pub fn cell(&self) -> String {
        format!("{} ({})", self.ends, relative(self.in_seconds))
    }
}

/// "in 43m", or "43m ago".
pub fn relative(seconds: i64) -> String {
    if seconds >= 0 {
        format!("in {}", age(seconds))
    } else {
        format!("{} ago", age(seconds.saturating_neg()))
    }
}

/// One member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    pub name: String,
    /// Its cluster ID (the kube-system UID or its ClusterProperty).
    pub id: String,
    pub datacenter_id: u32,
    /// Counts the member's writes to the registry.
    pub generation: u64,
    /// The blocks it holds, by index.
    pub blocks: Vec<u32>,
    /// The lowest bound among its blocks: where it stops issuing unless it renews (null
    /// when it holds none).
    pub nearest_bound: Option<TickTime>,
}

/// What `hub members` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MembersReport {
    pub space: String,
    pub namespace: String,
    pub revision: u64,
    /// When the report was made, RFC 3339 UTC.
    pub now: String,
    pub members: Vec<MemberRow>,
}

/// A block's state in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockStatus {
    /// A member holds it and its bound has not passed.
    Held,
    /// A member holds it but its bound has passed: any member may reclaim it.
    Lapsed,
    /// Nobody holds it; the next owner issues only above its floor.
    Free,
    /// Never used (not in the registry; listed only with `--all`).
    Unused,
}

/// One block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockRow {
    pub index: u32,
    pub datacenter_id: u32,
    /// Its slots (worker IDs), `firstSlot` to `lastSlot` inclusive.
    pub first_slot: u32,
    pub last_slot: u32,
    pub status: BlockStatus,
    /// The owner's cluster ID and name (held or lapsed only).
    pub owner: Option<String>,
    pub owner_name: Option<String>,
    /// Counts the block's hand-overs.
    pub term: u64,
    /// Ticks at or below the floor are never issued in this block again.
    pub floor: TickTime,
    /// The last tick the owner may issue (held or lapsed only).
    pub bound: Option<TickTime>,
    /// The bound has passed: the block may be reclaimed.
    pub lapsed: bool,
}

/// What `hub blocks` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlocksReport {
    pub space: String,
    pub namespace: String,
    pub revision: u64,
    pub block_slots: u64,
    /// Blocks in the space.
    pub block_count: u64,
    pub now: String,
    pub blocks: Vec<BlockRow>,
}

/// The members of `registry`, nearest bound first computed per member.
pub fn members(
    (name, namespace): (&str, &str),
    space: &Space,
    registry: &Registry,
    now_ms: u64,
) -> MembersReport {
    let timebase = space.sequence().timebase;
    let rows = registry
        .members()
        .map(|(id, m)| {
            let held: Vec<(u32, Tick)> = space
                .blocks()
                .filter_map(|b| match registry.block(b) {
                    BlockState::Held(c) if c.owner() == id => Some((b.get(), c.bound())),
                    _ => None,
                })
                .collect();
            MemberRow {
                name: m.name.to_string(),
                id: id.to_string(),
                datacenter_id: m.datacenter.0,
                generation: m.generation,
                blocks: held.iter().map(|(b, _)| *b).collect(),
                nearest_bound: held
                    .iter()
                    .map(|(_, bound)| *bound)
                    .min()
                    .map(|t| TickTime::new(&timebase, t, now_ms)),
            }
        })
        .collect();
    MembersReport {
        space: name.to_string(),
        namespace: namespace.to_string(),
        revision: registry.revision(),
        now: rfc3339(now_ms),
        members: rows,
    }
}

/// The blocks of `spec`'s registry (every block of the space with `all`).
pub fn blocks(
    (name, namespace): (&str, &str),
    spec: &IdSpaceSpec,
    space: &Space,
    registry: &Registry,
    all: bool,
    now_ms: u64,
) -> BlocksReport {
    let timebase = space.sequence().timebase;
    let now_tick = timebase.tick_at(now_ms).unwrap_or(Tick(0));
    let listed: Vec<i64> = spec.registry.blocks.iter().map(|b| b.index).collect();
    let owner_name = |id: &MemberId| registry.member(id).map(|m| m.name.to_string());
    let rows = space
        .blocks()
        .filter(|b| all || listed.contains(&i64::from(b.get())))
        .map(|b| {
            let (dc, slots) = space.slots_of(b);
            let state = registry.block(b);
            let (status, owner, term, bound) = match state {
                BlockState::Free { term, .. } if !listed.contains(&i64::from(b.get())) => {
                    (BlockStatus::Unused, None, *term, None)
                }
                BlockState::Free { term, .. } => (BlockStatus::Free, None, *term, None),
                BlockState::Held(c) => {
                    let status = if c.bound() < now_tick {
                        BlockStatus::Lapsed
                    } else {
                        BlockStatus::Held
                    };
                    (status, Some(c.owner().clone()), c.term(), Some(c.bound()))
                }
            };
            BlockRow {
                index: b.get(),
                datacenter_id: dc.0,
                first_slot: slots.start,
                last_slot: slots.end.saturating_sub(1),
                status,
                owner_name: owner.as_ref().and_then(owner_name),
                owner: owner.map(|o| o.to_string()),
                term,
                floor: TickTime::new(&timebase, state.floor(), now_ms),
                bound: bound.map(|t| TickTime::new(&timebase, t, now_ms)),
                lapsed: status == BlockStatus::Lapsed,
            }
        })
        .collect();
    BlocksReport {
        space: name.to_string(),
        namespace: namespace.to_string(),
        revision: registry.revision(),
        block_slots: space.block_slots(),
        block_count: space.block_count(),
        now: rfc3339(now_ms),
        blocks: rows,
    }
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

impl Report for MembersReport {
    fn table(&self) -> String {
        if self.members.is_empty() {
            return format!(
                "idspace {}/{} (revision {}) has no members yet: a member joins with an \
                 IdSpaceMembership in its own cluster\n",
                self.namespace, self.space, self.revision
            );
        }
        let rows: Vec<Vec<String>> = self
            .members
            .iter()
            .map(|m| {
                vec![
                    m.name.clone(),
                    m.id.clone(),
                    m.datacenter_id.to_string(),
                    m.generation.to_string(),
                    m.blocks.len().to_string(),
                    dash(m.nearest_bound.as_ref().map(TickTime::cell)),
                ]
            })
            .collect();
        table(
            &[
                "NAME",
                "CLUSTER ID",
                "DATACENTER",
                "GENERATION",
                "BLOCKS",
                "NEAREST BOUND",
            ],
            &rows,
        )
    }
}

impl Report for BlocksReport {
    fn table(&self) -> String {
        if self.blocks.is_empty() {
            return format!(
                "idspace {}/{} (revision {}): no block was ever used ({} blocks of {} slots; \
                 --all lists them)\n",
                self.namespace, self.space, self.revision, self.block_count, self.block_slots
            );
        }
        let rows: Vec<Vec<String>> = self
            .blocks
            .iter()
            .map(|b| {
                vec![
                    b.index.to_string(),
                    b.datacenter_id.to_string(),
                    format!("{}-{}", b.first_slot, b.last_slot),
                    format!("{:?}", b.status).to_lowercase(),
                    dash(b.owner_name.clone().or_else(|| b.owner.clone())),
                    b.term.to_string(),
                    if b.floor.tick == 0 {
                        "0".to_string()
                    } else {
                        format!("{} {}", b.floor.tick, b.floor.cell())
                    },
                    dash(b.bound.as_ref().map(|t| format!("{} {}", t.tick, t.cell()))),
                ]
            })
            .collect();
        table(
            &[
                "BLOCK",
                "DATACENTER",
                "SLOTS",
                "STATUS",
                "OWNER",
                "TERM",
                "FLOOR",
                "BOUND",
            ],
            &rows,
        )
    }
}
