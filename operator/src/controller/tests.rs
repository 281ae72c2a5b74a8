//! The controller against a scripted fake API server
//! ([`kubeflake_runtime::fake_api`]): the exact requests a pass sends, without a control
//! plane. One file (over 400 lines) because every test shares its fixture (caches, a
//! sequence, pods and slot Leases as the API server returns them); each test is a
//! specification of one write path.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kubeflake_crds::segment_counter::CounterError;
use kubeflake_crds::sequence::{
    IdSequence, IdSequenceSpec, IdSequenceStatus, Mode, SegmentSpec, SegmentStatus, SpecError,
};
use kubeflake_crds::slot_lease::{FINALIZER, SEQUENCE_LABEL, SlotLeaseError};
use kubeflake_crds::strict_oracle::OracleLeaseError;
use serde_json::{Value, json};

use super::*;
use crate::index::{IndexWriter, index};
use crate::metrics::{Metrics, RESULT_LABELS};
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_runtime::fake_api::{FakeApi, failure};

const NS: &str = "shop";
const SEQ: &str = "orders";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases";
const SEQUENCE: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idsequences/orders";
const STATUS: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idsequences/orders/status";

/// A context on `api`, with `pods` and `leases` in its caches.
struct Fixture {
    ctx: Arc<Context>,
    _writers: (IndexWriter<Pod>, IndexWriter<Lease>, Writer<IdSequence>),
}

fn fixture(api: &FakeApi, pods: Vec<Pod>, leases: Vec<Lease>) -> Fixture {
    fixture_with(api, pods, leases, None)
}

/// [`fixture`], with `id_spaces` telling which sequences share an ID space.
fn fixture_with(
    api: &FakeApi,
    pods: Vec<Pod>,
    leases: Vec<Lease>,
    id_spaces: Option<Arc<id_spaces::IdSpaces>>,
) -> Fixture {
    let (pod_store, mut pod_writer) = index::<Pod>();
    for pod in pods {
        pod_writer.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    let (lease_store, mut lease_writer) = index::<Lease>();
    for lease in leases {
        lease_writer.apply_watcher_event(&watcher::Event::Apply(lease));
    }
    // The IdSequence cache, listed, holds the tests' sequence.
    let (sequences, mut sequence_writer) = reflector::store::<IdSequence>();
    let listed = sequence(IdSequenceSpec::default(), true, false);
    sequence_writer.apply_watcher_event(&watcher::Event::Init);
    sequence_writer.apply_watcher_event(&watcher::Event::InitApply(listed));
    sequence_writer.apply_watcher_event(&watcher::Event::InitDone);
    let reporter = Reporter {
        controller: "kubeflake-operator".into(),
        instance: Some("test".into()),
    };
    let ctx = Context::new(
        api.client(),
        pod_store,
        lease_store,
        sequences,
        Arc::new(Metrics::new()),
        reporter,
    )
    .with_id_spaces(id_spaces);
    Fixture {
        ctx: Arc::new(ctx),
        _writers: (pod_writer, lease_writer, sequence_writer),
    }
}

fn sequence(spec: IdSequenceSpec, finalizer: bool, deleting: bool) -> IdSequence {
    let mut seq = IdSequence::new(SEQ, spec);
    seq.metadata.namespace = Some(NS.into());
    seq.metadata.uid = Some("seq-uid".into());
    seq.metadata.resource_version = Some("10".into());
    seq.metadata.generation = Some(1);
    if finalizer {
        seq.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    if deleting {
        seq.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
    }
    seq
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {SEQUENCE_LABEL: SEQ},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"phase": "Running"},
    }))
    .expect("a pod")
}

/// Slot 0's lease, held by `holder` (a pod name) or free, with `fence`.
fn slot_lease(holder: Option<&str>, fence: u64) -> Lease {
    let mut labels = kubeflake_crds::slot_lease::lease_labels(SEQ, kubeflake_crds::Slot(0), None);
    let mut annotations = serde_json::Map::new();
    annotations.insert("kubeflake.io/fence".into(), fence.to_string().into());
    if let Some(h) = holder {
        labels.insert("kubeflake.io/holder".into(), format!("uid-{h}"));
        annotations.insert("kubeflake.io/holder-pod".into(), h.into());
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": "orders-slot-0", "namespace": NS, "resourceVersion": "5",
            "labels": labels, "annotations": annotations,
            "ownerReferences": [owner()],
        },
        "spec": {
            "holderIdentity": holder.map(|h| format!("uid-{h}")),
            "leaseTransitions": 1,
        },
    }))
    .expect("a lease")
}

