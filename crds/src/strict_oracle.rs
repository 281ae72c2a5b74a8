//! The strict oracle: the one sidecar of a strict sequence that serves its values
//! (docs/strict.md, docs/safety.md rule 13), and how the sidecars agree which one it is.
//!
//! **The oracle Lease**, one per strict sequence, named `<sequence>-strict-oracle`, created
//! by the operator (sidecars never create Leases) and written by the sidecars:
//!
//! | field                                | meaning                                          |
//! |--------------------------------------|--------------------------------------------------|
//! | `spec.holderIdentity`                | the oracle pod's UID, or empty when none serves  |
//! | `spec.leaseDurationSeconds`          | `D`: see the timing below                        |
//! | `spec.leaseTransitions`              | counts take-overs: the oracle's term             |
//! | `spec.acquireTime`, `renewTime`      | when taken / last renewed (for people: nobody compares them with a clock) |
//! | annotation `kubeflake.io/oracle-address` | `ip:port` where the oracle takes forwarded requests |
//! | annotation `kubeflake.io/claimants`  | the pods that may take it (the operator keeps it, as on the counter) |
//! | label `kubeflake.io/strict-oracle`   | the sequence's name (not `kubeflake.io/sequence`: slot code never sees it); without it the Lease is not kubeflake's ([`crate::ownership`]) |
//!
//! **Timing**, with `D` the lease duration and `ρ` = [`RATE_BOUND`] the most a pod's
//! monotonic clock may run fast or slow against real time ([`OracleTiming`]):
//! - the oracle serves a value only if, by its own monotonic clock, less than
//!   has passed since it *sent* the last renewal that succeeded (`D·(1-2ρ)`);
//! - another sidecar takes the Lease over only after it saw the same version, unchanged,
//!   for `D·(1+ρ)` on its own monotonic clock (or at once when the Lease names nobody: the
//!   holder stopped serving before it released);
//!
//! so two oracles never serve at overlapping times.
//!
//! **The window**: the oracle raises the segment counter's `next` from `n` to `W` by one
//! compare-and-set and serves `[n, W)` from memory, in order; it raises `W` again before
//! the window runs out. A new oracle starts at the `next` it raised itself, so above every
//! value an earlier one served. A counter served this way says [`COUNTER_FORMAT_ORACLE`]
//! (written by the operator), which sidecars of releases without the oracle refuse: their
//! one-write-per-value values would land above the window but be served before values
//! inside it (an order violation, never a duplicate).
//!
//! **Forwarding**: every other sidecar sends its strict requests to the oracle over one TCP
//! connection, one request in flight carrying every request queued meanwhile
//! ([`ForwardRequest`], answered with one range, [`ForwardReply`]). The wire format,
//! [`wire`], lives here because sidecars of two releases may talk to each other during an
//! upgrade.
//!
//! One piece (over 400 lines, half of them tests): the Lease's fields, its timing and its
//! transitions are one protocol, read together like [`crate::slot_lease`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

pub mod wire;

pub use self::wire::{ForwardReply, ForwardRequest, MAX_FORWARD_COUNT};
use crate::segment_counter::CLAIMANTS_ANNOTATION;
use crate::slot_lease::FORMAT_ANNOTATION;

pub use crate::ownership::{ORACLE_LABEL, oracle_name};
/// Annotation on the oracle Lease: `ip:port` of the oracle's forwarding listener.
pub const ADDRESS_ANNOTATION: &str = "kubeflake.io/oracle-address";
pub use crate::segment_counter::COUNTER_FORMAT_ORACLE;
/// The oracle Lease's format (absent = 1).
pub const ORACLE_LEASE_FORMAT: u64 = 1;
/// `D` of a new oracle Lease, in seconds.
pub const DEFAULT_LEASE_SECONDS: i32 = 5;
/// The longest `D` read: an hour (the operator writes [`DEFAULT_LEASE_SECONDS`]); a
/// longer one is refused, not clamped.
pub const MAX_LEASE_SECONDS: i32 = 3600;
/// `ρ`: the most a pod's monotonic clock may run fast or slow against real time (1/20:
/// far beyond any real clock's drift).
pub const RATE_BOUND: (u32, u32) = (1, 20);

