use chrono::TimeZone;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBindingSpec;
use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinitionCondition, CustomResourceDefinitionSpec,
    CustomResourceDefinitionStatus, CustomResourceDefinitionVersion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

use super::*;
use crate::check::model::Mark;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

/// The operator Deployment as the chart renders it (release `kf`), scaled and available
/// as given.
fn deployment(replicas: i32, available: i32, args: &[&str]) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("kf-kubeflake".into()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            template: PodTemplateSpec {
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "operator".into(),
                        args: Some(args.iter().map(|a| a.to_string()).collect()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
                ..PodTemplateSpec::default()
            },
            ..DeploymentSpec::default()
        }),
        status: Some(DeploymentStatus {
            available_replicas: Some(available),
            ..DeploymentStatus::default()
        }),
    }
}

const CHART_ARGS: [&str; 6] = [
    "--leader-election-namespace=kubeflake-system",
    "--leader-election-lease=kf-kubeflake-leader",
    "--lease-policy=kf-kubeflake-leases",
    "--lease-policy-binding=kf-kubeflake-leases",
    "--webhook-config=kf-kubeflake",
    "--webhook-service=kf-kubeflake-webhook",
];

#[test]
fn the_names_to_check_are_read_from_the_operator_deployment_s_flags() {
    let names = OperatorNames::of(&deployment(2, 2, &CHART_ARGS));
    assert_eq!(names.leader_namespace.as_deref(), Some("kubeflake-system"));
    assert_eq!(names.leader_lease, "kf-kubeflake-leader");
    assert_eq!(names.lease_policy.as_deref(), Some("kf-kubeflake-leases"));
    assert_eq!(names.webhook_config.as_deref(), Some("kf-kubeflake"));
    assert_eq!(
        names.webhook_service.as_deref(),
        Some("kf-kubeflake-webhook")
    );
    assert!(!names.without_lease_policy);
    let spaced = OperatorNames::of(&deployment(
        1,
        1,
        &[
            "--leader-election-namespace",
            "ops",
            "--unsafe-without-lease-policy",
        ],
    ));
    assert_eq!(spaced.leader_namespace.as_deref(), Some("ops"));
    assert_eq!(spaced.leader_lease, DEFAULT_LEADER_LEASE);
    assert!(spaced.without_lease_policy);
}

#[test]
fn the_deployment_passes_when_every_replica_is_available_and_fails_scaled_to_0_or_with_none() {
    let ns = "kubeflake-system";
    assert_eq!(
        judge_deployment(Some(&deployment(2, 2, &[])), ns).mark,
        Mark::Ok
    );
    let partly = judge_deployment(Some(&deployment(2, 1, &[])), ns);
    assert_eq!(partly.mark, Mark::Warn);
    assert!(
        partly.detail.contains("1/2 replicas available"),
        "{}",
        partly.detail
    );
    let scaled = judge_deployment(Some(&deployment(0, 0, &[])), ns);
    assert_eq!(scaled.mark, Mark::Fail);
    assert!(scaled.detail.contains("scaled to 0"), "{}", scaled.detail);
    assert!(
        scaled
            .hint
            .unwrap()
            .contains("docs/alerts.md#kubeflakeoperatordown")
    );
    assert_eq!(
        judge_deployment(Some(&deployment(2, 0, &[])), ns).mark,
        Mark::Fail
    );
    let none = judge_deployment(None, ns);
    assert_eq!(none.mark, Mark::Fail);
    assert!(none.hint.unwrap().contains("--operator-namespace"));
}

