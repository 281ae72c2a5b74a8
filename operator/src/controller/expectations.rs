//! Expectations: a Snowflake pass does not plan on a cache that has not yet seen the
//! previous pass's own writes.
//!
//! The caches (reflectors) see a write only when its watch event arrives. A pass that plans
//! before that sees the pod it just assigned as still waiting and the slot it just took as
//! still free: it tries the same writes again (409s, harmless but costly), or hands the
//! "waiting" pod a second free slot (a create on another lease succeeds). That stays safe,
//! because every write is a compare-and-swap and the next pass releases the extra slot, but
//! at scale it turns mass assignment into thousands of conflicts. So after a pass writes,
//! the sequence's next pass waits until the cache shows every lease it wrote in a version
//! other than the one it planned on (or shows it at all, for a lease it created).
//!
//! A bounded wait: after [`EXPECTATION_TIMEOUT`] the pass plans anyway (a lost watch event
//! must not stall a sequence; the writes stay compare-and-swaps). Pure apart from the clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a pass waits at most for the cache to see the previous pass's writes.
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(15);

/// One lease a pass wrote, and the version it planned on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub lease: String,
    /// The resourceVersion the write replaced; `None` when the write created the lease.
    pub replaced: Option<String>,
}

impl Written {
    /// Whether a cache that holds this lease at `cached` (its resourceVersion, `None` when
    /// the cache has no such lease) has seen the write.
    pub fn seen_in(&self, cached: Option<&str>) -> bool {
        match (&self.replaced, cached) {
            // Created: seen once the cache has it.
            (None, cached) => cached.is_some(),
            // Replaced (or deleted since): seen once the cache no longer holds the old version.
            (Some(old), cached) => cached != Some(old.as_str()),
        }
    }
}

/// What the cache says about the previous pass's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// No writes outstanding: plan.
    Current,
    /// `unseen` writes are not in the cache yet: wait for them.
    Behind { unseen: usize },
    /// Writes are still unseen after [`EXPECTATION_TIMEOUT`]: plan anyway.
    GaveUp { unseen: usize },
}

struct Pending {
    writes: Vec<Written>,
    since: Instant,
}

/// Per sequence (`namespace/name`), the writes its last pass made that the cache may not
/// show yet. Entries go once seen, timed out or forgotten with the sequence.
#[derive(Default)]
pub struct Expectations(Mutex<HashMap<String, Pending>>);

impl Expectations {
    /// Records the writes of a pass that just finished (replacing older ones).
    pub fn expect(&self, ns: &str, name: &str, writes: Vec<Written>, now: Instant) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = format!("{ns}/{name}");
        if writes.is_empty() {
            all.remove(&key);
        } else {
            all.insert(key, Pending { writes, since: now });
        }
    }

    /// Whether the sequence's next pass may plan, given `cached` (a lease name ->
    /// resourceVersion lookup in the cache). Clears what is settled.
    pub fn readiness(
        &self,
        ns: &str,
        name: &str,
        cached: impl Fn(&str) -> Option<String>,
        now: Instant,
    ) -> Readiness {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = format!("{ns}/{name}");
        let Some(pending) = all.get_mut(&key) else {
            return Readiness::Current;
        };
        pending
            .writes
            .retain(|w| !w.seen_in(cached(&w.lease).as_deref()));
        let unseen = pending.writes.len();
        if unseen == 0 {
            all.remove(&key);
            Readiness::Current
        } else if now.duration_since(pending.since) >= EXPECTATION_TIMEOUT {
            all.remove(&key);
            Readiness::GaveUp { unseen }
        } else {
            Readiness::Behind { unseen }
        }
    }

    /// Drops a deleted sequence's entry.
    pub fn forget(&self, ns: &str, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&format!("{ns}/{name}"));
    }

    /// Keeps the entries of the sequences (`namespace/name`) for which `exists` holds only.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|key, _| exists(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replaced(lease: &str, rv: &str) -> Written {
        Written {
            lease: lease.into(),
            replaced: Some(rv.into()),
        }
    }

    fn created(lease: &str) -> Written {
        Written {
            lease: lease.into(),
            replaced: None,
        }
    }

    fn cache(entries: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn a_sequence_without_writes_is_current() {
        let e = Expectations::default();
        assert_eq!(
            e.readiness("ns", "s", cache(&[]), Instant::now()),
            Readiness::Current
        );
    }

    #[test]
    fn a_pass_waits_until_the_cache_shows_a_replaced_lease_in_a_new_version() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect("ns", "s", vec![replaced("s-slot-0", "5")], t0);
        assert_eq!(
            e.readiness("ns", "s", cache(&[("s-slot-0", "5")]), t0),
            Readiness::Behind { unseen: 1 }
        );
        assert_eq!(
            e.readiness("ns", "s", cache(&[("s-slot-0", "6")]), t0),
            Readiness::Current
        );
        // Settled writes are forgotten: an old version later is not waited for again.
        assert_eq!(
            e.readiness("ns", "s", cache(&[("s-slot-0", "5")]), t0),
            Readiness::Current
        );
    }

    #[test]
    fn a_pass_waits_until_the_cache_holds_a_created_lease() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect(
            "ns",
            "s",
            vec![created("s-slot-1"), replaced("s-slot-0", "5")],
            t0,
        );
        assert_eq!(
            e.readiness("ns", "s", cache(&[("s-slot-0", "9")]), t0),
            Readiness::Behind { unseen: 1 }
        );
        assert_eq!(
            e.readiness("ns", "s", cache(&[("s-slot-1", "10")]), t0),
            Readiness::Current
        );
    }

    #[test]
    fn a_lease_deleted_since_the_write_counts_as_seen() {
        assert!(replaced("s-slot-0", "5").seen_in(None));
        assert!(!created("s-slot-0").seen_in(None));
    }

    #[test]
    fn the_wait_is_bounded_a_lost_watch_event_does_not_stall_the_sequence() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect("ns", "s", vec![created("s-slot-1")], t0);
        let later = t0 + EXPECTATION_TIMEOUT;
        assert_eq!(
            e.readiness("ns", "s", cache(&[]), later),
            Readiness::GaveUp { unseen: 1 }
        );
        assert_eq!(
            e.readiness("ns", "s", cache(&[]), later),
            Readiness::Current
        );
    }

    #[test]
    fn sequences_wait_independently_and_forget_drops_one() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect("ns", "a", vec![created("a-slot-0")], t0);
        e.expect("ns", "b", vec![created("b-slot-0")], t0);
        assert_eq!(
            e.readiness("other", "a", cache(&[]), t0),
            Readiness::Current
        );
        e.forget("ns", "a");
        assert_eq!(e.readiness("ns", "a", cache(&[]), t0), Readiness::Current);
        assert_eq!(
            e.readiness("ns", "b", cache(&[]), t0),
            Readiness::Behind { unseen: 1 }
        );
    }

    #[test]
    fn a_pass_without_writes_clears_what_the_one_before_expected() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect("ns", "s", vec![created("s-slot-0")], t0);
        e.expect("ns", "s", vec![], t0);
        assert_eq!(e.readiness("ns", "s", cache(&[]), t0), Readiness::Current);
    }
}
