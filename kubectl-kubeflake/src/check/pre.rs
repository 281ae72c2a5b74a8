//! `check --pre`: can the chart be installed here? The Kubernetes version, the API kinds
//! the chart creates being served, and the installer's rights to create them. Judgements
//! are pure functions over what the API server answered; [`super::fetch_pre`] asks it.

use std::collections::{BTreeMap, BTreeSet};

use super::model::Finding;

const GROUP: &str = "kubernetes";

/// The oldest Kubernetes the chart supports (Chart.yaml `kubeVersion: ">=1.30.0-0"`):
/// ValidatingAdmissionPolicy v1 (the Lease policy) and native sidecars.
pub const MIN_MINOR: u32 = 30;

/// One kind the chart creates: its group/version, its resource, and whether it lives in
/// the release's namespace (else cluster-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChartKind {
    pub group_version: &'static str,
    pub resource: &'static str,
    pub namespaced: bool,
}

const fn kind(group_version: &'static str, resource: &'static str, namespaced: bool) -> ChartKind {
    ChartKind {
        group_version,
        resource,
        namespaced,
    }
}

/// What `helm install` of the chart creates with its default values (and the CRD in
/// `crds/`). cert-manager and Prometheus Operator kinds are optional and not listed.
pub const CHART_KINDS: [ChartKind; 20] = [
    kind(
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        false,
    ),
    kind(
        "admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        false,
    ),
    kind(
        "admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        false,
    ),
    kind(
        "admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        false,
    ),
    kind("rbac.authorization.k8s.io/v1", "clusterroles", false),
    kind("rbac.authorization.k8s.io/v1", "clusterrolebindings", false),
    kind("flowcontrol.apiserver.k8s.io/v1", "flowschemas", false),
    kind(
        "flowcontrol.apiserver.k8s.io/v1",
        "prioritylevelconfigurations",
        false,
    ),
    kind("rbac.authorization.k8s.io/v1", "roles", true),
    kind("rbac.authorization.k8s.io/v1", "rolebindings", true),
    kind("apps/v1", "deployments", true),
    kind("coordination.k8s.io/v1", "leases", true),
    kind("policy/v1", "poddisruptionbudgets", true),
    kind("networking.k8s.io/v1", "networkpolicies", true),
    kind("v1", "services", true),
    kind("v1", "serviceaccounts", true),
    kind("v1", "configmaps", true),
    kind("v1", "secrets", true),
    kind("authorization.k8s.io/v1", "selfsubjectaccessreviews", false),
    kind("discovery.k8s.io/v1", "endpointslices", true),
];

/// The API server's version (`/version`: `major`, `minor`, `gitVersion`).
pub fn judge_version(major: &str, minor: &str, git_version: &str) -> Finding {
    // Providers append to minor ("30+"); the number is what counts.
    let digits = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    let need = format!("the chart needs 1.{MIN_MINOR} or later");
    match (digits(major), digits(minor)) {
        (Some(1), Some(minor)) if minor >= MIN_MINOR => {
            Finding::ok(GROUP, "version", format!("{git_version} ({need})"))
        }
        (Some(major), Some(_)) if major > 1 => {
            Finding::ok(GROUP, "version", format!("{git_version} ({need})"))
        }
        (Some(_), Some(_)) => Finding::fail(
            GROUP,
            "version",
            format!(
                "{git_version}, but {need}: ValidatingAdmissionPolicy v1 (the Lease policy) and native sidecars"
            ),
            format!("upgrade the cluster to Kubernetes 1.{MIN_MINOR} or later (docs/install.md)"),
        ),
        _ => Finding::warn(
            GROUP,
            "version",
            format!(
                "the API server reports version {major:?}.{minor:?} ({git_version}), which is not a number"
            ),
            format!("make sure the cluster runs Kubernetes 1.{MIN_MINOR} or later ({need})"),
        ),
    }
}

/// Whether every kind of [`CHART_KINDS`] is served; `served` maps a group/version to its
/// resources (a group/version the server does not know is absent).
pub fn judge_served(served: &BTreeMap<String, BTreeSet<String>>) -> Finding {
    let missing: Vec<String> = CHART_KINDS
        .iter()
        .filter(|k| {
            !served
                .get(k.group_version)
                .is_some_and(|r| r.contains(k.resource))
        })
        .map(|k| format!("{} {}", k.group_version, k.resource))
        .collect();
    if missing.is_empty() {
        Finding::ok(
            GROUP,
            "API kinds",
            format!("all {} kinds the chart uses are served", CHART_KINDS.len()),
        )
    } else {
        Finding::fail(
            GROUP,
            "API kinds",
            format!("not served: {}", missing.join(", ")),
            "enable these API groups on the API server (--runtime-config), or use Kubernetes 1.30 or later where they are on by default",
        )
    }
}

/// The answer to one SelfSubjectAccessReview for `create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub kind: ChartKind,
    pub allowed: bool,
}

/// Whether the installer may create everything the chart creates in `namespace`.
pub fn judge_rights(rights: &[Right], namespace: &str) -> Finding {
    let denied: Vec<String> = rights
        .iter()
        .filter(|r| !r.allowed)
        .map(|r| {
            let (group, _) = r
                .kind
                .group_version
                .rsplit_once('/')
                .unwrap_or(("", r.kind.group_version));
            let resource = if group.is_empty() {
                r.kind.resource.to_string()
            } else {
                format!("{}.{group}", r.kind.resource)
            };
            if r.kind.namespaced {
                format!("create {resource} in namespace {namespace}")
            } else {
                format!("create {resource} (cluster-wide)")
            }
        })
        .collect();
    if denied.is_empty() {
        Finding::ok(
            GROUP,
            "installer's rights",
            format!(
                "you may create all {} kinds the chart creates (namespace {namespace})",
                rights.len()
            ),
        )
    } else {
        Finding::fail(
            GROUP,
            "installer's rights",
            format!("denied: {}", denied.join("; ")),
            "install as a cluster administrator, or have one grant these rights (helm install creates cluster-wide objects)",
        )
    }
}

#[cfg(test)]
mod tests;
