//! What every generated function must return, from the sidecar's `/decode` and the API
//! crate's layout (the code the sidecar issues IDs with), and a collector of mismatches
//! that reports the first few and how many there were.

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use kubeflake_crds::layout::Spread;
use kubeflake_crds::{Id, Tick};

use super::cells;
use super::sample::{Decoded, Sample};

/// Mismatches of one check, with the first few described.
#[derive(Debug, Default)]
pub struct Mismatches {
    count: usize,
    first: Vec<String>,
    compared: usize,
}

impl Mismatches {
    pub fn check(&mut self, ok: bool, describe: impl FnOnce() -> String) {
        self.compared += 1;
        if !ok {
            self.count += 1;
            if self.first.len() < 8 {
                self.first.push(describe());
            }
        }
    }

    /// Compares one line of client output with the expected cells, by column name.
    pub fn row(&mut self, what: &str, line: &str, expected: &[(&str, Option<String>)]) {
        let got = cells(line);
        if got.len() != expected.len() {
            self.check(false, || {
                format!(
                    "{what}: {} columns in {line:?}, expected {}",
                    got.len(),
                    expected.len()
                )
            });
            return;
        }
        for ((name, want), got) in expected.iter().zip(&got) {
            self.check(want.as_deref() == *got, || {
                format!("{what}: {name} is {got:?}, expected {want:?}")
            });
        }
    }

    pub fn compared(&self) -> usize {
        self.compared
    }

    pub fn into_result(self, check: &str) -> Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        bail!(
            "{check}: {} of {} values differ; the first:\n  {}",
            self.count,
            self.compared,
            self.first.join("\n  ")
        )
    }
}

fn some(v: impl ToString) -> Option<String> {
    Some(v.to_string())
}

impl Sample {
    fn low_bits(&self) -> u32 {
        let l = &self.params.layout;
        u32::from(l.datacenter_bits()) + u32::from(l.worker_bits()) + u32::from(l.sequence_bits())
    }

    pub fn unit_ms(&self) -> i64 {
        self.params.timebase.unit().millis() as i64
    }

    pub fn epoch_ms(&self) -> i64 {
        self.params.timebase.epoch_unix_ms() as i64
    }

    pub fn sharded(&self) -> bool {
        matches!(self.params.layout.spread(), Spread::ShardBits { .. })
    }

    pub fn reversed(&self) -> bool {
        self.params.layout.spread() == Spread::BitReversed
    }

    pub fn max_shard(&self) -> i64 {
        (1i64 << self.params.layout.spread().shard_bits()) - 1
    }

    /// The shard of an ID as the layout computes it (0 without shard bits), checked
    /// against the sidecar's `/decode` when it gives one.
    pub fn shard_of(&self, d: &Decoded) -> Option<u32> {
        let shard = self.params.layout.shard(Id::new(d.id).ok()?);
        if d.shard.is_some() {
            assert_eq!(d.shard, shard, "/decode/{} and the layout", d.id);
        }
        shard
    }

    /// A time inside the ID's tick but not always its start: the bounds of a time are
    /// those of the tick containing it.
    pub fn probe_ms(&self, d: &Decoded) -> i64 {
        d.unix_ms + (d.id % self.unit_ms() as u64) as i64
    }

    /// The tick containing `ms` as the functions count it: -1 before the epoch.
    pub fn tick_of(&self, ms: i64) -> i64 {
        (ms - self.epoch_ms()).div_euclid(self.unit_ms()).max(-1)
    }

    /// The smallest and largest key of a tick (`-1`: below every key).
    pub fn key_range(&self, tick: i64) -> (i64, i64) {
        if tick < 0 {
            return (-(1i64 << self.low_bits()), -1);
        }
        let (low, high) = self
            .params
            .layout
            .value_range_of_tick(Tick(tick as u64))
            .expect("a tick of an issued ID fits the layout");
        (low as i64, high as i64)
    }

