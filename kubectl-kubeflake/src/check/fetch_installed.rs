//! Reads what `check` judges after install. A read the API server refuses becomes a failed
//! check naming what could not be read (the others still run); only an unreachable API
//! server ends the command (exit 1).

use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, CustomResourceExt, Resource};
use kubeflake_crds::sequence::{IdSequence, Mode};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;

use super::model::Finding;
use super::operator::{
    OperatorNames, judge_crd, judge_deployment, judge_leader, judge_lease_policy,
};
use super::sequences::{judge_sequence, judge_sidecar_versions};
use super::webhook::{
    ProbeAnswer, has_sidecar, judge_ca_bundle, judge_config, judge_endpoints, judge_probe,
    probe_namespace, probe_pod,
};
use crate::error::CliError;

/// The labels every object of the chart carries, and the operator Deployment's.
const PART_OF: &str = "app.kubernetes.io/part-of=kubeflake";

/// A failed check for a read the API server refused.
fn unreadable(group: &str, check: &str, what: &str, e: &kube::Error) -> Finding {
    Finding::fail(
        group,
        check,
        format!("cannot read {what}: {e}"),
        "run check with rights to read it (kubectl auth can-i get/list it), or as a cluster administrator",
    )
}

/// Where to look: the operator's namespace, and the sequences' (`None`: all namespaces).
pub struct Scope<'a> {
    pub operator_namespace: &'a str,
    pub sequence_namespace: Option<&'a str>,
    pub release: &'a str,
}

/// Every finding after install.
pub async fn run(
    client: &Client,
    scope: &Scope<'_>,
    now: DateTime<Utc>,
) -> Result<Vec<Finding>, CliError> {
    client
        .apiserver_version()
        .await
        .map_err(|source| CliError::Api {
            what: "reach the API server".to_string(),
            source,
        })?;
    let mut findings = Vec::new();
    let crd_name = IdSequence::crd_name();
    let crd_present = match Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(crd_name)
        .await
    {
        Ok(crd) => {
            findings.push(judge_crd(crd.as_ref(), crd_name, &IdSequence::version(&())));
            crd.is_some()
        }
        Err(e) => {
            findings.push(unreadable(
                "operator",
                "CRD",
                &format!("customresourcedefinition {crd_name}"),
                &e,
            ));
            false
        }
    };
    operator_and_webhook(client, scope, now, &mut findings).await;
    if crd_present {
        sequences(client, scope, now, &mut findings).await;
    }
    Ok(findings)
}

async fn operator_and_webhook(
    client: &Client,
    scope: &Scope<'_>,
    now: DateTime<Utc>,
    findings: &mut Vec<Finding>,
) {
    let ns = scope.operator_namespace;
    let listed = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(PART_OF))
        .await;
    let deployment = match listed {
        Ok(list) => list
            .items
            .into_iter()
            .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name)),
        Err(e) => {
            findings.push(unreadable(
                "operator",
                "deployment",
                &format!("deployments in {ns}"),
                &e,
            ));
            return;
        }
    };
    findings.push(judge_deployment(deployment.as_ref(), ns));
    let Some(deployment) = deployment else {
        return;
    };
    let names = OperatorNames::of(&deployment);
    let operator = Operator {
        namespace: ns,
        deployment: deployment.metadata.name.as_deref().unwrap_or("?"),
        probe_namespace: scope.sequence_namespace,
    };
    if let Some(lease_ns) = &names.leader_namespace {
        match Api::<Lease>::namespaced(client.clone(), lease_ns)
            .get_opt(&names.leader_lease)
            .await
        {
            Ok(lease) => findings.push(judge_leader(&names, lease.as_ref(), now)),
            Err(e) => findings.push(unreadable(
                "operator",
                "leader",
                &format!("lease {lease_ns}/{}", names.leader_lease),
                &e,
            )),
        }
    } else {
        findings.push(judge_leader(&names, None, now));
    }
    let (policy, binding) = match (&names.lease_policy, &names.lease_policy_binding) {
        (Some(p), Some(b)) if !names.without_lease_policy => {
            let policy = Api::<ValidatingAdmissionPolicy>::all(client.clone())
                .get_opt(p)
                .await;
            let binding = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
                .get_opt(b)
                .await;
            match (policy, binding) {
                (Ok(p), Ok(b)) => (p, b),
                (Err(e), _) | (_, Err(e)) => {
                    findings.push(unreadable(
                        "operator",
                        "lease policy",
                        &format!("the Lease policy {p} and its binding {b}"),
                        &e,
                    ));
                    return webhook(client, &names, &operator, now, findings).await;
                }
            }
        }
        _ => (None, None),
    };
    findings.push(judge_lease_policy(
        &names,
        policy.as_ref(),
        binding.as_ref(),
    ));
    webhook(client, &names, &operator, now, findings).await;
}

/// The operator Deployment found: the webhook's hints name it.
struct Operator<'a> {
    namespace: &'a str,
    deployment: &'a str,
    /// Where the webhook probe's pod goes when the webhook selects it (`-n`).
    probe_namespace: Option<&'a str>,
}

