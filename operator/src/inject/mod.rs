//! What the admission webhook does to a pod, as a pure function: given the pod as
//! submitted, decide to leave it alone or return the JSON Patch that adds the sidecar.
//!
//! The sidecar is a *native sidecar* (an init container with `restartPolicy: Always`):
//! it starts before the app containers, keeps running beside them and stops after them,
//! so the app can ask for IDs from its first line to its last.
//!
//! Injection is idempotent: a pod that already has the sidecar gets no patch, so a
//! re-invoked webhook (`reinvocationPolicy: IfNeeded`) never injects twice.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, Pod, Probe, ResourceRequirements, SeccompProfile, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use serde_json::{Value, json};

/// Name of the injected init container (also how a second invocation recognises it).
pub const SIDECAR_NAME: &str = "kubeflake-sidecar";
/// Pod annotation that switches injection off: `kubeflake.io/inject: "false"`.
pub const INJECT_ANNOTATION: &str = "kubeflake.io/inject";
/// Pod annotation the webhook sets on pods it changed, with the operator's version.
pub const INJECTED_ANNOTATION: &str = "kubeflake.io/injected";
/// Environment variable that tells app containers where the sidecar listens.
pub const URL_ENV: &str = "KUBEFLAKE_URL";
/// The emptyDir that keeps the pod-local fence across sidecar restarts (rule 6).
pub const STATE_VOLUME: &str = "kubeflake-state";
/// Where the state volume is mounted in the sidecar.
pub const STATE_DIR: &str = "/var/run/kubeflake";
/// Numeric non-root user the sidecar runs as (the image's user too).
pub const SIDECAR_UID: i64 = 65532;

/// How to build the sidecar container; set from the operator's `--sidecar-*` flags.
#[derive(Debug, Clone)]
pub struct SidecarTemplate {
    pub image: String,
    pub image_pull_policy: String,
    /// Port of the ID API on 127.0.0.1 (the app calls it).
    pub port: u16,
    /// Port of `/healthz` and `/readyz` on all addresses (kubelet probes reach the pod IP).
    pub probe_port: u16,
    pub requests: BTreeMap<String, Quantity>,
    pub limits: BTreeMap<String, Quantity>,
}

/// Why the patch for a pod could not be built. Not the pod's fault: the operator's.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(
        "kubeflake-operator could not serialise the {what} for the sidecar patch: {source}; \
         the pod was not admitted rather than patched with a null {what} (this is a bug in \
         the operator: report it with the operator's version; opt the pod out with \
         kubeflake.io/inject: \"false\" to create it without the sidecar meanwhile)"
    )]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// The webhook's answer for one pod.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Admit unchanged, for the stated reason.
    Skip(&'static str),
    /// Reject the pod, with a message that tells its owner what to fix.
    Deny(String),
    /// Reject the pod because the operator failed to build its patch (an internal error,
    /// counted as such), with a message saying so.
    Fail(String),
    /// Admit with this JSON Patch (RFC 6902) applied, after checking that the sequence
    /// named by the label exists.
    Inject { sequence: String, patch: Value },
}

/// Decides what to do with `pod` (as it will be created).
pub fn decide(pod: &Pod, template: &SidecarTemplate) -> Decision {
    let Some(sequence) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SEQUENCE_LABEL))
    else {
        return Decision::Skip("pod has no kubeflake.io/sequence label");
    };
    let opted_out = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INJECT_ANNOTATION))
        .is_some_and(|v| v.eq_ignore_ascii_case("false"));
    if opted_out {
        return Decision::Skip("pod opted out with kubeflake.io/inject: \"false\"");
    }
    if sequence.is_empty() {
        return Decision::Deny(format!(
            "the pod's {SEQUENCE_LABEL} label is empty: set it to the name of an IdSequence in \
             this namespace (kubectl get idsequences), or remove the label"
        ));
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Decision::Skip("pod has no spec");
    };
    if spec.automount_service_account_token == Some(false) {
        return Decision::Deny(format!(
            "the pod sets automountServiceAccountToken: false, but the kubeflake sidecar needs \
             the service account token to renew its slot Lease: remove that setting, or opt \
             out of injection with the annotation {INJECT_ANNOTATION}: \"false\""
        ));
    }
    let init = spec.init_containers.as_deref().unwrap_or_default();
    if init
        .iter()
        .chain(&spec.containers)
        .any(|c| c.name == SIDECAR_NAME)
    {
        return Decision::Skip("sidecar already injected");
    }
    inject_or_fail(sequence, patch(pod, sequence, template))
}

