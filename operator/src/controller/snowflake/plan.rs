//! Slot planning: a pure function from what the operator observed to what it should write.
//!
//! Keeping the decision free of I/O makes the rules easy to test (docs/safety.md rules 9, 10):
//! - a slot is released only when its holder pod is gone (to be confirmed by a direct read
//!   before the write) or when the operator saw the lease unchanged for a lease duration;
//! - waiting pods get free slots, oldest pod first; slots whose fence has passed come first,
//!   then never-used ones, then least recently released;
//! - a pod that somehow holds two slots keeps the lowest; the others are released.
//!
//! The plan is only a proposal: every write is a compare-and-swap on the lease's
//! `resourceVersion`, so a stale view makes a write fail, never makes it wrong.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use kubeflake_crds::slot_lease::SlotLease;
use kubeflake_crds::{Slot, Tick};

/// A pod that takes part in the sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub uid: String,
    /// When the pod was created, if known: waiting pods are served oldest first.
    pub created: Option<DateTime<Utc>>,
    /// Being deleted, or finished: it keeps a slot it holds but gets no new one.
    pub leaving: bool,
}

/// Why a slot is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The holder pod was not seen; confirm with a direct read before releasing.
    PodGone,
    /// The lease did not change for a full lease duration (judged on the operator's clock).
    Silent,
    /// The pod holds a lower slot too.
    Duplicate,
}

impl ReleaseReason {
    pub fn label(self) -> &'static str {
        match self {
            ReleaseReason::PodGone => "pod_gone",
            ReleaseReason::Silent => "silent",
            ReleaseReason::Duplicate => "duplicate",
        }
    }
}

/// One write the operator should attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Release {
        lease: SlotLease,
        reason: ReleaseReason,
    },
    /// `existing` is the free lease to take over, or `None` to create the slot's lease.
    Assign {
        slot: Slot,
        pod: PodInfo,
        existing: Option<SlotLease>,
    },
}

/// The outcome of planning one sequence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Slots with a holder (before this plan's writes).
    pub assigned: u64,
    /// Pods that wait for a slot after this plan's assignments.
    pub still_waiting: u64,
    /// Creation time of the oldest of them (the next to get a slot), for the operator's
    /// waiting metrics; `None` when none waits.
    pub oldest_waiting_since: Option<DateTime<Utc>>,
}

/// Everything planning needs.
pub struct Observed<'a> {
    pub capacity: u64,
    pub leases: &'a [SlotLease],
    pub pods: &'a [PodInfo],
    /// Leases the operator has seen unchanged for a full lease duration, by name.
    pub silent: &'a BTreeSet<String>,
    /// The current tick on the operator's clock (used only to prefer slots, never for safety).
    pub now: Tick,
    /// Whether new slots may be handed out (not while the sequence is being deleted).
    pub assign: bool,
}

/// Decides releases and assignments.
pub fn plan(o: &Observed<'_>) -> Plan {
    let live: HashMap<&str, &PodInfo> = o.pods.iter().map(|p| (p.uid.as_str(), p)).collect();
    let mut steps = Vec::new();
    let mut holding: BTreeMap<&str, Vec<&SlotLease>> = BTreeMap::new();
    for lease in o.leases {
        if let Some(holder) = lease.holder.as_deref() {
            holding.entry(holder).or_default().push(lease);
        }
    }
    let assigned = holding.values().map(|v| v.len() as u64).sum();
    for (holder, leases) in &mut holding {
        leases.sort_by_key(|l| l.slot);
        for (i, lease) in leases.iter().enumerate() {
            // Silence first: it needs no confirmation, while "pod gone" is skipped when a
            // direct read finds the pod (e.g. one whose sequence label was removed: out of
            // the cache, but alive). A silent holder is reclaimed either way.
            let reason = if o.silent.contains(&lease.name) {
                Some(ReleaseReason::Silent)
            } else if !live.contains_key(holder) {
                Some(ReleaseReason::PodGone)
            } else if i > 0 {
                Some(ReleaseReason::Duplicate)
            } else {
                None
            };
            if let Some(reason) = reason {
                steps.push(Step::Release {
                    lease: (*lease).clone(),
                    reason,
                });
            }
        }
    }

    let mut waiting: Vec<&PodInfo> = o
        .pods
        .iter()
        .filter(|p| !p.leaving && !holding.contains_key(p.uid.as_str()))
        .collect();
    waiting.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));

    let free = if o.assign { free_slots(o) } else { Vec::new() };
    let handed_out = waiting.len().min(free.len());
    for (pod, (slot, existing)) in waiting.iter().zip(free) {
        steps.push(Step::Assign {
            slot,
            pod: (*pod).clone(),
            existing,
        });
    }
    // Waiting pods are served oldest first: those left over are the younger ones.
    let left: &[&PodInfo] = waiting.get(handed_out..).unwrap_or_default();
    Plan {
        steps,
        assigned,
        still_waiting: left.len() as u64,
        oldest_waiting_since: left.first().and_then(|p| p.created),
    }
}

