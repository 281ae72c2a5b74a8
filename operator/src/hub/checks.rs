//! Whether the membership task has compared a membership's copy with the hub since this
//! operator started, or since the controller's membership watch last listed from scratch
//! (issue 55; rule 21 of docs/design/2026-11-29-multicluster.md, "A member's etcd restored
//! from an older snapshot while its pods run").
//!
//! A restored etcd brings back an older copy of the claims and older slot Leases, and it
//! needs an API server restart, after which the operator either starts anew or its watches
//! list again from scratch (the restored store answers `410 Gone` to their old
//! resourceVersions). Until a contact has compared the copy's generation with the hub's,
//! the controller cannot tell a restored copy from a current one, and it would assign slots
//! from Leases that may have gone back. So the controller assigns no slot of a joined
//! sequence until this record says the task has compared that membership once since then
//! (`controller/id_spaces/blocks.rs`, `Waiting::HubCheckPending`). If the hub is
//! unreachable then, new pods wait while running pods keep issuing: the one moment a pod's
//! start waits on the hub.
//!
//! The record is in memory, shared by the task and the controller of one process: a new
//! operator starts with nothing checked. Each re-list bumps an epoch; a contact counts only
//! when it began in the current epoch (a contact that began before the re-list may have read
//! what was there before the restore). A contact that found the copy behind stores the
//! hub's generation and `FencesRaised=False` in one status write, so the controller also
//! waits until the copy it reads is at least as new as the one the contact stored. That
//! copy is read from the API server at each pass, not taken from the cache
//! (`IdSpaces::fresh`): after a restore the pods' watch may list the restored store before
//! the membership watch does, and the cache would still hold the copy of before the
//! restore, the one a contact compared.

use std::collections::HashMap;
use std::sync::Mutex;

/// The memberships compared with the hub since the start or the last re-list.
#[derive(Debug, Default)]
pub struct HubChecks {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counts the re-lists after the first list.
    epoch: u64,
    /// Whether the controller's watch has listed once (that first list bumps nothing: it
    /// follows the start, which begins with nothing checked).
    listed: bool,
    /// By (namespace, name): the epoch of the contact, and the generation of the copy
    /// it stored.
    checked: HashMap<(String, String), Checked>,
}

#[derive(Debug, Clone, Copy)]
struct Checked {
    epoch: u64,
    generation: i64,
}

/// The epoch a contact began in, to hand back to [`HubChecks::compared`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

impl HubChecks {
    /// The current epoch: taken before a contact reads anything.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.lock().epoch)
    }

    /// The controller's membership watch began a list from scratch. The first does
    /// nothing; each later one forgets every comparison.
    pub fn listing(&self) {
        let mut inner = self.lock();
        if inner.listed {
            inner.epoch += 1;
            inner.checked.clear();
        }
        inner.listed = true;
    }

    /// The contact with membership `namespace/name` that began in `began` compared the copy
    /// with the hub and stored a copy of `generation`. Ignored when a re-list came since
    /// the contact began.
    pub fn compared(&self, namespace: &str, name: &str, began: Epoch, generation: i64) {
        let mut inner = self.lock();
        if began.0 != inner.epoch {
            return;
        }
        let key = (namespace.to_string(), name.to_string());
        inner.checked.insert(
            key,
            Checked {
                epoch: began.0,
                generation,
            },
        );
    }

    /// Whether the controller may use membership `namespace/name`, whose copy in its cache
    /// has `generation`: compared in this epoch, and the cache at least as new as what the
    /// contact stored.
    pub fn usable(&self, namespace: &str, name: &str, generation: i64) -> bool {
        let inner = self.lock();
        inner
            .checked
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|c| c.epoch == inner.epoch && generation >= c.generation)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while held leaves plain data behind: still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule21_nothing_is_usable_before_a_contact_after_the_start() {
        let checks = HubChecks::default();
        checks.listing();
        assert!(!checks.usable("ns", "m", 7));
        let began = checks.epoch();
        checks.compared("ns", "m", began, 7);
        assert!(checks.usable("ns", "m", 7));
        assert!(!checks.usable("ns", "other", 7));
        assert!(!checks.usable("other", "m", 7));
    }

    #[test]
    fn rule21_a_relist_forgets_every_comparison_and_a_contact_begun_before_it_counts_for_nothing() {
        let checks = HubChecks::default();
        checks.listing();
        let before = checks.epoch();
        checks.compared("ns", "m", before, 3);
        let during = checks.epoch();
        checks.listing();
        assert!(!checks.usable("ns", "m", 3));
        checks.compared("ns", "m", during, 3);
        assert!(!checks.usable("ns", "m", 3));
        let after = checks.epoch();
        checks.compared("ns", "m", after, 3);
        assert!(checks.usable("ns", "m", 3));
    }

    #[test]
    fn rule21_a_cache_older_than_the_copy_the_contact_stored_is_not_used() {
        let checks = HubChecks::default();
        let began = checks.epoch();
        // The contact found the copy at 4 behind the hub's 9 and stored 9.
        checks.compared("ns", "m", began, 9);
        assert!(!checks.usable("ns", "m", 4));
        assert!(checks.usable("ns", "m", 9));
        assert!(checks.usable("ns", "m", 10));
    }
}
