//! Epoch and time unit: the mapping between wall-clock instants and [`Tick`]s.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::layout::{Layout, Tick};

/// The length of one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum TimeUnit {
    /// One millisecond (the default).
    #[default]
    #[serde(rename = "1ms")]
    Millisecond,
    /// Ten milliseconds.
    #[serde(rename = "10ms")]
    TenMilliseconds,
    /// A hundred milliseconds.
    #[serde(rename = "100ms")]
    HundredMilliseconds,
    /// One second.
    #[serde(rename = "1s")]
    Second,
}

impl TimeUnit {
    /// Every unit, shortest first.
    pub const ALL: [TimeUnit; 4] = [
        TimeUnit::Millisecond,
        TimeUnit::TenMilliseconds,
        TimeUnit::HundredMilliseconds,
        TimeUnit::Second,
    ];

    /// The spelling an IdSequence uses (its serde name): "1ms", "10ms", "100ms" or "1s".
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Millisecond => "1ms",
            TimeUnit::TenMilliseconds => "10ms",
            TimeUnit::HundredMilliseconds => "100ms",
            TimeUnit::Second => "1s",
        }
    }

    pub fn millis(self) -> u64 {
        match self {
            TimeUnit::Millisecond => 1,
            TimeUnit::TenMilliseconds => 10,
            TimeUnit::HundredMilliseconds => 100,
            TimeUnit::Second => 1000,
        }
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A time unit spelled other than an IdSequence spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a time unit: use 1ms, 10ms, 100ms or 1s")]
pub struct UnknownTimeUnit(pub String);

impl FromStr for TimeUnit {
    type Err = UnknownTimeUnit;

    /// Parses the spelling an IdSequence uses (the inverse of [`TimeUnit::as_str`]).
    fn from_str(text: &str) -> Result<TimeUnit, UnknownTimeUnit> {
        TimeUnit::ALL
            .into_iter()
            .find(|u| u.as_str() == text)
            .ok_or_else(|| UnknownTimeUnit(text.to_string()))
    }
}

/// Why an epoch cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    #[error("epoch {0:?} is not an RFC 3339 time such as 2025-01-01T00:00:00Z")]
    NotRfc3339(String),
    #[error("epoch {0} is before 1970-01-01T00:00:00Z")]
    BeforeUnixEpoch(String),
}

/// Epoch plus time unit. Converts Unix milliseconds to ticks and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timebase {
    epoch_unix_ms: u64,
    unit: TimeUnit,
}

/// The default epoch, 2025-01-01T00:00:00Z.
pub const DEFAULT_EPOCH: &str = "2025-01-01T00:00:00Z";

impl Timebase {
    pub fn new(epoch_unix_ms: u64, unit: TimeUnit) -> Timebase {
        Timebase {
            epoch_unix_ms,
            unit,
        }
    }

    /// Parses an RFC 3339 epoch as written in an IdSequence.
    pub fn parse(epoch: &str, unit: TimeUnit) -> Result<Timebase, EpochError> {
        let at = DateTime::parse_from_rfc3339(epoch)
            .map_err(|_| EpochError::NotRfc3339(epoch.to_string()))?;
        let ms = u64::try_from(at.timestamp_millis())
            .map_err(|_| EpochError::BeforeUnixEpoch(epoch.to_string()))?;
        Ok(Timebase::new(ms, unit))
    }

    pub fn epoch_unix_ms(&self) -> u64 {
        self.epoch_unix_ms
    }
    pub fn unit(&self) -> TimeUnit {
        self.unit
    }

    /// The tick containing the instant `unix_ms`, or `None` before the epoch.
    #[inline]
    pub fn tick_at(&self, unix_ms: u64) -> Option<Tick> {
        unix_ms
            .checked_sub(self.epoch_unix_ms)
            .map(|d| Tick(d / self.unit.millis()))
    }

    /// The instant a tick starts, in Unix milliseconds (saturating far in the future).
    pub fn start_of(&self, tick: Tick) -> u64 {
        self.epoch_unix_ms
            .saturating_add(tick.0.saturating_mul(self.unit.millis()))
    }

    /// Converts a length of time into whole ticks, rounding up.
    pub fn ticks_in_ms(&self, ms: u64) -> u64 {
        ms.div_ceil(self.unit.millis())
    }

    /// The first instant the timestamp bits of `layout` can no longer represent.
    pub fn exhausts_at_ms(&self, layout: &Layout) -> u64 {
        self.start_of(Tick(layout.max_tick().0.saturating_add(1)))
    }

    /// IDs per second one worker can issue at most.
    pub fn ids_per_second_per_worker(&self, layout: &Layout) -> u64 {
        layout.ids_per_tick() * 1000 / self.unit.millis()
    }
}

/// Formats Unix milliseconds as RFC 3339 (UTC, millisecond precision).
pub fn rfc3339(unix_ms: u64) -> String {
    i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| "beyond year 262143".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_epoch_and_unit_map_instants_to_ticks() {
        let tb = Timebase::parse(DEFAULT_EPOCH, TimeUnit::Millisecond).unwrap();
        assert_eq!(tb.epoch_unix_ms(), 1_735_689_600_000);
        assert_eq!(tb.tick_at(1_735_689_600_000), Some(Tick(0)));
        assert_eq!(tb.tick_at(1_735_689_600_999), Some(Tick(999)));
        assert_eq!(tb.tick_at(1_735_689_599_999), None, "before the epoch");
        let coarse = Timebase::new(1000, TimeUnit::TenMilliseconds);
        assert_eq!(coarse.tick_at(1_019), Some(Tick(1)));
        assert_eq!(coarse.start_of(Tick(1)), 1_010);
    }

    #[test]
    fn lifetime_of_the_default_layout_is_about_69_years() {
        let tb = Timebase::parse(DEFAULT_EPOCH, TimeUnit::Millisecond).unwrap();
        let layout = Layout::default();
        assert_eq!(
            rfc3339(tb.exhausts_at_ms(&layout)),
            "2094-09-07T15:47:35.552Z"
        );
        assert_eq!(tb.ids_per_second_per_worker(&layout), 4_096_000);
    }

    #[test]
    fn time_unit_text_is_the_serde_name_and_parses_back() {
        for unit in TimeUnit::ALL {
            let serde_name = serde_json::to_value(unit).unwrap();
            assert_eq!(serde_name.as_str(), Some(unit.as_str()));
            assert_eq!(unit.to_string().parse::<TimeUnit>(), Ok(unit));
        }
        let err = "5ms".parse::<TimeUnit>().unwrap_err().to_string();
        assert!(err.contains("1ms, 10ms, 100ms or 1s"), "{err}");
    }

    #[test]
    fn epoch_must_be_rfc3339_after_1970() {
        assert!(matches!(
            Timebase::parse("2025-01-01", TimeUnit::Second),
            Err(EpochError::NotRfc3339(_))
        ));
        assert!(matches!(
            Timebase::parse("1969-12-31T23:59:59Z", TimeUnit::Second),
            Err(EpochError::BeforeUnixEpoch(_))
        ));
    }
}
