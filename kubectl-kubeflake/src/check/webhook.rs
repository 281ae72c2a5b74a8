//! `check` after install, the injection webhook: its configuration present, its Service
//! backed by ready endpoints, the CA bundle the API server trusts not expired nor
//! expiring within [`EXPIRY_WARN_DAYS`], and the API server actually getting the webhook's
//! answer (a dry-run create of a labelled pod: the one check that sees a `caBundle` from
//! another CA than the one that signed the serving certificate).

use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use kubeflake_crds::contract::SIDECAR_NAME;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;

use super::cert::bundle_validity;
use super::model::Finding;

const GROUP: &str = "webhook";
const RUNBOOK: &str = "docs/alerts.md#kubeflakewebhookerrors";

/// A CA certificate that expires sooner than this is a warning.
pub const EXPIRY_WARN_DAYS: i64 = 30;

/// The configuration by name, and the Service its first webhook calls (namespace, name).
pub fn judge_config(
    config: Option<&MutatingWebhookConfiguration>,
    name: &str,
) -> (Finding, Option<(String, String)>) {
    let Some(config) = config else {
        return (
            Finding::fail(
                GROUP,
                "configuration",
                format!(
                    "MutatingWebhookConfiguration {name} is missing: labelled pods get no sidecar"
                ),
                "helm upgrade (your values as before) recreates it (docs/install.md)",
            ),
            None,
        );
    };
    let service = config
        .webhooks
        .iter()
        .flatten()
        .find_map(|w| w.client_config.service.as_ref())
        .map(|s| (s.namespace.clone(), s.name.clone()));
    match service {
        Some((ns, svc)) => (
            Finding::ok(
                GROUP,
                "configuration",
                format!("{name} calls service {ns}/{svc}"),
            ),
            Some((ns, svc)),
        ),
        None => (
            Finding::fail(
                GROUP,
                "configuration",
                format!("{name} has no webhook calling a service"),
                "helm upgrade (your values as before) restores it (docs/install.md)",
            ),
            None,
        ),
    }
}

/// Whether the webhook's Service has a ready endpoint (an endpoint whose `ready` is unset
/// counts as ready, as the EndpointSlice API says).
pub fn judge_endpoints(namespace: &str, service: &str, slices: &[EndpointSlice]) -> Finding {
    let ready = slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .count();
    if ready == 0 {
        Finding::fail(
            GROUP,
            "endpoints",
            format!(
                "service {namespace}/{service} has no ready endpoint: the API server cannot call the webhook"
            ),
            format!(
                "make the operator's pods ready: kubectl -n {namespace} describe pods -l app.kubernetes.io/component=operator ({RUNBOOK})"
            ),
        )
    } else {
        Finding::ok(
            GROUP,
            "endpoints",
            format!(
                "service {namespace}/{service} has {ready} ready endpoint{}",
                if ready == 1 { "" } else { "s" }
            ),
        )
    }
}

/// The `caBundle` the API server uses to trust the webhook: every certificate valid now
/// and for [`EXPIRY_WARN_DAYS`] more days. `namespace`/`deployment` is the operator, which
/// the hint tells to restart.
pub fn judge_ca_bundle(
    config: &MutatingWebhookConfiguration,
    namespace: &str,
    deployment: &str,
    now: DateTime<Utc>,
) -> Finding {
    let name = config.metadata.name.as_deref().unwrap_or("?");
    let bundle = config
        .webhooks
        .iter()
        .flatten()
        .find_map(|w| w.client_config.ca_bundle.as_ref())
        .map(|b| b.0.as_slice())
        .filter(|b| !b.is_empty());
    let rotate = format!(
        "the operator renews its certificates and patches caBundle at start: kubectl -n {namespace} rollout restart deploy/{deployment} (with cert-manager: check its Certificate) ({RUNBOOK})"
    );
    let Some(bundle) = bundle else {
        return Finding::fail(
            GROUP,
            "CA certificate",
            format!("{name} has an empty caBundle: the API server cannot trust the webhook"),
            rotate,
        );
    };
    let certs = match bundle_validity(bundle) {
        Ok(certs) => certs,
        Err(e) => {
            return Finding::fail(
                GROUP,
                "CA certificate",
                format!("the caBundle of {name} cannot be read: {e}"),
                rotate,
            );
        }
    };
    let Some(first_to_expire) = certs.iter().map(|c| c.not_after).min() else {
        return Finding::fail(
            GROUP,
            "CA certificate",
            format!("{name} has no certificate in its caBundle"),
            rotate,
        );
    };
    let days = (first_to_expire - now).num_days();
    let at = first_to_expire.format("%Y-%m-%dT%H:%M:%SZ");
    if first_to_expire <= now {
        Finding::fail(
            GROUP,
            "CA certificate",
            format!("expired at {at}: the API server refuses the webhook's certificate"),
            rotate,
        )
    } else if let Some(not_yet) = certs
        .iter()
        .map(|c| c.not_before)
        .filter(|t| *t > now)
        .min()
    {
        Finding::fail(
            GROUP,
            "CA certificate",
            format!(
                "not valid before {}: is this machine's or the operator's clock wrong?",
                not_yet.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            rotate,
        )
    } else if days < EXPIRY_WARN_DAYS {
        Finding::warn(
            GROUP,
            "CA certificate",
            format!("expires at {at}, in {days} days"),
            rotate,
        )
    } else {
        Finding::ok(
            GROUP,
            "CA certificate",
            format!("valid until {at} ({days} days)"),
        )
    }
}

/// The sequence named by the probe pod's label: one no one creates, so a webhook that
/// answers refuses the pod with "IdSequence ... not found" (nothing is stored: a dry run).
pub const PROBE_SEQUENCE: &str = "kubeflake-check-probe-no-such-sequence";

/// The namespace to send the probe pod to: one the webhook's `namespaceSelector` selects
/// by name. `preferred` (the `-n` namespace) when allowed, else the first name of an `In`
/// list, else `default`; `None` when the selector leaves every candidate out.
pub fn probe_namespace(
    config: &MutatingWebhookConfiguration,
    preferred: Option<&str>,
) -> Option<String> {
    let (mut only, mut never) = (None::<Vec<String>>, Vec::<String>::new());
    let expressions = config
        .webhooks
        .iter()
        .flatten()
        .filter_map(|w| w.namespace_selector.as_ref())
        .filter_map(|s| s.match_expressions.as_ref())
        .flatten()
        .filter(|e| e.key == "kubernetes.io/metadata.name");
    for e in expressions {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => only = Some(values),
            "NotIn" => never.extend(values),
            _ => {}
        }
    }
    let allowed = |ns: &str| {
        only.as_ref().is_none_or(|o| o.iter().any(|v| v == ns)) && !never.iter().any(|v| v == ns)
    };
    let first_in = only.as_ref().and_then(|o| o.first().cloned());
    [
        preferred.map(str::to_string),
        first_in,
        Some("default".to_string()),
    ]
    .into_iter()
    .flatten()
    .find(|ns| allowed(ns))
}