/// The decision for a pod whose patch was built, or could not be.
fn inject_or_fail(sequence: &str, patch: Result<Value, InjectError>) -> Decision {
    match patch {
        Ok(patch) => Decision::Inject {
            sequence: sequence.to_string(),
            patch,
        },
        Err(e) => Decision::Fail(e.to_string()),
    }
}

/// A serialised part of the patch; `what` names it in the error.
fn patch_value(
    what: &'static str,
    serialised: Result<Value, serde_json::Error>,
) -> Result<Value, InjectError> {
    serialised.map_err(|source| InjectError::Serialize { what, source })
}

/// Adds the value at `path`, creating the array or map `parent` first when it is absent.
fn add_to(ops: &mut Vec<Value>, parent_exists: bool, parent: &str, key: &str, value: Value) {
    if parent_exists {
        ops.push(json!({"op": "add", "path": format!("{parent}/{key}"), "value": value}));
    } else if key == "-" || key == "0" {
        ops.push(json!({"op": "add", "path": parent, "value": [value]}));
    } else {
        ops.push(json!({"op": "add", "path": parent, "value": {unescape(key): value}}));
    }
}

/// Undoes JSON Pointer escaping for a map key written as a path segment.
fn unescape(key: &str) -> String {
    key.replace("~1", "/").replace("~0", "~")
}

fn patch(pod: &Pod, sequence: &str, template: &SidecarTemplate) -> Result<Value, InjectError> {
    let mut ops = Vec::new();
    let spec = pod.spec.as_ref();
    let has_init = spec.is_some_and(|s| s.init_containers.is_some());
    // First, so that other init containers can already ask for IDs.
    let sidecar = patch_value(
        "sidecar container",
        serde_json::to_value(sidecar(sequence, template)),
    )?;
    add_to(&mut ops, has_init, "/spec/initContainers", "0", sidecar);

    let volume = patch_value(
        "state volume",
        serde_json::to_value(Volume {
            name: STATE_VOLUME.into(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        }),
    )?;
    let has_volumes = spec.is_some_and(|s| s.volumes.is_some());
    add_to(&mut ops, has_volumes, "/spec/volumes", "-", volume);

    let url = json!({"name": URL_ENV, "value": format!("http://127.0.0.1:{}", template.port)});
    for (i, container) in spec
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let env = container.env.as_deref().unwrap_or_default();
        if env.iter().any(|e| e.name == URL_ENV) {
            continue; // the app chose its own address; keep it
        }
        let parent = format!("/spec/containers/{i}/env");
        add_to(&mut ops, container.env.is_some(), &parent, "-", url.clone());
    }

    let has_annotations = pod.metadata.annotations.is_some();
    add_to(
        &mut ops,
        has_annotations,
        "/metadata/annotations",
        "kubeflake.io~1injected",
        json!(env!("CARGO_PKG_VERSION")),
    );
    Ok(Value::Array(ops))
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn plain_env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    }
}

fn http_probe(path: &str, port: u16, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port.into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        ..Default::default()
    }
}

/// The sidecar container: the downward API gives it the pod's identity, the emptyDir
/// its local fence; it runs as a numeric non-root user with nothing it does not need.
fn sidecar(sequence: &str, t: &SidecarTemplate) -> Container {
    Container {
        name: SIDECAR_NAME.into(),
        image: Some(t.image.clone()),
        image_pull_policy: Some(t.image_pull_policy.clone()),
        restart_policy: Some("Always".into()),
        args: Some(vec!["cluster".into()]),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_UID", "metadata.uid"),
            plain_env("KUBEFLAKE_SEQUENCE", sequence.into()),
            plain_env("KUBEFLAKE_LISTEN", format!("127.0.0.1:{}", t.port)),
            plain_env(
                "KUBEFLAKE_PROBE_LISTEN",
                format!("0.0.0.0:{}", t.probe_port),
            ),
            plain_env("KUBEFLAKE_FENCE_DIR", STATE_DIR.into()),
            plain_env("KUBEFLAKE_LOG_FORMAT", "json".into()),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("kubeflake-probe".into()),
            container_port: t.probe_port.into(),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(http_probe("/readyz", t.probe_port, 2)),
        liveness_probe: Some(http_probe("/healthz", t.probe_port, 10)),
        resources: Some(ResourceRequirements {
            requests: Some(t.requests.clone()).filter(|r| !r.is_empty()),
            limits: Some(t.limits.clone()).filter(|l| !l.is_empty()),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(SIDECAR_UID),
            run_as_group: Some(SIDECAR_UID),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: STATE_VOLUME.into(),
            mount_path: STATE_DIR.into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
