//! One NetworkPolicy per IdSequence, in its namespace, for the sidecars' ports on the pod IP
//! (issue 54; docs/install.md, "Network policies"). Off unless the operator runs with
//! `--sequence-network-policy` (chart: `sequenceNetworkPolicy.mode`).
//!
//! The policy `<sequence>-kubeflake` selects the sequence's pods (`kubeflake.io/sequence`)
//! for ingress and allows:
//! - the strict oracle's port (strict sequences only) from the sequence's own pods;
//! - the probe port (`/healthz`, `/readyz`, `/metrics`) from the configured peers, or from
//!   anywhere when none are configured (the kubelet's probes come from the node, which
//!   NetworkPolicy never blocks; Prometheus needs it);
//! - with [`Mode::AllowOtherPorts`], every other port from anywhere (TCP around the two
//!   sidecar ports, all of UDP and SCTP), so the app keeps working; this also opens those
//!   ports of these pods when a default-deny policy of the namespace closed them, which is
//!   why the mode is a choice and the whole feature is off by default. With
//!   [`Mode::KubeflakePortsOnly`] the app's ports are closed unless other policies allow
//!   them.
//!
//! It is kubeflake's by its name, the label [`POLICY_LABEL`] naming the sequence and the
//! IdSequence as its controller (so it is garbage-collected with it). A same-named policy
//! without both is *foreign*: never adopted, changed or deleted, and reported once (a
//! Warning Event `ForeignNetworkPolicy`, the log and
//! `kubeflake_operator_network_policies_total{outcome="foreign"}`), like a foreign Lease
//! (docs/safety.md rule 16). Every write is a compare-and-swap (create, or replace with the
//! version read). A failure is logged and counted and never stops the pass: slots and
//! claims do not wait on a NetworkPolicy.
//!
//! The policy is read by name on every pass (no cache): one GET per sequence per pass.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kubeflake_crds::sequence::{IdSequence, Mode as SequenceMode};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;

use super::context::Context;
use super::error::{is_conflict, is_not_found};
pub use crate::network_policies::{Config, Mode, SequencePolicies};

/// Label on the policy: the sequence it belongs to. With the IdSequence as controller
/// owner, what makes a policy of that name kubeflake's.
pub const POLICY_LABEL: &str = "kubeflake.io/network-policy";
/// The Event reason of a foreign policy.
pub const FOREIGN_REASON: &str = "ForeignNetworkPolicy";

/// The policy's name for sequence `name`.
pub fn policy_name(sequence: &str) -> String {
    format!("{sequence}-kubeflake")
}

fn tcp(port: u16, end: Option<u16>) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port.into())),
        end_port: end.map(i32::from),
        protocol: Some("TCP".into()),
    }
}

/// TCP ports 1..=65535 without `holes`, as ranges.
fn tcp_around(holes: &[u16]) -> Vec<NetworkPolicyPort> {
    let mut holes: Vec<u16> = holes.iter().copied().filter(|p| *p > 0).collect();
    holes.sort_unstable();
    holes.dedup();
    let mut ranges = Vec::new();
    let mut from: u32 = 1;
    for hole in holes.into_iter().map(u32::from).chain([65_536]) {
        if from < hole {
            let (start, end) = (from as u16, (hole - 1) as u16);
            ranges.push(tcp(start, (end > start).then_some(end)));
        }
        from = hole + 1;
    }
    ranges
}

fn sequence_pods(sequence: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            SEQUENCE_LABEL.to_string(),
            sequence.to_string(),
        )])),
        ..Default::default()
    }
}

fn is_strict(seq: &IdSequence) -> bool {
    seq.spec.mode == SequenceMode::Segment && seq.spec.segment.as_ref().is_some_and(|s| s.strict)
}

/// The policy `seq` should have.
pub fn desired(seq: &IdSequence, config: &Config) -> NetworkPolicy {
    let name = seq.name_any();
    let mut ingress = Vec::new();
    if is_strict(seq) {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(sequence_pods(&name)),
                ..Default::default()
            }]),
            ports: Some(vec![tcp(config.oracle_port, None)]),
        });
    }
    ingress.push(NetworkPolicyIngressRule {
        from: (!config.probe_from.is_empty()).then(|| config.probe_from.clone()),
        ports: Some(vec![tcp(config.probe_port, None)]),
    });
    if config.mode == Mode::AllowOtherPorts {
        let mut ports = tcp_around(&[config.probe_port, config.oracle_port]);
        for protocol in ["UDP", "SCTP"] {
            ports.push(NetworkPolicyPort {
                protocol: Some(protocol.into()),
                ..Default::default()
            });
        }
        ingress.push(NetworkPolicyIngressRule {
            from: None,
            ports: Some(ports),
        });
    }
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(policy_name(&name)),
            namespace: seq.namespace(),
            labels: Some(BTreeMap::from([
                (POLICY_LABEL.to_string(), name.clone()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "kubeflake".to_string(),
                ),
            ])),
            owner_references: seq.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(sequence_pods(&name)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            egress: None,
        }),
    }
}