/// The controller owner reference the operator puts on the slot and oracle Leases it makes
/// for the fixture's sequence (uid `seq-uid`).
fn owner() -> Value {
    json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence", "name": SEQ,
        "uid": "seq-uid", "controller": true,
    })
}

fn echo(seq: &IdSequence) -> Value {
    serde_json::to_value(seq).expect("serialises")
}

fn status_patches(api: &FakeApi) -> Vec<IdSequenceStatus> {
    api.requests(&Method::PATCH, STATUS)
        .into_iter()
        .map(|s| serde_json::from_value(s.body["status"].clone()).expect("a status"))
        .collect()
}

#[tokio::test]
async fn a_409_on_a_lease_write_requeues_soon_and_counts_a_conflict() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    // The name is taken by the operator's own Lease (another replica was first): a
    // conflict, read to tell it from a foreign Lease (rule 16).
    let api = FakeApi::new()
        .expect(
            Method::POST,
            LEASES,
            409,
            failure(409, "AlreadyExists", "taken"),
        )
        .expect(
            Method::GET,
            &format!("{LEASES}/orders-slot-0"),
            200,
            json!(slot_lease(Some("b"), 0)),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a conflict is no error");
    api.verify();
    assert_eq!(action, Action::requeue(Duration::from_millis(500)));
    assert_eq!(f.ctx.metrics.conflicts.get(), 1);
    assert_eq!(f.ctx.metrics.assignments.get(), 0);
}

#[tokio::test]
async fn a_pass_waits_for_the_cache_to_show_its_own_writes_so_a_waiting_pod_never_gets_a_second_slot()
 {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let written = slot_lease(Some("a"), 0);
    let api = FakeApi::new()
        .expect(Method::POST, LEASES, 201, json!(written))
        .always(Method::PATCH, STATUS, 200, echo(&seq));
    let mut f = fixture(&api, vec![pod("a")], vec![]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("the pass that assigns");
    // The watch event of the created lease has not arrived: in the cache pod "a" still
    // waits and every slot is free. Planning now would create a second lease for "a".
    let put_off = reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a put-off pass");
    assert_eq!(put_off, Action::requeue(Duration::from_millis(200)));
    assert_eq!(f.ctx.metrics.passes_deferred.get(), 1);
    // Once the cache shows the write, passes plan again (and find nothing to do).
    f._writers
        .1
        .apply_watcher_event(&watcher::Event::Apply(written));
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass on a current cache");
    api.verify();
    assert_eq!(
        api.requests(&Method::POST, LEASES).len(),
        1,
        "one slot for pod a"
    );
    assert_eq!(f.ctx.metrics.assignments.get(), 1);
    assert_eq!(f.ctx.metrics.passes_deferred.get(), 1);
}

#[tokio::test]
async fn a_pod_gone_release_is_skipped_when_the_direct_read_finds_the_pod() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    // The cache has not seen pod "a" yet; the API server has it.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            "/api/v1/namespaces/shop/pods/a",
            200,
            json!(pod("a")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![slot_lease(Some("a"), 7)]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert!(
        api.requests(&Method::PUT, &format!("{LEASES}/orders-slot-0"))
            .is_empty()
    );
    assert_eq!(
        f.ctx
            .metrics
            .reclaims
            .with_label_values(&["pod_gone"])
            .get(),
        0
    );
}

#[tokio::test]
async fn a_pod_gone_release_happens_when_the_direct_read_finds_no_pod() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let released = slot_lease(None, 7);
    let api = FakeApi::new()
        .expect(
            Method::GET,
            "/api/v1/namespaces/shop/pods/a",
            404,
            failure(404, "NotFound", "gone"),
        )
        .expect(
            Method::PUT,
            &format!("{LEASES}/orders-slot-0"),
            200,
            json!(released),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![slot_lease(Some("a"), 7)]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let put = &api.requests(&Method::PUT, &format!("{LEASES}/orders-slot-0"))[0];
    assert_eq!(
        put.body["metadata"]["resourceVersion"], "5",
        "a compare-and-swap"
    );
    assert_eq!(
        put.body["metadata"]["annotations"]["kubeflake.io/fence"], "7",
        "fence kept"
    );
    assert_eq!(
        f.ctx
            .metrics
            .reclaims
            .with_label_values(&["pod_gone"])
            .get(),
        1
    );
}

#[tokio::test]
async fn deletion_waits_and_keeps_the_finalizer_while_a_slot_is_held_or_fenced() {
    let far = kubeflake_crds::layout::MAX_TICK.0;
    for (lease, pods) in [
        (slot_lease(Some("a"), 0), vec![pod("a")]),
        (slot_lease(None, far), vec![]),
    ] {
        let seq = sequence(IdSequenceSpec::default(), true, true);
        let api = FakeApi::new().expect(Method::PATCH, STATUS, 200, echo(&seq));
        let f = fixture(&api, pods, vec![lease]);
        let action = reconcile(Arc::new(seq), f.ctx.clone())
            .await
            .expect("a pass");
        api.verify();
        assert_eq!(action, Action::requeue(Duration::from_secs(2)));
        let written = status_patches(&api);
        let ready = condition(written.last(), ConditionType::Ready).expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Deleting")
        );
        assert!(
            ready.message.contains("deletion waits"),
            "{}",
            ready.message
        );
        assert!(
            api.requests(&Method::PATCH, SEQUENCE).is_empty(),
            "the finalizer stays"
        );
        assert!(
            api.requests(&Method::DELETE, &format!("{LEASES}/orders-slot-0"))
                .is_empty()
        );
    }
}

