//! The ID space's generated objects (docs/design/2026-11-29-multicluster.md): the checked-in
//! `IdSpace` and `IdSpaceMembership` CRDs and the hub's policy equal what the code
//! generates, and the CRDs' CEL rules refuse what they should, saying which field to fix.
//! (The same rules, the list keys and the policy are checked against a real API server in
//! e2e/tests/id_space_objects.rs.)

use kube::CustomResourceExt;
use kubeflake_crds::id_space::{self, IdSpace, IdSpaceMembership, IdSpaceSpec, hub_policy};
use serde_json::{Value, json};

fn checked_in(file: &str) -> String {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("crds/{file}: {e}"))
}

#[test]
fn checked_in_idspace_crd_equals_what_the_code_generates() {
    assert!(
        checked_in("idspace.yaml") == id_space::crd_yaml(),
        "crds/idspace.yaml is stale: run `cargo run -p kubeflake-crds --bin crdgen -- --idspace crds/idspace.yaml`"
    );
}

#[test]
fn checked_in_idspacemembership_crd_equals_what_the_code_generates() {
    assert!(
        checked_in("idspacemembership.yaml") == id_space::membership_crd_yaml(),
        "crds/idspacemembership.yaml is stale: run `cargo run -p kubeflake-crds --bin crdgen -- --membership crds/idspacemembership.yaml charts/kubeflake/crds/idspacemembership.yaml`"
    );
}

#[test]
fn the_charts_idspacemembership_crd_equals_what_the_code_generates() {
    assert!(
        checked_in("../charts/kubeflake/crds/idspacemembership.yaml")
            == id_space::membership_crd_yaml(),
        "charts/kubeflake/crds/idspacemembership.yaml differs from the CRD the code generates: run `cargo run -p kubeflake-crds --bin crdgen -- --membership crds/idspacemembership.yaml charts/kubeflake/crds/idspacemembership.yaml`"
    );
}

#[test]
fn checked_in_hub_policy_equals_what_the_code_generates() {
    assert!(
        checked_in("idspace-hub-policy.yaml") == hub_policy::policy_yaml(),
        "crds/idspace-hub-policy.yaml is stale: run `cargo run -p kubeflake-crds --bin policygen -- --hub crds/idspace-hub-policy.yaml`"
    );
}

#[test]
fn both_crds_are_namespaced_v1alpha1_and_only_the_membership_has_a_status() {
    let space = IdSpace::crd();
    let membership = IdSpaceMembership::crd();
    for crd in [&space, &membership] {
        assert_eq!(crd.spec.group, "kubeflake.io");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
    }
    // The registry is authoritative state written by members, so it lives in spec.
    assert!(space.spec.versions[0].subresources.is_none());
    let status = membership.spec.versions[0].subresources.as_ref();
    assert!(status.and_then(|s| s.status.as_ref()).is_some());
}

