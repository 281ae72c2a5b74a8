//! Where the writes of a kubeflake ID stream land (issue 25): a deterministic simulation of
//! N pods issuing IDs into a model of a range-partitioned store, and of `id % N` sharding,
//! for the default (time-ordered) layout and each hotspot-free key form.
//!
//! Nothing here reads a clock. Each pod issues IDs at Poisson-distributed instants of a
//! simulated clock (a seeded PRNG, so a run is the same on every machine and its results
//! can be asserted in a test), takes its generator *position* by the sidecar's rule
//! `max(last + 1, now_tick << sequenceBits)` (sidecar/src/generator.rs), and turns it into
//! an ID with the real [`Layout::id_at`], so what is measured is the real ID format.
//!
//! The store models, each fed every ID in time order:
//! - [`EqualRanges`]: `R` ranges that split `[0, 2^totalBits)` evenly (a pre-split table);
//! - [`SplitStore`]: one range at first; a range that holds more than `S` keys splits at
//!   its median key (size-based splits, like CockroachDB's).
//!
//! The figure is, per window of simulated time, the share of that window's writes that
//! landed on the hottest range. The split store is read through its ranges *as they were
//! when the window began*: a range that splits during a window counts as one until the
//! window ends (after a split both halves stay on the same nodes until a rebalancer moves
//! one), so a time-ordered stream, whose last range keeps splitting, shows as the one hot
//! range it is rather than as many short-lived ones.

use kubeflake_crds::layout::spread::mix64;
use kubeflake_crds::layout::{SequenceStart, Spread};
use kubeflake_crds::{DatacenterId, Layout, LayoutError, Slot};
use serde::Serialize;

mod store;

pub use store::{EqualRanges, SplitStore};
use store::{largest_share, range_in};

/// Nanoseconds per tick: the default time unit, 1 ms.
pub const TICK_NS: u64 = 1_000_000;

/// A tiny seeded PRNG (splitmix64): deterministic, good enough for arrival times.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// One key form under test: a name for the report and the layout that issues the IDs.
#[derive(Debug, Clone, Copy)]
pub struct Form {
    pub name: &'static str,
    pub layout: Layout,
}

impl Form {
    /// The layout's bits, `timestamp/datacenter/worker/sequence` and any shard bits.
    pub fn bits(&self) -> String {
        let l = &self.layout;
        let fields = format!(
            "{}/{}/{}/{}",
            l.timestamp_bits(),
            l.datacenter_bits(),
            l.worker_bits(),
            l.sequence_bits()
        );
        match l.spread() {
            Spread::ShardBits { bits } => format!("{fields} + {bits} shard"),
            Spread::TimeOrdered | Spread::BitReversed => fields,
        }
    }
}

/// The default layout (41/0/10/12, 63 bits) and every hotspot-free form of it, side by
/// side. Shard bits are taken from the timestamp.
pub fn forms() -> Result<Vec<Form>, LayoutError> {
    let form = |name, timestamp_bits: i64, spread, start| {
        Layout::with_form([timestamp_bits, 0, 10, 12], 63, spread, start)
            .map(|layout| Form { name, layout })
    };
    let shard = |bits: u8| Spread::ShardBits { bits };
    use SequenceStart::{Rotating, Zero};
    Ok(vec![
        form("default (time-ordered)", 41, Spread::TimeOrdered, Zero)?,
        form("shardBits 2", 39, shard(2), Zero)?,
        form("shardBits 4", 37, shard(4), Zero)?,
        form("shardBits 8", 33, shard(8), Zero)?,
        form("bitReversed", 41, Spread::BitReversed, Zero)?,
        form("sequenceStart Rotating", 41, Spread::TimeOrdered, Rotating)?,
        form("shardBits 4 + Rotating", 37, shard(4), Rotating)?,
        form("bitReversed + Rotating", 41, Spread::BitReversed, Rotating)?,
    ])
}

/// The traffic and what to measure of it.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Pods, in slots `0 .. pods`.
    pub pods: u32,
    /// Mean IDs per second each pod issues (Poisson arrivals).
    pub ids_per_s_per_pod: f64,
    /// Simulated seconds.
    pub secs: u64,
    /// Simulated seconds per reported window.
    pub window_secs: u64,
    /// The tick (ms since the sequence's epoch) at which the simulation starts.
    pub start_tick: u64,
    pub seed: u64,
    /// Range counts of the equal-range models.
    pub equal_ranges: Vec<u64>,
    /// Keys a range of the split store holds before it splits.
    pub split_keys: usize,
    /// The `N`s of `id % N`.
    pub moduli: Vec<u64>,
}

/// One ID issued by the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// Simulated nanoseconds since the start.
    pub at_ns: u64,
    pub slot: u32,
    /// The generator position (`tick << sequenceBits | n`).
    pub position: u64,
}

/// Every pod's IDs in time order (ties: lower slot first).
pub struct Arrivals {
    next_ns: Vec<u64>,
    rngs: Vec<Rng>,
    last: Vec<u64>,
    mean_gap_ns: f64,
    end_ns: u64,
    start_tick: u64,
    sequence_bits: u8,
}

impl Arrivals {
    pub fn new(scenario: &Scenario, sequence_bits: u8) -> Arrivals {
        let mean_gap_ns = 1e9 / scenario.ids_per_s_per_pod;
        let mut rngs: Vec<Rng> = (0..scenario.pods)
            .map(|slot| Rng::new(mix64(scenario.seed ^ mix64(u64::from(slot) + 1))))
            .collect();
        let next_ns = rngs.iter_mut().map(|r| gap_ns(r, mean_gap_ns)).collect();
        Arrivals {
            next_ns,
            rngs,
            last: vec![0; scenario.pods as usize],
            mean_gap_ns,
            end_ns: scenario.secs * 1_000_000_000,
            start_tick: scenario.start_tick,
            sequence_bits,
        }
    }
}