/// How long an oracle may serve after a renewal, and how long others wait to take over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OracleTiming {
    /// `D`.
    pub lease: Duration,
}

impl OracleTiming {
    pub fn new(lease: Duration) -> OracleTiming {
        OracleTiming { lease }
    }

    /// `D·(1-2ρ)`: after *sending* a renewal that then succeeded, the oracle serves for at
    /// most this long (by its monotonic clock) unless a later renewal succeeds.
    pub fn serve_for(&self) -> Duration {
        let (num, den) = RATE_BOUND;
        self.lease * (den - 2 * num) / den
    }

    /// `D·(1+ρ)`: another sidecar takes a held Lease over only after it saw one version
    /// unchanged for this long (by its monotonic clock).
    pub fn take_over_after(&self) -> Duration {
        let (num, den) = RATE_BOUND;
        self.lease * (den + num) / den
    }

    /// How often the oracle renews: five times per serving period, so that a few slow or
    /// failed renewals do not interrupt serving.
    pub fn renew_every(&self) -> Duration {
        self.serve_for() / 5
    }

    /// How often a sidecar that is not the oracle looks at the Lease when nothing changed:
    /// it reads it (the oracle's address, and whether it is still renewed) while its watch
    /// of it is down; otherwise it only checks whether the version it follows has lapsed.
    pub fn poll_every(&self) -> Duration {
        self.lease / 12
    }
}

/// Why a Lease is not a well-formed oracle Lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OracleLeaseError {
    #[error(
        "oracle lease {name} has leaseDurationSeconds {value:?}: it must be a whole number of \
         seconds from 1 to {MAX_LEASE_SECONDS}; the operator writes {DEFAULT_LEASE_SECONDS}, put \
         that back"
    )]
    BadDuration { name: String, value: Option<i32> },
    #[error(
        "oracle lease {name} was written in format {found} ({FORMAT_ANNOTATION}); this release \
         understands format {ORACLE_LEASE_FORMAT}: upgrade the sidecars, nothing was written"
    )]
    UnsupportedFormat { name: String, found: String },
    #[error(
        "oracle lease {name} has spec.leaseTransitions {value}: kubeflake counts terms from 0 \
         up to 2^31-2; nothing was written"
    )]
    BadTerm { name: String, value: i32 },
    /// Not kubeflake's (docs/safety.md rule 16): never read further, never written.
    #[error(transparent)]
    Foreign(#[from] crate::ownership::Foreign),
}

/// Why a transition refuses the Lease as read: read it again and decide again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OracleTransitionError {
    #[error(
        "oracle lease {name} names pod {holder} as the oracle, not pod {expected}: it was taken \
         over, so it was not written"
    )]
    NotHolder {
        name: String,
        expected: String,
        holder: String,
    },
    #[error("oracle lease {name} names no oracle: a renewal or release needs one")]
    NoHolder { name: String },
}

/// What one oracle Lease says, and the Lease it says it of.
#[derive(Debug, Clone)]
pub struct OracleLease {
    pub name: String,
    /// The oracle's pod UID.
    pub holder: Option<String>,
    /// Where the oracle takes forwarded requests (`ip:port`).
    pub address: Option<String>,
    pub timing: OracleTiming,
    /// Take-overs so far: the term of the current holder.
    pub term: i32,
    /// The version read: the precondition of the next write.
    pub resource_version: Option<String>,
    /// The Lease exactly as read; transitions start from it.
    pub read: Arc<Lease>,
}

