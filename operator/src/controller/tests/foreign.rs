//! Rule 16 (docs/safety.md): a Lease with the name of one of a sequence's Leases that
//! kubeflake did not make (a tenant with Lease `create` rights made it first, without the
//! kubeflake label the Lease policy guards by) is refused, reported and never adopted:
//! the operator neither writes nor deletes it, says which Lease and what to do in a
//! condition and a Warning Event (once), counts it, and gives a waiting pod another slot.

use super::*;
use kubeflake_crds::segment_counter::{CLAIMANTS_ANNOTATION, new_counter};
use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
use kubeflake_crds::strict_oracle::{ADDRESS_ANNOTATION, new_oracle_lease};

const COUNTER: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-segment-counter";
const ORACLE: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-strict-oracle";
const SLOT_0: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders-slot-0";

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

/// What a tenant creates: the name, no kubeflake label, no owner.
fn tenants(mut lease: Lease) -> Lease {
    lease.metadata.labels = None;
    lease.metadata.owner_references = None;
    lease.metadata.resource_version = Some("3".into());
    lease
}

/// The Warning Events of `reason` the passes recorded.
fn warnings(api: &FakeApi, reason: &str) -> usize {
    api.seen()
        .iter()
        .filter(|s| {
            s.path.contains("/events") && s.body["reason"] == reason && s.body["type"] == "Warning"
        })
        .count()
}

fn last_condition(
    api: &FakeApi,
    type_: ConditionType,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    status_patches(api)
        .iter()
        .rev()
        .find_map(|s| condition(Some(s), type_).cloned())
        .unwrap_or_else(|| panic!("no {} condition written", type_.as_str()))
}

fn found(f: &Fixture, kind: &str) -> u64 {
    f.ctx.metrics.foreign_found.with_label_values(&[kind]).get()
}

#[tokio::test]
async fn rule16_an_unlabelled_counter_lease_precreated_by_a_tenant_is_refused_and_never_adopted() {
    let seq = segment(false);
    // The tenant's "counter" starts at 1, below spec.segment.start: adopted, it would be
    // raised and claimed from, and its creator could lower it again (values repeat).
    let forged = tenants(new_counter(SEQ, NS, 1));
    let mut own = new_counter(SEQ, NS, 1000);
    own.metadata.resource_version = Some("9".into());
    let api = FakeApi::new()
        .expect(Method::GET, COUNTER, 200, json!(forged))
        .expect(Method::GET, COUNTER, 200, json!(forged))
        // Then a person deletes it: the operator creates its own at spec.segment.start.
        .expect(
            Method::GET,
            COUNTER,
            404,
            failure(404, "NotFound", "deleted"),
        )
        .expect(Method::GET, SEQUENCE, 200, echo(&seq))
        .expect(Method::POST, LEASES, 201, json!(own))
        .expect(Method::PATCH, COUNTER, 200, json!(own))
        .always(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    for _ in 0..2 {
        let action = reconcile(Arc::new(seq.clone()), f.ctx.clone())
            .await
            .expect("a refusal is reported, not failed");
        assert_eq!(action, Action::requeue(Duration::from_secs(15)));
    }
    assert_eq!(
        lease_writes(&api),
        Vec::<String>::new(),
        "never raised, listed, created over or deleted"
    );
    let ready = last_condition(&api, ConditionType::Ready);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ForeignLease")
    );
    for part in [
        "orders-segment-counter",
        "not made by kubeflake",
        "Delete Lease orders-segment-counter",
    ] {
        assert!(ready.message.contains(part), "{part:?}: {}", ready.message);
    }
    let foreign = last_condition(&api, ConditionType::ForeignLeases);
    assert_eq!(
        (foreign.status.as_str(), foreign.reason.as_str()),
        ("True", "ForeignLease")
    );
    assert_eq!(
        warnings(&api, "ForeignLease"),
        1,
        "reported once, not per pass"
    );
    assert_eq!(found(&f, "segment_counter"), 1);
    assert!(
        f.ctx
            .metrics
            .render()
            .contains("kubeflake_operator_foreign_leases 1"),
    );

    // The sequence as the refusals left it.
    let mut refused = seq.clone();
    refused.status = status_patches(&api).pop();
    reconcile(Arc::new(refused), f.ctx.clone())
        .await
        .expect("the pass after the tenant's Lease was deleted");
    api.verify();
    let created = api.requests(&Method::POST, LEASES);
    assert_eq!(
        created[0].body["metadata"]["labels"]["kubeflake.io/segment-counter"],
        SEQ
    );
    let foreign = last_condition(&api, ConditionType::ForeignLeases);
    assert_eq!(
        (foreign.status.as_str(), foreign.reason.as_str()),
        ("False", "NoForeignLease")
    );
    let ready = last_condition(&api, ConditionType::Ready);
    assert_eq!(ready.reason, "CounterReady");
    assert!(
        f.ctx
            .metrics
            .render()
            .contains("kubeflake_operator_foreign_leases 0"),
    );
}

