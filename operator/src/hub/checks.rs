//! Whether the membership task has compared a membership's copy with the hub since this
//! operator started, or since the controller's membership watch last failed or listed from
//! scratch (issue 55; rule 21 of docs/design/2026-11-29-multicluster.md, "A member's etcd
//! restored from an older snapshot while its pods run").
//!
//! A restored etcd brings back an older copy of the claims and older slot Leases, and it
//! needs an API server restart, after which the operator either starts anew or its watches
//! fail and list again from scratch (the restored store answers `410 Gone` to their old
//! resourceVersions). Until a contact has compared the copy's generation with the hub's,
//! the controller cannot tell a restored copy from a current one, and it would assign slots
//! from Leases that may have gone back. So the controller assigns no slot of a joined
//! sequence until this record says the task has compared that membership once since then
//! (`controller/id_spaces/blocks.rs`, `Waiting::HubCheckPending`). If the hub is
//! unreachable then, new pods wait while running pods keep issuing: the one moment a pod's
//! start waits on the hub.
//!
//! The record is in memory, shared by the task and the controller of one process: a new
//! operator starts with nothing checked. Each failure of the watch, and each list from
//! scratch after the first, bumps an epoch and forgets every comparison; a contact counts
//! only when it began in the current epoch (a contact that began before may have read what
//! was there before the restore).
//!
//! **Why a failure of any watch, not only the re-list.** Each of the controller's watches
//! lists again after its own backoff (up to a few seconds, jittered), and a watch ended by
//! the API server's stop may even wait for the restored one before its next request
//! fails: the pods' and Leases' watches may list the restored store before the
//! memberships' watch fails. Until then the membership cache holds the copy of before the
//! restore, which a comparison made before the restore had passed; a new pod seen by the
//! pods' watch was handed a slot from it before any contact with the hub (found by e2e
//! `id_space_etcd_restore`). Whatever a watch lists from a restored store, it lists after a
//! failure of that watch (the restore answers `410 Gone` to its resourceVersion), so a
//! failure of the pods', Leases' or memberships' watch forgets every comparison.
//!
//! **Why the resourceVersion.** A contact that found the copy behind stores the hub's
//! generation and `FencesRaised=False` in one status write, and the controller must not use
//! its cache until the cache shows that write: the copy of before the restore may still be
//! there (its watch not yet listed again), with the very generation the contact stored and
//! without the condition. So the record keeps the resourceVersion of what the contact stored
//! (or read, when nothing changed), and of the status the fence raise wrote after it; the
//! controller uses a cached membership only when its resourceVersion is one of them. A
//! resourceVersion names one state of one object (a restore with `--bump-revision`, as the
//! Kubernetes documentation asks, never hands one out twice), so an equal one is that very
//! object, whatever the cache went through. A membership edited by anyone else waits for
//! the next contact (one period).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::watcher;

/// The memberships compared with the hub since the start, or the last failure or re-list
/// of the controller's membership watch.
#[derive(Debug, Default)]
pub struct HubChecks {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counts the failures and the re-lists after the first list.
    epoch: u64,
    /// Whether the controller's watch has listed once (that first list bumps nothing: it
    /// follows the start, which begins with nothing checked).
    listed: bool,
    /// By (namespace, name): the epoch of the contact, the generation of the copy it
    /// stored, and the resourceVersions of what it stored and of what was written after it
    /// in the same epoch (the fence raise).
    checked: HashMap<(String, String), Checked>,
}

#[derive(Debug, Clone)]
struct Checked {
    epoch: u64,
    generation: i64,
    versions: Vec<String>,
}

/// The epoch a contact began in, to hand back to [`HubChecks::compared`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