impl OracleLease {
    pub fn parse(lease: Lease) -> Result<OracleLease, OracleLeaseError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        // Kubeflake's at all (its label, and the name the label gives it; rule 16)? A
        // foreign Lease was never guarded by the Lease policy: its address means nothing.
        crate::ownership::check_named(&lease, crate::ownership::LeaseKind::StrictOracle)?;
        let annotations = lease.metadata.annotations.as_ref();
        if let Some(found) = annotations.and_then(|a| a.get(FORMAT_ANNOTATION))
            && found != &ORACLE_LEASE_FORMAT.to_string()
        {
            return Err(OracleLeaseError::UnsupportedFormat {
                name,
                found: found.clone(),
            });
        }
        let spec = lease.spec.as_ref();
        let seconds = spec.and_then(|s| s.lease_duration_seconds);
        let secs = seconds
            .filter(|s| (1..=MAX_LEASE_SECONDS).contains(s))
            .and_then(|s| u64::try_from(s).ok())
            .ok_or_else(|| OracleLeaseError::BadDuration {
                name: name.clone(),
                value: seconds,
            })?;
        let term = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        // A take writes term + 1: the largest term could not be taken over.
        if !(0..i32::MAX).contains(&term) {
            return Err(OracleLeaseError::BadTerm { name, value: term });
        }
        Ok(OracleLease {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            address: annotations
                .and_then(|a| a.get(ADDRESS_ANNOTATION).cloned())
                .filter(|a| !a.is_empty()),
            timing: OracleTiming::new(Duration::from_secs(secs)),
            term,
            resource_version: lease.metadata.resource_version.clone(),
            name,
            read: Arc::new(lease),
        })
    }

    /// The Lease taken by pod `uid`, which takes forwarded requests at `address`; a new
    /// term. Whether it may be taken (free, or unchanged for long enough) is the caller's
    /// decision; the write is a compare-and-swap on the version read.
    pub fn take(&self, uid: &str, address: &str, now: DateTime<Utc>) -> Lease {
        let mut next = Lease::clone(&self.read);
        next.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ADDRESS_ANNOTATION.to_string(), address.to_string());
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(uid.to_string());
        spec.acquire_time = Some(MicroTime(to_timestamp(now)));
        spec.renew_time = Some(MicroTime(to_timestamp(now)));
        // Below i32::MAX by the parse: never saturates.
        spec.lease_transitions = Some(self.term.saturating_add(1));
        next
    }

    /// The Lease renewed by its holder `uid`.
    pub fn renew(&self, uid: &str, now: DateTime<Utc>) -> Result<Lease, OracleTransitionError> {
        self.held_by(uid)?;
        let mut next = Lease::clone(&self.read);
        next.spec.get_or_insert_with(LeaseSpec::default).renew_time =
            Some(MicroTime(to_timestamp(now)));
        Ok(next)
    }

    /// The Lease released by its holder `uid`, which has stopped serving: no holder, no
    /// address, so the next sidecar takes it over without waiting.
    pub fn release(&self, uid: &str) -> Result<Lease, OracleTransitionError> {
        self.held_by(uid)?;
        let mut next = Lease::clone(&self.read);
        if let Some(a) = next.metadata.annotations.as_mut() {
            a.remove(ADDRESS_ANNOTATION);
        }
        next.spec
            .get_or_insert_with(LeaseSpec::default)
            .holder_identity = None;
        Ok(next)
    }

    fn held_by(&self, uid: &str) -> Result<(), OracleTransitionError> {
        match &self.holder {
            Some(h) if h == uid => Ok(()),
            Some(h) => Err(OracleTransitionError::NotHolder {
                name: self.name.clone(),
                expected: uid.to_string(),
                holder: h.clone(),
            }),
            None => Err(OracleTransitionError::NoHolder {
                name: self.name.clone(),
            }),
        }
    }
}

fn to_timestamp(t: DateTime<Utc>) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_microsecond(t.timestamp_micros())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

