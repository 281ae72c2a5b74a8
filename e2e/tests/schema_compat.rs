//! The IdSequence schema stays compatible with the previous release's (docs/api-versions.md,
//! "What is promised within v1alpha1"): objects stored under the previous release keep
//! their meaning and stay valid. Compared with the CRD in the previous release's commit
//! (`releases.txt`, read with `git show`), every version it served is still served, and in
//! each: no property is removed or retyped, no default changes, no enum value goes away,
//! and no property becomes required. A change that needs any of these is a new API version
//! with conversion, not an edit of v1alpha1. (No cluster: it lives in e2e for the one
//! reader of releases.txt, `kubeflake_e2e::release`.)

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const CRD: &str = "charts/kubeflake/crds/idsequence.yaml";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The newest `<version> <commit>` of releases.txt.
fn previous_release() -> (String, String) {
    kubeflake_e2e::release::previous_point().expect("releases.txt lists a release")
}

fn previous_crd(commit: &str) -> Value {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo())
        .args(["show", &format!("{commit}:{CRD}")])
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git show {commit}:{CRD}: {} (the release's commit must be in this clone's history)",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_slice(&out.stdout).expect("the previous CRD is YAML")
}

fn current_crd() -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo().join(CRD)).expect("CRD")).expect("YAML")
}

/// name -> openAPIV3Schema of every served version.
fn served(crd: &Value) -> Vec<(String, Value)> {
    crd["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter(|v| v["served"].as_bool() == Some(true))
        .map(|v| {
            (
                v["name"].as_str().expect("name").to_owned(),
                v["schema"]["openAPIV3Schema"].clone(),
            )
        })
        .collect()
}

/// Every way `new` breaks objects valid under `old`, with the path of each.
fn incompatibilities(path: &str, old: &Value, new: &Value, found: &mut Vec<String>) {
    if new.is_null() {
        found.push(format!("{path}: removed"));
        return;
    }
    if old["type"] != new["type"] {
        found.push(format!(
            "{path}: type {:?} became {:?}",
            old["type"], new["type"]
        ));
    }
    if old["default"] != new["default"] {
        found.push(format!(
            "{path}: default {:?} became {:?} (stored objects were created with the old one)",
            old["default"], new["default"]
        ));
    }
    if let Some(values) = old["enum"].as_array() {
        let kept = new["enum"].as_array().cloned().unwrap_or_default();
        for v in values.iter().filter(|v| !kept.contains(v)) {
            found.push(format!("{path}: enum value {v:?} removed"));
        }
    }
    let required = |s: &Value| -> Vec<String> {
        s["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .collect()
    };
    let was = required(old);
    for r in required(new).into_iter().filter(|r| !was.contains(r)) {
        found.push(format!("{path}: {r} became required"));
    }
    if let Some(props) = old["properties"].as_object() {
        for (name, old_prop) in props {
            let name = name.as_str();
            incompatibilities(
                &format!("{path}.{name}"),
                old_prop,
                &new["properties"][name],
                found,
            );
        }
    }
    if !old["items"].is_null() {
        incompatibilities(&format!("{path}[]"), &old["items"], &new["items"], found);
    }
}

fn check(old: &Value, new: &Value) -> Vec<String> {
    let now = served(new);
    let mut found = Vec::new();
    for (version, old_schema) in served(old) {
        match now.iter().find(|(v, _)| *v == version) {
            None => found.push(format!("{version}: no longer served")),
            Some((_, new_schema)) => {
                incompatibilities(&version, &old_schema, new_schema, &mut found)
            }
        }
    }
    found
}

#[test]
fn the_schema_keeps_every_field_type_default_and_enum_value_of_the_previous_release() {
    let (version, commit) = previous_release();
    let found = check(&previous_crd(&commit), &current_crd());
    assert!(
        found.is_empty(),
        "the IdSequence schema breaks objects stored under {version} ({commit}); add a new \
         API version with conversion instead (docs/api-versions.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_catches_a_renamed_field_a_changed_default_and_a_new_required_field() {
    let (_, commit) = previous_release();
    let old = previous_crd(&commit);
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    let edit = |change: &dyn Fn(&mut Value)| -> Vec<String> {
        let mut json = old.clone();
        change(json.pointer_mut(spec).expect("spec schema"));
        check(&old, &json)
    };
    let renamed = edit(&|s| {
        let epoch = s["properties"]["epoch"].take();
        s["properties"].as_object_mut().unwrap().remove("epoch");
        s["properties"]["epochTime"] = epoch;
    });
    assert!(
        renamed.iter().any(|f| f == "v1alpha1.spec.epoch: removed"),
        "{renamed:?}"
    );
    let default =
        edit(&|s| s["properties"]["layout"]["properties"]["workerBits"]["default"] = 16.into());
    assert!(
        default
            .iter()
            .any(|f| f.starts_with("v1alpha1.spec.layout.workerBits: default")),
        "{default:?}"
    );
    let required = edit(&|s| s["required"] = serde_json::json!(["epoch"]));
    assert!(
        required
            .iter()
            .any(|f| f == "v1alpha1.spec: epoch became required"),
        "{required:?}"
    );
    let retyped = edit(&|s| s["properties"]["datacenterId"]["type"] = "string".into());
    assert!(
        retyped.iter().any(|f| f.contains("datacenterId: type")),
        "{retyped:?}"
    );
}