fn lease(holder: Option<&str>, renewed_secs_ago: i64) -> Lease {
    let at = now().timestamp_millis() - renewed_secs_ago * 1000;
    Lease {
        metadata: ObjectMeta::default(),
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                k8s_openapi::jiff::Timestamp::from_millisecond(at).unwrap(),
            )),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn the_leader_lease_must_be_held_and_renewed_within_its_duration_and_the_slack() {
    let names = OperatorNames::of(&deployment(2, 2, &CHART_ARGS));
    let fresh = judge_leader(&names, Some(&lease(Some("kf-kubeflake-abc"), 3)), now());
    assert_eq!(fresh.mark, Mark::Ok);
    assert!(
        fresh
            .detail
            .contains("kf-kubeflake-abc holds kubeflake-system/kf-kubeflake-leader"),
        "{}",
        fresh.detail
    );
    let edge = judge_leader(
        &names,
        Some(&lease(Some("a"), 15 + LEADER_SLACK_SECONDS)),
        now(),
    );
    assert_eq!(edge.mark, Mark::Ok);
    let stale = judge_leader(
        &names,
        Some(&lease(Some("a"), 16 + LEADER_SLACK_SECONDS)),
        now(),
    );
    assert_eq!(stale.mark, Mark::Fail);
    assert!(
        stale.detail.contains("no replica leads"),
        "{}",
        stale.detail
    );
    assert_eq!(
        judge_leader(&names, Some(&lease(None, 1)), now()).mark,
        Mark::Fail
    );
    assert_eq!(
        judge_leader(&names, Some(&lease(Some(""), 1)), now()).mark,
        Mark::Fail
    );
    let missing = judge_leader(&names, None, now());
    assert_eq!(missing.mark, Mark::Fail);
    assert!(missing.detail.contains("does not exist"));
    let single = OperatorNames::of(&deployment(1, 1, &[]));
    assert_eq!(judge_leader(&single, None, now()).mark, Mark::Ok);
}

fn crd(served: &[&str], established: bool) -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta::default(),
        spec: CustomResourceDefinitionSpec {
            versions: served
                .iter()
                .map(|v| CustomResourceDefinitionVersion {
                    name: v.to_string(),
                    served: true,
                    storage: true,
                    ..CustomResourceDefinitionVersion::default()
                })
                .collect(),
            ..CustomResourceDefinitionSpec::default()
        },
        status: Some(CustomResourceDefinitionStatus {
            conditions: Some(vec![CustomResourceDefinitionCondition {
                type_: "Established".into(),
                status: if established { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..CustomResourceDefinitionCondition::default()
            }]),
            ..CustomResourceDefinitionStatus::default()
        }),
    }
}

#[test]
fn the_crd_must_exist_be_established_and_serve_the_version_this_plugin_reads() {
    let name = "idsequences.kubeflake.io";
    assert_eq!(
        judge_crd(Some(&crd(&["v1alpha1"], true)), name, "v1alpha1").mark,
        Mark::Ok
    );
    let other = judge_crd(Some(&crd(&["v1beta1"], true)), name, "v1alpha1");
    assert_eq!(other.mark, Mark::Fail);
    assert!(
        other
            .detail
            .contains("serves v1beta1, but this plugin reads v1alpha1"),
        "{}",
        other.detail
    );
    assert_eq!(
        judge_crd(Some(&crd(&["v1alpha1"], false)), name, "v1alpha1").mark,
        Mark::Fail
    );
    let missing = judge_crd(None, name, "v1alpha1");
    assert_eq!(missing.mark, Mark::Fail);
    assert!(missing.hint.unwrap().contains("charts/kubeflake/crds/"));
}

fn binding(policy: &str) -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: ObjectMeta::default(),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(policy.into()),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
    }
}

#[test]
fn the_lease_policy_and_a_binding_to_it_must_both_be_present() {
    let names = OperatorNames::of(&deployment(2, 2, &CHART_ARGS));
    let policy = ValidatingAdmissionPolicy::default();
    let good = binding("kf-kubeflake-leases");
    assert_eq!(
        judge_lease_policy(&names, Some(&policy), Some(&good)).mark,
        Mark::Ok
    );
    let no_policy = judge_lease_policy(&names, None, Some(&good));
    assert_eq!(no_policy.mark, Mark::Fail);
    assert!(
        no_policy
            .detail
            .contains("ValidatingAdmissionPolicy kf-kubeflake-leases is missing")
    );
    assert!(
        no_policy
            .hint
            .unwrap()
            .contains("kubeflakeleasepolicymissing")
    );
    assert_eq!(
        judge_lease_policy(&names, Some(&policy), None).mark,
        Mark::Fail
    );
    let elsewhere = judge_lease_policy(&names, Some(&policy), Some(&binding("other")));
    assert_eq!(elsewhere.mark, Mark::Fail);
    assert!(elsewhere.detail.contains("binds other"));
    let mut deleting = policy.clone();
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(
        judge_lease_policy(&names, Some(&deleting), Some(&good)).mark,
        Mark::Fail
    );
    let unsafe_names = OperatorNames::of(&deployment(1, 1, &["--unsafe-without-lease-policy"]));
    assert_eq!(
        judge_lease_policy(&unsafe_names, None, None).mark,
        Mark::Warn
    );
}
