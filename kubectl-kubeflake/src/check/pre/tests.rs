use super::*;
use crate::check::model::Mark;

#[test]
fn kubernetes_1_30_and_later_pass_and_older_fail_saying_what_the_chart_needs() {
    assert_eq!(judge_version("1", "30", "v1.30.0").mark, Mark::Ok);
    assert_eq!(judge_version("1", "35", "v1.35.4").mark, Mark::Ok);
    assert_eq!(judge_version("1", "31+", "v1.31.2-gke.1").mark, Mark::Ok);
    let old = judge_version("1", "29", "v1.29.9");
    assert_eq!(old.mark, Mark::Fail);
    assert!(old.detail.contains("v1.29.9"), "{}", old.detail);
    assert!(old.detail.contains("1.30 or later"), "{}", old.detail);
    assert!(old.hint.unwrap().contains("upgrade"));
}

#[test]
fn a_version_that_is_not_a_number_is_a_warning_not_a_guess() {
    let odd = judge_version("", "", "v0.0.0-master");
    assert_eq!(odd.mark, Mark::Warn);
}

fn all_served() -> BTreeMap<String, BTreeSet<String>> {
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for k in CHART_KINDS {
        served
            .entry(k.group_version.to_string())
            .or_default()
            .insert(k.resource.to_string());
    }
    served
}

#[test]
fn every_kind_of_the_chart_served_passes_and_a_missing_one_is_named() {
    assert_eq!(judge_served(&all_served()).mark, Mark::Ok);
    let mut served = all_served();
    if let Some(r) = served.get_mut("admissionregistration.k8s.io/v1") {
        r.remove("validatingadmissionpolicies");
    }
    served.remove("flowcontrol.apiserver.k8s.io/v1");
    let f = judge_served(&served);
    assert_eq!(f.mark, Mark::Fail);
    assert!(
        f.detail
            .contains("admissionregistration.k8s.io/v1 validatingadmissionpolicies"),
        "{}",
        f.detail
    );
    assert!(
        f.detail
            .contains("flowcontrol.apiserver.k8s.io/v1 flowschemas")
    );
    assert!(!f.detail.contains("mutatingwebhookconfigurations"));
}

#[test]
fn the_chart_kinds_cover_what_the_chart_templates_create() {
    for resource in [
        "customresourcedefinitions",
        "mutatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "clusterroles",
        "clusterrolebindings",
        "flowschemas",
        "deployments",
        "leases",
    ] {
        assert!(
            CHART_KINDS.iter().any(|k| k.resource == resource),
            "{resource} missing"
        );
    }
}

#[test]
fn rights_pass_when_all_are_allowed_and_each_denied_one_is_named_with_its_scope() {
    let allowed: Vec<Right> = CHART_KINDS
        .iter()
        .map(|&kind| Right {
            kind,
            allowed: true,
        })
        .collect();
    assert_eq!(judge_rights(&allowed, "kubeflake-system").mark, Mark::Ok);
    let mut denied = allowed.clone();
    for r in &mut denied {
        if r.kind.resource == "customresourcedefinitions" || r.kind.resource == "deployments" {
            r.allowed = false;
        }
    }
    let f = judge_rights(&denied, "kubeflake-system");
    assert_eq!(f.mark, Mark::Fail);
    assert_eq!(
        f.detail,
        "denied: create customresourcedefinitions.apiextensions.k8s.io (cluster-wide); \
         create deployments.apps in namespace kubeflake-system"
    );
    let core = Right {
        kind: kind("v1", "secrets", true),
        allowed: false,
    };
    assert!(
        judge_rights(&[core], "ns")
            .detail
            .contains("create secrets in namespace ns")
    );
}