async fn webhook(
    client: &Client,
    names: &OperatorNames,
    operator: &Operator<'_>,
    now: DateTime<Utc>,
    findings: &mut Vec<Finding>,
) {
    let Some(name) = &names.webhook_config else {
        findings.push(Finding::warn(
            "webhook",
            "configuration",
            "the operator runs without a webhook (no --webhook-config): labelled pods get no sidecar",
            "install with webhook.enabled=true unless pods get their sidecars another way (docs/install.md)",
        ));
        return;
    };
    let config = match Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(name)
        .await
    {
        Ok(config) => config,
        Err(e) => {
            findings.push(unreadable(
                "webhook",
                "configuration",
                &format!("mutatingwebhookconfiguration {name}"),
                &e,
            ));
            return;
        }
    };
    let (finding, service) = judge_config(config.as_ref(), name);
    findings.push(finding);
    if let Some((ns, svc)) = service {
        let selector = format!("kubernetes.io/service-name={svc}");
        match Api::<EndpointSlice>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(slices) => findings.push(judge_endpoints(&ns, &svc, &slices.items)),
            Err(e) => findings.push(unreadable(
                "webhook",
                "endpoints",
                &format!("the endpoint slices of {ns}/{svc}"),
                &e,
            )),
        }
    }
    if let Some(config) = &config {
        findings.push(judge_ca_bundle(
            config,
            operator.namespace,
            operator.deployment,
            now,
        ));
        findings.push(probe(client, config, operator).await);
    }
}

/// Creates a labelled pod with a dry run (nothing is stored) where the webhook is called,
/// and judges what came back ([`judge_probe`]).
async fn probe(
    client: &Client,
    config: &MutatingWebhookConfiguration,
    operator: &Operator<'_>,
) -> Finding {
    let Some(namespace) = probe_namespace(config, operator.probe_namespace) else {
        return Finding::warn(
            "webhook",
            "answers the API server",
            "not tried: the webhook's namespaceSelector leaves out every namespace check would try",
            "run check with -n <a namespace with IdSequences>",
        );
    };
    let pod: Pod = match serde_json::from_value(probe_pod()) {
        Ok(pod) => pod,
        Err(e) => {
            return Finding::fail(
                "webhook",
                "answers the API server",
                format!("internal error building the probe pod: {e}"),
                "report this as a bug",
            );
        }
    };
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some("kubectl-kubeflake-check".to_string()),
    };
    let answer = match Api::<Pod>::namespaced(client.clone(), &namespace)
        .create(&dry_run, &pod)
        .await
    {
        Ok(pod) => ProbeAnswer::Admitted {
            injected: has_sidecar(&pod),
        },
        Err(kube::Error::Api(status)) => ProbeAnswer::Refused {
            code: status.code,
            message: status.message,
        },
        Err(e) => ProbeAnswer::Refused {
            code: 0,
            message: e.to_string(),
        },
    };
    judge_probe(&answer, &namespace, operator.namespace, operator.deployment)
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn sequences(
    client: &Client,
    scope: &Scope<'_>,
    now: DateTime<Utc>,
    findings: &mut Vec<Finding>,
) {
    let where_ = scope
        .sequence_namespace
        .map_or("all namespaces".to_string(), |ns| format!("namespace {ns}"));
    let labelled = ListParams::default().labels(SEQUENCE_LABEL);
    let read = async {
        let seqs = api::<IdSequence>(client, scope.sequence_namespace)
            .list(&ListParams::default())
            .await?;
        let pods = api::<Pod>(client, scope.sequence_namespace)
            .list(&labelled)
            .await?;
        let leases = api::<Lease>(client, scope.sequence_namespace)
            .list(&labelled)
            .await?;
        Ok::<_, kube::Error>((seqs.items, pods.items, leases.items))
    };
    let (seqs, pods, leases) = match read.await {
        Ok(all) => all,
        Err(e) => {
            findings.push(unreadable(
                "sequences",
                "list",
                &format!("idsequences, their pods and leases in {where_}"),
                &e,
            ));
            return;
        }
    };
    if seqs.is_empty() {
        findings.push(Finding::ok(
            "sequences",
            "list",
            format!("no IdSequence in {where_}"),
        ));
    }
    let now_ms = now.timestamp_millis();
    for seq in &seqs {
        let ns = seq.metadata.namespace.as_deref().unwrap_or_default();
        let name = seq.metadata.name.as_deref().unwrap_or_default();
        let of_seq = |labels: &Option<std::collections::BTreeMap<String, String>>,
                      object_ns: &Option<String>| {
            object_ns.as_deref() == Some(ns)
                && labels
                    .as_ref()
                    .and_then(|l| l.get(SEQUENCE_LABEL))
                    .map(String::as_str)
                    == Some(name)
        };
        let waiting = match (seq.spec.mode, seq.spec.params()) {
            (Mode::Snowflake, Ok(params)) => {
                let pods: Vec<Pod> = pods
                    .iter()
                    .filter(|p| of_seq(&p.metadata.labels, &p.metadata.namespace))
                    .cloned()
                    .collect();
                let leases: Vec<Lease> = leases
                    .iter()
                    .filter(|l| of_seq(&l.metadata.labels, &l.metadata.namespace))
                    .cloned()
                    .collect();
                crate::slots::build(name, ns, &params, &leases, &pods, false, now_ms).waiting
            }
            _ => Vec::new(),
        };
        findings.extend(judge_sequence(seq, &waiting, now));
    }
    findings.push(judge_sidecar_versions(&pods, scope.release));
}
