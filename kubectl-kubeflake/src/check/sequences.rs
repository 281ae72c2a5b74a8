//! `check` after install, the sequences and the pods: each IdSequence's Ready condition,
//! slots free, the date its timestamp bits run out, pods waiting for a slot and foreign
//! Leases; and sidecars injected by a release outside the skew policy (docs/install.md,
//! "Which versions work together": the operator's release and the one before or after).

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::contract::INJECTED_ANNOTATION;
use kubeflake_crds::sequence::{IdSequence, Mode};

use super::model::Finding;
use crate::slots::WaitingPod;

const NOT_RECONCILING: &str = "docs/alerts.md#kubeflakeoperatornotreconciling";
const EXHAUSTED: &str = "docs/alerts.md#kubeflakeslotsexhausted";
const USAGE_HIGH: &str = "docs/alerts.md#kubeflakeslotusagehigh";
const WAITING: &str = "docs/alerts.md#kubeflakepodswaitingforslot";
const EXPIRING: &str = "docs/alerts.md#kubeflaketimestampbitsexpiring";
const FOREIGN: &str = "docs/alerts.md#kubeflakeforeignleases";
const SKEW: &str = "docs/install.md#which-versions-work-together";

/// Slots held from this share on are a warning (as the alert KubeflakeSlotUsageHigh).
pub const USAGE_WARN_PERCENT: i64 = 80;
/// Timestamp bits that run out sooner than this are a warning (the `Expiring` condition).
pub const LIFETIME_WARN_DAYS: i64 = 365;

/// Every finding for one sequence; `waiting` are its labelled pods without a slot.
pub fn judge_sequence(
    seq: &IdSequence,
    waiting: &[WaitingPod],
    now: DateTime<Utc>,
) -> Vec<Finding> {
    let ns = seq.metadata.namespace.as_deref().unwrap_or("default");
    let name = seq.metadata.name.as_deref().unwrap_or("?");
    let group = format!("sequence {ns}/{name}");
    let status = seq.status.as_ref();
    let mut out = Vec::new();
    out.push(match condition(status, ConditionType::Ready) {
        Some(c) if c.status == "True" => {
            Finding::ok(&group, "ready", format!("Ready ({})", c.reason))
        }
        Some(c) => Finding::fail(
            &group,
            "ready",
            format!("not Ready ({}): {}", c.reason, c.message),
            format!(
                "kubectl describe idsequence {name} -n {ns} shows its Events ({})",
                runbook_for(&c.reason)
            ),
        ),
        None => Finding::warn(
            &group,
            "ready",
            "no Ready condition: the operator has not reconciled it yet",
            format!("check that the operator runs and leads ({NOT_RECONCILING})"),
        ),
    });
    let exhausted = condition(status, ConditionType::Exhausted).filter(|c| c.status == "True");
    if seq.spec.mode == Mode::Segment {
        out.push(match exhausted {
            Some(c) => Finding::fail(
                &group,
                "counter",
                format!("exhausted: {}", c.message),
                "the counter reached its limit: no value is left (docs/segment.md)",
            ),
            None => Finding::ok(&group, "counter", "values left"),
        });
    } else {
        out.push(judge_slots(
            &group,
            name,
            ns,
            seq,
            exhausted.map(|c| c.message.as_str()),
        ));
        out.push(judge_waiting(&group, name, ns, waiting));
        out.push(judge_lifetime(&group, seq, now));
    }
    if let Some(c) = condition(status, ConditionType::ForeignLeases).filter(|c| c.status == "True")
    {
        out.push(Finding::warn(
            &group,
            "foreign leases",
            c.message.clone(),
            format!("rename or delete the Leases that kubeflake did not make ({FOREIGN})"),
        ));
    }
    out
}

fn runbook_for(reason: &str) -> &'static str {
    match reason {
        "LeasePolicyMissing" => "docs/alerts.md#kubeflakeleasepolicymissing",
        "ForeignLease" => FOREIGN,
        "InvalidSpec" | "EpochInFuture" => "docs/configuration.md",
        _ => NOT_RECONCILING,
    }
}