/// What the API server answered to the dry-run create of the probe pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// Stored (dry run): `injected` when it came back with kubeflake's sidecar.
    Admitted { injected: bool },
    /// Refused, with the API server's status code and message.
    Refused { code: u16, message: String },
}

/// The dry-run pod a probe sends: labelled for [`PROBE_SEQUENCE`], never stored.
pub fn probe_pod() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "kubeflake-check-probe-",
            "labels": {SEQUENCE_LABEL: PROBE_SEQUENCE},
        },
        "spec": {"containers": [{"name": "app", "image": "kubeflake-check-probe"}]},
    })
}

/// Whether a pod the API server returned carries kubeflake's sidecar.
pub fn has_sidecar(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec.as_ref().is_some_and(|spec| {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| c.name == SIDECAR_NAME)
    })
}

/// Whether the API server got the webhook's answer for a labelled pod in `namespace`.
/// The webhook refuses a pod whose sequence does not exist, so that refusal is the proof
/// that TLS (the `caBundle` against the serving certificate) and the Service path work.
pub fn judge_probe(
    answer: &ProbeAnswer,
    namespace: &str,
    operator_namespace: &str,
    deployment: &str,
) -> Finding {
    const CHECK: &str = "answers the API server";
    match answer {
        ProbeAnswer::Admitted { injected: true } => Finding::ok(
            GROUP,
            CHECK,
            format!("a labelled pod in {namespace} (dry run) came back with the sidecar"),
        ),
        ProbeAnswer::Refused { message, .. }
            if message.contains(PROBE_SEQUENCE) && message.contains("not found") =>
        {
            Finding::ok(
                GROUP,
                CHECK,
                format!(
                    "the API server called the webhook for a labelled pod in {namespace} (dry run) and got its answer"
                ),
            )
        }
        ProbeAnswer::Refused { code: 403, message } if message.contains("cannot create") => {
            Finding::warn(
                GROUP,
                CHECK,
                format!(
                    "not tried: no right to create pods in {namespace} (dry run, nothing is stored): {message}"
                ),
                format!(
                    "run check as someone who may create pods in {namespace} (kubectl auth can-i create pods -n {namespace})"
                ),
            )
        }
        ProbeAnswer::Refused { message, .. } if message.contains("failed calling webhook") => {
            let tls = ["x509", "certificate", "tls:"]
                .iter()
                .any(|w| message.contains(w));
            let hint = if tls {
                format!(
                    "the caBundle does not trust the certificate the webhook serves: with the operator's own certificates, delete the Secret it keeps them in and restart it (kubectl -n {operator_namespace} rollout restart deploy/{deployment}); with cert-manager, check its CA injector ({RUNBOOK})"
                )
            } else {
                format!(
                    "the API server cannot reach the webhook: check the operator's pods and the network policies between the API server and {operator_namespace} ({RUNBOOK})"
                )
            };
            Finding::fail(
                GROUP,
                CHECK,
                format!("a labelled pod in {namespace} is refused: {message}"),
                hint,
            )
        }
        ProbeAnswer::Refused { code, message } => Finding::warn(
            GROUP,
            CHECK,
            format!(
                "a labelled pod in {namespace} (dry run) was refused by something else ({code}): {message}"
            ),
            "read the message: another admission webhook or policy refused it before kubeflake's answer could be seen",
        ),
        ProbeAnswer::Admitted { injected: false } => Finding::warn(
            GROUP,
            CHECK,
            format!(
                "a labelled pod in {namespace} (dry run) was admitted without a sidecar and without the webhook's refusal of an unknown sequence: the webhook was not called, or failed and failurePolicy Ignore let the pod through"
            ),
            format!(
                "check the webhook's namespaceSelector and failurePolicy (kubectl get mutatingwebhookconfiguration -o yaml) and the operator's logs ({RUNBOOK})"
            ),
        ),
    }
}

#[cfg(test)]
mod tests;
