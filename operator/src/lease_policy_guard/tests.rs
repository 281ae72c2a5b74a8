//! The guard's judgement (pure) and its reads against the scripted fake API server. The
//! controller held back by it: `controller/policy_gate/tests.rs`.

use std::collections::BTreeMap;

use http::Method;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubeflake_crds::lease_policy;
use serde_json::json;

use super::*;
use kubeflake_runtime::fake_api::{FakeApi, failure};

const NS: &str = "shop";
const NAME: &str = "kubeflake-leases";
const OPERATOR: &str = "system:serviceaccount:kubeflake-system:kubeflake";
const POLICY: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/kubeflake-leases";
const BINDING: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/kubeflake-leases";

fn names(namespace: Option<&str>) -> PolicyNames {
    PolicyNames {
        policy: NAME.into(),
        binding: NAME.into(),
        namespace: namespace.map(str::to_string),
    }
}

fn policy() -> ValidatingAdmissionPolicy {
    lease_policy::policy(NAME, OPERATOR, &["system:masters"])
}

fn binding(namespace: Option<&str>) -> ValidatingAdmissionPolicyBinding {
    lease_policy::binding(NAME, NAME, namespace)
}

/// The policy as the API server answers a GET: its defaults filled in.
fn read_back(mut p: ValidatingAdmissionPolicy) -> ValidatingAdmissionPolicy {
    let m = p
        .spec
        .as_mut()
        .and_then(|s| s.match_constraints.as_mut())
        .expect("match constraints");
    m.namespace_selector = Some(LabelSelector::default());
    m.object_selector = Some(LabelSelector::default());
    m.match_policy = Some("Equivalent".into());
    for rule in m.resource_rules.iter_mut().flatten() {
        rule.scope = Some("*".into());
    }
    p
}

fn judged(
    names: &PolicyNames,
    p: Option<ValidatingAdmissionPolicy>,
    b: Option<ValidatingAdmissionPolicyBinding>,
) -> Option<Missing> {
    judge(names, p.as_ref(), b.as_ref())
}

#[test]
fn rule14_the_policy_and_binding_the_chart_installs_are_in_force_as_the_api_server_returns_them() {
    for groups in [&[][..], &["system:masters", "ops"][..]] {
        let p = read_back(lease_policy::policy(NAME, OPERATOR, groups));
        assert_eq!(judged(&names(None), Some(p), Some(binding(None))), None);
    }
    let p = read_back(policy());
    let watched = names(Some(NS));
    assert_eq!(
        judged(&watched, Some(p.clone()), Some(binding(Some(NS)))),
        None
    );
    // A binding for every namespace covers the watched one too.
    assert_eq!(judged(&watched, Some(p), Some(binding(None))), None);
}

#[test]
fn rule14_a_missing_or_deleted_policy_or_binding_is_reported_by_name() {
    let n = names(None);
    assert!(matches!(
        judged(&n, None, Some(binding(None))),
        Some(Missing::PolicyNotFound { .. })
    ));
    assert!(matches!(
        judged(&n, Some(policy()), None),
        Some(Missing::BindingNotFound { .. })
    ));
    let mut deleting = binding(None);
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    assert!(matches!(
        judged(&n, Some(policy()), Some(deleting)),
        Some(Missing::BindingDeleting { .. })
    ));
    let message = judged(&n, Some(policy()), None)
        .expect("missing")
        .to_string();
    assert!(
        message.contains(NAME) && message.contains("helm upgrade"),
        "{message}"
    );
}

#[test]
fn rule14_a_binding_that_only_warns_or_binds_another_policy_or_fewer_namespaces_is_not_in_force() {
    let n = names(None);
    let mut warn_only = binding(None);
    warn_only.spec.as_mut().expect("spec").validation_actions =
        Some(vec!["Warn".into(), "Audit".into()]);
    assert!(matches!(
        judged(&n, Some(policy()), Some(warn_only)),
        Some(Missing::BindingDoesNotDeny { .. })
    ));
    let mut elsewhere = binding(None);
    elsewhere.spec.as_mut().expect("spec").policy_name = Some("allow-all".into());
    assert!(matches!(
        judged(&n, Some(policy()), Some(elsewhere)),
        Some(Missing::BindingElsewhere { .. })
    ));
    // The operator watches every namespace, the binding covers one.
    assert!(matches!(
        judged(&n, Some(policy()), Some(binding(Some("other")))),
        Some(Missing::BindingNarrowed { .. })
    ));
    // The operator watches "shop", the binding covers "other".
    assert!(matches!(
        judged(
            &names(Some(NS)),
            Some(policy()),
            Some(binding(Some("other")))
        ),
        Some(Missing::BindingNarrowed { .. })
    ));
    let mut labelled_only = binding(None);
    labelled_only.spec.as_mut().expect("spec").match_resources = Some(
        k8s_openapi::api::admissionregistration::v1::MatchResources {
            object_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("team".to_string(), "a".to_string())])),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    assert!(matches!(
        judged(&n, Some(policy()), Some(labelled_only)),
        Some(Missing::BindingNarrowed { .. })
    ));
}

