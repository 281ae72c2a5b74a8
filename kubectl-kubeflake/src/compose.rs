//! `compose --time T`: the smallest and largest ID any worker can produce in the tick
//! containing `T`, so `WHERE id BETWEEN min AND max` selects the rows made in that tick
//! (and `id >= min(T1) AND id <= max(T2)` a time range).
//!
//! The range covers every datacenter and worker: IDs order by time first, so it is the
//! exact bound for a table shared by several datacenters too.

use chrono::{DateTime, Utc};
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
    pub min: String,
    pub max: String,
}

impl Report for ComposeReport {
    fn table(&self) -> String {
        fields(&[
            ("TIME", self.time.clone()),
            ("TICK", self.tick.to_string()),
            (
                "TICK SPAN",
                format!("{} .. {} (end exclusive)", self.tick_start, self.tick_end),
            ),
            ("MIN ID", self.min.clone()),
            ("MAX ID", self.max.clone()),
        ])
    }
}

impl ComposeReport {
    /// The report with `min` and `max` written in `form` (`--format`), for keys stored as
    /// base32 or base62 text: those forms sort byte by byte like the IDs, so the bounds
    /// still select the tick's rows.
    pub fn in_form(mut self, form: TextForm) -> ComposeReport {
        for id in [&mut self.min, &mut self.max] {
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
    let (min, max): (Id, Id) = layout.id_range_of_tick(tick).map_err(|_| beyond())?;
    Ok(ComposeReport {
        layout: source.view(),
        time: shown,
        tick: tick.0,
        tick_start: rfc3339(timebase.start_of(tick)),
        tick_end: rfc3339(timebase.start_of(Tick(tick.0 + 1))),
        min: min.to_string(),
        max: max.to_string(),
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
            .decode(Id::new(r.min.parse().unwrap()).unwrap())
            .unwrap();
        let max = layout
            .decode(Id::new(r.max.parse().unwrap()).unwrap())
            .unwrap();
        assert_eq!((min.tick.0, min.slot.0, min.sequence), (1500, 0, 0));
        assert_eq!((max.tick.0, max.slot.0, max.sequence), (1500, 1023, 4095));
        let prev: u64 = r.min.parse::<u64>().unwrap() - 1;
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
}
