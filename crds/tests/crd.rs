//! The checked-in CRD matches the Rust types, and its CEL rules say what they should.
//! (The same rules are checked against a real API server in e2e/tests/.)

use kube::CustomResourceExt;
use kubeflake_crds::sequence::{
    IdSequence, IdSequenceSpec, LayoutSpec, Mode, SegmentSpec, SpecError,
};
use serde_json::{Value, json};

/// How to regenerate both checked-in copies of the CRD.
const REGENERATE: &str = "run `cargo run -p kubeflake-crds --bin crdgen crds/idsequence.yaml charts/kubeflake/crds/idsequence.yaml`";

#[test]
fn checked_in_crd_yaml_equals_what_the_code_generates() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/idsequence.yaml");
    let checked_in = std::fs::read_to_string(path).expect("crds/idsequence.yaml exists");
    assert!(
        checked_in == kubeflake_crds::crd_yaml(),
        "crds/idsequence.yaml is stale: {REGENERATE}"
    );
}

#[test]
fn helm_chart_crd_equals_what_the_code_generates() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/kubeflake/crds/idsequence.yaml"
    );
    let in_chart =
        std::fs::read_to_string(path).expect("charts/kubeflake/crds/idsequence.yaml exists");
    assert!(
        in_chart == kubeflake_crds::crd_yaml(),
        "charts/kubeflake/crds/idsequence.yaml differs from the CRD the code generates: {REGENERATE}"
    );
}

#[test]
fn crd_is_namespaced_with_short_name_and_status() {
    let crd = IdSequence::crd();
    assert_eq!(crd.spec.group, "kubeflake.io");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["idseq".to_string()]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
}

fn object(spec: Value) -> Value {
    json!({"apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
           "metadata": {"name": "orders"}, "spec": spec})
}

fn full_spec() -> Value {
    serde_json::to_value(IdSequenceSpec::default()).unwrap()
}

fn schema() -> Value {
    serde_json::to_value(
        IdSequence::crd().spec.versions[0]
            .schema
            .clone()
            .unwrap()
            .open_api_v3_schema
            .unwrap(),
    )
    .unwrap()
}

