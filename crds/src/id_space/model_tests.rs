//! A model checker for the block protocol: members, a hub and time, driven by seeded
//! random interleavings of joins, claims, renewals, releases, partitions, hub outages,
//! reclaims, forgotten members, members that die and come back, and members whose copy
//! of their claims goes back to an old snapshot (an etcd restore). Every member issues
//! adversarially: under every grant it ever learned, until that grant's bound, whatever
//! the hub said since (a partitioned member keeps issuing until its bound). Each member's
//! clock is off by its own skew. The checker records every (worker, tick) issued and fails
//! on the first one issued twice.
//!
//! The same checker runs a broken hand-over (a reclaim or a forget that keeps the old floor
//! instead of raising it to the bound) and must find a duplicate.

use std::collections::HashMap;

use super::tests::{id, name};
use super::*;
use crate::layout::{DatacenterId, Tick};
use crate::sequence::LayoutSpec;
use crate::timebase::TimeUnit;

/// SplitMix64: a small deterministic generator, so every seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandOver {
    /// As built: the floor goes to the bound the hub recorded.
    AboveBound,
    /// Broken on purpose: the block is freed with its old floor.
    SkipsFence,
}

/// 16 workers (1 datacenter bit, 3 worker bits) in 8 blocks of 2, 1 s ticks, a 300 s
/// tolerance renewed every 10 s: a claim reaches 310 ticks ahead.
fn model_space_spec() -> IdSpaceSpec {
    IdSpaceSpec {
        sequence: SpaceSequenceSpec {
            layout: LayoutSpec {
                timestamp_bits: 41,
                datacenter_bits: 1,
                worker_bits: 3,
                sequence_bits: 18,
                ..LayoutSpec::default()
            },
            time_unit: TimeUnit::Second,
            ..SpaceSequenceSpec::default()
        },
        block_slots: 2,
        tolerance_seconds: 300,
        renew_every_seconds: 10,
        registry: RegistryRecord::default(),
        segment: None,
    }
}

const TOLERANCE_TICKS: u64 = 300;

struct Cluster {
    id: MemberId,
    name: MemberName,
    datacenter: DatacenterId,
    skew: u64,
    want: usize,
    alive: bool,
    cut_off: bool,
    record: LocalRecord,
    snapshots: Vec<LocalRecord>,
    /// Every grant ever learned, by (block, term), with the highest bound learned.
    ever: HashMap<(u32, u64), Grant>,
    /// The last tick issued under each grant.
    progress: HashMap<(u32, u64), u64>,
    /// Its last contact with the hub, and whether it left it with a grant a tolerance ahead.
    last_contact: Option<(u64, bool)>,
}

#[derive(Debug, Default)]
struct Counts {
    issued: u64,
    claims: u64,
    renewals: u64,
    releases: u64,
    reclaims: u64,
    forgets: u64,
    restores: u64,
    partitions: u64,
    outages: u64,
    stalls: u64,
}

struct Model {
    space: Space,
    spec: IdSpaceSpec,
    hub: Registry,
    hub_up: bool,
    clusters: Vec<Cluster>,
    now: u64,
    hand_over: HandOver,
    seen: HashMap<(u32, u64), usize>,
    duplicate: Option<String>,
    counts: Counts,
}

impl Model {
    fn new(seed: u64, hand_over: HandOver) -> (Model, Rng) {
        let spec = model_space_spec();
        let space = spec.space().unwrap();
        let mut rng = Rng(seed);
        let clusters = (0..3)
            .map(|n| Cluster {
                id: id(n),
                name: name(n),
                datacenter: DatacenterId(n % 2),
                skew: rng.below(30),
                want: 1 + rng.below(2) as usize,
                alive: true,
                cut_off: false,
                record: LocalRecord::default(),
                snapshots: Vec::new(),
                ever: HashMap::new(),
                progress: HashMap::new(),
                last_contact: None,
            })
            .collect();
        let model = Model {
            space,
            spec,
            hub: Registry::default(),
            hub_up: true,
            clusters,
            now: 1000,
            hand_over,
            seen: HashMap::new(),
            duplicate: None,
            counts: Counts::default(),
        };
        (model, rng)
    }

