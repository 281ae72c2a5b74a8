//! The membership task's Segment path (docs/safety.md rule 22) against a fake API server
//! that keeps its objects and does compare-and-swap on their resourceVersion: the member's
//! cluster (the membership, the counter Lease, the pods) and the hub (the IdSpace) in one.
//! A write can be made to fail once, as a crash between two writes would leave things.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use http::Method;
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::{IdSpace, IdSpaceSpec, MemberId, SpaceSequenceSpec};
use kubeflake_crds::segment_counter::range::MAX_RANGE;
use kubeflake_crds::segment_counter::{CLAIMANTS_ANNOTATION, Counter, new_counter, take};
use kubeflake_crds::sequence::Mode;
use kubeflake_runtime::fake_api::{FakeApi, failure};
use serde_json::{Value, json};

use super::{MIN_RANGE, Rates, Reach, contact};
use crate::hub::conditions::Reason;
use crate::hub::connect::Hub;
use crate::metrics::hub::HubMetrics;

const SPACE: &str = "/apis/kubeflake.io/v1alpha1/namespaces/kubeflake-space-orders/idspaces/orders";
const MEMBERSHIP: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/orders";
const COUNTER: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-segment-counter";
const PODS: &str = "/api/v1/namespaces/shop/pods";
/// Where a test keeps the IdSequence as the contact reads it (without: [`sequence`]).
const SEQUENCE: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idsequences/orders";

/// The objects the fake keeps, by path; writes to fail once, by path.
#[derive(Default)]
struct World {
    objects: BTreeMap<String, Value>,
    fail_once: BTreeSet<String>,
    version: u64,
}

fn fake(world: Arc<Mutex<World>>) -> FakeApi {
    FakeApi::answering(move |method, target, body| {
        let path = target.split('?').next().unwrap_or_default().to_string();
        let mut w = world.lock().unwrap();
        if *method == Method::GET && path == PODS {
            let items: Vec<Value> = w
                .objects
                .iter()
                .filter(|(p, _)| p.starts_with(&format!("{PODS}/")))
                .map(|(_, v)| v.clone())
                .collect();
            return (
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
            );
        }
        let key = path.trim_end_matches("/status").to_string();
        match *method {
            Method::GET => match w.objects.get(&key) {
                Some(v) => (200, v.clone()),
                None => (404, failure(404, "NotFound", "not found")),
            },
            Method::PUT => {
                if w.fail_once.remove(&path) {
                    return (
                        500,
                        failure(500, "InternalError", "the write is lost (a crash)"),
                    );
                }
                let mut new: Value = serde_json::from_slice(body).unwrap();
                let Some(old) = w.objects.get(&key) else {
                    return (404, failure(404, "NotFound", "not found"));
                };
                if new["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
                    return (
                        409,
                        failure(409, "Conflict", "the object has been modified"),
                    );
                }
                if path.ends_with("/status") {
                    let status = new["status"].clone();
                    new = old.clone();
                    new["status"] = status;
                }
                w.version += 1;
                new["metadata"]["resourceVersion"] = json!(w.version.to_string());
                w.objects.insert(key, new.clone());
                (200, new)
            }
            _ => (405, failure(405, "MethodNotAllowed", "not in the fake")),
        }
    })
}

fn sequence() -> IdSequence {
    serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {"mode": "Segment"},
    }))
    .unwrap()
}

fn membership() -> IdSpaceMembership {
    serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
        "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": "1"},
        "spec": {"sequence": "orders", "memberName": "prod",
                 "space": {"namespace": "kubeflake-space-orders", "name": "orders"},
                 "hubSecret": "kubeflake-hub-orders"},
    }))
    .unwrap()
}

fn space(hub_next: Option<i64>, revision: i64) -> Value {
    let mut spec = IdSpaceSpec::new(
        SpaceSequenceSpec {
            mode: Mode::Segment,
            ..SpaceSequenceSpec::default()
        },
        64,
    );
    spec.registry.revision = revision;
    spec.segment =
        hub_next.map(|next| kubeflake_crds::id_space::resource::SpaceCounterRecord { next });
    json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpace",
        "metadata": {"name": "orders", "namespace": "kubeflake-space-orders",
                     "uid": "9d0c7a57-0000-4000-8000-000000000001", "resourceVersion": "1"},
        "spec": spec,
    })
}

fn pod(name: &str, uid: &str, injected: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "uid": uid,
                        "labels": {"kubeflake.io/sequence": "orders"},
                        "annotations": {"kubeflake.io/injected": injected}}})
}