fn cel_errors(new: Value, old: Option<Value>) -> String {
    match kube::core::cel::Validator::new().validate(&schema(), &new, old.as_ref()) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn default_spec_passes_every_rule_and_is_a_valid_layout() {
    assert_eq!(cel_errors(object(full_spec()), None), "");
    let params = IdSequenceSpec::default().params().unwrap();
    assert_eq!(params.layout.slot_count(), 1024);
}

#[test]
fn cel_rejects_layout_bits_that_do_not_add_up() {
    let mut spec = full_spec();
    spec["layout"]["sequenceBits"] = json!(11);
    let errors = cel_errors(object(spec), None);
    assert!(errors.contains("must add up to totalBits"), "{errors}");
}

#[test]
fn cel_rejects_datacenter_id_too_large_for_its_bits() {
    let mut spec = full_spec();
    spec["layout"]["datacenterBits"] = json!(2);
    spec["layout"]["workerBits"] = json!(8);
    spec["datacenterId"] = json!(4);
    let errors = cel_errors(object(spec.clone()), None);
    assert!(errors.contains("datacenterId does not fit"), "{errors}");
    spec["datacenterId"] = json!(3);
    assert_eq!(cel_errors(object(spec), None), "");
}

#[test]
fn cel_rejects_an_epoch_that_is_not_rfc3339() {
    for bad in ["2025-01-01", "yesterday", "1969-12-31T23:59:59Z"] {
        let mut spec = full_spec();
        spec["epoch"] = json!(bad);
        let errors = cel_errors(object(spec), None);
        assert!(
            errors.contains("epoch must be an RFC 3339 time"),
            "{bad}: {errors}"
        );
    }
}

#[test]
fn cel_rejects_changes_to_layout_epoch_time_unit_and_datacenter() {
    let old = object(full_spec());
    let changes = [
        (
            "layout",
            json!({"timestampBits": 40, "datacenterBits": 0, "workerBits": 11, "sequenceBits": 12, "totalBits": 63}),
        ),
        ("epoch", json!("2024-01-01T00:00:00Z")),
        ("timeUnit", json!("10ms")),
        ("datacenterId", json!(1)),
    ];
    for (field, value) in changes {
        let mut spec = full_spec();
        spec[field] = value;
        if field == "datacenterId" {
            spec["layout"] = json!({"timestampBits": 41, "datacenterBits": 1, "workerBits": 9, "sequenceBits": 12, "totalBits": 63});
        }
        let errors = cel_errors(object(spec), Some(old.clone()));
        assert!(
            errors.contains(&format!("{field} is immutable")),
            "{field}: {errors}"
        );
    }
    let mut lease_change = full_spec();
    lease_change["lease"]["durationSeconds"] = json!(60);
    assert_eq!(
        cel_errors(object(lease_change), Some(old)),
        "",
        "lease settings may change"
    );
}

#[test]
fn spec_from_yaml_uses_defaults_for_missing_fields() {
    let seq: IdSequence = serde_saphyr::from_str(
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\nspec:\n  layout: {workerBits: 8, sequenceBits: 14}\n",
    )
    .unwrap();
    assert_eq!(
        seq.spec.layout,
        LayoutSpec {
            worker_bits: 8,
            sequence_bits: 14,
            ..LayoutSpec::default()
        }
    );
    assert_eq!(seq.spec.epoch, "2025-01-01T00:00:00Z");
    assert!(seq.spec.params().is_ok());
}

#[test]
fn mode_defaults_to_snowflake_and_a_segment_spec_gets_its_defaults() {
    let seq: IdSequence = serde_saphyr::from_str(
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\nspec: {}\n",
    )
    .unwrap();
    assert_eq!(seq.spec.mode, Mode::Snowflake);
    assert_eq!(seq.spec.segment_params().unwrap(), None);
    let seq: IdSequence = serde_saphyr::from_str(
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\nspec: {mode: Segment}\n",
    )
    .unwrap();
    let p = seq.spec.segment_params().unwrap().unwrap();
    assert_eq!((p.start, p.block_size, p.max_block_size), (1, 1000, 1000));
    assert_eq!((p.prefetch_percent, p.target_claim_interval_secs), (10, 60));
}

fn segment_spec(segment: Value) -> Value {
    let mut spec = full_spec();
    spec["mode"] = json!("Segment");
    spec["segment"] = segment;
    spec
}

#[test]
fn cel_accepts_a_full_segment_spec() {
    let spec = segment_spec(json!({"start": 0, "blockSize": 100, "maxBlockSize": 100000,
                                   "prefetchPercent": 20, "targetClaimIntervalSeconds": 30}));
    assert_eq!(cel_errors(object(spec), None), "");
}

#[test]
fn cel_rejects_a_segment_spec_while_mode_is_snowflake() {
    let mut spec = full_spec();
    spec["segment"] = json!({"blockSize": 100, "start": 1, "prefetchPercent": 10, "targetClaimIntervalSeconds": 60});
    let errors = cel_errors(object(spec.clone()), None);
    assert!(
        errors.contains("segment is set but mode is Snowflake"),
        "{errors}"
    );
    let typed: IdSequenceSpec = serde_json::from_value(spec).unwrap();
    assert!(matches!(
        typed.segment_params(),
        Err(SpecError::SegmentWithoutMode)
    ));
}

#[test]
fn cel_rejects_max_block_size_below_block_size() {
    let spec = segment_spec(json!({"start": 1, "blockSize": 1000, "maxBlockSize": 10,
                                   "prefetchPercent": 10, "targetClaimIntervalSeconds": 60}));
    let errors = cel_errors(object(spec.clone()), None);
    assert!(
        errors.contains("segment.maxBlockSize (10) is below segment.blockSize (1000)"),
        "{errors}"
    );
    let typed: IdSequenceSpec = serde_json::from_value(spec).unwrap();
    let err = typed.segment_params().unwrap_err().to_string();
    assert!(
        err.contains("maxBlockSize is 10, but it must be at least blockSize"),
        "{err}"
    );
}

#[test]
fn schema_bounds_segment_numbers() {
    let schema = schema();
    let segment = &schema["properties"]["spec"]["properties"]["segment"]["properties"];
    assert_eq!(segment["start"]["minimum"], json!(0.0));
    assert_eq!(segment["blockSize"]["minimum"], json!(1.0));
    assert_eq!(segment["prefetchPercent"]["minimum"], json!(1.0));
    assert_eq!(segment["prefetchPercent"]["maximum"], json!(90.0));
    let typed = SegmentSpec {
        prefetch_percent: 95,
        ..SegmentSpec::default()
    };
    assert!(
        typed
            .params()
            .unwrap_err()
            .to_string()
            .contains("prefetchPercent is 95")
    );
}

#[test]
fn cel_rejects_changing_the_mode() {
    let old = object(full_spec());
    let errors = cel_errors(
        object(segment_spec(
            json!({"start": 1, "blockSize": 1000, "prefetchPercent": 10, "targetClaimIntervalSeconds": 60}),
        )),
        Some(old),
    );
    assert!(errors.contains("mode is immutable"), "{errors}");
    let old = object(segment_spec(
        json!({"start": 1, "blockSize": 1000, "prefetchPercent": 10, "targetClaimIntervalSeconds": 60}),
    ));
    let new = object(segment_spec(
        json!({"start": 1, "blockSize": 5000, "prefetchPercent": 10, "targetClaimIntervalSeconds": 60}),
    ));
    assert_eq!(
        cel_errors(new, Some(old)),
        "",
        "segment settings may change"
    );
}

#[test]
fn cel_accepts_a_strict_segment_sequence_and_rejects_max_block_size_with_it() {
    let strict = segment_spec(json!({"start": 1, "blockSize": 1000, "prefetchPercent": 10,
                                     "targetClaimIntervalSeconds": 60, "strict": true}));
    assert_eq!(cel_errors(object(strict.clone()), None), "");
    let typed: IdSequenceSpec = serde_json::from_value(strict).unwrap();
    assert!(typed.segment_params().unwrap().unwrap().strict);

    let with_max = segment_spec(json!({"start": 1, "blockSize": 1000, "maxBlockSize": 5000,
                                       "prefetchPercent": 10, "targetClaimIntervalSeconds": 60,
                                       "strict": true}));
    let errors = cel_errors(object(with_max.clone()), None);
    assert!(
        errors.contains("segment.maxBlockSize has no effect with strict: true"),
        "{errors}"
    );
    let typed: IdSequenceSpec = serde_json::from_value(with_max).unwrap();
    assert!(matches!(
        typed.segment_params(),
        Err(SpecError::StrictWithMaxBlockSize)
    ));
}

/// docs/safety.md rule 13: blocks and strict values would interleave.
#[test]
fn cel_rejects_turning_strict_on_or_off() {
    let segment = |strict: Option<bool>| {
        let mut s = json!({"start": 1, "blockSize": 1000, "prefetchPercent": 10,
                           "targetClaimIntervalSeconds": 60});
        if let Some(strict) = strict {
            s["strict"] = json!(strict);
        }
        object(segment_spec(s))
    };
    let no_segment = || {
        let mut spec = full_spec();
        spec["mode"] = json!("Segment");
        object(spec)
    };
    let cases = [
        (segment(Some(false)), segment(Some(true))),
        (segment(Some(true)), segment(Some(false))),
        (segment(None), segment(Some(true))),
        (no_segment(), segment(Some(true))),
        (segment(Some(true)), no_segment()),
    ];
    for (old, new) in cases {
        let errors = cel_errors(new.clone(), Some(old.clone()));
        assert!(
            errors.contains("segment.strict is immutable"),
            "{old} -> {new}: {errors}"
        );
    }
    // Unchanged, or only other settings changed: accepted.
    assert_eq!(
        cel_errors(segment(Some(true)), Some(segment(Some(true)))),
        ""
    );
    assert_eq!(cel_errors(segment(None), Some(segment(Some(false)))), "");
    assert_eq!(cel_errors(no_segment(), Some(segment(None))), "");
}

#[test]
fn the_charts_lease_policy_spec_equals_what_the_code_generates() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/kubeflake/files/lease-policy-spec.yaml"
    );
    let in_chart = std::fs::read_to_string(path)
        .expect("charts/kubeflake/files/lease-policy-spec.yaml exists");
    assert!(
        in_chart == kubeflake_crds::lease_policy::spec_yaml(),
        "charts/kubeflake/files/lease-policy-spec.yaml is stale: run `cargo run -p kubeflake-crds \
         --bin policygen -- charts/kubeflake/files/lease-policy-spec.yaml`"
    );
}

