//! The controller held back by the Lease-policy gate, against the scripted fake API server:
//! no Lease request (no slot, no counter, no claimant) while it is closed, and the sequence
//! says why; assignment once it opens.

use std::sync::Arc;

use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::sequence::{IdSequence, IdSequenceSpec, IdSequenceStatus, Mode};
use kubeflake_crds::slot_lease::{FINALIZER, SEQUENCE_LABEL};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::*;
use crate::controller::reconcile;
use crate::index::{IndexWriter, index};
use crate::lease_policy_guard::{LeasePolicyGate, Missing, PolicyState};
use crate::metrics::Metrics;
use kubeflake_runtime::fake_api::FakeApi;

const NS: &str = "shop";
const SEQ: &str = "orders";
const NAME: &str = "kubeflake-leases";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases";
const STATUS: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idsequences/orders/status";

/// A controller context on `api` with `pods` cached and the gate fed by the returned sender.
fn context(
    api: &FakeApi,
    pods: Vec<Pod>,
    state: PolicyState,
) -> (Arc<Context>, watch::Sender<PolicyState>, Writers) {
    let (pod_store, mut pod_writer) = index::<Pod>();
    for pod in pods {
        pod_writer.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    let (lease_store, lease_writer) = index::<Lease>();
    let (sequences, mut sequence_writer) = reflector::store::<IdSequence>();
    sequence_writer.apply_watcher_event(&watcher::Event::Init);
    sequence_writer.apply_watcher_event(&watcher::Event::InitApply(sequence(
        IdSequenceSpec::default(),
    )));
    sequence_writer.apply_watcher_event(&watcher::Event::InitDone);
    let reporter = Reporter {
        controller: "kubeflake-operator".into(),
        instance: Some("test".into()),
    };
    let (sender, gate) = LeasePolicyGate::new(state);
    let ctx = Context::new(
        api.client(),
        pod_store,
        lease_store,
        sequences,
        Arc::new(Metrics::new()),
        reporter,
    )
    .with_lease_policy(gate);
    (
        Arc::new(ctx),
        sender,
        (pod_writer, lease_writer, sequence_writer),
    )
}

/// The caches' writers, kept for as long as the test uses the context.
type Writers = (IndexWriter<Pod>, IndexWriter<Lease>, Writer<IdSequence>);

fn sequence(spec: IdSequenceSpec) -> IdSequence {
    let mut seq = IdSequence::new(SEQ, spec);
    seq.metadata.namespace = Some(NS.into());
    seq.metadata.uid = Some("seq-uid".into());
    seq.metadata.resource_version = Some("10".into());
    seq.metadata.generation = Some(1);
    seq.metadata.finalizers = Some(vec![FINALIZER.into()]);
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

fn status_of(api: &FakeApi) -> IdSequenceStatus {
    let patches = api.requests(&Method::PATCH, STATUS);
    let last = patches.last().expect("a status patch");
    serde_json::from_value(last.body["status"].clone()).expect("a status")
}

fn events(api: &FakeApi) -> Vec<Value> {
    api.seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/apis/events.k8s.io/"))
        .map(|s| s.body)
        .collect()
}

#[tokio::test]
async fn rule14_without_the_lease_policy_the_operator_assigns_no_slot_and_says_why() {
    let seq = sequence(IdSequenceSpec::default());
    let missing = PolicyState::Missing(Missing::BindingNotFound { name: NAME.into() });
    // Only the status: no Lease is read, created or written.
    let api = FakeApi::new().always(Method::PATCH, STATUS, 200, json!(seq));
    let (ctx, sender, _writers) = context(&api, vec![pod("a")], missing);
    let action = reconcile(Arc::new(seq.clone()), ctx.clone())
        .await
        .expect("a held-back pass is no error");
    api.verify();
    assert_eq!(action, Action::requeue(HELD_BACK));
    assert!(
        api.requests(&Method::POST, LEASES).is_empty(),
        "no slot assigned"
    );
    assert_eq!(ctx.metrics.assignments.get(), 0);
    let status = status_of(&api);
    let ready = condition(Some(&status), ConditionType::Ready).expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "LeasePolicyMissing")
    );
    assert!(ready.message.contains(NAME), "{}", ready.message);
    let warned = events(&api);
    assert!(
        warned
            .iter()
            .any(|e| e["reason"] == "LeasePolicyMissing" && e["type"] == "Warning"),
        "a Warning Event: {warned:#?}"
    );

    // The binding is back: the next pass assigns the waiting pod its slot.
    sender.send_replace(PolicyState::InForce);
    let held_back = IdSequence {
        status: Some(status),
        ..seq
    };
    let lease = json!({
        "metadata": {
            "name": "orders-slot-0", "namespace": NS, "resourceVersion": "6",
            "labels": kubeflake_crds::slot_lease::lease_labels(SEQ, kubeflake_crds::Slot(0), None),
        },
        "spec": {"holderIdentity": "uid-a", "leaseTransitions": 1},
    });
    let api2 = api.clone().expect(Method::POST, LEASES, 201, lease);
    reconcile(Arc::new(held_back), ctx.clone())
        .await
        .expect("a pass that assigns");
    api2.verify();
    assert_eq!(
        api2.requests(&Method::POST, LEASES).len(),
        1,
        "one slot for pod a"
    );
    assert_eq!(ctx.metrics.assignments.get(), 1);
    let status = status_of(&api2);
    let ready = condition(Some(&status), ConditionType::Ready).expect("Ready");
    assert_eq!(ready.status, "True", "{ready:?}");
}

#[tokio::test]
async fn rule14_without_the_lease_policy_no_claimant_is_listed_on_a_segment_counter() {
    let spec = IdSequenceSpec {
        mode: Mode::Segment,
        ..Default::default()
    };
    let seq = sequence(spec);
    let api = FakeApi::new().always(Method::PATCH, STATUS, 200, json!(seq));
    let (ctx, _sender, _writers) = context(&api, vec![pod("a")], PolicyState::Unchecked);
    reconcile(Arc::new(seq), ctx)
        .await
        .expect("a held-back pass is no error");
    // The fake refuses (and verify reports) any request but the status patch: the counter
    // is neither read nor created, and no claimant is written on it.
    api.verify();
    let status = status_of(&api);
    let ready = condition(Some(&status), ConditionType::Ready).expect("Ready");
    assert_eq!(ready.reason, "LeasePolicyMissing");
}