#[tokio::test]
async fn rule16_an_oracle_lease_precreated_by_a_tenant_is_refused_and_never_adopted() {
    let seq = segment(true);
    let mut counter = new_counter(SEQ, NS, 1000);
    let annotations = counter
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(FORMAT_ANNOTATION.into(), "2".into());
    annotations.insert(CLAIMANTS_ANNOTATION.into(), "uid-a".into());
    counter.metadata.resource_version = Some("7".into());
    // Unlabelled (a tenant's), and labelled but owned by another object: neither is the
    // sequence's. Adopted, the first would get the claimants listed, and its creator could
    // point kubeflake.io/oracle-address at a listener of its own.
    let mut unlabelled = tenants(new_oracle_lease(SEQ, NS));
    unlabelled
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ADDRESS_ANNOTATION.into(), "10.9.9.9:7072".into());
    let mut not_owned = new_oracle_lease(SEQ, NS);
    not_owned.metadata.resource_version = Some("4".into());
    let mut other_owner = owner();
    other_owner["uid"] = json!("another-uid");
    not_owned.metadata.owner_references =
        Some(vec![serde_json::from_value(other_owner).expect("an owner")]);
    for forged in [unlabelled, not_owned] {
        let api = FakeApi::new()
            .always(Method::GET, COUNTER, 200, json!(counter))
            .always(Method::GET, ORACLE, 200, json!(forged))
            .expect(Method::PATCH, STATUS, 200, echo(&seq));
        let f = fixture(&api, vec![pod("a")], vec![]);
        reconcile(Arc::new(seq.clone()), f.ctx.clone())
            .await
            .expect("a refusal is reported, not failed");
        api.verify();
        assert_eq!(lease_writes(&api), Vec::<String>::new(), "{forged:?}");
        let ready = last_condition(&api, ConditionType::Ready);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ForeignLease")
        );
        assert!(
            ready.message.contains("Delete Lease orders-strict-oracle"),
            "{}",
            ready.message
        );
        assert_eq!(warnings(&api, "ForeignLease"), 1);
        assert_eq!(found(&f, "strict_oracle"), 1);
    }
}

#[tokio::test]
async fn rule16_a_slot_lease_precreated_by_a_tenant_is_skipped_and_the_waiting_pod_gets_the_next_slot()
 {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let mut forged = tenants(slot_lease(None, 0));
    forged.metadata.annotations = None;
    let mut given = held_slot_lease(1, "a");
    given.metadata.resource_version = Some("8".into());
    let api = FakeApi::new()
        // Pass 1: slot 0's name is taken; the read shows a Lease kubeflake did not make.
        .expect(
            Method::POST,
            LEASES,
            409,
            failure(
                409,
                "AlreadyExists",
                "leases \"orders-slot-0\" already exists",
            ),
        )
        .expect(Method::GET, SLOT_0, 200, json!(forged))
        // Pass 2: the pod gets the next slot.
        .expect(Method::POST, LEASES, 201, json!(given))
        .always(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![]);
    let first = reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("pass 1");
    assert_eq!(
        first,
        Action::requeue(Duration::from_millis(500)),
        "planned again soon"
    );
    reconcile(Arc::new(seq.clone()), f.ctx.clone())
        .await
        .expect("pass 2");
    api.verify();
    let creates = api.requests(&Method::POST, LEASES);
    let names: Vec<&str> = creates
        .iter()
        .map(|c| c.body["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["orders-slot-0", "orders-slot-1"]);
    assert_eq!(creates[1].body["spec"]["holderIdentity"], "uid-a");
    assert!(
        lease_writes(&api)
            .iter()
            .all(|w| !w.ends_with("/orders-slot-0")),
        "the tenant's Lease is neither written nor deleted: {:?}",
        lease_writes(&api)
    );
    assert_eq!(f.ctx.metrics.assignments.get(), 1);
    assert_eq!(f.ctx.metrics.conflicts.get(), 0, "not a lost race");
    assert_eq!(found(&f, "slot"), 1);
    assert_eq!(warnings(&api, "ForeignLease"), 1, "reported once");
    let foreign = last_condition(&api, ConditionType::ForeignLeases);
    assert_eq!(
        (foreign.status.as_str(), foreign.reason.as_str()),
        ("True", "ForeignLease")
    );
    assert!(
        foreign.message.contains("orders-slot-0"),
        "{}",
        foreign.message
    );
}

#[tokio::test]
async fn rule16_a_labelled_slot_lease_the_sequence_does_not_own_is_never_planned_written_or_deleted()
 {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    // Labelled for "orders" (the policy would have let only the operator or an exempt
    // user make it), held by a pod that is gone, owned by an earlier sequence's UID.
    let mut leftover = slot_lease(Some("gone"), 5);
    let mut other_owner = owner();
    other_owner["uid"] = json!("earlier-uid");
    leftover.metadata.owner_references =
        Some(vec![serde_json::from_value(other_owner).expect("an owner")]);
    let api = FakeApi::new()
        .expect(Method::POST, LEASES, 201, json!(held_slot_lease(1, "a")))
        .always(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![pod("a")], vec![leftover]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("a pass");
    api.verify();
    let creates = api.requests(&Method::POST, LEASES);
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].body["metadata"]["name"], "orders-slot-1");
    assert_eq!(found(&f, "slot"), 1);
    assert_eq!(warnings(&api, "ForeignLease"), 1);
}