/// An exponentially distributed gap with the given mean.
fn gap_ns(rng: &mut Rng, mean_ns: f64) -> u64 {
    (-rng.unit().ln() * mean_ns) as u64
}

impl Iterator for Arrivals {
    type Item = Write;
    fn next(&mut self) -> Option<Write> {
        let (pod, &at_ns) = self.next_ns.iter().enumerate().min_by_key(|&(_, t)| *t)?;
        if at_ns >= self.end_ns {
            return None;
        }
        let now_tick = self.start_tick + at_ns / TICK_NS;
        // The generator's rule: the next sequence number in the same tick, 0 in a later one.
        let position = (self.last[pod] + 1).max(now_tick << self.sequence_bits);
        self.last[pod] = position;
        self.next_ns[pod] = at_ns + gap_ns(&mut self.rngs[pod], self.mean_gap_ns);
        Some(Write {
            at_ns,
            slot: pod as u32,
            position,
        })
    }
}

/// The hottest share of one equal-range model, per window.
#[derive(Debug, Clone, Serialize)]
pub struct EqualSeries {
    pub ranges: u64,
    pub hottest: Vec<f64>,
    /// Median of `hottest` over the windows after the first.
    pub median: f64,
}

/// The split store's hottest share per window, and its range count when each began.
#[derive(Debug, Clone, Serialize)]
pub struct SplitSeries {
    pub split_keys: usize,
    pub hottest: Vec<f64>,
    pub ranges: Vec<usize>,
    pub ranges_at_end: usize,
    pub median: f64,
}

/// The largest residue class of `id % n` over the whole run.
#[derive(Debug, Clone, Serialize)]
pub struct ModuloShare {
    pub n: u64,
    pub largest: f64,
}

/// What one form did under one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct FormResult {
    pub form: String,
    pub bits: String,
    pub ids: u64,
    pub equal: Vec<EqualSeries>,
    pub split: SplitSeries,
    pub modulo: Vec<ModuloShare>,
}

/// The median of the windows after the first (of the only one, if there is one).
pub fn median_after_first(windows: &[f64]) -> f64 {
    let mut v: Vec<f64> = windows.iter().skip(1).copied().collect();
    if v.is_empty() {
        v = windows.to_vec();
    }
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The split store and the per-window count over its ranges as of the window's start.
struct SplitWindow {
    store: SplitStore,
    starts: Vec<u64>,
    counts: Vec<u64>,
    hottest: Vec<f64>,
    ranges: Vec<usize>,
}

impl SplitWindow {
    fn begin(&mut self) {
        self.starts.clear();
        self.starts.extend_from_slice(self.store.starts());
        self.counts = vec![0; self.starts.len()];
        self.ranges.push(self.starts.len());
    }
    fn write(&mut self, key: u64) {
        self.counts[range_in(&self.starts, key)] += 1;
        self.store.insert(key);
    }
    fn end(&mut self) {
        self.hottest.push(largest_share(&self.counts));
    }
}

/// Runs one form through the scenario.
pub fn simulate(scenario: &Scenario, form: &Form) -> FormResult {
    let layout = &form.layout;
    let total_bits = layout.total_bits();
    let window_ns = scenario.window_secs.max(1) * 1_000_000_000;
    let mut equal: Vec<(EqualRanges, Vec<f64>)> = scenario
        .equal_ranges
        .iter()
        .map(|&r| (EqualRanges::new(r, total_bits), Vec::new()))
        .collect();
    let mut split = SplitWindow {
        store: SplitStore::new(scenario.split_keys),
        starts: Vec::new(),
        counts: Vec::new(),
        hottest: Vec::new(),
        ranges: Vec::new(),
    };
    let mut modulo: Vec<Vec<u64>> = scenario
        .moduli
        .iter()
        .map(|&n| vec![0; n as usize])
        .collect();
    let nodes: Vec<_> = (0..scenario.pods)
        .map(|slot| layout.node_bits(DatacenterId(0), Slot(slot)))
        .collect();
    let close = |equal: &mut Vec<(EqualRanges, Vec<f64>)>, split: &mut SplitWindow| {
        for (model, hottest) in equal.iter_mut() {
            hottest.push(model.take_hottest());
        }
        split.end();
    };
    let mut window = 0;
    let mut ids = 0u64;
    split.begin();
    for w in Arrivals::new(scenario, layout.sequence_bits()) {
        while w.at_ns / window_ns > window {
            close(&mut equal, &mut split);
            split.begin();
            window += 1;
        }
        let id = layout.id_at(w.position, nodes[w.slot as usize]).get();
        ids += 1;
        for (model, _) in equal.iter_mut() {
            model.write(id);
        }
        split.write(id);
        for (counts, &n) in modulo.iter_mut().zip(&scenario.moduli) {
            counts[(id % n) as usize] += 1;
        }
    }
    close(&mut equal, &mut split);
    FormResult {
        form: form.name.to_string(),
        bits: form.bits(),
        ids,
        equal: equal
            .into_iter()
            .map(|(model, hottest)| EqualSeries {
                ranges: model.ranges(),
                median: median_after_first(&hottest),
                hottest,
            })
            .collect(),
        split: SplitSeries {
            split_keys: scenario.split_keys,
            median: median_after_first(&split.hottest),
            ranges_at_end: split.store.starts().len(),
            hottest: split.hottest,
            ranges: split.ranges,
        },
        modulo: modulo
            .iter()
            .zip(&scenario.moduli)
            .map(|(counts, &n)| ModuloShare {
                n,
                largest: largest_share(counts),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
