//! The foreign Leases the operator knows of, per sequence (docs/safety.md rule 16): Leases
//! with the name of one of a sequence's Leases that kubeflake did not make. Kept here,
//! beside the other per-sequence figures, because it is what the metrics export
//! (`kubeflake_operator_foreign_leases`), and because a pass needs to remember them: an
//! unlabelled slot Lease is not in the operator's cache (it is selected by label), so the
//! planner would pick its slot again on every pass if nothing remembered it.
//!
//! Each is reported once (a Warning Event and `kubeflake_operator_foreign_leases_found_total`)
//! when it is first noted, not on every pass. An operator restart notes it, and so reports
//! it, once more.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kubeflake_crds::Slot;
use kubeflake_crds::ownership::{Foreign, LeaseKind};

/// How the operator came to know of a foreign Lease, and so how it finds out that it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// In the sequence's labelled cache: what the cache shows each pass is the truth.
    Cache,
    /// Read by name (a create found the name taken, or the counter and oracle Leases, which
    /// are always read by name): read again now and then.
    Read,
}

/// One foreign Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignLease {
    pub kind: LeaseKind,
    /// The slot its name takes, for a slot Lease: the planner skips it.
    pub slot: Option<Slot>,
    /// What is wrong and what to do ([`Foreign`]'s message).
    pub message: String,
    pub source: Source,
    /// When it was last seen to be foreign (the operator's monotonic clock).
    pub checked: Instant,
}

type Book = HashMap<String, BTreeMap<String, ForeignLease>>;

/// Per sequence (`namespace/name`): lease name -> what was found.
#[derive(Default)]
pub struct ForeignBook(Mutex<Book>);

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl ForeignBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes `foreign` of sequence `name`; `true` when it was not known (report it).
    pub fn note(
        &self,
        ns: &str,
        name: &str,
        foreign: &Foreign,
        slot: Option<Slot>,
        source: Source,
        now: Instant,
    ) -> bool {
        let mut book = self.lock();
        let leases = book.entry(key(ns, name)).or_default();
        let new = !leases.contains_key(&foreign.name);
        leases.insert(
            foreign.name.clone(),
            ForeignLease {
                kind: foreign.kind,
                slot,
                message: foreign.to_string(),
                source,
                checked: now,
            },
        );
        new
    }

    /// Forgets Lease `lease` of sequence `name` (deleted, or kubeflake's after all).
    pub fn clear(&self, ns: &str, name: &str, lease: &str) {
        let mut book = self.lock();
        if let Some(leases) = book.get_mut(&key(ns, name)) {
            leases.remove(lease);
            if leases.is_empty() {
                book.remove(&key(ns, name));
            }
        }
    }

    /// Keeps, of the Leases known from the cache, only those it shows now (`names`).
    pub fn seen_in_cache(&self, ns: &str, name: &str, names: &BTreeSet<String>) {
        let mut book = self.lock();
        if let Some(leases) = book.get_mut(&key(ns, name)) {
            leases.retain(|lease, f| f.source != Source::Cache || names.contains(lease));
            if leases.is_empty() {
                book.remove(&key(ns, name));
            }
        }
    }

    /// The foreign Leases of sequence `name`, by name.
    pub fn of(&self, ns: &str, name: &str) -> BTreeMap<String, ForeignLease> {
        self.lock().get(&key(ns, name)).cloned().unwrap_or_default()
    }

    /// The slots whose Lease name a foreign Lease takes: never planned.
    pub fn taken_slots(&self, ns: &str, name: &str) -> BTreeSet<Slot> {
        self.of(ns, name).values().filter_map(|f| f.slot).collect()
    }

    /// The slot Leases known by a read and last checked `every` or longer before `now`:
    /// to be read again (one may have been deleted, and its slot be free again).
    pub fn due(&self, ns: &str, name: &str, now: Instant, every: Duration) -> Vec<String> {
        self.of(ns, name)
            .into_iter()
            .filter(|(_, f)| f.kind == LeaseKind::Slot && f.source == Source::Read)
            .filter(|(_, f)| now.saturating_duration_since(f.checked) >= every)
            .map(|(lease, _)| lease)
            .collect()
    }

    /// Drops sequence `name` (deleted).
    pub fn forget(&self, ns: &str, name: &str) {
        self.lock().remove(&key(ns, name));
    }

    /// Keeps the sequences (`namespace/name`) for which `exists` holds only.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.lock().retain(|k, _| exists(k));
    }

    /// How many foreign Leases are known, over all sequences.
    pub fn total(&self) -> usize {
        self.lock().values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::ownership::Mismatch;

    fn foreign(name: &str, kind: LeaseKind) -> Foreign {
        Foreign {
            name: name.into(),
            kind,
            mismatch: Mismatch::NoLabel,
        }
    }

    #[test]
    fn rule16_a_foreign_lease_is_new_once_and_its_slot_stays_taken_until_it_is_cleared() {
        let book = ForeignBook::default();
        let t0 = Instant::now();
        let slot0 = foreign("orders-slot-0", LeaseKind::Slot);
        assert!(book.note("shop", "orders", &slot0, Some(Slot(0)), Source::Read, t0));
        assert!(!book.note("shop", "orders", &slot0, Some(Slot(0)), Source::Read, t0));
        assert_eq!(
            book.taken_slots("shop", "orders"),
            BTreeSet::from([Slot(0)])
        );
        assert!(
            book.due("shop", "orders", t0, Duration::from_secs(30))
                .is_empty()
        );
        assert_eq!(
            book.due(
                "shop",
                "orders",
                t0 + Duration::from_secs(30),
                Duration::from_secs(30)
            ),
            ["orders-slot-0"]
        );
        assert_eq!(book.total(), 1);
        book.clear("shop", "orders", "orders-slot-0");
        assert!(book.taken_slots("shop", "orders").is_empty());
        assert_eq!(book.total(), 0);
    }

    #[test]
    fn leases_known_from_the_cache_go_when_the_cache_no_longer_shows_them() {
        let book = ForeignBook::default();
        let t0 = Instant::now();
        let cached = foreign("x", LeaseKind::Slot);
        let read = foreign("orders-segment-counter", LeaseKind::SegmentCounter);
        book.note("shop", "orders", &cached, None, Source::Cache, t0);
        book.note("shop", "orders", &read, None, Source::Read, t0);
        book.seen_in_cache("shop", "orders", &BTreeSet::new());
        assert_eq!(
            book.of("shop", "orders").into_keys().collect::<Vec<_>>(),
            ["orders-segment-counter"]
        );
        book.forget("shop", "orders");
        assert_eq!(book.total(), 0);
    }
}