    /// The ID range of a tick (in `shard`), `None` for bit-reversed layouts.
    pub fn id_range(&self, tick: i64, shard: i64) -> Option<(i64, i64)> {
        let layout = &self.params.layout;
        if self.reversed() {
            return None;
        }
        if tick < 0 {
            let (low, high) = self.key_range(tick);
            let top = if self.sharded() {
                shard << layout.value_bits()
            } else {
                0
            };
            return Some((top + low, top + high));
        }
        let range = match layout.spread() {
            Spread::ShardBits { .. } => layout.shard_range_of_tick(Tick(tick as u64), shard as u32),
            _ => layout.id_range_of_tick(Tick(tick as u64)),
        };
        let (low, high) = range.expect("a tick of an issued ID fits the layout");
        Some((low.get() as i64, high.get() as i64))
    }

    /// The cells every dialect returns for an ID's fields: id, key, unix_ms, time (with
    /// `time` as the dialect prints it), worker, datacenter, shard.
    pub fn field_cells(&self, d: &Decoded, time: String) -> Vec<(&'static str, Option<String>)> {
        let key = self
            .params
            .layout
            .time_ordered_value(Id::new(d.id).expect("63-bit"))
            .expect("an issued ID decodes");
        if let Some(k) = d.key {
            assert_eq!(k, key, "/decode/{}'s key and the layout's", d.id);
        }
        vec![
            ("id", some(d.id)),
            ("key", some(key)),
            ("unix_ms", some(d.unix_ms)),
            ("time", Some(time)),
            ("worker", some(d.worker)),
            ("datacenter", some(d.datacenter)),
            ("shard", self.shard_of(d).map(|s| s.to_string())),
        ]
    }

    /// Windows of time for range queries, in Unix milliseconds, with the IDs each must
    /// select: the whole sample, single ticks, parts, none before and none after.
    pub fn windows(&self) -> Vec<(i64, i64, BTreeSet<u64>)> {
        let times: Vec<i64> = self
            .ids
            .iter()
            .map(|d| d.unix_ms)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let n = times.len();
        let unit = self.unit_ms();
        let first = times[0];
        let last = times[n - 1];
        let mut bounds = vec![
            (first, last),
            (first - 1, last + unit - 1),
            (times[n / 3], times[n / 3]),
            (times[n / 3] + unit - 1, times[n / 3] + unit - 1),
            (times[n / 4], times[n / 2]),
            (times[n / 2] + unit / 2, times[3 * n / 4] + unit / 2),
            (self.epoch_ms() - 1000, first - 1),
            (last + unit, last + 100 * unit),
            (times[n / 2], times[n / 4]),
        ];
        bounds.dedup();
        bounds
            .into_iter()
            .map(|(from, to)| {
                let (a, b) = (self.tick_of(from), self.tick_of(to));
                let ids = self
                    .ids
                    .iter()
                    .filter(|d| (a..=b).contains(&(d.tick as i64)))
                    .map(|d| d.id)
                    .collect();
                (from, to, ids)
            })
            .collect()
    }

    /// Values of the bound functions at the edges of the layout's time, as
    /// `(function, argument in Unix ms, shard, expected)`: before the epoch (below every
    /// key), at the epoch, at the last millisecond the timestamp bits hold, and after
    /// (NULL); a shard that does not exist (NULL).
    pub fn edges(&self) -> Vec<(&'static str, i64, i64, Option<i64>)> {
        let e = self.epoch_ms();
        let low = 1i64 << self.low_bits();
        let value_bits = self.params.layout.value_bits();
        let mut list = vec![
            ("min_key_ms", e - 1, 0, Some(-low)),
            ("max_key_ms", e - 1, 0, Some(-1)),
            ("min_key_ms", e, 0, Some(0)),
            ("max_key_ms", e, 0, Some(low - 1)),
        ];
        let ticks = 1i128 << self.params.layout.timestamp_bits();
        let end = i128::from(e) + ticks * i128::from(self.unit_ms());
        if let Ok(end) = i64::try_from(end) {
            let largest = ((1i128 << value_bits) - 1) as i64;
            list.extend([
                ("min_key_ms", end - 1, 0, Some(largest - (low - 1))),
                ("max_key_ms", end - 1, 0, Some(largest)),
                ("min_key_ms", end, 0, None),
                ("max_key_ms", end, 0, None),
            ]);
        }
        if self.sharded() {
            let max = self.max_shard();
            list.extend([
                ("min_id_ms", e, -1, None),
                ("max_id_ms", e, max + 1, None),
                ("min_id_ms", e, max, Some(max << value_bits)),
                ("max_id_ms", e, max, Some((max << value_bits) + low - 1)),
            ]);
        }
        list
    }
}
