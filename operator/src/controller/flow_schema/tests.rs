//! The sidecars' FlowSchema kept to the namespaces that have an IdSequence, against the
//! scripted fake API server: what is read, what is written, and when nothing is.

use http::Method;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kubeflake_crds::sequence::IdSequenceSpec;
use serde_json::{Value, json};

use super::*;
use kubeflake_runtime::fake_api::{FakeApi, failure};

const SCHEMA: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/kubeflake-sidecars";

/// A listed IdSequence cache holding sequences in `namespaces`.
fn sequences(namespaces: &[&str]) -> (Store<IdSequence>, Writer<IdSequence>) {
    let (store, mut writer) = reflector::store::<IdSequence>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for (i, ns) in namespaces.iter().enumerate() {
        let mut seq = IdSequence::new(&format!("seq-{i}"), IdSequenceSpec::default());
        seq.metadata.namespace = Some(ns.to_string());
        writer.apply_watcher_event(&watcher::Event::InitApply(seq));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, writer)
}

/// The chart's FlowSchema as the API server returns it, its rules naming `namespaces`.
fn schema(namespaces: &[&str]) -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": "kubeflake-sidecars", "resourceVersion": "41"},
        "spec": {
            "matchingPrecedence": 1000,
            "priorityLevelConfiguration": {"name": "kubeflake-sidecars"},
            "distinguisherMethod": {"type": "ByNamespace"},
            "rules": [{
                "subjects": [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}],
                "resourceRules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                     "verbs": ["get", "list", "watch", "update", "patch"], "namespaces": namespaces},
                    {"apiGroups": ["kubeflake.io"], "resources": ["idsequences"],
                     "verbs": ["get", "list", "watch"], "namespaces": namespaces},
                ],
            }],
        },
    })
}

#[tokio::test]
async fn the_flow_schema_is_narrowed_from_every_namespace_to_those_with_a_sequence() {
    // As installed by 0.1.0's chart, or rendered before the first pass.
    let api = FakeApi::new()
        .expect(Method::GET, SCHEMA, 200, schema(&["*"]))
        .expect(Method::PUT, SCHEMA, 200, schema(&["apps", "shop"]));
    let (store, _w) = sequences(&["shop", "apps", "shop"]);
    let keeper = FlowSchemaKeeper::new("kubeflake-sidecars".into());
    let outcome = keep(&api.client(), &store, &keeper).await;
    assert_eq!(
        outcome,
        Outcome::Updated(vec!["apps".into(), "shop".into()])
    );
    api.verify();
    let put = &api.requests(&Method::PUT, SCHEMA)[0].body;
    assert_eq!(
        put["metadata"]["resourceVersion"], "41",
        "a compare-and-swap"
    );
    for rule in put["spec"]["rules"][0]["resourceRules"].as_array().unwrap() {
        assert_eq!(rule["namespaces"], json!(["apps", "shop"]));
    }
    // Everything else as it was: subjects, verbs, precedence, level.
    let mut rest = put.clone();
    let mut before = schema(&["apps", "shop"]);
    for v in [&mut rest, &mut before] {
        v["metadata"] = Value::Null;
    }
    assert_eq!(rest, before);

    // The next pass, namespaces unchanged: no request at all.
    let outcome = keep(&api.client(), &store, &keeper).await;
    assert_eq!(outcome, Outcome::Skipped);
    assert_eq!(api.seen().len(), 2);
}

#[tokio::test]
async fn a_flow_schema_that_already_lists_them_is_not_written() {
    let api = FakeApi::new().expect(Method::GET, SCHEMA, 200, schema(&["shop"]));
    let (store, _w) = sequences(&["shop"]);
    let keeper = FlowSchemaKeeper::new("kubeflake-sidecars".into());
    assert_eq!(
        keep(&api.client(), &store, &keeper).await,
        Outcome::Unchanged
    );
    api.verify();
}

#[tokio::test]
async fn with_no_sequence_or_before_the_cache_is_listed_nothing_is_read_or_written() {
    let api = FakeApi::new();
    let keeper = FlowSchemaKeeper::new("kubeflake-sidecars".into());
    let (empty, _w) = sequences(&[]);
    assert_eq!(keep(&api.client(), &empty, &keeper).await, Outcome::Skipped);
    let (unlisted, _w2) = reflector::store::<IdSequence>();
    assert_eq!(
        keep(&api.client(), &unlisted, &keeper).await,
        Outcome::Skipped
    );
    api.verify();
    assert!(api.seen().is_empty());
}

#[tokio::test]
async fn a_refused_write_is_logged_and_tried_again_on_the_next_pass() {
    let api = FakeApi::new()
        .expect(Method::GET, SCHEMA, 200, schema(&["*"]))
        .expect(
            Method::PUT,
            SCHEMA,
            409,
            failure(409, "Conflict", "the object has been modified"),
        )
        .expect(Method::GET, SCHEMA, 200, schema(&["*"]))
        .expect(Method::PUT, SCHEMA, 200, schema(&["shop"]));
    let (store, _w) = sequences(&["shop"]);
    let keeper = FlowSchemaKeeper::new("kubeflake-sidecars".into());
    assert_eq!(keep(&api.client(), &store, &keeper).await, Outcome::Failed);
    assert_eq!(
        keep(&api.client(), &store, &keeper).await,
        Outcome::Updated(vec!["shop".into()])
    );
    api.verify();
}
