use super::*;
use kubeflake_crds::segment_counter::new_counter;
use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
use kubeflake_runtime::fake_api::FakeApi;

/// Issue 23: a counter Lease a newer kubeflake wrote is its own refusal (not "corrupt"),
/// naming the Lease, the format and what to do.
#[tokio::test]
async fn a_counter_lease_in_a_newer_format_is_refused_as_such() {
    let mut newer = new_counter("orders", "ns", 7);
    newer
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(FORMAT_ANNOTATION.into(), "4".into());
    let body = serde_json::to_value(&newer).unwrap();
    let client = FakeApi::answering(move |_, _, _| (200, body.clone())).client();
    let err = LeaseCounter::new(client, "ns", "orders")
        .read()
        .await
        .unwrap_err();
    let StoreError::UnsupportedFormat(message) = err else {
        panic!("another error: {err}");
    };
    assert!(
        message.contains("orders-segment-counter") && message.contains("format 4"),
        "{message}"
    );
}

/// Rule 22: every `next` a read finds is recorded as seen, and a later read below it
/// leaves the record where it was (the claim that reads it refuses it).
#[tokio::test]
async fn rule22_reads_record_the_highest_next_seen_and_a_lower_read_does_not_lower_it() {
    let next = std::sync::Arc::new(std::sync::Mutex::new(5_000u64));
    let answer = next.clone();
    let api = FakeApi::answering(move |_, _, _| {
        let lease = new_counter("orders", "ns", *answer.lock().unwrap());
        (200, serde_json::to_value(&lease).unwrap())
    });
    let counter = LeaseCounter::new(api.client(), "ns", "orders");
    assert_eq!(counter.seen_next(), 0);
    assert_eq!(counter.read().await.unwrap().next, 5_000);
    assert_eq!(counter.seen_next(), 5_000);
    *next.lock().unwrap() = 101; // an etcd snapshot restored
    assert_eq!(counter.read().await.unwrap().next, 101);
    assert_eq!(counter.seen_next(), 5_000);
}

/// Rule 22: a claim of a format 3 counter, a move to its queued range included, patches
/// `next` and `claims` only, as for every counter (what the Lease policy of earlier
/// releases lets a claimant write).
#[tokio::test]
async fn rule22_a_claim_that_moves_to_the_queued_range_patches_next_and_claims_only() {
    use kubeflake_crds::segment_counter::{
        QUEUED_LIMIT_ANNOTATION, QUEUED_START_ANNOTATION, RANGE_LIMIT_ANNOTATION, take,
    };
    let mut lease = new_counter("orders", "ns", 1000);
    lease.metadata.resource_version = Some("5".into());
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (k, v) in [
        (FORMAT_ANNOTATION, "3"),
        (RANGE_LIMIT_ANNOTATION, "1000"),
        (QUEUED_START_ANNOTATION, "5000"),
        (QUEUED_LIMIT_ANNOTATION, "6000"),
    ] {
        annotations.insert(k.into(), v.into());
    }
    let plain = {
        let mut l = new_counter("orders", "ns", 7);
        l.metadata.resource_version = Some("5".into());
        l
    };
    for (lease, want) in [
        (
            lease,
            json!({NEXT_ANNOTATION: "5010", CLAIMS_ANNOTATION: "1"}),
        ),
        (
            plain,
            json!({NEXT_ANNOTATION: "17", CLAIMS_ANNOTATION: "1"}),
        ),
    ] {
        let body = serde_json::to_value(&lease).unwrap();
        let api = FakeApi::answering(move |_, _, _| (200, body.clone()));
        let counter = LeaseCounter::new(api.client(), "ns", "orders");
        let seen = counter.read().await.unwrap();
        let taken = take(&seen, 10, 0).unwrap();
        counter
            .compare_and_swap(&seen, taken.counter)
            .await
            .unwrap();
        let patch = api.seen().pop().unwrap().body;
        assert_eq!(patch["metadata"]["annotations"], want);
        assert_eq!(patch["metadata"]["resourceVersion"], "5");
    }
}

/// Rule 16: a Lease with the counter's name that a tenant made before the operator
/// (no kubeflake label, so the Lease policy never guarded it) is not the counter: the
/// sidecar claims nothing from it, whatever `next` it says, and says what to do.
#[tokio::test]
async fn rule16_a_counter_lease_a_tenant_precreated_is_never_claimed_from() {
    let mut forged = new_counter("orders", "ns", 7);
    forged.metadata.labels = None;
    let body = serde_json::to_value(&forged).unwrap();
    let seen = FakeApi::answering(move |_, _, _| (200, body.clone()));
    let client = seen.client();
    let err = LeaseCounter::new(client, "ns", "orders")
        .read()
        .await
        .unwrap_err();
    let StoreError::Corrupt(message) = err else {
        panic!("another error: {err}");
    };
    for part in [
        "orders-segment-counter",
        "not made by kubeflake",
        "Delete Lease",
    ] {
        assert!(message.contains(part), "{part:?}: {message}");
    }
    assert_eq!(seen.seen().len(), 1, "one read, no write");
}
