//! From spec to validated parameters. Pure.
//!
//! A live sequence needs a valid spec: otherwise its status says `InvalidSpec` and nothing
//! is written. A sequence being deleted does not: its spec is read leniently ([`teardown`]),
//! so that a spec that turned invalid after the finalizer was added (a stricter operator,
//! a segment setting changed) never blocks deletion.

use std::time::Duration;

use kubeflake_crds::sequence::{IdSequenceSpec, SegmentParams, SequenceParams, SpecError};
use kubeflake_crds::timebase::{EpochError, Timebase};

/// A live sequence's parameters, by mode.
#[derive(Debug, Clone, PartialEq)]
pub enum Valid {
    Snowflake(SequenceParams),
    Segment(SegmentParams),
}

/// Validates the spec the way the sidecars do; the first error found.
pub fn validate(spec: &IdSequenceSpec) -> Result<Valid, SpecError> {
    let params = spec.params()?;
    Ok(match spec.segment_params()? {
        Some(segment) => Valid::Segment(segment),
        None => Valid::Snowflake(params),
    })
}

/// What deletion needs from the spec, each part read on its own so that one bad field
/// costs only what depends on it.
#[derive(Debug, Clone)]
pub struct Teardown {
    /// The full parameters, when the spec is valid.
    pub params: Option<SequenceParams>,
    /// Ticks for judging fences (docs/safety.md rule 10); without it no fence can be
    /// judged passed, and deletion waits for a person.
    pub timebase: Result<Timebase, EpochError>,
    /// How long a held lease must stay unchanged to count as silent (rule 9).
    pub lease_duration: Duration,
    /// Slots in the layout, for the slot gauges (0 when the layout does not validate).
    pub capacity: u64,
}

/// Reads the spec of a sequence being deleted, whether or not it validates.
pub fn teardown(spec: &IdSequenceSpec) -> Teardown {
    let params = spec.params().ok();
    Teardown {
        params,
        timebase: match &params {
            Some(p) => Ok(p.timebase),
            None => Timebase::parse(&spec.epoch, spec.time_unit),
        },
        lease_duration: Duration::from_secs(
            u64::try_from(spec.lease.duration_seconds).unwrap_or(0),
        ),
        capacity: params.map_or(0, |p| p.layout.slot_count()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::sequence::{Mode, SegmentSpec};

    #[test]
    fn a_snowflake_spec_validates_to_its_params_and_a_segment_spec_to_its_settings() {
        let spec = IdSequenceSpec::default();
        assert_eq!(
            validate(&spec).ok(),
            Some(Valid::Snowflake(
                spec.params().expect("the default is valid")
            ))
        );
        let segment = IdSequenceSpec {
            mode: Mode::Segment,
            ..Default::default()
        };
        assert!(matches!(validate(&segment), Ok(Valid::Segment(_))));
    }

    #[test]
    fn a_sequence_being_deleted_is_read_even_when_its_spec_no_longer_validates() {
        let spec = IdSequenceSpec {
            mode: Mode::Segment,
            segment: Some(SegmentSpec {
                block_size: 0,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(validate(&spec).is_err());
        let t = teardown(&spec);
        assert!(t.timebase.is_ok(), "the epoch still reads");
        assert!(t.params.is_some(), "the Snowflake params are fine");
        let bad_epoch = IdSequenceSpec {
            epoch: "not a time".into(),
            ..Default::default()
        };
        let t = teardown(&bad_epoch);
        assert!(t.timebase.is_err() && t.params.is_none());
        let default = IdSequenceSpec::default().lease.duration_seconds;
        assert_eq!(t.lease_duration, Duration::from_secs(default as u64));
    }
}
