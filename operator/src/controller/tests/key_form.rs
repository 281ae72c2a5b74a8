//! Issue 25: a Snowflake sequence whose layout stores IDs in a key form (docs/layouts.md)
//! gives no slot to a pod injected before 0.2.0: its sidecar ignores the key-form fields and
//! would issue time-ordered IDs, other numbers than its sequence's other pods issue, which
//! could equal theirs (docs/safety.md, "Key forms and older sidecars").

use super::*;

fn injected(name: &str, version: &str) -> Pod {
    let mut p = pod(name);
    p.metadata.annotations = Some(
        [(
            kubeflake_crds::contract::INJECTED_ANNOTATION.to_string(),
            version.to_string(),
        )]
        .into(),
    );
    p
}

fn reversed() -> IdSequence {
    let mut spec = IdSequenceSpec::default();
    spec.layout.bit_reversed = true;
    sequence(spec, true, false)
}

#[tokio::test]
async fn rule15_a_pod_injected_by_0_1_gets_no_slot_of_a_sequence_with_a_key_form() {
    let seq = reversed();
    let api = FakeApi::new()
        .expect(Method::POST, LEASES, 201, json!(slot_lease(Some("new"), 0)))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(
        &api,
        vec![injected("old", "0.1.0"), injected("new", "0.2.0")],
        vec![],
    );
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("the pass succeeds");
    api.verify();
    let created: Vec<Value> = api
        .requests(&Method::POST, LEASES)
        .into_iter()
        .map(|r| r.body["spec"]["holderIdentity"].clone())
        .collect();
    assert_eq!(
        created,
        vec![json!("uid-new")],
        "only the 0.2.0 pod holds a slot"
    );
}

#[tokio::test]
async fn rule15_a_pod_injected_by_0_1_still_gets_a_slot_of_a_time_ordered_sequence() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let api = FakeApi::new()
        .expect(Method::POST, LEASES, 201, json!(slot_lease(Some("old"), 0)))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture(&api, vec![injected("old", "0.1.0")], vec![]);
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("the pass succeeds");
    api.verify();
    let created = api.requests(&Method::POST, LEASES);
    assert_eq!(created[0].body["spec"]["holderIdentity"], json!("uid-old"));
}
