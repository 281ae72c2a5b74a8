//! Issue 24: what the operator prepares for a strict sequence's oracle (`segment::oracle`):
//! the counter in format 2, the oracle Lease (created, owned by the sequence, never in the
//! way of its deletion) and its claimants, the counter's. Each test names the rule it pins:
//! rule 13 (the oracle's Lease and claimants), rule 15 (format 2 keeps 0.2.0 sidecars off a
//! counter an oracle serves).

use super::*;
use kubeflake_crds::segment_counter::{CLAIMANTS_ANNOTATION, new_counter};
use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
use kubeflake_crds::strict_oracle::{ORACLE_LABEL, new_oracle_lease};

const COUNTER: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-segment-counter";
const ORACLE: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-strict-oracle";

fn segment(strict: bool) -> IdSequence {
    let spec = IdSequenceSpec {
        mode: Mode::Segment,
        segment: Some(SegmentSpec {
            start: 1000,
            strict,
            ..Default::default()
        }),
        ..Default::default()
    };
    sequence(spec, true, false)
}

/// A counter as the API server returns it: at version `version`, in `format` (`None`: no
/// format annotation, as 0.1.0 wrote it), listing `claimants`.
fn counter(format: Option<&str>, claimants: &str, version: &str) -> Lease {
    let mut lease = new_counter(SEQ, NS, 1000);
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.remove(FORMAT_ANNOTATION);
    if let Some(f) = format {
        annotations.insert(FORMAT_ANNOTATION.into(), f.into());
    }
    annotations.insert(CLAIMANTS_ANNOTATION.into(), claimants.into());
    lease.metadata.resource_version = Some(version.into());
    lease
}

/// The oracle Lease as the API server returns it, listing `claimants`, at `version`.
fn oracle(claimants: &str, version: &str) -> Lease {
    let mut lease = new_oracle_lease(SEQ, NS);
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CLAIMANTS_ANNOTATION.into(), claimants.into());
    lease.metadata.resource_version = Some(version.into());
    // Owned by the sequence, as the operator creates it (rule 16: else it is foreign).
    lease.metadata.owner_references =
        Some(vec![serde_json::from_value(owner()).expect("an owner")]);
    lease
}

fn annotation<'a>(body: &'a Value, key: &str) -> &'a Value {
    &body["metadata"]["annotations"][key]
}

#[tokio::test]
async fn rule13_a_new_strict_sequence_gets_a_format_2_counter_and_an_oracle_lease_it_owns_listing_the_same_pods()
 {
    let seq = segment(true);
    let mut fresh = seq.clone();
    fresh.status = None;
    let api = FakeApi::new()
        .expect(Method::GET, COUNTER, 404, failure(404, "NotFound", "none"))
        .expect(Method::GET, SEQUENCE, 200, echo(&fresh))
        .expect(
            Method::POST,
            LEASES,
            201,
            json!(counter(Some("2"), "", "5")),
        )
        .expect(
            Method::PATCH,
            COUNTER,
            200,
            json!(counter(Some("2"), "uid-a,uid-b", "6")),
        )
        .expect(Method::GET, ORACLE, 404, failure(404, "NotFound", "none"))
        .expect(Method::POST, LEASES, 201, json!(oracle("uid-a,uid-b", "7")))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a"), pod("b")], vec![]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(action, Action::requeue(Duration::from_secs(15)));
    let posts = api.requests(&Method::POST, LEASES);
    assert_eq!(posts.len(), 2, "{posts:#?}");
    let (created_counter, created_oracle) = (&posts[0].body, &posts[1].body);
    assert_eq!(
        created_counter["metadata"]["name"],
        "orders-segment-counter"
    );
    assert_eq!(
        annotation(created_counter, FORMAT_ANNOTATION),
        "2",
        "a new strict counter is created in the oracle's format: {created_counter:#}"
    );
    assert_eq!(created_oracle["metadata"]["name"], "orders-strict-oracle");
    assert_eq!(created_oracle["metadata"]["labels"][ORACLE_LABEL], SEQ);
    assert_eq!(
        created_oracle["spec"]["holderIdentity"],
        Value::Null,
        "nobody holds a new oracle Lease"
    );
    let claimants = annotation(created_oracle, CLAIMANTS_ANNOTATION);
    let counter_patch = &api.requests(&Method::PATCH, COUNTER)[0].body;
    assert_eq!(claimants, "uid-a,uid-b");
    assert_eq!(
        claimants,
        annotation(counter_patch, CLAIMANTS_ANNOTATION),
        "the oracle lists the counter's claimants"
    );
    let owners = created_oracle["metadata"]["ownerReferences"]
        .as_array()
        .expect("an owner reference");
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0]["kind"], "IdSequence");
    assert_eq!(owners[0]["uid"], "seq-uid", "deleted with its sequence");
    assert_eq!(owners[0]["controller"], true);
    assert_eq!(
        owners[0]["blockOwnerDeletion"],
        Value::Null,
        "deleting the sequence never waits for it"
    );
    assert_eq!(
        created_counter["metadata"]["ownerReferences"],
        Value::Null,
        "the counter outlives its sequence, as ever"
    );
}