/// One state of a membership: its generation on the hub (in the copy) and its
/// resourceVersion.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    pub generation: i64,
    pub resource_version: &'a str,
}

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
            inner.forget();
        }
        inner.listed = true;
    }

    /// The controller's membership watch failed (the API server went away, or answered
    /// `410 Gone`): its cache may hold what was there before a restore until it lists
    /// again. Forgets every comparison.
    pub fn failed(&self) {
        self.lock().forget();
    }

    /// The contact with membership `namespace/name` that began in `began` compared the copy
    /// with the hub and `stored` it (or found it unchanged). Ignored when a failure or a
    /// re-list came since the contact began.
    pub fn compared(&self, namespace: &str, name: &str, began: Epoch, stored: Stored<'_>) {
        let mut inner = self.lock();
        if began.0 != inner.epoch {
            return;
        }
        let key = (namespace.to_string(), name.to_string());
        inner.checked.insert(
            key,
            Checked {
                epoch: began.0,
                generation: stored.generation,
                versions: vec![stored.resource_version.to_string()],
            },
        );
    }

    /// After the comparison of a contact that began in `began`, the task wrote the
    /// membership again (`FencesRaised=True`): that state is usable too. Ignored when a
    /// failure or a re-list came since, or when nothing was compared.
    pub fn rewritten(&self, namespace: &str, name: &str, began: Epoch, resource_version: &str) {
        let mut inner = self.lock();
        let epoch = inner.epoch;
        if began.0 != epoch {
            return;
        }
        let key = (namespace.to_string(), name.to_string());
        if let Some(c) = inner.checked.get_mut(&key).filter(|c| c.epoch == epoch) {
            c.versions.push(resource_version.to_string());
        }
    }

    /// Whether the controller may use membership `namespace/name` as its cache shows it
    /// (`cached`): compared in this epoch, and the cache shows a state the task stored or
    /// read since (so at least as new as the copy the contact stored).
    pub fn usable(&self, namespace: &str, name: &str, cached: Stored<'_>) -> bool {
        let inner = self.lock();
        inner
            .checked
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|c| {
                c.epoch == inner.epoch
                    && cached.generation >= c.generation
                    && c.versions.iter().any(|v| v == cached.resource_version)
            })
    }

    /// What the controller's membership watch yielded: a list from scratch
    /// ([`Self::listing`]) or a failure ([`Self::failed`]); anything else changes nothing.
    pub fn watched<K>(&self, event: &Result<watcher::Event<K>, watcher::Error>) {
        match event {
            Ok(watcher::Event::Init) => self.listing(),
            Err(error) => self.watch_failed("IdSpaceMembership", error),
            Ok(_) => {}
        }
    }

    /// The controller's watch of `kind` (pods, slot Leases) failed: what it lists next may
    /// be a restored store, and the membership watch need not have failed yet (a watch
    /// ended by the API server's stop may wait for the restored one before its next
    /// request fails). Forgets every comparison.
    pub fn watch_failed(&self, kind: &str, error: &watcher::Error) {
        if self.any_checked() {
            tracing::info!(%error, kind, "a watch of the controller failed: no new slot of a joined sequence until its copy is compared with the hub again (rule 21)");
        }
        self.failed();
    }

    fn any_checked(&self) -> bool {
        !self.lock().checked.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while held leaves plain data behind: still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// For a watch the controller plans from (pods, slot Leases): each failure voids the
/// comparisons in `checks` ([`HubChecks::watch_failed`]): what it lists next may be a
/// restored etcd.
pub fn failures_void<K>(
    kind: &'static str,
    checks: Option<Arc<HubChecks>>,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    move |event| {
        if let (Err(error), Some(checks)) = (event, &checks) {
            checks.watch_failed(kind, error);
        }
    }
}

impl Inner {
    fn forget(&mut self) {
        self.epoch += 1;
        self.checked.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(generation: i64, resource_version: &str) -> Stored<'_> {
        Stored {
            generation,
            resource_version,
        }
    }

    #[test]
    fn rule21_nothing_is_usable_before_a_contact_after_the_start() {
        let checks = HubChecks::default();
        checks.listing();
        assert!(!checks.usable("ns", "m", at(7, "10")));
        let began = checks.epoch();
        checks.compared("ns", "m", began, at(7, "10"));
        assert!(checks.usable("ns", "m", at(7, "10")));
        assert!(!checks.usable("ns", "other", at(7, "10")));
        assert!(!checks.usable("other", "m", at(7, "10")));
    }

    #[test]
    fn rule21_a_relist_forgets_every_comparison_and_a_contact_begun_before_it_counts_for_nothing() {
        let checks = HubChecks::default();
        checks.listing();
        let before = checks.epoch();
        checks.compared("ns", "m", before, at(3, "10"));
        let during = checks.epoch();
        checks.listing();
        assert!(!checks.usable("ns", "m", at(3, "10")));
        checks.compared("ns", "m", during, at(3, "10"));
        assert!(!checks.usable("ns", "m", at(3, "10")));
        let after = checks.epoch();
        checks.compared("ns", "m", after, at(3, "10"));
        assert!(checks.usable("ns", "m", at(3, "10")));
    }

    #[test]
    fn rule21_a_cache_older_than_the_copy_the_contact_stored_is_not_used() {
        let checks = HubChecks::default();
        let began = checks.epoch();
        // The contact found the copy at 4 behind the hub's 9 and stored 9.
        checks.compared("ns", "m", began, at(9, "20"));
        assert!(!checks.usable("ns", "m", at(4, "19")));
        assert!(checks.usable("ns", "m", at(9, "20")));
    }

    /// The first run of e2e `id_space_etcd_restore`: the API server stopped for the
    /// restore, so the membership watch failed, but it had not listed again (its backoff)
    /// when the pods' watch showed a new pod; the comparison made before the restore still
    /// counted, and the pod got a slot before any contact with the hub.
    #[test]
    fn rule21_a_failed_membership_watch_forgets_every_comparison_before_it_lists_again() {
        let checks = HubChecks::default();
        checks.watched::<()>(&Ok(watcher::Event::Init));
        let before = checks.epoch();
        checks.compared("ns", "m", before, at(5, "100"));
        assert!(checks.usable("ns", "m", at(5, "100")));
        checks.watched::<()>(&Err(watcher::Error::NoResourceVersion));
        assert!(
            !checks.usable("ns", "m", at(5, "100")),
            "the cache of before the failure is not used on a comparison of before it"
        );
        checks.watched::<()>(&Ok(watcher::Event::Apply(())));
        checks.watched::<()>(&Ok(watcher::Event::InitDone));
        assert!(!checks.usable("ns", "m", at(5, "100")));
    }

    /// A later run: the pods' watch failed and listed the restored store, and showed the
    /// new pod, while the memberships' watch had not failed yet.
    #[test]
    fn rule21_a_failed_pods_or_leases_watch_forgets_every_comparison() {
        let checks = HubChecks::default();
        checks.listing();
        let before = checks.epoch();
        checks.compared("ns", "m", before, at(5, "100"));
        checks.watch_failed("Pod", &watcher::Error::NoResourceVersion);
        assert!(!checks.usable("ns", "m", at(5, "100")));
        let began = checks.epoch();
        checks.compared("ns", "m", began, at(5, "100"));
        checks.watch_failed("Lease", &watcher::Error::NoResourceVersion);
        assert!(!checks.usable("ns", "m", at(5, "100")));
    }

    /// Same run: the contact after the restore found the copy behind and stored the hub's
    /// generation with `FencesRaised=False`; the cache still held the copy of before the
    /// restore, at that very generation and without the condition. Only the state the
    /// contact stored (or a later one the task wrote) is usable.
    #[test]
    fn rule21_a_cached_copy_of_before_the_restore_at_the_stored_generation_is_not_used() {
        let checks = HubChecks::default();
        checks.watched::<()>(&Ok(watcher::Event::Init));
        checks.watched::<()>(&Err(watcher::Error::NoResourceVersion));
        let began = checks.epoch();
        // Restored copy at 4, hub at 9: the contact stores 9 (and FencesRaised=False).
        checks.compared("ns", "m", began, at(9, "1000000200"));
        assert!(
            !checks.usable("ns", "m", at(9, "150")),
            "the cache of before the restore, at the stored generation"
        );
        assert!(checks.usable("ns", "m", at(9, "1000000200")));
        // The raise wrote FencesRaised=True: usable too.
        checks.rewritten("ns", "m", began, "1000000201");
        assert!(checks.usable("ns", "m", at(9, "1000000201")));
        assert!(checks.usable("ns", "m", at(9, "1000000200")));
    }

    #[test]
    fn rule21_a_write_after_a_failure_or_without_a_comparison_is_not_usable() {
        let checks = HubChecks::default();
        let began = checks.epoch();
        checks.rewritten("ns", "m", began, "7");
        assert!(!checks.usable("ns", "m", at(0, "7")), "nothing compared");
        checks.compared("ns", "m", began, at(1, "8"));
        checks.failed();
        checks.rewritten("ns", "m", began, "9");
        assert!(!checks.usable("ns", "m", at(1, "9")));
        assert!(!checks.usable("ns", "m", at(1, "8")));
    }
}
