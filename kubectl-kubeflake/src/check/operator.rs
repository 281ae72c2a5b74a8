//! `check` after install, the operator's side: the CRD at the version this plugin knows,
//! the operator Deployment available, its leader Lease held and fresh, and the Lease
//! policy in force. The names come from the Deployment's own flags ([`OperatorNames`]), so
//! any release name or `fullnameOverride` is checked as installed.

use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::model::Finding;

const GROUP: &str = "operator";
const DOWN: &str = "docs/alerts.md#kubeflakeoperatordown";
const NOT_RECONCILING: &str = "docs/alerts.md#kubeflakeoperatornotreconciling";
const POLICY: &str = "docs/alerts.md#kubeflakeleasepolicymissing";

/// A leader Lease renewed longer ago than its duration plus this is stale (the slack
/// absorbs a difference between this machine's clock and the API server's).
pub const LEADER_SLACK_SECONDS: i64 = 10;

/// What the operator Deployment's flags name (`charts/kubeflake/templates/deployment.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorNames {
    /// `--leader-election-namespace`; `None`: one replica without election.
    pub leader_namespace: Option<String>,
    /// `--leader-election-lease` (the operator's default when not given).
    pub leader_lease: String,
    pub webhook_config: Option<String>,
    pub webhook_service: Option<String>,
    pub lease_policy: Option<String>,
    pub lease_policy_binding: Option<String>,
    /// `--unsafe-without-lease-policy`.
    pub without_lease_policy: bool,
}

/// The operator's own default for `--leader-election-lease` (operator/src/lib.rs).
pub const DEFAULT_LEADER_LEASE: &str = "kubeflake-operator-leader";