/// Why a policy with the sequence's policy name is not kubeflake's; `None` when it is.
pub fn foreign(seq: &IdSequence, policy: &NetworkPolicy) -> Option<String> {
    let name = seq.name_any();
    let label = policy.labels().get(POLICY_LABEL);
    if label != Some(&name) {
        return Some(match label {
            None => format!("it has no {POLICY_LABEL} label"),
            Some(other) => format!("its {POLICY_LABEL} label names {other:?}, not {name:?}"),
        });
    }
    let uid = seq.metadata.uid.as_deref().unwrap_or_default();
    let owned = policy
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && !uid.is_empty() && o.uid == uid);
    (!owned).then(|| format!("it is not controlled by IdSequence {name} (uid {uid:?})"))
}

/// What [`keep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Updated,
    Unchanged,
    Foreign,
    /// Another writer was first (409): the next pass reads again.
    Conflict,
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Foreign => "foreign",
            Outcome::Conflict => "conflict",
            Outcome::Error => "error",
        }
    }
}

/// Makes `seq`'s policy what [`desired`] says, when the operator makes policies; a no-op
/// otherwise. Never fails the pass: errors are logged and counted.
pub async fn keep(seq: &IdSequence, ctx: &Context) -> Option<Outcome> {
    let policies = ctx.network_policies.as_ref()?;
    let outcome = match write(seq, ctx, policies).await {
        Ok(outcome) => outcome,
        Err(e) if is_conflict(&e) => Outcome::Conflict,
        Err(e) => {
            tracing::warn!(sequence = %seq.name_any(), namespace = seq.namespace().unwrap_or_default(), error = %e, "cannot keep the sequence's NetworkPolicy (the operator needs get, create and update on networkpolicies); slots are handed out regardless");
            Outcome::Error
        }
    };
    // A foreign policy is counted once, when first found (in `write`).
    if !matches!(outcome, Outcome::Unchanged | Outcome::Foreign) {
        ctx.metrics
            .network_policies
            .with_label_values(&[outcome.label()])
            .inc();
    }
    Some(outcome)
}

async fn write(
    seq: &IdSequence,
    ctx: &Context,
    policies: &SequencePolicies,
) -> Result<Outcome, kube::Error> {
    let ns = seq.namespace().unwrap_or_default();
    let want = desired(seq, &policies.config);
    let name = want.name_any();
    if want.metadata.owner_references.is_none() {
        tracing::warn!(sequence = %seq.name_any(), namespace = %ns, "the IdSequence has no uid, so its NetworkPolicy could not be owned by it; none is made");
        return Ok(Outcome::Error);
    }
    let key = format!("{ns}/{name}");
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(found) = api.get_opt(&name).await? else {
        policies.note_foreign(&key, false);
        return match api.create(&PostParams::default(), &want).await {
            Ok(_) => Ok(Outcome::Created),
            // Made meanwhile, by another operator or someone else: judged on the next pass.
            Err(e) if is_conflict(&e) => Ok(Outcome::Conflict),
            Err(e) => Err(e),
        };
    };
    if let Some(why) = foreign(seq, &found) {
        if policies.note_foreign(&key, true) {
            ctx.metrics
                .network_policies
                .with_label_values(&[Outcome::Foreign.label()])
                .inc();
            report_foreign(seq, ctx, &name, &why).await;
        }
        return Ok(Outcome::Foreign);
    }
    policies.note_foreign(&key, false);
    if found.spec == want.spec && found.labels() == want.labels() {
        return Ok(Outcome::Unchanged);
    }
    let mut replaced = found;
    replaced.spec = want.spec;
    replaced.metadata.labels = want.metadata.labels;
    match api.replace(&name, &PostParams::default(), &replaced).await {
        Ok(_) => Ok(Outcome::Updated),
        Err(e) if is_not_found(&e) => Ok(Outcome::Conflict),
        Err(e) => Err(e),
    }
}

async fn report_foreign(seq: &IdSequence, ctx: &Context, name: &str, why: &str) {
    let ns = seq.namespace().unwrap_or_default();
    let message = format!(
        "NetworkPolicy {name} has the name of kubeflake's policy for IdSequence {seq_name} but \
         was not made by kubeflake ({why}); it is neither used, changed nor deleted, and the \
         sequence's sidecar ports get no kubeflake policy. Delete it (kubectl delete \
         networkpolicy -n {ns} {name}) if nobody needs it, and kubeflake makes its own",
        seq_name = seq.name_any(),
    );
    tracing::error!(sequence = %seq.name_any(), namespace = %ns, policy = name, %message, "foreign NetworkPolicy");
    let event = Event {
        type_: EventType::Warning,
        reason: FOREIGN_REASON.into(),
        note: Some(message.chars().take(1000).collect()),
        action: "CheckNetworkPolicy".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &seq.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an Event");
    }
}
