//! The two store models of the simulation: equal key ranges, and ranges split at a size.

/// `ranges` ranges splitting `[0, 2^total_bits)` evenly.
#[derive(Debug, Clone)]
pub struct EqualRanges {
    ranges: u64,
    total_bits: u32,
    counts: Vec<u64>,
}

impl EqualRanges {
    pub fn new(ranges: u64, total_bits: u32) -> EqualRanges {
        EqualRanges {
            ranges,
            total_bits,
            counts: vec![0; ranges as usize],
        }
    }
    pub fn ranges(&self) -> u64 {
        self.ranges
    }
    pub fn range_of(&self, key: u64) -> usize {
        ((u128::from(key) * u128::from(self.ranges)) >> self.total_bits) as usize
    }
    /// Counts a write of `key`.
    pub fn write(&mut self, key: u64) {
        let r = self.range_of(key);
        self.counts[r] += 1;
    }
    /// The hottest range's share of the writes counted since the last call; starts over.
    pub fn take_hottest(&mut self) -> f64 {
        let share = largest_share(&self.counts);
        self.counts.fill(0);
        share
    }
}

/// A store that splits a range at its median key once it holds more than `max_keys`.
#[derive(Debug, Clone)]
pub struct SplitStore {
    max_keys: usize,
    /// The first key of each range, ascending; the first is 0.
    starts: Vec<u64>,
    /// The keys of each range, unordered.
    keys: Vec<Vec<u64>>,
}

impl SplitStore {
    pub fn new(max_keys: usize) -> SplitStore {
        SplitStore {
            max_keys: max_keys.max(2),
            starts: vec![0],
            keys: vec![Vec::new()],
        }
    }
    /// The first key of each range, ascending.
    pub fn starts(&self) -> &[u64] {
        &self.starts
    }
    /// Keys held per range, in key order.
    pub fn sizes(&self) -> Vec<usize> {
        self.keys.iter().map(Vec::len).collect()
    }
    /// Stores a key (keys are distinct), splitting its range if it grew too large.
    pub fn insert(&mut self, key: u64) {
        let i = range_in(&self.starts, key);
        let keys = &mut self.keys[i];
        keys.push(key);
        if keys.len() > self.max_keys {
            let mid = keys.len() / 2;
            // Below `mid` only smaller keys, from `mid` on the median and larger ones.
            let (_, &mut median, _) = keys.select_nth_unstable(mid);
            let right = keys.split_off(mid);
            self.starts.insert(i + 1, median);
            self.keys.insert(i + 1, right);
        }
    }
}

/// The range of `key` among ranges starting at `starts` (ascending, the first 0).
pub(super) fn range_in(starts: &[u64], key: u64) -> usize {
    starts.partition_point(|&s| s <= key).saturating_sub(1)
}

/// Share of the largest count in `counts` (0 when there are none).
pub(super) fn largest_share(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let max = counts.iter().copied().max().unwrap_or(0);
    if total == 0 {
        0.0
    } else {
        max as f64 / total as f64
    }
}
