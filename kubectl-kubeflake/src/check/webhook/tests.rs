use chrono::TimeZone;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, ServiceReference, WebhookClientConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::check::cert::tests::{FAR, OLD};
use crate::check::model::Mark;

/// A configuration as the chart installs it, with `ca` as its caBundle.
fn config(ca: &str) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("kubeflake".into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: "sidecar.inject.kubeflake.io".into(),
            client_config: WebhookClientConfig {
                ca_bundle: Some(ByteString(ca.as_bytes().to_vec())),
                service: Some(ServiceReference {
                    namespace: "kubeflake-system".into(),
                    name: "kubeflake-webhook".into(),
                    ..ServiceReference::default()
                }),
                url: None,
            },
            ..MutatingWebhook::default()
        }]),
    }
}

fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap()
}

#[test]
fn the_configuration_names_the_service_its_webhook_calls_and_a_missing_one_fails() {
    let (found, service) = judge_config(Some(&config(FAR)), "kubeflake");
    assert_eq!(found.mark, Mark::Ok);
    assert_eq!(
        service,
        Some(("kubeflake-system".into(), "kubeflake-webhook".into()))
    );
    let (missing, none) = judge_config(None, "kubeflake");
    assert_eq!(missing.mark, Mark::Fail);
    assert!(
        missing
            .detail
            .contains("MutatingWebhookConfiguration kubeflake is missing")
    );
    assert_eq!(none, None);
}

#[test]
fn a_valid_ca_passes_one_expiring_within_30_days_warns_and_an_expired_one_fails() {
    // FAR is valid 2025-06-01 .. 2060-01-01.
    let ok = judge_ca_bundle(&config(FAR), "kf-system", "kf", at(2026, 11, 29));
    assert_eq!(ok.mark, Mark::Ok);
    assert!(
        ok.detail.contains("valid until 2060-01-01T00:00:00Z"),
        "{}",
        ok.detail
    );
    let soon = judge_ca_bundle(&config(FAR), "kf-system", "kf", at(2059, 12, 10));
    assert_eq!(soon.mark, Mark::Warn);
    assert!(soon.detail.contains("in 22 days"), "{}", soon.detail);
    assert_eq!(
        judge_ca_bundle(&config(FAR), "kf-system", "kf", at(2059, 12, 3)).mark,
        Mark::Warn
    ); // 29 days
    assert_eq!(
        judge_ca_bundle(&config(FAR), "kf-system", "kf", at(2059, 12, 2)).mark,
        Mark::Ok
    ); // 30 days
    // OLD expired on 2021-01-01T12:30:05Z.
    let expired = judge_ca_bundle(&config(OLD), "kf-system", "kf", at(2026, 11, 29));
    assert_eq!(expired.mark, Mark::Fail);
    assert!(
        expired.detail.contains("expired at 2021-01-01T12:30:05Z"),
        "{}",
        expired.detail
    );
    assert!(
        expired
            .hint
            .unwrap()
            .contains("kubectl -n kf-system rollout restart deploy/kf "),
        "the hint names the operator to restart"
    );
}

#[test]
fn the_first_certificate_to_expire_in_a_bundle_decides() {
    let both = format!("{FAR}{OLD}");
    assert_eq!(
        judge_ca_bundle(&config(&both), "kf-system", "kf", at(2026, 11, 29)).mark,
        Mark::Fail
    );
}

#[test]
fn an_empty_unreadable_or_not_yet_valid_ca_bundle_fails() {
    let empty = judge_ca_bundle(&config(""), "kf-system", "kf", at(2026, 11, 29));
    assert_eq!(empty.mark, Mark::Fail);
    assert!(empty.detail.contains("empty caBundle"), "{}", empty.detail);
    let garbled = judge_ca_bundle(
        &config("not a certificate"),
        "kf-system",
        "kf",
        at(2026, 11, 29),
    );
    assert_eq!(garbled.mark, Mark::Fail);
    assert!(
        garbled.detail.contains("cannot be read"),
        "{}",
        garbled.detail
    );
    let early = judge_ca_bundle(&config(FAR), "kf-system", "kf", at(2025, 1, 1));
    assert_eq!(early.mark, Mark::Fail);
    assert!(
        early
            .detail
            .contains("not valid before 2025-06-01T12:00:00Z"),
        "{}",
        early.detail
    );
}