    fn clock(&self, c: usize) -> u64 {
        self.now + self.clusters[c].skew
    }

    /// One member talks to the hub: joins if it is not a member, checks its copy, renews
    /// what is due, claims up to what it wants, and sometimes releases a block.
    fn contact(&mut self, c: usize, rng: &mut Rng) {
        let now = Tick(self.clock(c));
        let cluster = &self.clusters[c];
        if !cluster.alive || cluster.cut_off || !self.hub_up {
            return;
        }
        let member = cluster.id.clone();
        let view = match self.hub.view_of(&member) {
            Ok(view) => view,
            Err(_) => {
                let req = JoinRequest {
                    id: member.clone(),
                    name: cluster.name.clone(),
                    sequence: *self.space.sequence(),
                    datacenter: cluster.datacenter,
                    used: Vec::new(),
                    now,
                };
                let Ok(joined) = join(&self.space, &self.hub, &req) else {
                    return;
                };
                self.hub = joined.registry;
                self.hub.view_of(&member).unwrap()
            }
        };
        match check_hub(&self.clusters[c].record, &view) {
            HubCheck::Current => {}
            HubCheck::LocalBehind { .. } => self.clusters[c].record = LocalRecord::from_view(&view),
            HubCheck::HubWentBack { .. } => panic!("the model never restores the hub"),
        }
        for (block, term) in self.clusters[c].record.due(&self.space, now) {
            match self.hub.renew(&self.space, &member, block, term, now) {
                Ok((reg, grant)) => {
                    self.hub = reg;
                    self.counts.renewals += 1;
                    self.learn(c, grant, now);
                }
                Err(_) => self.clusters[c].record.forget(block),
            }
        }
        while self.clusters[c].record.grants().count() < self.clusters[c].want {
            let Ok((reg, grant)) = self.hub.claim(&self.space, &member, now) else {
                break;
            };
            self.hub = reg;
            self.counts.claims += 1;
            self.learn(c, grant, now);
        }
        let first = self.clusters[c].record.grants().next().copied();
        if rng.below(10) == 0
            && let Some(grant) = first
            && let Ok(reg) = self.hub.release(&member, grant.block, grant.term)
        {
            self.hub = reg;
            self.counts.releases += 1;
            self.clusters[c].record.forget(grant.block);
        }
        let ahead = self.clusters[c]
            .record
            .grants()
            .any(|g| g.bound.0 >= now.0 + TOLERANCE_TICKS);
        self.clusters[c].last_contact = Some((now.0, ahead));
        self.sync_counters(c);
    }

    fn learn(&mut self, c: usize, grant: Grant, now: Tick) {
        let cluster = &mut self.clusters[c];
        let key = (grant.block.get(), grant.term);
        let entry = cluster.ever.entry(key).or_insert(grant);
        entry.bound = entry.bound.max(grant.bound);
        cluster.progress.entry(key).or_insert(now.0);
        cluster.record.learn(grant, 0, 0);
    }

    fn sync_counters(&mut self, c: usize) {
        let view = self.hub.view_of(&self.clusters[c].id);
        let record = &mut self.clusters[c].record;
        if let Ok(view) = view {
            record.generation = view.generation;
            record.revision_seen = view.revision;
        }
    }

    /// Frees a block held by someone else, as built or broken.
    fn hand_over(&self, reg: &Registry, block: BlockIndex, now: Tick) -> Option<Registry> {
        match self.hand_over {
            HandOver::AboveBound => reg.reclaim(block, now).ok(),
            HandOver::SkipsFence => {
                let BlockState::Held(claim) = reg.block(block) else {
                    return None;
                };
                (claim.bound() < now).then(|| self.free_keeping_floor(reg, &[block], None))
            }
        }
    }

