//! Rule 22: a Segment member whose etcd is restored from an older snapshot. The member's
//! entry on the hub is made at the first contact and counted up when claims moved the
//! counter; a counter Lease and membership status put back as a snapshot held them give
//! the counter's ranges up before anything is taken, and never queue a range the status
//! kept. The hub administrator's two changes of a Segment space (`kubectl kubeflake hub
//! forget` and `hub recover`, `kubectl-kubeflake/src/hub/segment.rs`) as a running member
//! meets them: its ranges given up, its entry made again or taken, nothing claimed twice.

use super::*;

/// The sidecars claim `n` values from the counter as it is now; returns the counter's
/// `next` after the claim.
fn claim(w: &Arc<Mutex<World>>, n: u64) -> u64 {
    let claimed = take(&counter(w), n, 0).expect("claims");
    let lease: k8s_openapi::api::coordination::v1::Lease = get(w, COUNTER);
    let lease = serde_json::to_value(claimed.counter.write_into(lease)).unwrap();
    w.lock().unwrap().objects.insert(COUNTER.to_string(), lease);
    claimed.end
}

/// The member's cluster's objects as an etcd snapshot holds them: the counter Lease and
/// the membership.
fn snapshot(w: &Arc<Mutex<World>>) -> (Value, Value) {
    let objects = &w.lock().unwrap().objects;
    (objects[COUNTER].clone(), objects[MEMBERSHIP].clone())
}

fn restore(w: &Arc<Mutex<World>>, (lease, membership): (Value, Value)) {
    let objects = &mut w.lock().unwrap().objects;
    objects.insert(COUNTER.to_string(), lease);
    objects.insert(MEMBERSHIP.to_string(), membership);
}

/// This member's entry's generation on the hub, and the membership's.
fn generations(w: &Arc<Mutex<World>>) -> (i64, i64) {
    let space: IdSpace = get(w, SPACE);
    let hub = space
        .spec
        .registry
        .members
        .iter()
        .find(|m| m.name == "prod")
        .map_or(0, |m| m.generation);
    let m: IdSpaceMembership = get(w, MEMBERSHIP);
    (hub, m.status.map_or(0, |s| s.generation))
}

fn revision(w: &Arc<Mutex<World>>) -> i64 {
    get::<IdSpace>(w, SPACE).spec.registry.revision
}

#[tokio::test]
async fn rule22_the_member_entry_is_made_at_the_first_contact_and_counted_up_when_claims_moved_the_counter()
 {
    let w = world(5_000, None);
    let f = fake(w.clone());
    let (metrics, rates) = (HubMetrics::unexported(), Rates::default());
    once_of(&w, &f, &metrics, &rates).await.expect("joined");
    // Made with the first range taken, at that write's revision (above any generation an
    // earlier entry of this cluster had).
    let made = revision(&w);
    assert_eq!(
        generations(&w),
        (made, made),
        "made with the first range taken"
    );
    let space: IdSpace = get(&w, SPACE);
    let entry = &space.spec.registry.members[0];
    assert_eq!(
        (entry.id.as_str(), entry.datacenter_id),
        ("3f1b2c4d-0000-4000-8000-000000000001", 0)
    );
    // Nothing claimed: no write.
    let before = revision(&w);
    once_of(&w, &f, &metrics, &rates)
        .await
        .expect("nothing to do");
    assert_eq!(
        revision(&w),
        before,
        "no claim since the count-up: no hub write"
    );
    // The first claim moves into the queued range: the spare taken next counts up.
    claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates)
        .await
        .expect("a spare taken");
    assert_eq!(generations(&w), (made + 1, made + 1));
    // Claims inside the range in use: counted up alone (no range taken), then kept.
    let (hub_before, revision_before) = (hub_next(&w), revision(&w));
    claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates).await.expect("counted up");
    assert_eq!(generations(&w), (made + 2, made + 2));
    assert_eq!(revision(&w), revision_before + 1);
    assert_eq!(hub_next(&w), hub_before, "no range taken");
    let m: IdSpaceMembership = get(&w, MEMBERSHIP);
    assert_eq!(m.status.unwrap().revision_seen, revision_before + 1);
}

