//! `compose --time T`: the smallest and largest ID any worker can produce in the tick
//! containing `T`, so `WHERE id BETWEEN min AND max` selects the rows made in that tick
//! (and `id >= min(T1) AND id <= max(T2)` a time range).
//!
//! The range covers every datacenter and worker: IDs order by time first, so it is the
//! exact bound for a table shared by several datacenters too.

use chrono::{DateTime, Utc};
use kubeflake_crds::layout::Spread;
use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Id, TextForm, Tick};
use serde::Serialize;

use crate::error::CliError;
use crate::output::{Report, fields};
use crate::source::{LayoutView, Resolved};

/// What `compose` prints. IDs are strings (see `decode`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComposeReport {
    pub layout: LayoutView,
    /// The instant asked for, normalised to RFC 3339 UTC (millisecond precision).
    pub time: String,
    pub tick: u64,
    /// First instant of the tick.
    pub tick_start: String,
    /// First instant of the next tick (exclusive end).
    pub tick_end: String,
    /// The tick's smallest and largest ID, where a tick's IDs are one range (the
    /// time-ordered layouts, a rotating sequence start included; docs/layouts.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
    /// Layouts with shard bits: the tick's range of IDs in each shard.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardRange>,
    /// Layouts with a key form: the range of the time-ordered key (`/decode`'s `key`, the
    /// SQL functions' `_key(id)`), the one range every key form has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_key: Option<String>,
}

/// One shard's IDs of a tick.
#[derive(Debug, Clone, Serialize)]
pub struct ShardRange {
    pub shard: u32,
    pub min: String,
    pub max: String,
}

impl Report for ComposeReport {
    fn table(&self) -> String {
        let mut rows = vec![
            ("TIME", self.time.clone()),
            ("TICK", self.tick.to_string()),
            (
                "TICK SPAN",
                format!("{} .. {} (end exclusive)", self.tick_start, self.tick_end),
            ),
            (
                "MIN ID",
                self.min.clone().unwrap_or_else(|| NO_RANGE.to_string()),
            ),
            (
                "MAX ID",
                self.max.clone().unwrap_or_else(|| NO_RANGE.to_string()),
            ),
        ];
        for r in &self.shards {
            rows.push(("SHARD", format!("{}: {} .. {}", r.shard, r.min, r.max)));
        }
        if let (Some(lo), Some(hi)) = (&self.min_key, &self.max_key) {
            rows.push(("KEY RANGE", format!("{lo} .. {hi}")));
        }
        fields(&rows)
    }
}

/// What the table shows where a key form has no single ID range for a tick.
const NO_RANGE: &str = "- (no single range in this key form: see SHARD or KEY RANGE)";

impl ComposeReport {
    /// The report with `min` and `max` written in `form` (`--format`), for keys stored as
    /// base32 or base62 text: those forms sort byte by byte like the IDs, so the bounds
    /// still select the tick's rows.
    pub fn in_form(mut self, form: TextForm) -> ComposeReport {
        let ids = [&mut self.min, &mut self.max].into_iter().flatten().chain(
            self.shards
                .iter_mut()
                .flat_map(|r| [&mut r.min, &mut r.max]),
        );
        for id in ids {
            if let Ok(value) = TextForm::Decimal.parse(id) {
                *id = form.encode(value);
            }
        }
        self
    }
}

/// Parses `--time`: RFC 3339 or `now`, to Unix milliseconds (negative before 1970).
pub fn parse_time(text: &str) -> Result<i64, CliError> {
    if text.trim() == "now" {
        return Ok(Utc::now().timestamp_millis());
    }
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|_| CliError::NotATime {
            text: text.to_string(),
        })
}