    /// The broken hand-over, through the stored record: owner and bound dropped, the floor
    /// kept (and a member removed, for a broken forget).
    fn free_keeping_floor(
        &self,
        reg: &Registry,
        blocks: &[BlockIndex],
        forget: Option<&MemberId>,
    ) -> Registry {
        let mut record = reg.to_record();
        record.revision += 1;
        for b in record.blocks.iter_mut() {
            if blocks.iter().any(|x| i64::from(x.get()) == b.index) {
                b.owner = None;
                b.bound = None;
            }
        }
        if let Some(member) = forget {
            record.members.retain(|m| m.id != member.as_str());
        }
        IdSpaceSpec {
            registry: record,
            ..self.spec.clone()
        }
        .registry(&self.space)
        .unwrap()
    }

    fn reclaim_lapsed(&mut self, by: usize) {
        let now = Tick(self.clock(by));
        for block in self.space.blocks() {
            if let Some(reg) = self.hand_over(&self.hub, block, now) {
                self.hub = reg;
                self.counts.reclaims += 1;
            }
        }
    }

    fn forget(&mut self, c: usize) {
        let member = self.clusters[c].id.clone();
        if self.hub.member(&member).is_none() {
            return;
        }
        self.hub = match self.hand_over {
            HandOver::AboveBound => self.hub.forget(&member).unwrap(),
            HandOver::SkipsFence => {
                let held: Vec<BlockIndex> = self
                    .space
                    .blocks()
                    .filter(|b| matches!(self.hub.block(*b), BlockState::Held(cl) if *cl.owner() == member))
                    .collect();
                self.free_keeping_floor(&self.hub, &held, Some(&member))
            }
        };
        self.counts.forgets += 1;
        self.clusters[c].last_contact = None;
    }

    /// Every live member issues every tick up to its clock under every grant it ever
    /// learned, within the grant's floor and bound.
    fn issue(&mut self) {
        for c in 0..self.clusters.len() {
            if !self.clusters[c].alive {
                continue;
            }
            let now = self.clock(c);
            let grants: Vec<Grant> = self.clusters[c].ever.values().copied().collect();
            for g in grants {
                let key = (g.block.get(), g.term);
                let from = self.clusters[c].progress[&key].max(g.floor.0);
                let to = now.min(g.bound.0);
                if to <= from {
                    continue;
                }
                let (dc, slots) = self.space.slots_of(g.block);
                for slot in slots {
                    let node = (dc.0 << 3) | slot;
                    for tick in from + 1..=to {
                        self.counts.issued += 1;
                        if let Some(first) = self.seen.insert((node, tick), c)
                            && self.duplicate.is_none()
                        {
                            self.duplicate = Some(format!(
                                "worker {node} tick {tick}: issued by member {first} and by \
                                 member {c} (block {}, term {}, floor {}, bound {})",
                                g.block.get(),
                                g.term,
                                g.floor.0,
                                g.bound.0
                            ));
                        }
                    }
                }
                self.clusters[c].progress.insert(key, to);
            }
        }
    }

    /// A member cut off for less than the tolerance after leaving the hub with a grant a
    /// tolerance ahead still holds a grant it may issue under now.
    fn check_not_stalled(&mut self) {
        for c in 0..self.clusters.len() {
            let now = self.clock(c);
            let cluster = &self.clusters[c];
            if let Some((at, true)) = cluster.last_contact
                && cluster.alive
                && now < at + TOLERANCE_TICKS
                && !cluster
                    .record
                    .grants()
                    .any(|g| g.floor.0 < now && now <= g.bound.0)
                && !cluster.record.grants().any(|g| g.floor.0 >= now)
            {
                self.counts.stalls += 1;
            }
        }
    }

    fn step(&mut self, rng: &mut Rng) {
        let c = rng.below(self.clusters.len() as u64) as usize;
        match rng.below(100) {
            0..=39 => self.contact(c, rng),
            40..=49 => {
                self.clusters[c].cut_off = !self.clusters[c].cut_off;
                self.counts.partitions += 1;
            }
            50..=53 => {
                self.hub_up = !self.hub_up;
                self.counts.outages += 1;
            }
            54..=68 => self.reclaim_lapsed(c),
            69..=71 => self.forget(c),
            72..=75 => self.clusters[c].alive = !self.clusters[c].alive,
            76..=81 => {
                let cluster = &mut self.clusters[c];
                if !cluster.snapshots.is_empty() {
                    let pick = rng.below(cluster.snapshots.len() as u64) as usize;
                    cluster.record = cluster.snapshots[pick].clone();
                    cluster.last_contact = None;
                    self.counts.restores += 1;
                }
            }
            82..=89 => {
                let cluster = &mut self.clusters[c];
                cluster.snapshots.push(cluster.record.clone());
            }
            _ => {}
        }
        self.now += rng.below(8);
        self.issue();
        self.check_not_stalled();
    }
}

