use super::*;
use crate::controller::id_spaces::blocks::Blocks;

/// `created`: an RFC 3339 time, or whole seconds since the Unix epoch.
/// The plan's release steps, as (slot, why), in plan order.
pub(super) fn released(plan: &Plan) -> Vec<(u32, ReleaseReason)> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            Step::Release { lease, reason } => Some((lease.slot.0, *reason)),
            _ => None,
        })
        .collect()
}

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
        fence_cap: None,
        released_at: released_at.map(String::from),
        format: 1,
        read: Default::default(),
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
        taken: &NONE_TAKEN,
        blocks: &Blocks::Lone,
    }
}

static NONE_TAKEN: BTreeSet<Slot> = BTreeSet::new();

/// Rule 16: a slot whose Lease name a foreign Lease takes (a tenant's, unlabelled) is never
/// handed out: before, the oldest waiting pod was planned onto it on every pass, the create
/// failed with 409, and the pod waited forever.
#[test]
fn rule16_a_slot_a_foreign_lease_takes_is_skipped_and_the_waiting_pod_gets_the_next() {
    let pods = [pod("a", "100")];
    let taken = BTreeSet::from([Slot(0), Slot(1)]);
    let silent = BTreeSet::new();
    let planned = plan(&Observed {
        taken: &taken,
        ..observe(4, &[], &pods, &silent)
    });
    assert_eq!(assignments(&planned), [("a".to_string(), 2)]);
    // A free slot Lease of kubeflake's own is skipped too when its name is taken (it
    // cannot be, but the planner does not rely on that).
    let leases = [lease(0, None, 0, None)];
    let planned = plan(&Observed {
        taken: &taken,
        ..observe(4, &leases, &pods, &silent)
    });
    assert_eq!(assignments(&planned), [("a".to_string(), 2)]);
    // Every free slot taken: the pod waits, and says so.
    let all = BTreeSet::from([Slot(0), Slot(1), Slot(2), Slot(3)]);
    let planned = plan(&Observed {
        taken: &all,
        ..observe(4, &[], &pods, &silent)
    });
    assert_eq!((planned.steps.len(), planned.still_waiting), (0, 1));
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
    assert_eq!(
        released(&plan),
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

/// The order rule as first written: every free slot of the layout, sorted.
fn every_free_slot_sorted(o: &Observed<'_>) -> Vec<u32> {
    let by_slot: HashMap<Slot, &SlotLease> = o.leases.iter().map(|l| (l.slot, l)).collect();
    let mut free: Vec<(Slot, Option<&SlotLease>)> = (0..o.capacity)
        .map(|n| Slot(n as u32))
        .filter_map(|slot| match by_slot.get(&slot) {
            None => Some((slot, None)),
            Some(l) if l.holder.is_none() => Some((slot, Some(*l))),
            Some(_) => None,
        })
        .collect();
    let key = |lease: Option<&SlotLease>| {
        let fence = lease.map(|l| l.fence).unwrap_or(Tick(0));
        (fence >= o.now, lease.and_then(SlotLease::released_time))
    };
    free.sort_by_key(|(slot, lease)| (key(*lease), *slot));
    free.into_iter().map(|(slot, _)| slot.0).collect()
}

#[test]
fn only_as_many_free_slots_as_pods_wait_are_looked_for_in_the_same_order_as_all_of_them() {
    let leases = [
        lease(0, Some("a"), 900, None),
        lease(1, None, 5000, Some("2026-01-01T00:00:09Z")), // fence in the future
        lease(3, None, 10, Some("2026-01-01T00:00:05Z")),
        lease(4, None, 10, None), // free, never released by a release that says when
        lease(6, None, 10, Some("2026-01-01T00:00:01Z")),
        lease(7, Some("b"), 900, None),
        lease(9, None, 2000, None), // fence in the future, no released-at
        lease(12, None, 10, Some("2026-01-01T00:00:01Z")), // beyond the layout's 12 slots
    ];
    let none = BTreeSet::new();
    let o = observe(12, &leases, &[], &none);
    let all = every_free_slot_sorted(&o);
    // Never-used 2, 5, 8, 10, 11 and the free lease without released-at (4) by number;
    // then released, least recently first; then fences still in the future.
    assert_eq!(all, [2, 4, 5, 8, 10, 11, 6, 3, 9, 1]);
    for want in 0..=all.len() + 2 {
        let got: Vec<u32> = free_slots(&o, want).iter().map(|(s, ..)| s.0).collect();
        assert_eq!(got, all[..want.min(all.len())], "want {want}");
    }
    let taken_over: Vec<(u32, bool)> = free_slots(&o, 3)
        .iter()
        .map(|(slot, existing, _)| (slot.0, existing.is_some()))
        .collect();
    assert_eq!(
        taken_over,
        [(2, false), (4, true), (5, false)],
        "a free lease is taken over, a never-used slot is created"
    );
}

#[test]
fn a_layout_of_65536_slots_with_every_slot_used_but_the_last_hands_out_the_last() {
    let leases: Vec<SlotLease> = (0..65_535).map(|n| lease(n, Some("x"), 0, None)).collect();
    let pods = [pod("x", "1"), pod("a", "2"), pod("b", "3")];
    let none = BTreeSet::new();
    let plan = plan(&observe(65_536, &leases, &pods, &none));
    assert_eq!(assignments(&plan), [("a".to_string(), 65_535)]);
    assert_eq!(plan.still_waiting, 1);
}