/// The ID range of the tick containing `unix_ms`.
pub fn compose(unix_ms: i64, source: &Resolved) -> Result<ComposeReport, CliError> {
    let timebase = &source.params.timebase;
    let layout = &source.params.layout;
    let shown = rfc3339(u64::try_from(unix_ms).unwrap_or(0));
    let shown = if unix_ms < 0 {
        DateTime::<Utc>::from_timestamp_millis(unix_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or(shown)
    } else {
        shown
    };
    let tick = u64::try_from(unix_ms)
        .ok()
        .and_then(|ms| timebase.tick_at(ms))
        .ok_or_else(|| CliError::TimeBeforeEpoch {
            time: shown.clone(),
            epoch: rfc3339(timebase.epoch_unix_ms()),
            source_name: source.name.clone(),
        })?;
    let beyond = || CliError::TimeBeyondLayout {
        time: shown.clone(),
        exhausts_at: rfc3339(timebase.exhausts_at_ms(layout)),
        bits: layout.timestamp_bits(),
        source_name: source.name.clone(),
    };
    if tick > layout.max_tick() {
        return Err(beyond());
    }
    let range: Option<(Id, Id)> = match layout.spread() {
        Spread::TimeOrdered => Some(layout.id_range_of_tick(tick).map_err(|_| beyond())?),
        Spread::ShardBits { .. } | Spread::BitReversed => None,
    };
    let shards = match layout.spread() {
        Spread::ShardBits { bits } => (0..1u32 << bits)
            .map(|shard| {
                let (min, max) = layout
                    .shard_range_of_tick(tick, shard)
                    .map_err(|_| beyond())?;
                Ok(ShardRange {
                    shard,
                    min: min.to_string(),
                    max: max.to_string(),
                })
            })
            .collect::<Result<Vec<_>, CliError>>()?,
        Spread::TimeOrdered | Spread::BitReversed => Vec::new(),
    };
    let keys = if layout.is_time_ordered() {
        None
    } else {
        Some(layout.value_range_of_tick(tick).map_err(|_| beyond())?)
    };
    Ok(ComposeReport {
        layout: source.view(),
        time: shown,
        tick: tick.0,
        tick_start: rfc3339(timebase.start_of(tick)),
        tick_end: rfc3339(timebase.start_of(Tick(tick.0 + 1))),
        min: range.map(|(min, _)| min.to_string()),
        max: range.map(|(_, max)| max.to_string()),
        shards,
        min_key: keys.map(|(lo, _)| lo.to_string()),
        max_key: keys.map(|(_, hi)| hi.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::LayoutArgs;
    use crate::source::from_flags;

    fn defaults() -> Resolved {
        from_flags(&LayoutArgs::default()).unwrap()
    }

    #[test]
    fn the_range_holds_every_id_of_the_tick_and_nothing_else() {
        let source = defaults();
        // 2025-01-01T00:00:01.5Z is 1500 ms after the default epoch: tick 1500 at 1 ms.
        let ms = parse_time("2025-01-01T00:00:01.500Z").unwrap();
        let r = compose(ms, &source).unwrap();
        assert_eq!(r.tick, 1500);
        let layout = source.params.layout;
        let min = layout
            .decode(Id::new(r.min.as_deref().unwrap().parse().unwrap()).unwrap())
            .unwrap();
        let max = layout
            .decode(Id::new(r.max.as_deref().unwrap().parse().unwrap()).unwrap())
            .unwrap();
        assert_eq!((min.tick.0, min.slot.0, min.sequence), (1500, 0, 0));
        assert_eq!((max.tick.0, max.slot.0, max.sequence), (1500, 1023, 4095));
        let prev: u64 = r.min.as_deref().unwrap().parse::<u64>().unwrap() - 1;
        assert_eq!(layout.decode(Id::new(prev).unwrap()).unwrap().tick.0, 1499);
    }

    #[test]
    fn offsets_are_normalised_to_utc() {
        let a = parse_time("2025-06-01T14:00:00+02:00").unwrap();
        let b = parse_time("2025-06-01T12:00:00Z").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn times_outside_the_layout_are_refused_saying_why() {
        let source = defaults();
        let before = compose(parse_time("2024-12-31T23:59:59Z").unwrap(), &source).unwrap_err();
        assert!(
            matches!(before, CliError::TimeBeforeEpoch { .. }),
            "{before}"
        );
        let before_1970 = compose(parse_time("1960-01-01T00:00:00Z").unwrap(), &source);
        assert!(matches!(before_1970, Err(CliError::TimeBeforeEpoch { .. })));
        let beyond = compose(parse_time("2100-01-01T00:00:00Z").unwrap(), &source).unwrap_err();
        let end = rfc3339(source.params.timebase.exhausts_at_ms(&source.params.layout));
        assert!(beyond.to_string().contains(&end), "{beyond}");
        assert!(matches!(
            parse_time("yesterday"),
            Err(CliError::NotATime { .. })
        ));
    }

    fn with_layout(edit: impl FnOnce(&mut kubeflake_crds::sequence::LayoutSpec)) -> Resolved {
        let mut spec = kubeflake_crds::IdSequenceSpec::default();
        edit(&mut spec.layout);
        Resolved {
            name: "test".into(),
            params: spec.params().unwrap(),
        }
    }

    #[test]
    fn a_sharded_layout_has_one_range_per_shard_and_a_key_range_but_no_single_id_range() {
        let source = with_layout(|l| {
            l.timestamp_bits = 38;
            l.shard_bits = 3;
        });
        let layout = source.params.layout;
        let r = compose(parse_time("2025-01-01T00:00:01.500Z").unwrap(), &source).unwrap();
        assert_eq!((r.min.as_deref(), r.max.as_deref()), (None, None));
        assert_eq!(r.shards.len(), 8);
        for (slot, seq) in [(0, 0), (17, 3), (1023, 4095)] {
            let id = layout
                .encode(kubeflake_crds::IdParts {
                    tick: Tick(1500),
                    datacenter: kubeflake_crds::DatacenterId(0),
                    slot: kubeflake_crds::Slot(slot),
                    sequence: seq,
                })
                .unwrap();
            let range = &r.shards[layout.shard(id).unwrap() as usize];
            let (lo, hi): (u64, u64) = (range.min.parse().unwrap(), range.max.parse().unwrap());
            assert!(
                lo <= id.get() && id.get() <= hi,
                "{id} in its shard's range"
            );
            let key = layout.time_ordered_value(id).unwrap();
            let (klo, khi): (u64, u64) = (
                r.min_key.as_deref().unwrap().parse().unwrap(),
                r.max_key.as_deref().unwrap().parse().unwrap(),
            );
            assert!(klo <= key && key <= khi);
        }
        assert!(r.table().contains("KEY RANGE"), "{}", r.table());
    }

    #[test]
    fn a_bit_reversed_layout_has_only_a_key_range_and_a_rotating_one_keeps_its_id_range() {
        let reversed = with_layout(|l| l.bit_reversed = true);
        let r = compose(parse_time("2025-01-01T00:00:01.500Z").unwrap(), &reversed).unwrap();
        assert!(r.min.is_none() && r.shards.is_empty() && r.min_key.is_some());
        assert!(r.table().contains("no single range"), "{}", r.table());
        let rotating = with_layout(|l| {
            l.sequence_start = kubeflake_crds::sequence::SequenceStartSpec::Rotating
        });
        let r = compose(parse_time("2025-01-01T00:00:01.500Z").unwrap(), &rotating).unwrap();
        assert_eq!(
            r.min, r.min_key,
            "the rotating start keeps the tick's ID range"
        );
        assert!(r.min.is_some());
    }
}