fn run(seed: u64, hand_over: HandOver, steps: usize) -> Model {
    let (mut model, mut rng) = Model::new(seed, hand_over);
    for _ in 0..steps {
        model.step(&mut rng);
        if model.duplicate.is_some() {
            break;
        }
    }
    model
}

const SEEDS: u64 = 40;
const STEPS: usize = 1500;

#[test]
fn rule18_model_no_two_members_issue_one_worker_and_tick_under_any_interleaving() {
    let mut total = Counts::default();
    for seed in 0..SEEDS {
        let model = run(seed, HandOver::AboveBound, STEPS);
        if let Some(dup) = &model.duplicate {
            panic!("seed {seed}: {dup}; {:?}", model.counts);
        }
        let c = &model.counts;
        total.issued += c.issued;
        total.claims += c.claims;
        total.renewals += c.renewals;
        total.releases += c.releases;
        total.reclaims += c.reclaims;
        total.forgets += c.forgets;
        total.restores += c.restores;
        total.partitions += c.partitions;
        total.outages += c.outages;
        total.stalls += c.stalls;
    }
    // The model did exercise every move (a run that never reclaims proves nothing).
    for (what, n) in [
        ("IDs", total.issued),
        ("claims", total.claims),
        ("renewals", total.renewals),
        ("releases", total.releases),
        ("reclaims", total.reclaims),
        ("forgets", total.forgets),
        ("restores", total.restores),
        ("partitions", total.partitions),
        ("hub outages", total.outages),
    ] {
        assert!(n > 20, "only {n} {what} in {SEEDS} runs: {total:?}");
    }
    assert_eq!(total.stalls, 0, "rule 19 in the model: {total:?}");
    eprintln!("{SEEDS} runs, no duplicate: {total:?}");
}

#[test]
fn rule18_model_a_hand_over_that_skips_the_high_water_fence_is_caught_by_the_same_checker() {
    let found: Vec<String> = (0..SEEDS)
        .filter_map(|seed| run(seed, HandOver::SkipsFence, STEPS).duplicate)
        .collect();
    eprintln!(
        "{} of {SEEDS} runs found a duplicate; the first: {:?}",
        found.len(),
        found.first()
    );
    assert!(
        !found.is_empty(),
        "the checker found no duplicate in {SEEDS} runs of a hand-over that keeps the old floor"
    );
}

#[test]
fn rule21_model_a_member_restored_to_an_old_copy_still_repeats_nothing() {
    // The same model, restores only: members snapshot their copy often and go back to it,
    // renewing, claiming and issuing from the old copy until the hub says otherwise.
    let mut restores = 0;
    for seed in 100..100 + SEEDS {
        let (mut model, mut rng) = Model::new(seed, HandOver::AboveBound);
        for _ in 0..STEPS / 3 {
            let c = rng.below(3) as usize;
            match rng.below(10) {
                0..=4 => model.contact(c, &mut rng),
                5 => model.reclaim_lapsed(c),
                6 | 7 => {
                    let cl = &mut model.clusters[c];
                    cl.snapshots.push(cl.record.clone());
                }
                _ => {
                    let cl = &mut model.clusters[c];
                    if !cl.snapshots.is_empty() {
                        let pick = rng.below(cl.snapshots.len() as u64) as usize;
                        cl.record = cl.snapshots[pick].clone();
                        restores += 1;
                    }
                }
            }
            model.now += rng.below(8);
            model.issue();
            assert_eq!(model.duplicate, None, "seed {seed}");
        }
    }
    assert!(restores > 100, "{restores}");
}
