//! Silence: a held slot lease whose version the operator saw unchanged for a full lease
//! duration, on its own monotonic clock, never by comparing `renewTime` with its wall
//! clock (docs/safety.md rule 9). The operator's memory of lease versions, per sequence,
//! pruned as leases, holders and sequences go. Pure apart from the clock.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kubeflake_crds::slot_lease::SlotLease;

/// One sequence's record of lease versions: `lease/holder` -> (resourceVersion, since).
pub(crate) type Silence = HashMap<String, (String, Instant)>;

/// The records of every sequence (`namespace/name`), pruned as leases and sequences go.
#[derive(Default)]
pub struct SilenceBook(Mutex<HashMap<String, Silence>>);

impl SilenceBook {
    /// Updates the record of the sequence's lease versions and returns the held leases it
    /// has seen unchanged for a full lease duration on its monotonic clock (rule 9).
    pub fn silent(
        &self,
        ns: &str,
        name: &str,
        leases: &[SlotLease],
        duration: Duration,
    ) -> BTreeSet<String> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = format!("{ns}/{name}");
        let seen = all.entry(key.clone()).or_default();
        let silent = track_silence(seen, leases, duration, Instant::now());
        if seen.is_empty() {
            all.remove(&key);
        }
        silent
    }

    /// Drops a deleted sequence's record.
    pub fn forget(&self, ns: &str, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&format!("{ns}/{name}"));
    }

    /// The sequences (`namespace/name`) with a record, sorted.
    #[cfg(test)]
    pub(crate) fn sequences(&self) -> Vec<String> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut keys: Vec<String> = all.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Keeps the records of the sequences (`namespace/name`) for which `exists` holds only.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|key, _| exists(key));
    }
}

/// [`SilenceBook::silent`] on one sequence's record `seen`, at `now`.
pub(crate) fn track_silence(
    seen: &mut Silence,
    leases: &[SlotLease],
    duration: Duration,
    now: Instant,
) -> BTreeSet<String> {
    let key =
        |lease: &SlotLease| format!("{}/{}", lease.name, lease.holder.as_deref().unwrap_or(""));
    // Forget leases that are gone and holders that no longer hold them. Forgetting only
    // ever delays a reclaim: a record made again starts its silence from `now`.
    let current: BTreeSet<String> = leases.iter().map(key).collect();
    seen.retain(|k, _| current.contains(k));
    let mut silent = BTreeSet::new();
    for lease in leases {
        let version = lease.resource_version.clone().unwrap_or_default();
        let entry = seen
            .entry(key(lease))
            .or_insert_with(|| (version.clone(), now));
        if entry.0 != version {
            *entry = (version, now);
        } else if lease.holder.is_some() && now.duration_since(entry.1) >= duration {
            silent.insert(lease.name.clone());
        }
    }
    silent
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::{Slot, Tick};

    fn lease(name: &str, holder: Option<&str>, version: &str) -> SlotLease {
        SlotLease {
            name: name.into(),
            slot: Slot(0),
            holder: holder.map(str::to_string),
            holder_pod: holder.map(|h| format!("pod-{h}")),
            fence: Tick(0),
            fence_cap: None,
            transitions: 1,
            resource_version: Some(version.into()),
            released_at: None,
            format: 1,
            read: Default::default(),
        }
    }

    #[test]
    fn silence_records_of_deleted_leases_and_former_holders_are_pruned() {
        let duration = Duration::from_secs(15);
        let t0 = Instant::now();
        let mut seen = Silence::new();
        let a = lease("s-slot-0", Some("uid-a"), "1");
        let b = lease("s-slot-1", Some("uid-b"), "5");
        track_silence(&mut seen, &[a, b], duration, t0);
        assert_eq!(seen.len(), 2);
        // Slot 1's lease was deleted; slot 0 went to another pod.
        let c = lease("s-slot-0", Some("uid-c"), "2");
        track_silence(&mut seen, &[c], duration, t0 + Duration::from_secs(1));
        let keys: Vec<&str> = seen.keys().map(String::as_str).collect();
        assert_eq!(keys, ["s-slot-0/uid-c"]);
        // No leases left: nothing left.
        track_silence(&mut seen, &[], duration, t0 + Duration::from_secs(2));
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[test]
    fn a_lease_is_silent_only_after_a_full_duration_unchanged_and_a_pruned_one_starts_over() {
        let duration = Duration::from_secs(15);
        let t0 = Instant::now();
        let mut seen = Silence::new();
        let a = lease("s-slot-0", Some("uid-a"), "1");
        let free = lease("s-slot-1", None, "3");
        let both = [a.clone(), free.clone()];
        assert!(track_silence(&mut seen, &both, duration, t0).is_empty());
        let almost = t0 + duration - Duration::from_millis(1);
        assert!(track_silence(&mut seen, &both, duration, almost).is_empty());
        let silent = track_silence(&mut seen, &both, duration, t0 + duration);
        assert_eq!(
            silent,
            BTreeSet::from(["s-slot-0".to_string()]),
            "a free lease is never silent"
        );
        // Gone from one pass (pruned), back in the next: its clock starts again.
        track_silence(&mut seen, &[free], duration, t0 + duration);
        let back = t0 + duration + Duration::from_secs(1);
        assert!(track_silence(&mut seen, std::slice::from_ref(&a), duration, back).is_empty());
        let later = back + duration;
        assert_eq!(track_silence(&mut seen, &[a], duration, later).len(), 1);
    }
}