fn judge_slots(
    group: &str,
    name: &str,
    ns: &str,
    seq: &IdSequence,
    exhausted: Option<&str>,
) -> Finding {
    let status = seq.status.as_ref();
    let (Some(capacity), Some(assigned)) = (
        status.and_then(|s| s.capacity),
        status.and_then(|s| s.assigned),
    ) else {
        return Finding::warn(
            group,
            "slots",
            "the status shows no slot counts yet",
            format!("check that the operator runs and leads ({NOT_RECONCILING})"),
        );
    };
    let free = (capacity - assigned).max(0);
    let detail = format!("{free} of {capacity} free");
    let look = format!("kubectl kubeflake slots {name} -n {ns}");
    if let Some(message) = exhausted {
        Finding::fail(
            group,
            "slots",
            format!("{detail}; exhausted: {message}"),
            format!(
                "{look}; free slots by scaling down, or a layout with more worker bits ({EXHAUSTED})"
            ),
        )
    } else if capacity > 0 && assigned * 100 >= capacity * USAGE_WARN_PERCENT {
        Finding::warn(
            group,
            "slots",
            format!("{detail}: {USAGE_WARN_PERCENT}% or more held"),
            format!("{look} ({USAGE_HIGH})"),
        )
    } else {
        Finding::ok(group, "slots", detail)
    }
}

fn judge_waiting(group: &str, name: &str, ns: &str, waiting: &[WaitingPod]) -> Finding {
    if waiting.is_empty() {
        return Finding::ok(group, "waiting pods", "none");
    }
    let names: Vec<String> = waiting
        .iter()
        .map(|w| match w.waiting_seconds {
            Some(s) => format!("{} ({s}s)", w.pod),
            None => w.pod.clone(),
        })
        .collect();
    Finding::warn(
        group,
        "waiting pods",
        format!("{} waiting for a slot: {}", waiting.len(), names.join(", ")),
        format!("kubectl kubeflake slots {name} -n {ns} ({WAITING})"),
    )
}

fn judge_lifetime(group: &str, seq: &IdSequence, now: DateTime<Utc>) -> Finding {
    let Some(text) = seq.status.as_ref().and_then(|s| s.exhausts_at.as_deref()) else {
        return Finding::warn(
            group,
            "lifetime",
            "the status shows no exhaustion date yet",
            format!("check that the operator runs and leads ({NOT_RECONCILING})"),
        );
    };
    let Ok(at) = DateTime::parse_from_rfc3339(text) else {
        return Finding::warn(
            group,
            "lifetime",
            format!("status.exhaustsAt {text:?} is not an RFC 3339 time"),
            format!("check that the operator runs and leads ({NOT_RECONCILING})"),
        );
    };
    let days = (at.with_timezone(&Utc) - now).num_days();
    if at <= now {
        Finding::fail(
            group,
            "lifetime",
            format!("its timestamp bits ran out at {text}: no ID can be made"),
            format!("move to a new sequence with a later epoch ({EXPIRING})"),
        )
    } else if days < LIFETIME_WARN_DAYS {
        Finding::warn(
            group,
            "lifetime",
            format!("timestamp bits run out at {text}, in {days} days"),
            format!("plan the move to a new sequence ({EXPIRING})"),
        )
    } else {
        Finding::ok(
            group,
            "lifetime",
            format!("timestamp bits last until {text}"),
        )
    }
}

/// `major.minor` of a version such as `0.2.0` (a pre-release suffix is ignored).
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.split(['-', '+']).next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether a sidecar of `sidecar`'s release works with `release`'s operator: the same
/// release, or one minor release before or after it.
pub fn supported(sidecar: &str, release: &str) -> bool {
    match (major_minor(sidecar), major_minor(release)) {
        (Some((a, x)), Some((b, y))) => a == b && x.abs_diff(y) <= 1,
        _ => false,
    }
}

/// Pods whose sidecar was injected by a release outside the skew policy.
pub fn judge_sidecar_versions(pods: &[Pod], release: &str) -> Finding {
    let mut injected = 0;
    let mut outside = Vec::new();
    for pod in pods {
        let Some(version) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INJECTED_ANNOTATION))
        else {
            continue;
        };
        injected += 1;
        if !supported(version, release) {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or("?");
            outside.push(format!("{ns}/{name} ({version})"));
        }
    }
    if outside.is_empty() {
        Finding::ok(
            "sidecars",
            "versions",
            format!(
                "{injected} injected pod{} within one release of {release}",
                if injected == 1 { "" } else { "s" }
            ),
        )
    } else {
        Finding::fail(
            "sidecars",
            "versions",
            format!(
                "{} of {injected} injected pods run a sidecar outside the skew policy of {release}: {}",
                outside.len(),
                outside.join(", ")
            ),
            format!(
                "recreate them (kubectl rollout restart) so the webhook injects this release's sidecar ({SKEW})"
            ),
        )
    }
}

#[cfg(test)]
mod tests;