#[tokio::test]
async fn deletion_removes_the_leases_then_the_finalizer_once_every_slot_is_free_and_fenced_in_the_past()
 {
    let seq = sequence(IdSequenceSpec::default(), true, true);
    let api = FakeApi::new()
        .expect(
            Method::DELETE,
            &format!("{LEASES}/orders-slot-0"),
            200,
            json!(slot_lease(None, 0)),
        )
        .expect(Method::PATCH, SEQUENCE, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![slot_lease(None, 0)]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(action, Action::await_change());
    let delete = &api.requests(&Method::DELETE, &format!("{LEASES}/orders-slot-0"))[0];
    assert_eq!(delete.body["preconditions"]["resourceVersion"], "5");
    let patch = &api.requests(&Method::PATCH, SEQUENCE)[0];
    assert_eq!(patch.body["metadata"]["finalizers"], json!([]));
    assert_eq!(
        patch.body["metadata"]["resourceVersion"], "10",
        "a compare-and-swap"
    );
}

#[tokio::test]
async fn an_unchanged_status_is_not_written() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let api = FakeApi::new().expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("first pass");
    api.verify();
    let mut written = seq;
    written.status = status_patches(&api).pop();
    assert!(written.status.is_some());
    // The same world again: nothing to write.
    let again = FakeApi::new();
    let f = fixture(&again, vec![], vec![]);
    reconcile(Arc::new(written), f.ctx.clone())
        .await
        .expect("second pass");
    again.verify();
    assert!(again.seen().is_empty(), "{:#?}", again.seen());
}

#[tokio::test]
async fn a_lost_segment_counter_is_never_created_again() {
    let spec = IdSequenceSpec {
        mode: Mode::Segment,
        ..Default::default()
    };
    let mut seq = sequence(spec, true, false);
    seq.status = Some(IdSequenceStatus {
        segment: Some(SegmentStatus {
            next: Some(5000),
            blocks_claimed: Some(12),
            ..Default::default()
        }),
        ..Default::default()
    });
    let counter = format!("{LEASES}/orders-segment-counter");
    let api = FakeApi::new()
        .expect(
            Method::GET,
            &counter,
            404,
            failure(404, "NotFound", "deleted"),
        )
        .expect(Method::GET, SEQUENCE, 200, echo(&seq))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert!(
        api.requests(&Method::POST, LEASES).is_empty(),
        "never re-created"
    );
    let ready = status_patches(&api)
        .pop()
        .and_then(|s| condition(Some(&s), ConditionType::Ready).cloned())
        .expect("Ready");
    assert_eq!(ready.reason, "CounterLost");
    let warned = api
        .seen()
        .iter()
        .any(|s| s.path.contains("/events") && s.body["reason"] == "CounterLost");
    assert!(warned, "a Warning Event says so");
}