/// A member cluster with its counter at `next` (listing pod `app`), and a hub at
/// `hub_next`, registry revision 4.
fn world(next: u64, hub_next: Option<i64>) -> Arc<Mutex<World>> {
    let mut lease = serde_json::to_value(new_counter("orders", "shop", next)).unwrap();
    lease["metadata"]["resourceVersion"] = json!("1");
    lease["metadata"]["annotations"][CLAIMANTS_ANNOTATION] = json!("uid-app");
    let mut objects = BTreeMap::new();
    objects.insert(COUNTER.to_string(), lease);
    objects.insert(SPACE.to_string(), space(hub_next, 4));
    objects.insert(
        MEMBERSHIP.to_string(),
        serde_json::to_value(membership()).unwrap(),
    );
    objects.insert(format!("{PODS}/app"), pod("app", "uid-app", "0.2.0"));
    Arc::new(Mutex::new(World {
        objects,
        version: 10,
        ..World::default()
    }))
}

fn get<T: k8s_openapi::serde::de::DeserializeOwned>(world: &Arc<Mutex<World>>, path: &str) -> T {
    serde_json::from_value(world.lock().unwrap().objects[path].clone()).unwrap()
}

fn counter(world: &Arc<Mutex<World>>) -> Counter {
    Counter::parse(&get(world, COUNTER)).unwrap()
}

fn hub_next(world: &Arc<Mutex<World>>) -> i64 {
    get::<IdSpace>(world, SPACE).spec.segment.unwrap().next
}

/// One contact, reading the membership and the IdSpace as they are now.
async fn once(world: &Arc<Mutex<World>>, fake: &FakeApi) -> Result<super::Kept, Reason> {
    once_with(world, fake, &HubMetrics::unexported()).await
}

/// [`once`], its figures in `metrics`.
async fn once_with(
    world: &Arc<Mutex<World>>,
    fake: &FakeApi,
    metrics: &HubMetrics,
) -> Result<super::Kept, Reason> {
    once_of(world, fake, metrics, &Rates::default()).await
}

/// [`once`] by an operator that remembers `rates` from its earlier contacts.
async fn once_of(
    world: &Arc<Mutex<World>>,
    fake: &FakeApi,
    metrics: &HubMetrics,
    rates: &Rates,
) -> Result<super::Kept, Reason> {
    let client = fake.client();
    let hub = Hub {
        client: client.clone(),
        server: "https://hub.invalid".into(),
    };
    let reach = Reach {
        hub: &hub,
        metrics,
        rates,
    };
    let kept = world.lock().unwrap().objects.get(SEQUENCE).cloned();
    let kept_sequence = kept.map_or_else(sequence, |s| serde_json::from_value(s).unwrap());
    let this = MemberId::new("3f1b2c4d-0000-4000-8000-000000000001").unwrap();
    contact(
        &client,
        reach,
        &this,
        &get(world, MEMBERSHIP),
        &kept_sequence,
        get(world, SPACE),
    )
    .await
    .map_err(|r| {
        eprintln!("refused: {r:?}");
        r.reason
    })
}

mod restore;

#[tokio::test]
async fn rule22_a_joining_counter_gets_a_range_from_the_hub_above_every_value_it_issued_alone() {
    // The counter issued up to 5,000 alone; the hub's counter was never used.
    let w = world(5_000, None);
    let f = fake(w.clone());
    once(&w, &f).await.expect("joined");
    let c = counter(&w);
    let range = c.range.expect("format 3");
    assert_eq!(
        range.limit, 5_000,
        "the range in use is empty: nothing below is claimed"
    );
    let queued = range.queued.expect("a range queued");
    assert!(
        queued.start >= 5_000,
        "queued {queued:?} below the counter's next"
    );
    assert!(queued.limit - queued.start >= MIN_RANGE);
    assert_eq!(
        hub_next(&w) as u64,
        queued.limit,
        "the hub handed out up to the queued end"
    );
    let m: IdSpaceMembership = get(&w, MEMBERSHIP);
    let status = m.status.unwrap();
    assert_eq!(status.segment_range, None, "queued, so no longer kept");
    assert_eq!(status.revision_seen, 5);
    assert!(status.member_id.is_some() && status.id_space_uid.is_some());
    // A claim is inside the queued range; a second contact takes nothing more (a spare is
    // queued), and the hub's counter does not move.
    let claimed = take(&c, 10, 0).unwrap();
    assert!(claimed.start >= 5_000);
    let before = hub_next(&w);
    once(&w, &f).await.expect("nothing to do");
    assert_eq!(hub_next(&w), before);
}

#[tokio::test]
async fn rule22_a_counter_far_ahead_of_the_hub_passes_it_one_range_per_write_and_queues_only_above()
{
    let ahead = 3 * MAX_RANGE + 7;
    let w = world(ahead, Some(0));
    let f = fake(w.clone());
    // Each contact takes up to six ranges; what lies below the counter is skipped.
    for _ in 0..2 {
        let _ = once(&w, &f).await;
    }
    let queued = counter(&w).range.and_then(|r| r.queued).expect("queued");
    assert!(queued.start >= ahead, "{queued:?}");
    assert!(hub_next(&w) as u64 >= ahead);
}