#[tokio::test]
async fn rule22_a_counter_and_status_restored_from_an_older_snapshot_give_the_ranges_up_before_anything_is_taken()
 {
    let w = world(5_000, None);
    let f = fake(w.clone());
    let (metrics, rates) = (HubMetrics::unexported(), Rates::default());
    let first = once_of(&w, &f, &metrics, &rates).await.expect("joined");
    assert!(first.went_back.is_none());
    let (made, _) = generations(&w);
    let snap = snapshot(&w);
    // After the snapshot the sidecars claim, and a contact counts up on the hub.
    let issued_up_to = claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates).await.expect("counted up");
    let hub_before = hub_next(&w) as u64;
    restore(&w, snap);
    assert!(
        counter(&w).next < issued_up_to,
        "the restored counter is below values claimed"
    );
    let kept = once_of(&w, &f, &metrics, &rates)
        .await
        .expect("given up, taken again");
    let message = kept.went_back.expect("the restore is reported");
    assert!(
        message.contains(&format!("status.generation is {made}")),
        "{message}"
    );
    // The restored ranges given up, `next` moved into a range taken after the restore:
    // above every value claimed, so sidecars whose blocks lie above the restored counter
    // (they refuse a counter below their own top) claim again.
    let c = counter(&w);
    assert!(
        c.next >= hub_before,
        "only a range taken after the restore: {c:?}, the hub was at {hub_before}"
    );
    let next_claim = take(&c, 10, 0).unwrap();
    assert!(next_claim.start >= issued_up_to, "{next_claim:?}");
    let (hub, local) = generations(&w);
    assert_eq!(hub, local, "the status holds the hub's generation again");
    // The next contact finds nothing behind.
    let again = once_of(&w, &f, &metrics, &rates).await.expect("current");
    assert!(again.went_back.is_none());
}

/// The controller keeps the claim count it saw before the restore in the IdSequence's
/// status, and every sidecar refuses a counter with fewer claims: after the give-up (the
/// counter's `next` in a fresh range above every value handed out), the count is raised.
#[tokio::test]
async fn rule22_after_a_give_up_the_claim_count_is_raised_to_the_one_the_controller_kept() {
    let w = world(5_000, None);
    let f = fake(w.clone());
    let (metrics, rates) = (HubMetrics::unexported(), Rates::default());
    once_of(&w, &f, &metrics, &rates).await.expect("joined");
    let snap = snapshot(&w);
    claim(&w, 1_000);
    claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates).await.expect("counted up");
    let seen = counter(&w).claims;
    restore(&w, snap);
    assert!(counter(&w).claims < seen);
    let mut seq = serde_json::to_value(sequence()).unwrap();
    seq["status"] = json!({"segment": {"blocksClaimed": seen}});
    w.lock().unwrap().objects.insert(SEQUENCE.to_string(), seq);
    once_of(&w, &f, &metrics, &rates).await.expect("given up");
    assert!(counter(&w).claims >= seen, "{:?}", counter(&w));
}

#[tokio::test]
async fn rule22_a_range_kept_in_a_restored_status_is_dropped_never_queued() {
    let w = world(700, Some(1_000));
    let f = fake(w.clone());
    let (metrics, rates) = (HubMetrics::unexported(), Rates::default());
    // The range is taken and kept, its queueing lost: the snapshot holds it kept.
    w.lock().unwrap().fail_once.insert(COUNTER.to_string());
    let _ = once_of(&w, &f, &metrics, &rates).await;
    let snap = snapshot(&w);
    let kept: IdSpaceMembership = serde_json::from_value(snap.1.clone()).unwrap();
    let kept = kept.status.unwrap().segment_range.expect("kept");
    // Then it is queued, and claimed from.
    once_of(&w, &f, &metrics, &rates).await.expect("queued");
    let issued_up_to = claim(&w, 1_000);
    assert!(issued_up_to > kept.start as u64);
    once_of(&w, &f, &metrics, &rates).await.expect("counted up");
    let hub_before = hub_next(&w) as u64;
    restore(&w, snap);
    let back = once_of(&w, &f, &metrics, &rates).await.expect("given up");
    assert!(back.went_back.unwrap().contains("kept in the status"));
    let c = counter(&w);
    let claimed = take(&c, 10, 0).unwrap();
    assert!(
        claimed.start >= hub_before,
        "the kept range {kept:?} was queued again: {c:?}"
    );
    let m: IdSpaceMembership = get(&w, MEMBERSHIP);
    assert_eq!(m.status.unwrap().segment_range, None);
}

#[tokio::test]
async fn rule22_a_member_entry_of_this_cluster_under_another_name_is_refused() {
    let w = world(5_000, None);
    let mut space: IdSpace = get(&w, SPACE);
    space
        .spec
        .registry
        .members
        .push(kubeflake_crds::id_space::MemberRecord {
            id: "3f1b2c4d-0000-4000-8000-000000000001".into(),
            name: "eu".into(),
            datacenter_id: 0,
            generation: 1,
        });
    w.lock()
        .unwrap()
        .objects
        .insert(SPACE.to_string(), serde_json::to_value(&space).unwrap());
    let f = fake(w.clone());
    assert_eq!(once(&w, &f).await.unwrap_err(), Reason::JoinRefused);
    assert_eq!(counter(&w).range, None, "nothing taken");
}

