//! The serving phase: what [`crate::state::Serving`] is, without its data.
//!
//! It sits below both [`crate::state`] (which publishes it) and [`crate::metrics`] (which
//! exports it as `kubeflake_sidecar_phase{phase}`), so neither has to import the other's
//! upward. Add a phase here, then its arm in `Serving::phase`.

/// The phase of a [`Serving`](crate::state::Serving), without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Waiting,
    Snowflake,
    Segment,
    Stopping,
}

impl Phase {
    pub(crate) const ALL: [Phase; 4] = [
        Phase::Waiting,
        Phase::Snowflake,
        Phase::Segment,
        Phase::Stopping,
    ];

    /// The `phase` label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Snowflake => "snowflake",
            Phase::Segment => "segment",
            Phase::Stopping => "stopping",
        }
    }
}