/// A new oracle Lease for `sequence` in `namespace`: nobody holds it, nobody may take it
/// until the operator lists the sequence's pods as claimants.
pub fn new_oracle_lease(sequence: &str, namespace: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(oracle_name(sequence)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                ORACLE_LABEL.to_string(),
                sequence.to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    FORMAT_ANNOTATION.to_string(),
                    ORACLE_LEASE_FORMAT.to_string(),
                ),
                (CLAIMANTS_ANNOTATION.to_string(), String::new()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            lease_duration_seconds: Some(DEFAULT_LEASE_SECONDS),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(uid: &str) -> OracleLease {
        let free = OracleLease::parse(new_oracle_lease("orders", "ns")).unwrap();
        OracleLease::parse(free.take(uid, "10.0.0.5:7072", Utc::now())).unwrap()
    }

    #[test]
    fn a_new_oracle_lease_names_nobody_and_lists_no_claimants() {
        let lease = new_oracle_lease("orders", "ns");
        assert_eq!(lease.metadata.name.as_deref(), Some("orders-strict-oracle"));
        let parsed = OracleLease::parse(lease).unwrap();
        assert_eq!(parsed.holder, None);
        assert_eq!(parsed.term, 0);
        assert_eq!(
            parsed.timing.lease,
            Duration::from_secs(DEFAULT_LEASE_SECONDS as u64)
        );
        assert!(
            crate::segment_counter::claimants(&parsed.read).is_empty(),
            "nobody may take it before the operator lists the pods"
        );
    }

    #[test]
    fn rule13_a_take_over_starts_a_new_term_and_publishes_the_address() {
        let a = held("uid-a");
        assert_eq!(a.holder.as_deref(), Some("uid-a"));
        assert_eq!(a.address.as_deref(), Some("10.0.0.5:7072"));
        assert_eq!(a.term, 1);
        let b = OracleLease::parse(a.take("uid-b", "10.0.0.6:7072", Utc::now())).unwrap();
        assert_eq!((b.holder.as_deref(), b.term), (Some("uid-b"), 2));
    }

    #[test]
    fn rule13_only_the_holder_renews_or_releases_and_a_release_names_nobody() {
        let a = held("uid-a");
        assert!(matches!(
            a.renew("uid-b", Utc::now()),
            Err(OracleTransitionError::NotHolder { .. })
        ));
        assert!(a.release("uid-b").is_err());
        let released = OracleLease::parse(a.release("uid-a").unwrap()).unwrap();
        assert_eq!((&released.holder, &released.address), (&None, &None));
        assert_eq!(released.term, 1, "a release keeps the term count");
        assert!(matches!(
            released.renew("uid-a", Utc::now()),
            Err(OracleTransitionError::NoHolder { .. })
        ));
    }

    #[test]
    fn transitions_keep_fields_they_do_not_own() {
        let mut lease = new_oracle_lease("orders", "ns");
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CLAIMANTS_ANNOTATION.into(), "uid-a,uid-b".into());
        lease.metadata.resource_version = Some("41".into());
        let taken = OracleLease::parse(lease)
            .unwrap()
            .take("uid-a", "10.0.0.5:7072", Utc::now());
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("41"));
        assert_eq!(
            crate::segment_counter::claimants(&taken),
            ["uid-a", "uid-b"]
        );
        assert_eq!(
            taken.spec.as_ref().unwrap().lease_duration_seconds,
            Some(DEFAULT_LEASE_SECONDS)
        );
    }

    /// Rule 13: an oracle stops serving before anyone may take over, whatever the rates
    /// of the two clocks within the bound. The holder's clock slow by ρ serves for at most
    /// serve_for/(1-ρ) of real time; the taker's clock fast by ρ waits at least
    /// take_over_after/(1+ρ) of real time, counted from a moment after the renewal was sent.
    #[test]
    fn rule13_an_oracle_stops_serving_before_another_may_take_over() {
        let (num, den) = RATE_BOUND;
        for secs in [1, 2, 5, 30, 600] {
            let t = OracleTiming::new(Duration::from_secs(secs));
            let holder_serves_at_most =
                t.serve_for().as_secs_f64() * den as f64 / (den - num) as f64;
            let taker_waits_at_least =
                t.take_over_after().as_secs_f64() * den as f64 / (den + num) as f64;
            assert!(holder_serves_at_most < taker_waits_at_least, "D = {secs} s");
            assert!(t.renew_every() < t.serve_for());
        }
    }

    #[test]
    fn a_bad_duration_or_newer_format_is_refused_with_what_to_fix() {
        let mut lease = new_oracle_lease("orders", "ns");
        lease.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
        let err = OracleLease::parse(lease).unwrap_err();
        assert!(err.to_string().contains("put that back"), "{err}");
        let mut lease = new_oracle_lease("orders", "ns");
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(FORMAT_ANNOTATION.into(), "2".into());
        assert!(matches!(
            OracleLease::parse(lease),
            Err(OracleLeaseError::UnsupportedFormat { .. })
        ));
    }
}