#[tokio::test]
async fn rule22_a_crash_after_the_hub_write_never_queues_a_range_twice_and_loses_none_kept() {
    let w = world(700, Some(1_000));
    let f = fake(w.clone());
    // The counter write is lost: the range stays in the status.
    w.lock().unwrap().fail_once.insert(COUNTER.to_string());
    let _ = once(&w, &f).await;
    let kept = get::<IdSpaceMembership>(&w, MEMBERSHIP)
        .status
        .unwrap()
        .segment_range
        .expect("the range is kept in the status");
    assert_eq!(counter(&w).range, None, "not queued yet");
    let after_take = hub_next(&w);
    // The next contact queues the kept range, and takes no new one.
    once(&w, &f).await.expect("queued");
    let queued = counter(&w).range.and_then(|r| r.queued).unwrap();
    assert_eq!(
        (queued.start as i64, queued.limit as i64),
        (kept.start, kept.end)
    );
    assert_eq!(hub_next(&w), after_take, "no second range taken");
    // The status write that forgets it is lost: the next contact sees it queued already.
    let status_path = format!("{MEMBERSHIP}/status");
    let mut m: IdSpaceMembership = get(&w, MEMBERSHIP);
    m.status.as_mut().unwrap().segment_range = Some(kept.clone());
    w.lock()
        .unwrap()
        .objects
        .insert(MEMBERSHIP.to_string(), serde_json::to_value(&m).unwrap());
    w.lock().unwrap().fail_once.insert(status_path);
    let _ = once(&w, &f).await;
    once(&w, &f).await.expect("done");
    let c = counter(&w);
    assert_eq!(
        c.range.and_then(|r| r.queued),
        Some(queued),
        "queued once, unchanged"
    );
    assert_eq!(hub_next(&w), after_take);
    let m: IdSpaceMembership = get(&w, MEMBERSHIP);
    assert_eq!(m.status.unwrap().segment_range, None);
}

#[tokio::test]
async fn rule22_a_hub_whose_registry_went_back_gives_no_range() {
    let w = world(700, Some(1_000));
    let f = fake(w.clone());
    let mut m: IdSpaceMembership = get(&w, MEMBERSHIP);
    m.status.get_or_insert_with(Default::default).revision_seen = 9;
    w.lock()
        .unwrap()
        .objects
        .insert(MEMBERSHIP.to_string(), serde_json::to_value(&m).unwrap());
    assert_eq!(once(&w, &f).await.unwrap_err(), Reason::HubWentBack);
    assert_eq!(hub_next(&w), 1_000);
    assert_eq!(counter(&w).range, None);
}

#[tokio::test]
async fn rule22_a_counter_listing_a_pod_injected_by_0_1_is_not_put_in_format_3() {
    let w = world(700, Some(1_000));
    w.lock()
        .unwrap()
        .objects
        .insert(format!("{PODS}/old"), pod("old", "uid-old", "0.1.0"));
    let mut lease = w.lock().unwrap().objects[COUNTER].clone();
    lease["metadata"]["annotations"][CLAIMANTS_ANNOTATION] = json!("uid-app,uid-old");
    w.lock().unwrap().objects.insert(COUNTER.to_string(), lease);
    let f = fake(w.clone());
    assert_eq!(once(&w, &f).await.unwrap_err(), Reason::HubCheckPending);
    assert_eq!(
        counter(&w).range,
        None,
        "no range while a 0.1.0 sidecar may claim"
    );
    // Once the controller has taken it off the claimants, the range kept is queued.
    let mut lease = w.lock().unwrap().objects[COUNTER].clone();
    lease["metadata"]["annotations"][CLAIMANTS_ANNOTATION] = json!("uid-app");
    w.lock().unwrap().objects.insert(COUNTER.to_string(), lease);
    let before = hub_next(&w);
    once(&w, &f).await.expect("queued");
    assert!(counter(&w).range.and_then(|r| r.queued).is_some());
    assert_eq!(
        hub_next(&w),
        before,
        "the range kept was queued, none taken"
    );
}

#[tokio::test]
async fn rule22_a_ranged_counter_the_membership_did_not_record_gives_its_ranges_up_first() {
    // A counter restored from another cluster, which holds 2,000..3,000 queued.
    let w = world(700, Some(10_000));
    let theirs = Counter {
        range: Some(kubeflake_crds::segment_counter::range::Ranged {
            limit: 700,
            queued: Some(kubeflake_crds::segment_counter::range::Queued {
                start: 2_000,
                limit: 3_000,
            }),
        }),
        ..counter(&w)
    };
    let lease: k8s_openapi::api::coordination::v1::Lease = get(&w, COUNTER);
    let lease = serde_json::to_value(theirs.write_into(lease)).unwrap();
    w.lock().unwrap().objects.insert(COUNTER.to_string(), lease);
    let f = fake(w.clone());
    once(&w, &f).await.expect("joined");
    // Given up, then moved at once into the range this member took.
    let c = counter(&w);
    assert!(c.next >= 10_000, "only a range this member took: {c:?}");
    let claimed = take(&c, 10, 0).unwrap();
    assert!(claimed.start >= 10_000, "{claimed:?}");
}