#[tokio::test]
async fn rule15_an_existing_strict_counter_in_format_1_is_moved_to_format_2_by_a_compare_and_swap_changing_nothing_else()
 {
    for format in [None, Some("1")] {
        let seq = segment(true);
        let api = FakeApi::new()
            .expect(
                Method::GET,
                COUNTER,
                200,
                json!(counter(format, "uid-a", "5")),
            )
            .expect(
                Method::PATCH,
                COUNTER,
                200,
                json!(counter(Some("2"), "uid-a", "6")),
            )
            .expect(Method::GET, ORACLE, 200, json!(oracle("uid-a", "3")))
            .expect(Method::PATCH, STATUS, 200, echo(&seq));
        let f = fixture(&api, vec![pod("a")], vec![]);
        reconcile(Arc::new(seq), f.ctx.clone())
            .await
            .expect("a pass");
        api.verify();
        let patches = api.requests(&Method::PATCH, COUNTER);
        assert_eq!(patches.len(), 1, "{format:?}: {patches:#?}");
        assert_eq!(
            patches[0].body,
            json!({"metadata": {
                "resourceVersion": "5",
                "annotations": {FORMAT_ANNOTATION: "2"},
            }}),
            "{format:?}: only the format, conditional on the version read"
        );
        assert_eq!(
            patches[0].content_type, "application/merge-patch+json",
            "a merge patch: every other field stays as the sidecars wrote it"
        );
    }
}

/// A sidecar claimed between the read and the format write: the write is refused (409)
/// and the pass is retried soon, before the oracle Lease is looked at.
#[tokio::test]
async fn rule15_a_format_write_that_loses_a_race_is_retried_and_nothing_else_is_written() {
    let seq = segment(true);
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(Some("1"), "uid-a", "5")),
        )
        .expect(
            Method::PATCH,
            COUNTER,
            409,
            failure(409, "Conflict", "the object has been modified"),
        );
    let f = fixture(&api, vec![pod("a")], vec![]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(action, Action::requeue(Duration::from_millis(500)));
}