/// Two replicas during a leader handover must not flap the conditions: the status is
/// written by server-side apply under the operator's own field manager, forced (the
/// operator owns its status), never by a JSON merge patch without a manager.
#[tokio::test]
async fn the_status_is_written_by_server_side_apply_as_the_operators_field_manager() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let api = FakeApi::new().expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let patch = &api.requests(&Method::PATCH, STATUS)[0];
    assert_eq!(patch.content_type, "application/apply-patch+yaml");
    let query: BTreeSet<&str> = patch.query.split('&').collect();
    assert!(
        query.contains("fieldManager=kubeflake-operator") && query.contains("force=true"),
        "{}",
        patch.query
    );
    assert_eq!(patch.body["apiVersion"], "kubeflake.io/v1alpha1");
    assert_eq!(patch.body["kind"], "IdSequence");
}

/// A spec that no longer validates (a stricter operator, a segment setting changed after
/// the finalizer was added) must not keep a deleted sequence forever.
#[tokio::test]
async fn a_sequence_whose_spec_turned_invalid_is_still_deleted() {
    let spec = IdSequenceSpec {
        mode: Mode::Segment,
        segment: Some(SegmentSpec {
            block_size: 0,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(spec.segment_params().is_err(), "the spec is invalid");
    let seq = sequence(spec, true, true);
    let api = FakeApi::new().expect(Method::PATCH, SEQUENCE, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("deletion proceeds");
    api.verify();
    assert_eq!(action, Action::await_change());
    let patch = &api.requests(&Method::PATCH, SEQUENCE)[0];
    assert_eq!(patch.body["metadata"]["finalizers"], json!([]));
}

/// Even an epoch that no longer reads releases what it can and says how to finish by hand:
/// no fence can be judged passed without it (docs/safety.md rule 10).
#[tokio::test]
async fn a_deleted_sequence_with_an_unreadable_epoch_keeps_fenced_leases_and_says_why() {
    let spec = IdSequenceSpec {
        epoch: "not a time".into(),
        ..Default::default()
    };
    let seq = sequence(spec, true, true);
    let api = FakeApi::new()
        .expect(
            Method::GET,
            "/api/v1/namespaces/shop/pods/a",
            404,
            failure(404, "NotFound", "gone"),
        )
        .expect(
            Method::PUT,
            &format!("{LEASES}/orders-slot-0"),
            200,
            json!(slot_lease(None, 7)),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![], vec![slot_lease(Some("a"), 7)]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("deletion proceeds");
    api.verify();
    assert_eq!(action, Action::requeue(Duration::from_secs(2)));
    let ready = status_patches(&api)
        .pop()
        .and_then(|s| condition(Some(&s), ConditionType::Ready).cloned())
        .expect("Ready");
    assert_eq!(ready.reason, "Deleting");
    assert!(ready.message.contains("spec.epoch"), "{}", ready.message);
    assert!(
        api.requests(&Method::PATCH, SEQUENCE).is_empty(),
        "the finalizer stays"
    );
}

/// Every label a pass can produce, derived from [`result_label`] on one sample of each
/// [`Error`] variant, is pre-registered, and nothing else is.
#[test]
fn every_reconcile_result_label_is_pre_registered_and_nothing_else() {
    let samples = vec![
        Error::Kube(kube::Error::Api(Box::new(
            kube::core::Status::failure("conflict", "Conflict").with_code(409),
        ))),
        Error::NoNamespace,
        Error::BadLease(SlotLeaseError::BadSlot { name: "x".into() }),
        Error::InvalidSpec(SpecError::NegativeDatacenter(-1)),
        Error::Counter(CounterError::Missing { name: "x".into() }),
        Error::Oracle(OracleLeaseError::BadDuration {
            name: "x".into(),
            value: None,
        }),
        Error::FenceAboveCap(
            kubeflake_crds::slot_lease::fence_cap::CapError::BelowFence {
                name: "x".into(),
                cap: kubeflake_crds::Tick(1),
                fence: kubeflake_crds::Tick(2),
            },
        ),
    ];
    // No wildcard: a new variant does not compile here; give it an index and a sample.
    let mut covered = [false; 7];
    for e in &samples {
        covered[match e {
            Error::Kube(_) => 0,
            Error::NoNamespace => 1,
            Error::BadLease(_) => 2,
            Error::InvalidSpec(_) => 3,
            Error::Counter(_) => 4,
            Error::Oracle(_) => 5,
            Error::FenceAboveCap(_) => 6,
        }] = true;
    }
    assert!(
        covered.iter().all(|c| *c),
        "a variant has no sample: {covered:?}"
    );
    let produced: BTreeSet<String> = std::iter::once(Ok(Action::await_change()))
        .chain(samples.into_iter().map(Err))
        .map(|r| result_label(&r).to_string())
        .collect();
    let rendered = Metrics::new().render();
    let registered: BTreeSet<String> = rendered
        .lines()
        .filter_map(|l| l.strip_prefix("kubeflake_operator_reconciles_total{result=\""))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect();
    assert_eq!(registered, produced);
    assert_eq!(
        RESULT_LABELS
            .iter()
            .map(|l| l.to_string())
            .collect::<BTreeSet<_>>(),
        produced
    );
}

/// Slot `slot`'s lease, held by pod `holder` (the fixture's [`slot_lease`] for any slot).
fn held_slot_lease(slot: u32, holder: &str) -> Lease {
    let mut lease = slot_lease(Some(holder), 0);
    lease.metadata.name = Some(format!("orders-slot-{slot}"));
    lease.metadata.labels = Some(kubeflake_crds::slot_lease::lease_labels(
        SEQ,
        kubeflake_crds::Slot(slot),
        Some(&format!("uid-{holder}")),
    ));
    lease
}

/// A labelled pod created `ago_ms` before `now_ms` (Unix ms).
fn pod_created(name: &str, now_ms: i64, ago_ms: i64) -> Pod {
    let mut p = pod(name);
    p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(now_ms - ago_ms).expect("a time"),
    ));
    p
}

/// The value of an unlabelled series in the operator's `/metrics`.
fn gauge(rendered: &str, name: &str) -> f64 {
    rendered
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in:\n{rendered}"))
}

/// A pod that waits forever never reaches the pod-to-slot histogram: the waiting gauges
/// show it from the first pass that sees it, and go back to 0 on the pass that sees none.
#[tokio::test]
async fn pods_without_a_free_slot_show_in_the_waiting_gauges_until_no_pod_waits() {
    let mut spec = IdSequenceSpec::default();
    spec.layout.worker_bits = 1; // two slots
    spec.layout.sequence_bits = 21;
    let seq = sequence(spec, true, false);
    let now_ms = chrono::Utc::now().timestamp() * 1000;
    let waiting = [
        pod_created("c", now_ms, 90_000),
        pod_created("d", now_ms, 30_000),
    ];
    let mut pods = vec![pod("a"), pod("b")];
    pods.extend(waiting.iter().cloned());
    let api = FakeApi::new().always(Method::PATCH, STATUS, 200, echo(&seq));
    let mut f = fixture(
        &api,
        pods,
        vec![held_slot_lease(0, "a"), held_slot_lease(1, "b")],
    );
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass with both slots held");
    assert!(
        api.requests(&Method::POST, LEASES).is_empty(),
        "no slot is free to hand out"
    );
    let rendered = f.ctx.metrics.render_at(now_ms);
    assert_eq!(
        gauge(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        2.0
    );
    assert_eq!(
        gauge(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        90.0,
        "pod c, created 90 s ago, has waited longest"
    );

    for p in waiting {
        f._writers.0.apply_watcher_event(&watcher::Event::Delete(p));
    }
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass with no pod waiting");
    api.verify();
    let rendered = f.ctx.metrics.render_at(now_ms);
    assert_eq!(
        gauge(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        0.0
    );
    assert_eq!(
        gauge(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        0.0
    );
}

/// `lease` marked as written in Lease format `format` (a newer kubeflake's, here).
fn in_format(mut lease: Lease, format: &str) -> Lease {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            kubeflake_crds::slot_lease::FORMAT_ANNOTATION.into(),
            format.into(),
        );
    lease
}

/// Every write a pass sent to a Lease (create, replace, patch, delete).
fn lease_writes(api: &FakeApi) -> Vec<String> {
    api.seen()
        .iter()
        .filter(|s| s.path.starts_with(LEASES) && s.method != Method::GET)
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

/// The Ready condition the pass wrote last, and whether a Warning Event of `reason` went out.
fn ready_and_event(
    api: &FakeApi,
    reason: &str,
) -> (
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    bool,
) {
    let ready = status_patches(api)
        .pop()
        .and_then(|s| condition(Some(&s), ConditionType::Ready).cloned())
        .expect("Ready");
    let warned = api.seen().iter().any(|s| {
        s.path.contains("/events") && s.body["reason"] == reason && s.body["type"] == "Warning"
    });
    (ready, warned)
}

/// Issue 23: a slot Lease written by a newer kubeflake (a format this release does not
/// understand) is never guessed at: with a gone holder and a waiting pod (a live pass would
/// reclaim and assign) and during deletion (which would delete it), the operator writes no
/// Lease, and says which Lease and what to do in Ready=False and a Warning Event.
#[tokio::test]
async fn a_slot_lease_in_a_newer_format_is_never_written_and_the_sequence_says_why() {
    for deleting in [false, true] {
        let seq = sequence(IdSequenceSpec::default(), true, deleting);
        let api = FakeApi::new()
            .always(
                Method::GET,
                "/api/v1/namespaces/shop/pods/a",
                404,
                failure(404, "NotFound", "gone"),
            )
            .expect(Method::PATCH, STATUS, 200, echo(&seq));
        let newer = in_format(slot_lease(Some("a"), 7), "2");
        let f = fixture(&api, vec![pod("b")], vec![newer]);
        let err = reconcile(Arc::new(seq), f.ctx.clone())
            .await
            .expect_err("the pass is refused");
        api.verify();
        assert!(
            matches!(
                err,
                Error::BadLease(SlotLeaseError::UnsupportedFormat { found: 2, .. })
            ),
            "{err}"
        );
        assert!(
            !err.to_string().contains("fix or delete"),
            "no advice to delete a newer release's Lease: {err}"
        );
        assert_eq!(
            lease_writes(&api),
            Vec::<String>::new(),
            "deleting: {deleting}"
        );
        assert!(
            api.requests(&Method::PATCH, SEQUENCE).is_empty(),
            "the finalizer stays"
        );
        let (ready, warned) = ready_and_event(&api, "LeaseFormatUnsupported");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "LeaseFormatUnsupported")
        );
        for part in [
            "orders-slot-0",
            "format 2",
            "Upgrade this operator",
            "not changed",
        ] {
            assert!(ready.message.contains(part), "{part:?}: {}", ready.message);
        }
        assert!(warned, "a Warning Event says so");
        assert_eq!(
            f.ctx
                .metrics
                .reconciles
                .with_label_values(&["bad_lease"])
                .get(),
            1
        );
    }
}

/// Issue 23: a segment counter written by a newer kubeflake is neither raised to a higher
/// `start` nor given claimants; Ready=False and a Warning Event say which Lease and what to do.
#[tokio::test]
async fn a_segment_counter_in_a_newer_format_is_never_written_and_the_sequence_says_why() {
    let spec = IdSequenceSpec {
        mode: Mode::Segment,
        segment: Some(SegmentSpec {
            start: 1000,
            ..Default::default()
        }),
        ..Default::default()
    };
    let seq = sequence(spec, true, false);
    let counter = format!("{LEASES}/orders-segment-counter");
    let newer = in_format(
        kubeflake_crds::segment_counter::new_counter(SEQ, NS, 1),
        "4",
    );
    let api = FakeApi::new()
        .expect(Method::GET, &counter, 200, json!(newer))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    let err = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect_err("the pass is refused");
    api.verify();
    assert!(
        matches!(
            err,
            Error::Counter(CounterError::UnsupportedFormat { found: 4, .. })
        ),
        "{err}"
    );
    assert_eq!(lease_writes(&api), Vec::<String>::new());
    let (ready, warned) = ready_and_event(&api, "LeaseFormatUnsupported");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "LeaseFormatUnsupported")
    );
    for part in [
        "orders-segment-counter",
        "format 4",
        "Upgrade this operator",
        "not changed",
    ] {
        assert!(ready.message.contains(part), "{part:?}: {}", ready.message);
    }
    assert!(warned, "a Warning Event says so");
    assert_eq!(
        f.ctx
            .metrics
            .reconciles
            .with_label_values(&["bad_counter"])
            .get(),
        1
    );
}

#[tokio::test]
async fn a_sequence_gone_without_a_last_pass_leaves_no_figures_silence_or_expectations_behind() {
    // "carts" was passed once, then vanished from the IdSequence cache without the pass
    // that deletes it (its finalizer removed by hand, its namespace deleted, or deleted
    // while the operator was down): the next pass of any sequence forgets it.
    let held = kubeflake_crds::slot_lease::SlotLease::parse(&slot_lease(Some("a"), 0))
        .expect("a slot lease");
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let api = FakeApi::new().always(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![slot_lease(Some("a"), 0)]);
    let figures = crate::metrics::SlotFigures {
        assigned: 3,
        capacity: 8,
        waiting: 2,
        oldest_waiting_since_ms: Some(0),
    };
    f.ctx.metrics.set_slots(NS, "carts", figures);
    f.ctx
        .silence
        .silent(NS, "carts", &[held], Duration::from_secs(60));
    let created = expectations::Written {
        lease: "carts-slot-0".into(),
        replaced: None,
    };
    let t0 = std::time::Instant::now();
    f.ctx.expectations.expect(NS, "carts", vec![created], t0);

    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass of orders");
    let rendered = f.ctx.metrics.render_at(60_000);
    assert_eq!(gauge(&rendered, "kubeflake_operator_sequences"), 1.0);
    assert_eq!(gauge(&rendered, "kubeflake_operator_slots_assigned"), 1.0);
    assert_eq!(
        gauge(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        0.0
    );
    assert_eq!(
        gauge(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        0.0
    );
    assert_eq!(f.ctx.silence.sequences(), [format!("{NS}/{SEQ}")]);
    assert_eq!(
        f.ctx.expectations.readiness(NS, "carts", |_| None, t0),
        expectations::Readiness::Current,
        "no write of carts is waited for any more"
    );
}

#[tokio::test]
async fn nothing_is_forgotten_before_the_idsequence_cache_has_listed_once() {
    let api = FakeApi::new();
    let (pods, _pod_writer) = index::<Pod>();
    let (leases, _lease_writer) = index::<Lease>();
    // Not listed yet: empty, and saying nothing about which sequences exist.
    let (sequences, _sequence_writer) = reflector::store::<IdSequence>();
    let reporter = Reporter {
        controller: "kubeflake-operator".into(),
        instance: Some("test".into()),
    };
    let metrics = Arc::new(Metrics::new());
    let ctx = Context::new(api.client(), pods, leases, sequences, metrics, reporter);
    ctx.metrics
        .set_slots(NS, SEQ, crate::metrics::SlotFigures::default());
    ctx.forget_gone();
    let rendered = ctx.metrics.render_at(0);
    assert_eq!(gauge(&rendered, "kubeflake_operator_sequences"), 1.0);
}

// Issue 27: the operator's writes change the Lease as read.

const NOTE: &str = "example.com/note";
const TEAM: &str = "example.com/team";

/// `lease` as a cluster may hold it: with a lease duration, its sequence as owner, and a
/// label and an annotation kubeflake does not model.
fn with_foreign_fields(mut lease: Lease) -> Lease {
    lease
        .spec
        .get_or_insert_with(Default::default)
        .lease_duration_seconds = Some(15);
    lease
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(TEAM.into(), "payments".into());
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(NOTE.into(), "kept".into());
    lease.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "kubeflake.io/v1alpha1".into(),
            kind: "IdSequence".into(),
            name: SEQ.into(),
            uid: "seq-uid".into(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    lease
}

/// What the operator's write must carry over from the Lease it read.
fn assert_kept(put: &Value, what: &str) {
    let meta = &put["metadata"];
    assert_eq!(meta["resourceVersion"], "5", "{what}: a compare-and-swap");
    assert_eq!(meta["labels"][TEAM], "payments", "{what}: {put:#}");
    assert_eq!(meta["annotations"][NOTE], "kept", "{what}: {put:#}");
    assert_eq!(
        meta["ownerReferences"][0]["uid"], "seq-uid",
        "{what}: {put:#}"
    );
}

#[tokio::test]
async fn an_operator_release_keeps_lease_duration_unknown_labels_and_annotations() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let lease = format!("{LEASES}/orders-slot-0");
    let api = FakeApi::new()
        .expect(
            Method::GET,
            "/api/v1/namespaces/shop/pods/a",
            404,
            failure(404, "NotFound", "gone"),
        )
        .expect(Method::PUT, &lease, 200, json!(slot_lease(None, 7)))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let read = with_foreign_fields(slot_lease(Some("a"), 7));
    let f = fixture(&api, vec![], vec![read]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let put = &api.requests(&Method::PUT, &lease)[0].body;
    assert_kept(put, "release");
    assert_eq!(put["spec"]["leaseDurationSeconds"], 15, "{put:#}");
    assert_eq!(put["spec"]["holderIdentity"], Value::Null, "released");
    assert_eq!(put["metadata"]["annotations"]["kubeflake.io/fence"], "7");
}

#[tokio::test]
async fn an_assignment_of_a_free_lease_keeps_its_unknown_labels_annotations_and_owner() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let lease = format!("{LEASES}/orders-slot-0");
    let api = FakeApi::new()
        .expect(Method::PUT, &lease, 200, json!(slot_lease(Some("b"), 7)))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let read = with_foreign_fields(slot_lease(None, 7));
    let f = fixture(&api, vec![pod("b")], vec![read]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let put = &api.requests(&Method::PUT, &lease)[0].body;
    assert_kept(put, "assignment");
    assert_eq!(put["spec"]["holderIdentity"], "uid-b");
    let duration = seq.spec.params().expect("params").lease_duration_secs;
    assert_eq!(
        put["spec"]["leaseDurationSeconds"], duration,
        "the sequence's own duration"
    );
}

/// Issue 27: one failed write does not hide the writes of its pass that succeeded: their
/// Event, status count and metrics are published, then the failure is returned.
#[tokio::test]
async fn a_failed_write_still_publishes_the_assignments_that_succeeded_in_its_pass() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    // Two pods wait: one slot lease is created, the other create fails (500).
    let api = FakeApi::new()
        .expect(Method::POST, LEASES, 201, json!(slot_lease(Some("a"), 0)))
        .expect(
            Method::POST,
            LEASES,
            500,
            failure(500, "InternalError", "etcd timed out"),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a"), pod("b")], vec![]);
    let err = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect_err("the failed write is still returned, so the pass is retried");
    api.verify();
    assert!(
        matches!(&err, Error::Kube(kube::Error::Api(s)) if s.code == 500),
        "{err}"
    );
    let events: Vec<String> = api
        .seen()
        .iter()
        .filter(|s| s.path.contains("/events") && s.body["reason"] == "SlotsAssigned")
        .map(|s| s.body["note"].to_string())
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("assigned 1 slots"), "{events:?}");
    let status = status_patches(&api).pop().expect("the status is written");
    assert_eq!(status.assigned, Some(1), "the successful assignment counts");
    assert_eq!(f.ctx.metrics.assignments.get(), 1);
}

mod foreign;
mod id_space;
mod key_form;
mod segment_ranged;
mod strict;