/// The hub's IdSpace changed as `f` says (the hub administrator's write).
fn edit_space(w: &Arc<Mutex<World>>, f: impl FnOnce(&mut IdSpaceSpec)) {
    let mut space: IdSpace = get(w, SPACE);
    f(&mut space.spec);
    let value = serde_json::to_value(&space).unwrap();
    w.lock().unwrap().objects.insert(SPACE.to_string(), value);
}

#[tokio::test]
async fn rule22_a_member_still_running_whose_entry_was_forgotten_gives_its_ranges_up_and_joins_again()
 {
    let w = world(5_000, None);
    let f = fake(w.clone());
    let (metrics, rates) = (HubMetrics::unexported(), Rates::default());
    once_of(&w, &f, &metrics, &rates).await.expect("joined");
    let (made, _) = generations(&w);
    let issued_up_to = claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates).await.expect("counted up");
    assert_eq!(generations(&w), (made + 1, made + 1));
    let hub_before = hub_next(&w) as u64;
    // `hub forget prod`: the entry removed, the revision counted up, the counter left.
    edit_space(&w, |spec| {
        spec.registry.members.clear();
        spec.registry.revision += 1;
    });
    let kept = once_of(&w, &f, &metrics, &rates)
        .await
        .expect("given up, joined again");
    let message = kept
        .went_back
        .expect("the missing entry gives the ranges up");
    assert!(
        message.contains(&format!("status.generation is {}", made + 1)),
        "{message}"
    );
    // Claims go on only in a range taken after the forget, above every value claimed.
    let c = counter(&w);
    assert!(c.next >= hub_before, "{c:?}, the hub was at {hub_before}");
    assert!(take(&c, 10, 0).unwrap().start >= issued_up_to);
    // The entry made again, as a join: at the new revision, above every generation the
    // forgotten one had, so a snapshot of this cluster from before the forget never
    // matches it.
    let again_at = revision(&w);
    assert!(again_at > made + 1);
    assert_eq!(
        generations(&w),
        (again_at, again_at),
        "the entry made again, as a join"
    );
    let again = once_of(&w, &f, &metrics, &rates).await.expect("current");
    assert!(again.went_back.is_none());
}

#[tokio::test]
async fn rule22_a_hub_restored_from_a_backup_and_recovered_is_taken_again_above_the_raised_counter()
{
    let w = world(5_000, None);
    let f = fake(w.clone());
    let (metrics, rates) = (HubMetrics::unexported(), Rates::default());
    once_of(&w, &f, &metrics, &rates).await.expect("joined");
    let backup = w.lock().unwrap().objects[SPACE].clone();
    // After the backup: claims, ranges taken, generations counted up.
    claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates)
        .await
        .expect("a spare taken");
    let issued_up_to = claim(&w, 1_000);
    once_of(&w, &f, &metrics, &rates).await.expect("counted up");
    let c = counter(&w);
    let held = c
        .range
        .map_or(c.next, |r| r.limit.max(r.queued.map_or(0, |q| q.limit)))
        .max(c.next);
    // The hub restored: refused, nothing taken.
    w.lock().unwrap().objects.insert(SPACE.to_string(), backup);
    assert!(
        matches!(
            once_of(&w, &f, &metrics, &rates).await,
            Err(Reason::HubWentBack)
        ),
        "a restored hub is refused"
    );
    // `hub recover`: the counter raised to what the member holds, revision and generations
    // 2^32 up.
    let step = kubeflake_crds::id_space::registry::RECOVERY_REVISION_STEP as i64;
    edit_space(&w, |spec| {
        let next = spec.segment.as_ref().map_or(0, |s| s.next).max(held as i64);
        spec.segment = Some(kubeflake_crds::id_space::SpaceCounterRecord { next });
        spec.registry.revision += step;
        for m in &mut spec.registry.members {
            m.generation += step;
        }
    });
    let kept = once_of(&w, &f, &metrics, &rates)
        .await
        .expect("taken again after the recovery");
    assert!(
        kept.went_back.is_some(),
        "the ranges held are given up once"
    );
    let c = counter(&w);
    assert!(
        c.next >= held,
        "{c:?}: a range above the raised counter, {held}"
    );
    assert!(take(&c, 10, 0).unwrap().start >= issued_up_to);
    let (hub, local) = generations(&w);
    assert_eq!(hub, local);
    assert!(
        hub > step,
        "the member counts up from the raised generation"
    );
}