/// A counter that lists no claimants (none written yet, or as 0.1.0 left it: every pod may
/// claim) is put in format 3 when no pod of the sequence was injected by 0.1.0 (a sequence
/// without pods joins), and not while one is.
#[tokio::test]
async fn rule22_a_counter_listing_no_claimants_joins_unless_a_pod_injected_by_0_1_runs() {
    for (old_pod, joins) in [(false, true), (true, false)] {
        let w = world(700, Some(1_000));
        let mut lease = w.lock().unwrap().objects[COUNTER].clone();
        lease["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(CLAIMANTS_ANNOTATION);
        w.lock().unwrap().objects.insert(COUNTER.to_string(), lease);
        if old_pod {
            w.lock()
                .unwrap()
                .objects
                .insert(format!("{PODS}/old"), pod("old", "uid-old", "0.1.0"));
        }
        let f = fake(w.clone());
        let outcome = once(&w, &f).await;
        assert_eq!(outcome.is_ok(), joins, "0.1.0 pod {old_pod}");
        assert_eq!(counter(&w).range.is_some(), joins, "0.1.0 pod {old_pod}");
    }
}

/// The value of the one series of `name` in `rendered`.
fn series(rendered: &str, name: &str) -> Option<f64> {
    rendered
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .and_then(|rest| rest.split_once("} "))
        .and_then(|(_, v)| v.parse().ok())
}

/// What an operator of a Segment space watches: the values its counter can still hand out
/// (the range in use and the spare queued), the ranges taken from the hub, the claim rate;
/// and, read from the counter before the hub is reached, the values left falling as the
/// sidecars claim while the hub is away.
#[tokio::test]
async fn rule22_the_metrics_show_the_values_left_the_spare_and_the_ranges_taken() {
    let w = world(5_000, None);
    let f = fake(w.clone());
    let metrics = crate::metrics::Metrics::new();
    let kept = once_with(&w, &f, &metrics.hub).await.expect("joined");
    // What the task hands on (`operator/src/hub/task/observe.rs`).
    let member = crate::metrics::hub::Member::of(&kept.membership);
    metrics
        .hub
        .segment_joined(&member, kept.tolerance_secs, kept.claim_rate);
    let c = counter(&w);
    let queued = c.range.and_then(|r| r.queued).expect("queued");
    let size = (queued.limit - queued.start) as f64;
    let r = metrics.render_at(0);
    let values_left = "kubeflake_operator_id_space_segment_values_left";
    assert_eq!(series(&r, values_left), Some(size), "{r}");
    let spare = "kubeflake_operator_id_space_segment_spare_ranges";
    assert_eq!(series(&r, spare), Some(1.0), "{r}");
    let taken = "kubeflake_operator_id_space_segment_ranges_taken_total";
    assert_eq!(series(&r, taken), Some(1.0), "{r}");
    let rate = "kubeflake_operator_id_space_segment_claim_rate";
    assert_eq!(series(&r, rate), Some(0.0), "{r}");
    let tolerance = "kubeflake_operator_id_space_tolerance_seconds";
    assert_eq!(series(&r, tolerance), Some(3600.0), "{r}");
    assert!(
        r.lines().any(
            |l| l.starts_with("kubeflake_operator_id_space_ready_reason{")
                && l.contains(r#"reason="Joined""#)
                && l.ends_with(" 1")
        ),
        "Ready Joined in the metrics:\n{r}"
    );
    assert!(
        !r.contains("kubeflake_operator_id_space_blocks_held{"),
        "a Segment space holds no blocks:\n{r}"
    );
    // The sidecars claim 1,000 values (moving into the queued range) while the hub is away.
    let claimed = take(&c, 1_000, 0).expect("claims");
    let lease: k8s_openapi::api::coordination::v1::Lease = get(&w, COUNTER);
    let lease = serde_json::to_value(claimed.counter.write_into(lease)).unwrap();
    w.lock().unwrap().objects.insert(COUNTER.to_string(), lease);
    super::show_held(&f.client(), &metrics.hub, &get(&w, MEMBERSHIP)).await;
    let r = metrics.render_at(0);
    assert_eq!(series(&r, values_left), Some(size - 1_000.0), "{r}");
    assert_eq!(series(&r, spare), Some(0.0), "{r}");
}