/// The chart fills the spec's placeholders by text (`replace` in
/// templates/lease-policy.yaml, the groups as `toJson`): the result must still be YAML that
/// reads as the policy the code builds for those names, whatever quoting the serializer
/// chose (a JSON list dropped into a double-quoted scalar would not be).
#[test]
fn the_charts_text_substitution_yields_the_policy_the_code_builds() {
    use kubeflake_crds::lease_policy::{
        EXEMPT_GROUPS_PLACEHOLDER, OPERATOR_PLACEHOLDER, policy, spec_yaml,
    };
    let operator = "system:serviceaccount:kubeflake-system:kubeflake-operator";
    let groups = ["system:masters", "ops \"on call\""];
    let rendered = spec_yaml().replace(OPERATOR_PLACEHOLDER, operator).replace(
        EXEMPT_GROUPS_PLACEHOLDER,
        &serde_json::to_string(&groups).unwrap(),
    );
    let read: Value = serde_saphyr::from_str(&rendered).expect("the rendered spec is YAML");
    let built = serde_json::to_value(policy("p", operator, &groups).spec.unwrap()).unwrap();
    assert_eq!(read, built);
}

/// Rule 15: the strict oracle's rules are added beside the previous release's, never in
/// their place. Every variable and validation of the policy 0.2.0 shipped
/// (`tests/fixtures/lease-policy-spec-0.2.0.yaml`) is still there, word for word, so slot
/// Leases and counters are allowed and refused as before, during an upgrade and after; the
/// match only widens (every label it matched is still matched).
#[test]
fn rule15_the_lease_policy_keeps_every_rule_of_0_2_0_and_only_widens_what_it_matches() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/lease-policy-spec-0.2.0.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the 0.2.0 policy fixture");
    let old: Value = serde_saphyr::from_str(&text).expect("YAML");
    let new: Value =
        serde_saphyr::from_str(&kubeflake_crds::lease_policy::spec_yaml()).expect("YAML");
    for list in ["variables", "validations"] {
        let now = new[list].as_array().expect(list);
        for item in old[list].as_array().expect(list) {
            assert!(
                now.contains(item),
                "{list}: 0.2.0's {item} is gone or changed"
            );
        }
    }
    for same in ["failurePolicy", "matchConstraints"] {
        assert_eq!(old[same], new[same], "{same}");
    }
    let condition = |spec: &Value| {
        spec["matchConditions"][0]["expression"]
            .as_str()
            .map(String::from)
    };
    let (was, is) = (
        condition(&old).expect("0.2.0 match"),
        condition(&new).expect("match"),
    );
    for label in ["kubeflake.io/sequence", "kubeflake.io/segment-counter"] {
        assert!(was.contains(label) && is.contains(label), "{label}: {is}");
    }
}
