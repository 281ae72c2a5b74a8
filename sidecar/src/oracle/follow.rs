//! What the elector of a sidecar that does not hold the oracle Lease knows of it between
//! two steps: the Lease as its watch delivered it last, and since when (by this sidecar's
//! monotonic clock) it has seen one version of it unchanged: the wait before a take-over
//! (`D·(1+ρ)`, docs/safety.md rule 13) counts from there.

use std::time::{Duration, Instant};

use kubeflake_crds::strict_oracle::OracleLease;

#[derive(Debug, Default)]
pub(crate) struct Follow {
    /// The Lease as the watch delivered it last; `None` while the watch does not know it
    /// (then the elector reads it).
    pub(crate) watched: Option<OracleLease>,
    /// The version seen last, and when it was first seen.
    seen: Option<(Option<String>, Instant)>,
}

impl Follow {
    /// How long the version of `lease` has been seen unchanged; zero for a version not
    /// seen before, from which the wait starts again.
    pub(crate) fn unchanged_for(&mut self, lease: &OracleLease) -> Duration {
        self.unchanged_at(lease, Instant::now())
    }

    fn unchanged_at(&mut self, lease: &OracleLease, now: Instant) -> Duration {
        match &self.seen {
            Some((version, since)) if *version == lease.resource_version => {
                now.saturating_duration_since(*since)
            }
            _ => {
                self.seen = Some((lease.resource_version.clone(), now));
                Duration::ZERO
            }
        }
    }

    /// After a take-over was tried: the wait starts again, and the next step reads the
    /// Lease (a take that failed means the copy the watch showed was out of date).
    pub(crate) fn forget(&mut self) {
        *self = Follow::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::strict_oracle::new_oracle_lease;

    fn version(v: &str) -> OracleLease {
        let mut lease = new_oracle_lease("s", "ns");
        lease.metadata.resource_version = Some(v.into());
        OracleLease::parse(lease).unwrap()
    }

    #[test]
    fn rule13_the_take_over_wait_counts_from_when_a_version_was_first_seen_and_starts_again_with_each_new_one()
     {
        let mut f = Follow::default();
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(f.unchanged_at(&version("1"), t0), Duration::ZERO);
        assert_eq!(f.unchanged_at(&version("1"), t0 + 3 * s), 3 * s);
        assert_eq!(f.unchanged_at(&version("2"), t0 + 4 * s), Duration::ZERO);
        assert_eq!(f.unchanged_at(&version("2"), t0 + 6 * s), 2 * s);
        // A watch that lists again may show an older version: the wait starts again (only
        // ever later, never sooner).
        assert_eq!(f.unchanged_at(&version("1"), t0 + 7 * s), Duration::ZERO);
        f.forget();
        assert_eq!(f.unchanged_at(&version("1"), t0 + 8 * s), Duration::ZERO);
    }
}