fn slice(ready: &[Option<bool>]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta::default(),
        address_type: "IPv4".into(),
        endpoints: ready
            .iter()
            .map(|r| Endpoint {
                addresses: vec!["10.0.0.1".into()],
                conditions: Some(EndpointConditions {
                    ready: *r,
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: None,
    }
}

#[test]
fn the_service_needs_one_ready_endpoint_and_unset_ready_counts_as_ready() {
    let f = judge_endpoints("ns", "svc", &[slice(&[Some(true), Some(false), None])]);
    assert_eq!(f.mark, Mark::Ok);
    assert!(f.detail.contains("2 ready endpoints"), "{}", f.detail);
    let none = judge_endpoints("ns", "svc", &[slice(&[Some(false)])]);
    assert_eq!(none.mark, Mark::Fail);
    assert!(none.detail.contains("service ns/svc has no ready endpoint"));
    assert_eq!(judge_endpoints("ns", "svc", &[]).mark, Mark::Fail);
}

/// `config("")` with a namespaceSelector on names: `In` (when given) and `NotIn`.
fn selecting(only: Option<&[&str]>, never: &[&str]) -> MutatingWebhookConfiguration {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let rule = |operator: &str, values: &[&str]| LabelSelectorRequirement {
        key: "kubernetes.io/metadata.name".into(),
        operator: operator.into(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    };
    let mut expressions = vec![rule("NotIn", never)];
    if let Some(only) = only {
        expressions.push(rule("In", only));
    }
    let mut c = config("");
    c.webhooks.as_mut().unwrap()[0].namespace_selector = Some(LabelSelector {
        match_expressions: Some(expressions),
        match_labels: None,
    });
    c
}

#[test]
fn the_probe_goes_to_the_asked_namespace_else_a_selected_one_never_to_one_the_webhook_skips() {
    let chart = selecting(None, &["kube-system", "kubeflake-system"]);
    assert_eq!(probe_namespace(&chart, None).as_deref(), Some("default"));
    assert_eq!(
        probe_namespace(&chart, Some("shop")).as_deref(),
        Some("shop")
    );
    assert_eq!(
        probe_namespace(&chart, Some("kubeflake-system")).as_deref(),
        Some("default"),
        "the operator's namespace is never probed: the webhook skips it"
    );
    let watched = selecting(Some(&["shop", "billing"]), &["kube-system"]);
    assert_eq!(
        probe_namespace(&watched, Some("other")).as_deref(),
        Some("shop")
    );
    assert_eq!(
        probe_namespace(&watched, Some("billing")).as_deref(),
        Some("billing")
    );
    let nowhere = selecting(Some(&["kube-system"]), &["kube-system"]);
    assert_eq!(probe_namespace(&nowhere, Some("shop")), None);
}

fn refused(code: u16, message: &str) -> ProbeAnswer {
    ProbeAnswer::Refused {
        code,
        message: message.into(),
    }
}

fn probe(answer: &ProbeAnswer) -> Finding {
    judge_probe(answer, "shop", "kubeflake-system", "kubeflake")
}

#[test]
fn the_webhook_refusing_the_probes_unknown_sequence_is_the_proof_that_it_answers() {
    let answered = refused(
        400,
        &format!(
            "admission webhook \"sidecar.inject.kubeflake.io\" denied the request: IdSequence {PROBE_SEQUENCE:?} not found in namespace \"shop\": create it first"
        ),
    );
    assert_eq!(probe(&answered).mark, Mark::Ok);
    assert_eq!(
        probe(&ProbeAnswer::Admitted { injected: true }).mark,
        Mark::Ok
    );
}

#[test]
fn a_ca_bundle_from_another_ca_fails_the_probe_with_the_api_servers_words_and_says_to_renew() {
    let wrong_ca = refused(
        500,
        "Internal error occurred: failed calling webhook \"sidecar.inject.kubeflake.io\": failed to call webhook: Post \"https://kubeflake-webhook.kubeflake-system.svc:443/mutate?timeout=5s\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
    );
    let found = probe(&wrong_ca);
    assert_eq!(found.mark, Mark::Fail);
    assert!(
        found
            .detail
            .contains("x509: certificate signed by unknown authority"),
        "{}",
        found.detail
    );
    let hint = found.hint.unwrap();
    assert!(hint.contains("caBundle does not trust"), "{hint}");
    assert!(hint.contains("rollout restart deploy/kubeflake"), "{hint}");
    let unreachable = probe(&refused(
        500,
        "Internal error occurred: failed calling webhook \"sidecar.inject.kubeflake.io\": failed to call webhook: Post \"https://kubeflake-webhook.kubeflake-system.svc:443/mutate\": no endpoints available for service \"kubeflake-webhook\"",
    ));
    assert_eq!(unreachable.mark, Mark::Fail);
    assert!(
        unreachable
            .hint
            .unwrap()
            .contains("cannot reach the webhook")
    );
}

#[test]
fn a_probe_that_cannot_be_sent_or_proves_nothing_warns_and_says_why() {
    let forbidden = probe(&refused(
        403,
        "pods is forbidden: User \"dev\" cannot create resource \"pods\" in API group \"\" in the namespace \"shop\"",
    ));
    assert_eq!(forbidden.mark, Mark::Warn);
    assert!(
        forbidden
            .detail
            .contains("not tried: no right to create pods in shop")
    );
    let other = probe(&refused(
        403,
        "admission webhook \"policy.example.com\" denied the request: no",
    ));
    assert_eq!(other.mark, Mark::Warn);
    assert!(other.detail.contains("refused by something else (403)"));
    let uninjected = probe(&ProbeAnswer::Admitted { injected: false });
    assert_eq!(uninjected.mark, Mark::Warn);
    assert!(uninjected.detail.contains("failurePolicy Ignore"));
}

#[test]
fn the_probe_pod_is_labelled_for_a_sequence_no_one_creates_and_carries_no_sidecar() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(probe_pod()).unwrap();
    assert_eq!(pod.metadata.labels.unwrap()[SEQUENCE_LABEL], PROBE_SEQUENCE);
    assert!(
        pod.metadata.name.is_none(),
        "generateName: probes never collide"
    );
    let mut injected: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(probe_pod()).unwrap();
    assert!(!has_sidecar(&injected));
    injected.spec.as_mut().unwrap().init_containers =
        Some(vec![k8s_openapi::api::core::v1::Container {
            name: SIDECAR_NAME.into(),
            ..Default::default()
        }]);
    assert!(has_sidecar(&injected));
}