/// A change to a valid spec, and what the refusal must say.
type Case = (fn(&mut Value), &'static str);

fn schema<K: CustomResourceExt>() -> Value {
    serde_json::to_value(
        K::crd().spec.versions[0]
            .schema
            .clone()
            .unwrap()
            .open_api_v3_schema,
    )
    .unwrap()
}

fn cel_errors<K: CustomResourceExt>(new: &Value, old: Option<&Value>) -> String {
    match kube::core::cel::Validator::new().validate(&schema::<K>(), new, old) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

/// A valid IdSpace over the default layout (16 blocks of 64), one member holding block 0.
fn space(spec_changes: impl FnOnce(&mut Value)) -> Value {
    let mut spec = serde_json::to_value(IdSpaceSpec::new(Default::default(), 64)).unwrap();
    spec["registry"] = json!({
        "revision": 2,
        "members": [{"id": "0b6c2a4e-1111-2222-3333-444455556666", "name": "prod", "datacenterId": 0, "generation": 2}],
        "blocks": [{"index": 0, "term": 1, "floor": 0, "owner": "0b6c2a4e-1111-2222-3333-444455556666", "bound": 1000}],
    });
    spec_changes(&mut spec);
    json!({"apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpace",
           "metadata": {"name": "orders"}, "spec": spec})
}

#[test]
fn a_valid_space_passes_every_rule() {
    assert_eq!(cel_errors::<IdSpace>(&space(|_| {}), None), "");
}

#[test]
fn the_parameters_out_of_range_are_refused_naming_the_field_and_the_limit() {
    let cases: [Case; 6] = [
        (|s| s["blockSlots"] = json!(48), "must be a power of two"),
        (
            |s| s["blockSlots"] = json!(2048),
            "larger than the slot space",
        ),
        (
            |s| {
                s["sequence"]["layout"] = json!({"timestampBits": 31, "datacenterBits": 10, "workerBits": 10, "sequenceBits": 12, "totalBits": 63});
                s["blockSlots"] = json!(128);
            },
            "more than the 4096",
        ),
        (
            |s| s["renewEverySeconds"] = json!(1801),
            "at most half of toleranceSeconds",
        ),
        (
            |s| s["sequence"]["strict"] = json!(true),
            "strict sequences cannot span clusters",
        ),
        (
            |s| s["registry"]["blocks"][0]["index"] = json!(16),
            "not below the space's block count",
        ),
    ];
    for (change, says) in cases {
        let errors = cel_errors::<IdSpace>(&space(change), None);
        assert!(errors.contains(says), "{says}: {errors}");
    }
}

#[test]
fn the_sequence_block_size_and_timing_are_immutable() {
    let old = space(|_| {});
    let cases: [Case; 4] = [
        (
            |s| s["sequence"]["epoch"] = json!("2024-01-01T00:00:00Z"),
            "sequence is immutable",
        ),
        (|s| s["blockSlots"] = json!(32), "blockSlots is immutable"),
        (
            |s| s["toleranceSeconds"] = json!(7200),
            "toleranceSeconds is immutable",
        ),
        (
            |s| s["renewEverySeconds"] = json!(600),
            "renewEverySeconds is immutable",
        ),
    ];
    for (change, says) in cases {
        let errors = cel_errors::<IdSpace>(&space(change), Some(&old));
        assert!(errors.contains(says), "{says}: {errors}");
    }
}

#[test]
fn registry_records_that_break_an_invariant_are_refused() {
    let cases: [Case; 4] = [
        (
            |s| s["registry"]["members"][0]["name"] = json!("Prod EU"),
            "must be a DNS label",
        ),
        (
            |s| s["registry"]["members"][0]["id"] = json!("Not An ID"),
            "must be a cluster ID",
        ),
        (
            |s| {
                s["registry"]["blocks"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("bound");
            },
            "an owner and a bound together",
        ),
        (
            |s| s["registry"]["blocks"][0]["bound"] = json!(0),
            "bound must be above its floor",
        ),
    ];
    for (change, says) in cases {
        let errors = cel_errors::<IdSpace>(&space(change), None);
        assert!(errors.contains(says), "{says}: {errors}");
    }
}

#[test]
fn a_floor_or_the_revision_never_goes_down() {
    let old = space(|s| s["registry"]["blocks"][0]["floor"] = json!(500));
    let lowered = space(|s| s["registry"]["blocks"][0]["floor"] = json!(400));
    let errors = cel_errors::<IdSpace>(&lowered, Some(&old));
    assert!(errors.contains("floor may not go down"), "{errors}");
    let older = space(|s| s["registry"]["revision"] = json!(1));
    let errors = cel_errors::<IdSpace>(&older, Some(&old));
    assert!(errors.contains("revision may not go down"), "{errors}");
}

#[test]
fn two_members_may_not_share_a_name() {
    let twins = space(|s| {
        s["registry"]["members"].as_array_mut().unwrap().push(
            json!({"id": "other-cluster", "name": "prod", "datacenterId": 0, "generation": 1}),
        );
    });
    let errors = cel_errors::<IdSpace>(&twins, None);
    assert!(errors.contains("two members share one name"), "{errors}");
}

fn membership(status: Value) -> Value {
    json!({"apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
           "metadata": {"name": "orders"},
           "spec": {"sequence": "orders", "memberName": "prod", "hubSecret": "kubeflake-hub-orders",
                    "space": {"namespace": "kubeflake-space-orders", "name": "orders"}},
           "status": status})
}

#[test]
fn the_copys_cluster_and_idspace_uid_are_write_once_and_the_space_is_immutable() {
    let old = membership(json!({"memberId": "cluster-a", "idSpaceUid": "uid-1"}));
    assert_eq!(cel_errors::<IdSpaceMembership>(&old, None), "");
    let adopted = membership(json!({"memberId": "cluster-b", "idSpaceUid": "uid-1"}));
    let errors = cel_errors::<IdSpaceMembership>(&adopted, Some(&old));
    assert!(errors.contains("status.memberId is write-once"), "{errors}");
    let replaced = membership(json!({"memberId": "cluster-a", "idSpaceUid": "uid-2"}));
    let errors = cel_errors::<IdSpaceMembership>(&replaced, Some(&old));
    assert!(
        errors.contains("status.idSpaceUid is write-once"),
        "{errors}"
    );
    let mut moved = membership(json!({}));
    moved["spec"]["space"]["name"] = json!("invoices");
    let errors = cel_errors::<IdSpaceMembership>(&moved, Some(&membership(json!({}))));
    assert!(errors.contains("space is immutable"), "{errors}");
}

/// docs/safety.md rule 22: a Segment space's counter is never removed (its `next` would
/// start again at 0, below values handed to members) nor lowered, by anyone.
#[test]
fn rule22_a_segment_spaces_counter_is_never_removed_or_lowered() {
    let segment = |next: Option<i64>| {
        space(|s| {
            s["sequence"]["mode"] = json!("Segment");
            if let Some(next) = next {
                s["segment"] = json!({"next": next});
            }
        })
    };
    let old = segment(Some(5000));
    assert_eq!(cel_errors::<IdSpace>(&old, None), "");
    assert_eq!(cel_errors::<IdSpace>(&segment(Some(6000)), Some(&old)), "");
    let errors = cel_errors::<IdSpace>(&segment(None), Some(&old));
    assert!(errors.contains("segment may not be removed"), "{errors}");
    let errors = cel_errors::<IdSpace>(&segment(Some(4000)), Some(&old));
    assert!(errors.contains("segment.next may not go down"), "{errors}");
    assert_eq!(
        cel_errors::<IdSpace>(&segment(Some(1)), Some(&segment(None))),
        "",
        "a counter may be added"
    );
}