#[test]
fn rule14_a_policy_changed_from_what_this_release_generates_is_not_in_force() {
    let n = names(None);
    let changed = |f: &dyn Fn(
        &mut k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicySpec,
    )| {
        let mut p = policy();
        f(p.spec.as_mut().expect("spec"));
        judged(&n, Some(p), Some(binding(None)))
    };
    let is_changed = |m: Option<Missing>| matches!(m, Some(Missing::PolicyChanged { .. }));
    assert!(is_changed(changed(
        &|s| s.failure_policy = Some("Ignore".into())
    )));
    assert!(is_changed(changed(&|s| s.validations = Some(vec![]))));
    assert!(is_changed(changed(&|s| {
        if let Some(v) = s.validations.as_mut().and_then(|v| v.first_mut()) {
            v.expression = "true".into();
        }
    })));
    assert!(is_changed(changed(&|s| s.match_conditions = None)));
    assert!(is_changed(changed(&|s| {
        if let Some(rule) = s
            .match_constraints
            .as_mut()
            .and_then(|m| m.resource_rules.as_mut())
            .and_then(|r| r.first_mut())
        {
            rule.operations = Some(vec!["DELETE".into()]);
        }
    })));
    // The operator's name broken out of its CEL string makes everyone the operator.
    let escaped = lease_policy::policy(NAME, "x' || true || 'y", &["system:masters"]);
    assert!(is_changed(judged(&n, Some(escaped), Some(binding(None)))));
    let groups = lease_policy::policy(NAME, OPERATOR, &["a\"] + [\"b"]);
    assert!(is_changed(judged(&n, Some(groups), Some(binding(None)))));
}

/// Rule 17: the guard's judgement of the fence cap is the API server's: a policy without
/// any of the checks of `kubeflake.io/fence-cap` (who writes it, fence at most the cap, a
/// cap that is a tick), such as the previous release's, is not in force, so the operator
/// assigns no slot (in a block or not) until the chart's policy is back.
#[test]
fn rule17_a_policy_without_the_fence_cap_checks_is_not_in_force() {
    use kubeflake_crds::slot_lease::FENCE_CAP_ANNOTATION;
    let n = names(None);
    let cap_checks = |p: &ValidatingAdmissionPolicy| {
        p.spec
            .as_ref()
            .and_then(|s| s.validations.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, v)| v.expression.contains(FENCE_CAP_ANNOTATION))
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    let checks = cap_checks(&policy());
    assert_eq!(checks.len(), 3, "owner, range and fence-within-cap");
    for dropped in checks.iter().map(|i| vec![*i]).chain([checks.clone()]) {
        let mut p = policy();
        let validations = p
            .spec
            .as_mut()
            .and_then(|s| s.validations.as_mut())
            .expect("validations");
        for i in dropped.iter().rev() {
            validations.remove(*i);
        }
        assert!(
            matches!(
                judged(&n, Some(read_back(p)), Some(binding(None))),
                Some(Missing::PolicyChanged { .. })
            ),
            "validations {dropped:?} dropped"
        );
    }
    // The fence compared with a cap one tick higher is a weaker check: not in force either.
    let mut p = policy();
    let weakened = if let Some(v) = p
        .spec
        .as_mut()
        .and_then(|s| s.validations.as_mut())
        .and_then(|v| {
            v.iter_mut().find(|v| {
                v.expression.contains(FENCE_CAP_ANNOTATION) && v.expression.contains("uint(")
            })
        }) {
        v.expression = v.expression.replace(" <= uint(", " <= 1u + uint(");
        true
    } else {
        false
    };
    assert!(weakened, "the fence-within-cap check is there");
    assert!(matches!(
        judged(&n, Some(read_back(p)), Some(binding(None))),
        Some(Missing::PolicyChanged { .. })
    ));
    assert_eq!(
        judged(&n, Some(read_back(policy())), Some(binding(None))),
        None
    );
}

#[test]
fn rule14_nothing_is_handed_out_before_the_first_check_nor_while_the_policy_is_missing() {
    assert!(PolicyState::Unchecked.refusal().is_some());
    let missing = PolicyState::Missing(Missing::BindingNotFound { name: NAME.into() });
    assert!(missing.refusal().is_some_and(|why| why.contains(NAME)));
    assert_eq!(PolicyState::InForce.refusal(), None);
    assert_eq!(PolicyState::NotRequired.refusal(), None);
}

#[tokio::test]
async fn rule14_the_guard_reads_the_policy_and_binding_by_name_and_a_refused_read_holds_back() {
    let api = FakeApi::new()
        .expect(Method::GET, POLICY, 200, json!(read_back(policy())))
        .expect(Method::GET, BINDING, 200, json!(binding(None)));
    assert_eq!(
        check(&api.client(), &names(None)).await,
        PolicyState::InForce
    );
    api.verify();
    let api = FakeApi::new()
        .expect(Method::GET, POLICY, 200, json!(policy()))
        .expect(Method::GET, BINDING, 404, failure(404, "NotFound", "gone"));
    assert!(matches!(
        check(&api.client(), &names(None)).await,
        PolicyState::Missing(Missing::BindingNotFound { .. })
    ));
    api.verify();
    let api = FakeApi::new().expect(
        Method::GET,
        POLICY,
        403,
        failure(403, "Forbidden", "cannot get"),
    );
    assert!(matches!(
        check(&api.client(), &names(None)).await,
        PolicyState::Missing(Missing::Unreadable { .. })
    ));
    api.verify();
}