/// Free slots in order of preference: fence already passed (never-used slots have fence 0)
/// first, then least recently released, then lowest number.
fn free_slots(o: &Observed<'_>) -> Vec<(Slot, Option<SlotLease>)> {
    let by_slot: HashMap<Slot, &SlotLease> = o.leases.iter().map(|l| (l.slot, l)).collect();
    let mut free: Vec<(Slot, Option<SlotLease>)> = (0..o.capacity)
        .map(|n| Slot(n as u32))
        .filter_map(|slot| match by_slot.get(&slot) {
            None => Some((slot, None)),
            Some(l) if l.holder.is_none() => Some((slot, Some((*l).clone()))),
            Some(_) => None,
        })
        .collect();
    free.sort_by(|(a_slot, a), (b_slot, b)| {
        let key = |lease: &Option<SlotLease>| {
            let fence = lease.as_ref().map(|l| l.fence).unwrap_or(Tick(0));
            // Parsed times: older versions wrote released-at with other precisions,
            // which do not sort as text.
            let released = lease.as_ref().and_then(SlotLease::released_time);
            (fence >= o.now, released)
        };
        (key(a), a_slot).cmp(&(key(b), b_slot))
    });
    free
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `created`: an RFC 3339 time, or whole seconds since the Unix epoch.
    fn at(created: &str) -> Option<DateTime<Utc>> {
        match created.parse::<i64>() {
            Ok(secs) => DateTime::from_timestamp(secs, 0),
            Err(_) => Some(DateTime::parse_from_rfc3339(created).ok()?.to_utc()),
        }
    }

    fn pod(name: &str, created: &str) -> PodInfo {
        PodInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            created: at(created),
            leaving: false,
        }
    }

    fn lease(slot: u32, holder: Option<&str>, fence: u64, released_at: Option<&str>) -> SlotLease {
        SlotLease {
            name: format!("s-slot-{slot}"),
            slot: Slot(slot),
            holder: holder.map(|h| format!("uid-{h}")),
            holder_pod: holder.map(String::from),
            fence: Tick(fence),
            transitions: 1,
            resource_version: Some("1".into()),
            released_at: released_at.map(String::from),
            format: 1,
        }
    }

    fn observe<'a>(
        capacity: u64,
        leases: &'a [SlotLease],
        pods: &'a [PodInfo],
        silent: &'a BTreeSet<String>,
    ) -> Observed<'a> {
        Observed {
            capacity,
            leases,
            pods,
            silent,
            now: Tick(1000),
            assign: true,
        }
    }

    fn assignments(plan: &Plan) -> Vec<(String, u32)> {
        plan.steps
            .iter()
            .filter_map(|s| match s {
                Step::Assign { slot, pod, .. } => Some((pod.name.clone(), slot.0)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_waiting_pod_gets_a_distinct_slot_oldest_first() {
        let pods = [
            pod("b", "2026-01-01T00:00:02Z"),
            pod("a", "2026-01-01T00:00:01Z"),
        ];
        let none = BTreeSet::new();
        let plan = plan(&observe(4, &[], &pods, &none));
        assert_eq!(assignments(&plan), vec![("a".into(), 0), ("b".into(), 1)]);
        assert_eq!(plan.still_waiting, 0);
    }

    /// As text, "…:05.5Z" sorts before "…:05Z" ('.' < 'Z'): creation times are compared
    /// as times, so the pod created half a second earlier is served first.
    #[test]
    fn waiting_pods_are_ordered_by_creation_time_not_by_its_text() {
        let pods = [
            pod("later", "2026-01-01T00:00:05.5Z"),
            pod("earlier", "2026-01-01T00:00:05Z"),
        ];
        let none = BTreeSet::new();
        let plan = plan(&observe(1, &[], &pods, &none));
        assert_eq!(assignments(&plan), vec![("earlier".into(), 0)]);
        assert_eq!(plan.oldest_waiting_since, at("2026-01-01T00:00:05.5Z"));
    }

    #[test]
    fn a_held_slot_is_never_handed_to_another_pod() {
        let pods = [pod("a", "1"), pod("b", "2")];
        let leases = [lease(0, Some("a"), 5000, None)];
        let none = BTreeSet::new();
        let plan = plan(&observe(2, &leases, &pods, &none));
        assert_eq!(assignments(&plan), vec![("b".into(), 1)]);
    }

    #[test]
    fn more_pods_than_slots_leaves_the_rest_waiting() {
        let pods: Vec<PodInfo> = (0..6)
            .map(|i| pod(&format!("p{i}"), &format!("{i}")))
            .collect();
        let none = BTreeSet::new();
        let plan = plan(&observe(4, &[], &pods, &none));
        assert_eq!(assignments(&plan).len(), 4);
        assert_eq!(plan.still_waiting, 2);
    }

    #[test]
    fn the_oldest_pod_left_waiting_is_reported_with_its_creation_time() {
        let pods: Vec<PodInfo> = (0..6)
            .rev()
            .map(|i| pod(&format!("p{i}"), &format!("2026-01-01T00:00:0{i}Z")))
            .collect();
        let none = BTreeSet::new();
        let plan = plan(&observe(4, &[], &pods, &none));
        assert_eq!(plan.still_waiting, 2);
        assert_eq!(
            plan.oldest_waiting_since,
            at("2026-01-01T00:00:04Z"),
            "p0..p3 got the slots; p4 is the oldest of the two left waiting"
        );
    }

    #[test]
    fn no_oldest_waiting_pod_when_every_pod_gets_a_slot_or_is_leaving() {
        let mut leaving = pod("old", "2026-01-01T00:00:00Z");
        leaving.leaving = true;
        let pods = [leaving, pod("a", "2026-01-01T00:00:01Z")];
        let none = BTreeSet::new();
        let plan = plan(&observe(4, &[], &pods, &none));
        assert_eq!(plan.still_waiting, 0);
        assert_eq!(plan.oldest_waiting_since, None);
    }

    #[test]
    fn rule9_slots_are_released_only_from_pods_gone_or_silent() {
        let pods = [pod("alive", "1"), pod("quiet", "2")];
        let leases = [
            lease(0, Some("alive"), 5000, None),
            lease(1, Some("gone"), 5000, None),
            lease(2, Some("quiet"), 5000, None),
        ];
        let silent = BTreeSet::from(["s-slot-2".to_string()]);
        let plan = plan(&observe(3, &leases, &pods, &silent));
        let releases: Vec<(u32, ReleaseReason)> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Release { lease, reason } => Some((lease.slot.0, *reason)),
                _ => None,
            })
            .collect();
        assert_eq!(
            releases,
            vec![(1, ReleaseReason::PodGone), (2, ReleaseReason::Silent)]
        );
        assert!(
            assignments(&plan).is_empty(),
            "released slots are reassigned on the next pass"
        );
    }

    #[test]
    fn rule9_a_silent_holder_missing_from_the_pod_cache_is_released_as_silent_not_as_gone() {
        // A pod whose sequence label was removed leaves the cache but may still exist, so a
        // "pod gone" release would be skipped by the direct read, for ever; silence needs
        // no such confirmation.
        let leases = [lease(0, Some("unlabelled"), 5000, None)];
        let silent = BTreeSet::from(["s-slot-0".to_string()]);
        let plan = plan(&observe(1, &leases, &[], &silent));
        assert!(matches!(
            plan.steps.as_slice(),
            [Step::Release {
                reason: ReleaseReason::Silent,
                ..
            }]
        ));
    }

    #[test]
    fn rule9_prefers_slots_whose_fence_passed_then_least_recently_released() {
        let pods = [pod("a", "1"), pod("b", "2"), pod("c", "3")];
        let leases = [
            lease(0, None, 5000, Some("2026-01-01T00:00:09Z")), // fence in the future
            lease(1, None, 10, Some("2026-01-01T00:00:05Z")),
            lease(2, None, 10, Some("2026-01-01T00:00:01Z")), // least recently released
        ];
        let none = BTreeSet::new();
        let plan = plan(&observe(3, &leases, &pods, &none));
        assert_eq!(
            assignments(&plan),
            vec![("a".into(), 2), ("b".into(), 1), ("c".into(), 0)]
        );
    }

    #[test]
    fn a_pod_holding_two_slots_keeps_the_lowest() {
        let pods = [pod("a", "1")];
        let leases = [lease(3, Some("a"), 0, None), lease(1, Some("a"), 0, None)];
        let none = BTreeSet::new();
        let plan = plan(&observe(4, &leases, &pods, &none));
        assert_eq!(
            plan.steps,
            vec![Step::Release {
                lease: leases[0].clone(),
                reason: ReleaseReason::Duplicate
            }]
        );
    }

    #[test]
    fn leaving_pods_keep_their_slot_but_get_no_new_one() {
        let mut leaving = pod("old", "1");
        leaving.leaving = true;
        let pods = [
            leaving.clone(),
            PodInfo {
                name: "x".into(),
                uid: "uid-x".into(),
                created: at("2"),
                leaving: true,
            },
        ];
        let leases = [lease(0, Some("old"), 0, None)];
        let none = BTreeSet::new();
        let plan = plan(&observe(4, &leases, &pods, &none));
        assert!(plan.steps.is_empty(), "{:?}", plan.steps);
    }

    #[test]
    fn rule10_no_assignments_while_the_sequence_is_deleted() {
        let pods = [pod("a", "1")];
        let none = BTreeSet::new();
        let mut o = observe(4, &[], &pods, &none);
        o.assign = false;
        let plan = plan(&o);
        assert!(assignments(&plan).is_empty());
        assert_eq!(plan.still_waiting, 1);
        assert_eq!(plan.oldest_waiting_since, at("1"));
    }
}