impl OperatorNames {
    /// Reads the flags of the Deployment's containers (`--flag=value` or `--flag value`).
    pub fn of(deployment: &Deployment) -> OperatorNames {
        let args: Vec<String> = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| {
                s.containers
                    .iter()
                    .flat_map(|c| c.args.iter().flatten().chain(c.command.iter().flatten()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let flag = |name: &str| -> Option<String> {
            let with_eq = format!("--{name}=");
            args.iter().enumerate().find_map(|(i, a)| {
                if let Some(v) = a.strip_prefix(&with_eq) {
                    Some(v.to_string())
                } else if a == &format!("--{name}") {
                    args.get(i + 1).cloned()
                } else {
                    None
                }
            })
        };
        OperatorNames {
            leader_namespace: flag("leader-election-namespace"),
            leader_lease: flag("leader-election-lease")
                .unwrap_or_else(|| DEFAULT_LEADER_LEASE.to_string()),
            webhook_config: flag("webhook-config"),
            webhook_service: flag("webhook-service"),
            lease_policy: flag("lease-policy"),
            lease_policy_binding: flag("lease-policy-binding"),
            without_lease_policy: args.iter().any(|a| a == "--unsafe-without-lease-policy"),
        }
    }
}

/// The IdSequence CRD: present, established, serving `version`.
pub fn judge_crd(crd: Option<&CustomResourceDefinition>, name: &str, version: &str) -> Finding {
    let install =
        "apply the CRD: kubectl apply --server-side -f charts/kubeflake/crds/ (docs/install.md)";
    let Some(crd) = crd else {
        return Finding::fail(GROUP, "CRD", format!("{name} is not installed"), install);
    };
    let versions: Vec<&str> = crd
        .spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.as_str())
        .collect();
    if !versions.contains(&version) {
        return Finding::fail(
            GROUP,
            "CRD",
            format!(
                "{name} serves {}, but this plugin reads {version}",
                versions.join(", ")
            ),
            format!("use the plugin of the installed release, or upgrade the CRD: {install}"),
        );
    }
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    if !established {
        return Finding::fail(
            GROUP,
            "CRD",
            format!("{name} is not Established yet"),
            format!(
                "kubectl describe crd {name} says why (a name conflict, or wait a few seconds)"
            ),
        );
    }
    Finding::ok(GROUP, "CRD", format!("{name} serves {version}"))
}

/// The operator Deployment: found, scaled up, every replica available.
pub fn judge_deployment(deployment: Option<&Deployment>, namespace: &str) -> Finding {
    let Some(d) = deployment else {
        return Finding::fail(
            GROUP,
            "deployment",
            format!(
                "no operator Deployment (labels app.kubernetes.io/part-of=kubeflake, component=operator) in namespace {namespace}"
            ),
            "install the chart (docs/install.md), or pass --operator-namespace where it runs",
        );
    };
    let name = d.metadata.name.as_deref().unwrap_or("?");
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let available = d
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    let detail = format!("{namespace}/{name}: {available}/{want} replicas available");
    if want == 0 {
        Finding::fail(
            GROUP,
            "deployment",
            format!("{namespace}/{name} is scaled to 0: no slot is assigned or reclaimed"),
            format!("kubectl -n {namespace} scale deploy/{name} --replicas=2 ({DOWN})"),
        )
    } else if available == 0 {
        Finding::fail(
            GROUP,
            "deployment",
            detail,
            format!(
                "see why its pods do not start: kubectl -n {namespace} describe pods -l app.kubernetes.io/component=operator ({DOWN})"
            ),
        )
    } else if available < want {
        Finding::warn(
            GROUP,
            "deployment",
            detail,
            format!(
                "kubectl -n {namespace} describe pods -l app.kubernetes.io/component=operator ({DOWN})"
            ),
        )
    } else {
        Finding::ok(GROUP, "deployment", detail)
    }
}

/// The leader Lease: held, and renewed within its duration (plus [`LEADER_SLACK_SECONDS`]).
pub fn judge_leader(names: &OperatorNames, lease: Option<&Lease>, now: DateTime<Utc>) -> Finding {
    let Some(namespace) = &names.leader_namespace else {
        return Finding::ok(
            GROUP,
            "leader",
            "leader election is off (one replica reconciles)",
        );
    };
    let name = &names.leader_lease;
    let hint = format!(
        "kubectl -n {namespace} get lease {name} -o yaml; restart the operator if no replica logs \"waiting to become leader\" ({NOT_RECONCILING})"
    );
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Finding::fail(
            GROUP,
            "leader",
            format!("the leader Lease {namespace}/{name} does not exist"),
            hint,
        );
    };
    let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        return Finding::fail(
            GROUP,
            "leader",
            format!("no replica holds the leader Lease {namespace}/{name}"),
            hint,
        );
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let renewed = spec.renew_time.as_ref().map(|t| t.0.as_millisecond());
    let Some(renewed) = renewed else {
        return Finding::fail(
            GROUP,
            "leader",
            format!("{holder} holds {namespace}/{name} but never renewed it"),
            hint,
        );
    };
    let age = (now.timestamp_millis() - renewed) / 1000;
    if age > duration + LEADER_SLACK_SECONDS {
        Finding::fail(
            GROUP,
            "leader",
            format!(
                "{holder} last renewed {namespace}/{name} {age}s ago (its duration is {duration}s): no replica leads"
            ),
            hint,
        )
    } else {
        Finding::ok(
            GROUP,
            "leader",
            format!(
                "{holder} holds {namespace}/{name}, renewed {}s ago",
                age.max(0)
            ),
        )
    }
}

/// The Lease policy and its binding (the operator assigns nothing without them).
pub fn judge_lease_policy(
    names: &OperatorNames,
    policy: Option<&ValidatingAdmissionPolicy>,
    binding: Option<&ValidatingAdmissionPolicyBinding>,
) -> Finding {
    if names.without_lease_policy {
        return Finding::warn(
            GROUP,
            "lease policy",
            "the operator runs with --unsafe-without-lease-policy: nothing keeps other writers of kubeflake's Leases to the protocol",
            "install with leasePolicy.enabled=true (docs/install.md, \"Security\")",
        );
    }
    let (Some(policy_name), Some(binding_name)) =
        (&names.lease_policy, &names.lease_policy_binding)
    else {
        return Finding::warn(
            GROUP,
            "lease policy",
            "the operator Deployment names no --lease-policy / --lease-policy-binding",
            "install the chart's operator Deployment unchanged (docs/install.md)",
        );
    };
    let hint = format!("helm upgrade restores them; until then no slot is assigned ({POLICY})");
    let deleting = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.deletion_timestamp.is_some()
    };
    match (policy, binding) {
        (None, _) => Finding::fail(
            GROUP,
            "lease policy",
            format!("ValidatingAdmissionPolicy {policy_name} is missing"),
            hint,
        ),
        (_, None) => Finding::fail(
            GROUP,
            "lease policy",
            format!("ValidatingAdmissionPolicyBinding {binding_name} is missing"),
            hint,
        ),
        (Some(p), Some(b)) if deleting(&p.metadata) || deleting(&b.metadata) => Finding::fail(
            GROUP,
            "lease policy",
            format!("{policy_name} or its binding is being deleted"),
            hint,
        ),
        (Some(_), Some(b)) => {
            let bound_to = b.spec.as_ref().and_then(|s| s.policy_name.as_deref());
            if bound_to == Some(policy_name.as_str()) {
                Finding::ok(
                    GROUP,
                    "lease policy",
                    format!("{policy_name} and its binding {binding_name} are present"),
                )
            } else {
                Finding::fail(
                    GROUP,
                    "lease policy",
                    format!(
                        "binding {binding_name} binds {}, not {policy_name}",
                        bound_to.unwrap_or("nothing")
                    ),
                    hint,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;