#[tokio::test]
async fn rule15_a_non_strict_counter_stays_in_format_1_and_gets_no_oracle_lease() {
    // A new one: created in format 1. No oracle Lease is read or written (the fake
    // refuses, and verify reports, any request not listed).
    let seq = segment(false);
    let mut fresh = seq.clone();
    fresh.status = None;
    let api = FakeApi::new()
        .expect(Method::GET, COUNTER, 404, failure(404, "NotFound", "none"))
        .expect(Method::GET, SEQUENCE, 200, echo(&fresh))
        .expect(
            Method::POST,
            LEASES,
            201,
            json!(counter(Some("1"), "", "5")),
        )
        .expect(
            Method::PATCH,
            COUNTER,
            200,
            json!(counter(Some("1"), "uid-a", "6")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let created = &api.requests(&Method::POST, LEASES)[0].body;
    assert_eq!(annotation(created, FORMAT_ANNOTATION), "1");
    let patch = &api.requests(&Method::PATCH, COUNTER)[0].body;
    assert_eq!(
        annotation(patch, FORMAT_ANNOTATION),
        &Value::Null,
        "{patch:#}"
    );

    // An existing one in format 1: left in it.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(Some("1"), "uid-a", "5")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(lease_writes(&api), Vec::<String>::new());
}

#[tokio::test]
async fn rule13_the_oracle_lease_lists_the_counters_claimants_written_by_compare_and_swap() {
    let seq = segment(true);
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(Some("2"), "uid-a", "5")),
        )
        .expect(
            Method::PATCH,
            COUNTER,
            200,
            json!(counter(Some("2"), "uid-a,uid-b", "6")),
        )
        .expect(
            Method::GET,
            ORACLE,
            200,
            json!(oracle("uid-a,uid-gone", "8")),
        )
        .expect(
            Method::PATCH,
            ORACLE,
            200,
            json!(oracle("uid-a,uid-b", "9")),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a"), pod("b")], vec![]);
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let counter_patch = &api.requests(&Method::PATCH, COUNTER)[0].body;
    let oracle_patch = &api.requests(&Method::PATCH, ORACLE)[0].body;
    assert_eq!(
        oracle_patch,
        &json!({"metadata": {
            "resourceVersion": "8",
            "annotations": {CLAIMANTS_ANNOTATION: "uid-a,uid-b"},
        }}),
        "the claimants only, conditional on the version read"
    );
    assert_eq!(
        annotation(oracle_patch, CLAIMANTS_ANNOTATION),
        annotation(counter_patch, CLAIMANTS_ANNOTATION)
    );

    // A sidecar took or renewed the oracle Lease meanwhile: retried soon.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(Some("2"), "uid-a,uid-b", "6")),
        )
        .expect(Method::GET, ORACLE, 200, json!(oracle("uid-a", "8")))
        .expect(
            Method::PATCH,
            ORACLE,
            409,
            failure(409, "Conflict", "the object has been modified"),
        );
    let f = fixture(&api, vec![pod("a"), pod("b")], vec![]);
    let action = reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(action, Action::requeue(Duration::from_millis(500)));

    // Listed already, on both: nothing is written.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(Some("2"), "uid-a,uid-b", "6")),
        )
        .expect(Method::GET, ORACLE, 200, json!(oracle("uid-a,uid-b", "8")))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a"), pod("b")], vec![]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(lease_writes(&api), Vec::<String>::new());
}

/// An oracle Lease written by a newer kubeflake is never written: the pass fails as
/// `bad_oracle`, naming the Lease.
#[tokio::test]
async fn rule15_an_oracle_lease_in_a_newer_format_is_never_written() {
    let seq = segment(true);
    let newer = in_format(oracle("uid-a", "8"), "2");
    let api = FakeApi::new()
        .expect(
            Method::GET,
            COUNTER,
            200,
            json!(counter(Some("2"), "uid-a,uid-b", "6")),
        )
        .expect(Method::GET, ORACLE, 200, json!(newer));
    let f = fixture(&api, vec![pod("a"), pod("b")], vec![]);
    let err = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect_err("refused");
    api.verify();
    assert!(matches!(err, Error::Oracle(_)), "{err}");
    assert!(err.to_string().contains("orders-strict-oracle"), "{err}");
    assert_eq!(lease_writes(&api), Vec::<String>::new());
    assert_eq!(
        f.ctx
            .metrics
            .reconciles
            .with_label_values(&["bad_oracle"])
            .get(),
        1
    );
}

/// Deleting a strict sequence (rule 10's finalizer) never waits for, reads or deletes its
/// oracle Lease: the garbage collector removes it through its owner reference.
#[tokio::test]
async fn rule13_deleting_a_strict_sequence_is_not_held_up_by_its_oracle_lease() {
    let spec = segment(true).spec;
    let seq = sequence(spec, true, true);
    let api = FakeApi::new().expect(Method::PATCH, SEQUENCE, 200, echo(&seq));
    let mut held = oracle("uid-a", "8");
    held.spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some("uid-a".into());
    held.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "kubeflake.io/v1alpha1".into(),
            kind: "IdSequence".into(),
            name: SEQ.into(),
            uid: "seq-uid".into(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    let f = fixture(&api, vec![pod("a")], vec![held]);
    let action = reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    assert_eq!(action, Action::await_change());
    let patch = &api.requests(&Method::PATCH, SEQUENCE)[0];
    assert_eq!(
        patch.body["metadata"]["finalizers"],
        json!([]),
        "the finalizer goes"
    );
    assert_eq!(lease_writes(&api), Vec::<String>::new());
}
