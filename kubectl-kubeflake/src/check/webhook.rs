//! `check` after install, the injection webhook: its configuration present, its Service
//! backed by ready endpoints, and the CA bundle the API server trusts not expired nor
//! expiring within [`EXPIRY_WARN_DAYS`].

use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::discovery::v1::EndpointSlice;

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

#[cfg(test)]
mod tests;
