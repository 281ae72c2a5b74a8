//! What the admission webhook does to a pod, as a pure function: given the pod as
//! submitted, decide to leave it alone or return the JSON Patch that adds the sidecar.
//!
//! The sidecar is a *native sidecar* (an init container with `restartPolicy: Always`):
//! it starts before the app containers, keeps running beside them and stops after them,
//! so the app can ask for IDs from its first line to its last.
//!
//! Injection is idempotent: a pod that already has the sidecar never gets a second one.
//! The API server re-invokes the webhook (`reinvocationPolicy: IfNeeded`) when a later
//! webhook changed the pod after our injection, typically by adding a container; that
//! call gives each app container that lacks them the same `KUBEFLAKE_URL`,
//! `KUBEFLAKE_SOCKET` and socket mount as the first call gave the others
//! ([`Decision::Complete`]), and answers without a patch when every container has them.
//! The sidecar is injected with the service account token mount the API server's own
//! ServiceAccount plugin would add to it afterwards, so that plugin changes nothing and
//! does not cause that second call by itself ([`token_volume`]).
//!
//! ## The app starts only once the sidecar can issue
//!
//! The kubelet starts the containers after a native sidecar once that sidecar has
//! *started*: its startup probe passed (and its postStart hook returned, if it had one).
//! The sidecar gets a startup probe that long-polls its own `/readyz`:
//! `GET /readyz?wait=900` every second, which the sidecar holds open until it is ready (it
//! holds its slot or segment block and would answer `/id`) and answers 200 within a few ms
//! of that, or 503 after 900 ms, under the kubelet's 1 s probe timeout. A probe is nearly
//! always in flight, so the app starts as soon as the sidecar can issue, not on the next
//! probe tick; measured beside a postStart hook that waits the same way, it was as fast
//! for 20 pods and faster for 100 (docs/benchmarks.md, "Hook or startup probe"), and unlike
//! a hook the kubelet can stop a waiting pod within its grace period. The probe may fail
//! for a day (86,400 one-second tries) before the kubelet restarts the sidecar, so a pod
//! that waits for a free slot keeps its app unstarted instead of having its sidecar killed
//! in a loop; the sidecar records a `WaitingForSlot` Event on the pod. Pods injected by
//! 0.1.0 keep the postStart hook they got (`kubeflake-sidecar wait-ready`), which this
//! release's sidecar still runs. `kubeflake.io/hold-app: "false"` on a pod leaves the
//! probe out (the app starts at once).
//!
//! One piece (over 400 lines): the decision and the patch it returns are one change to a pod
//! (the sidecar container, the app containers' env and mount, the startup probe); apart,
//! what the decision finds missing and what the patch adds could drift. The tests are in
//! `inject/tests.rs`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, Pod, PodSpec, Probe, ResourceRequirements, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use serde_json::{Value, json};

// The names both sides of the injection agree on live in the API crate.
use kubeflake_crds::contract;
pub use kubeflake_crds::contract::{
    HOLD_APP_ANNOTATION, INJECT_ANNOTATION, INJECTED_ANNOTATION, SIDECAR_NAME, SIDECAR_UID,
    SOCKET_DIR, SOCKET_ENV, SOCKET_PATH, SOCKET_VOLUME, STATE_DIR, STATE_VOLUME, URL_ENV,
};

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
    /// The sidecar is already in the pod (this is a re-invocation after a later webhook
    /// changed the pod): admit with this JSON Patch, which gives the app containers added
    /// since the URL, the socket path and the socket mount. The sequence was checked when
    /// the sidecar was injected.
    Complete { patch: Value },
}

/// Whether the app containers wait for the sidecar: the pod is held unless it says
/// `kubeflake.io/hold-app: "false"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppStart {
    /// The sidecar's startup probe holds the app until the sidecar can issue (default).
    WhenSidecarReady,
    /// The app starts as soon as the sidecar's process runs (the pod opted out).
    AtOnce,
}

impl AppStart {
    pub fn of(pod: &Pod) -> AppStart {
        let opted_out =
            annotation(pod, HOLD_APP_ANNOTATION).is_some_and(|v| v.eq_ignore_ascii_case("false"));
        if opted_out {
            AppStart::AtOnce
        } else {
            AppStart::WhenSidecarReady
        }
    }
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(key))
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
    let opted_out =
        annotation(pod, INJECT_ANNOTATION).is_some_and(|v| v.eq_ignore_ascii_case("false"));
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
    if spec.host_network == Some(true) {
        // In the node's network namespace 127.0.0.1 is the node's: the ID API would be
        // open to every process on the node, and a second such pod on the node could not
        // bind the same ports (its sidecar would never start).
        return Decision::Deny(format!(
            "the pod sets hostNetwork: true, but the kubeflake sidecar serves IDs on \
             127.0.0.1:{port} and probes on port {probe}, which with hostNetwork are the \
             node's: any process on the node could take IDs, and a second such pod on the \
             node would fail to start. Remove hostNetwork: true, or opt out of injection \
             with the annotation {INJECT_ANNOTATION}: \"false\" and run kubeflake-sidecar \
             yourself with --listen and --probe-listen ports no other pod on the node uses \
             (docs/install.md, \"hostNetwork pods\")",
            port = template.port,
            probe = template.probe_port,
        ));
    }
    let init = spec.init_containers.as_deref().unwrap_or_default();
    if init
        .iter()
        .chain(&spec.containers)
        .any(|c| c.name == SIDECAR_NAME)
    {
        return complete(spec, template);
    }
    inject_or_fail(sequence, patch(pod, sequence, template))
}

/// The decision for a pod that already has the sidecar: the app containers that lack the
/// URL, the socket path or the socket mount get them, as at injection.
fn complete(spec: &PodSpec, template: &SidecarTemplate) -> Decision {
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    if !volumes.iter().any(|v| v.name == SOCKET_VOLUME) {
        // Not our injection (a sidecar written into the pod by hand, or by an operator
        // older than the socket): mounting a volume the pod does not have would make the
        // API server refuse the pod, so it is left as written.
        return Decision::Skip(
            "the pod already has a kubeflake-sidecar container but no kubeflake-socket \
             volume: left as written",
        );
    }
    match app_container_ops(spec, template, 0) {
        Ok(ops) if ops.is_empty() => Decision::Skip("sidecar already injected"),
        Ok(ops) => Decision::Complete {
            patch: Value::Array(ops),
        },
        Err(e) => Decision::Fail(e.to_string()),
    }
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
        serde_json::to_value(sidecar(
            sequence,
            template,
            AppStart::of(pod),
            spec.and_then(token_volume),
        )),
    )?;
    add_to(&mut ops, has_init, "/spec/initContainers", "0", sidecar);

    // Two emptyDirs: the state volume (the fence) only the sidecar mounts; the socket
    // volume the sidecar and every app container mount. An app must not be able to touch
    // the fence (docs/safety.md rule 6). And the projected oracle token, which only the
    // sidecar mounts: with it an app could pass for its pod on the oracle port (rule 16).
    let mut has_volumes = spec.is_some_and(|s| s.volumes.is_some());
    for (what, name) in [
        ("state volume", STATE_VOLUME),
        ("socket volume", SOCKET_VOLUME),
    ] {
        let volume = patch_value(
            what,
            serde_json::to_value(Volume {
                name: name.into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            }),
        )?;
        add_to(&mut ops, has_volumes, "/spec/volumes", "-", volume);
        has_volumes = true;
    }
    let token = patch_value(
        "oracle token volume",
        serde_json::to_value(oracle_token::volume()),
    )?;
    add_to(&mut ops, has_volumes, "/spec/volumes", "-", token);

    if let Some(spec) = spec {
        // The sidecar was just put in front of the init containers: theirs are one further.
        ops.extend(app_container_ops(spec, template, 1)?);
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

/// The operations that give every app container, and every init container but the
/// sidecar (they all run after it has started), what it lacks of `KUBEFLAKE_URL`,
/// `KUBEFLAKE_SOCKET` and the read-only socket mount; none when each has all three. The
/// same at injection and on re-invocation, so a container added by a later webhook ends
/// up like the others. `init_offset`: how far the init containers of `spec` have moved
/// in the patched pod (1 when the patch inserts the sidecar before them).
fn app_container_ops(
    spec: &PodSpec,
    template: &SidecarTemplate,
    init_offset: usize,
) -> Result<Vec<Value>, InjectError> {
    let mut ops = Vec::new();
    let url = json!({"name": URL_ENV, "value": contract::sidecar_url(template.port)});
    let socket = json!({"name": SOCKET_ENV, "value": SOCKET_PATH});
    let socket_mount = patch_value(
        "socket volume mount",
        serde_json::to_value(VolumeMount {
            name: SOCKET_VOLUME.into(),
            mount_path: SOCKET_DIR.into(),
            // Connecting needs no write access to the directory; the app cannot replace
            // or remove the socket.
            read_only: Some(true),
            ..Default::default()
        }),
    )?;
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let targets = init
        .iter()
        .enumerate()
        .filter(|(_, c)| c.name != SIDECAR_NAME)
        .map(|(i, c)| (format!("/spec/initContainers/{}", i + init_offset), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("/spec/containers/{i}"), c)),
        );
    for (path, container) in targets {
        let env = container.env.as_deref().unwrap_or_default();
        let parent = format!("{path}/env");
        let mut has_env = container.env.is_some();
        // A variable the app sets itself is its choice; keep it.
        for (name, value) in [(URL_ENV, &url), (SOCKET_ENV, &socket)] {
            if !env.iter().any(|e| e.name == name) {
                add_to(&mut ops, has_env, &parent, "-", value.clone());
                has_env = true;
            }
        }
        let mounts = container.volume_mounts.as_deref().unwrap_or_default();
        if !mounts.iter().any(|m| m.mount_path == SOCKET_DIR) {
            let parent = format!("{path}/volumeMounts");
            let has_mounts = container.volume_mounts.is_some();
            add_to(&mut ops, has_mounts, &parent, "-", socket_mount.clone());
        }
    }
    Ok(ops)
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

fn http_probe(path: &str, port: u16, period: i32, timeout: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port.into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        ..Default::default()
    }
}

/// The readiness probe: `/readyz` every 2 s, allowed 2 s to answer. The sidecar answers in
/// microseconds; the time goes to the kubelet's prober on a busy node. With Kubernetes'
/// default of 1 s, a burst of 100 pods on 2 cores timed readiness probes out, each failure
/// costing a 2 s period before the pod could turn Ready; with 2 s such bursts were Ready
/// 0.9-1.0 s sooner at p99 (docs/benchmarks.md, "Probe timeouts").
const READINESS_PERIOD_SECONDS: i32 = 2;
const READINESS_TIMEOUT_SECONDS: i32 = 2;
/// The liveness probe: `/healthz` every 10 s, allowed 5 s: a busy node must not make the
/// kubelet restart a sidecar that holds a slot (three failures in a row do).
const LIVENESS_PERIOD_SECONDS: i32 = 10;
const LIVENESS_TIMEOUT_SECONDS: i32 = 5;

/// How long the startup probe asks the sidecar to hold each `/readyz` question, ms: under
/// the probe's 1 s timeout, so a sidecar that is not ready yet answers 503 (a failed try)
/// before the kubelet gives up on the connection, and the next try follows at the next
/// one-second tick.
const STARTUP_WAIT_MS: u64 = 900;
/// How many one-second tries the startup probe may fail before the kubelet restarts the
/// sidecar: a day, so a pod that waits long for a free slot is not restarted in a loop.
const STARTUP_FAILURE_THRESHOLD: i32 = 86_400;

/// The startup probe that holds the app containers until the sidecar is ready (see the
/// top of this module).
fn wait_ready_probe(probe_port: u16) -> Probe {
    let path = format!(
        "{}?{}={STARTUP_WAIT_MS}",
        contract::READYZ_PATH,
        contract::READYZ_WAIT_PARAM
    );
    Probe {
        failure_threshold: Some(STARTUP_FAILURE_THRESHOLD),
        ..http_probe(&path, probe_port, 1, 1)
    }
}

/// Where the ServiceAccount admission plugin mounts a pod's token in every container.
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the name of the token volume that plugin adds to a pod.
const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";

/// The pod's service account token volume, as the API server's ServiceAccount admission
/// plugin added it before calling webhooks (the first volume it would pick itself).
///
/// The sidecar gets the plugin's mount of it in the patch. Otherwise the plugin, run again
/// after the patch, adds that mount to the new container, and because the pod changed
/// after this webhook, the API server calls the webhook a second time
/// (`reinvocationPolicy: IfNeeded`) for every labelled pod: a second admission review
/// for nothing, in the API server's CPU while a burst of pods is created.
fn token_volume(spec: &PodSpec) -> Option<&str> {
    spec.volumes
        .as_deref()?
        .iter()
        .map(|v| v.name.as_str())
        .find(|name| name.starts_with(TOKEN_VOLUME_PREFIX))
}

/// The sidecar container: the downward API gives it the pod's identity and IP, one emptyDir its
/// local fence, another the Unix socket it shares with the app; it runs as a numeric non-root user with nothing it does not need.
/// `token_volume`: the pod's service account token volume, mounted where the ServiceAccount
/// admission plugin would mount it ([`token_volume`]); without one, the plugin adds the
/// mount itself.
fn sidecar(
    sequence: &str,
    t: &SidecarTemplate,
    app_start: AppStart,
    token_volume: Option<&str>,
) -> Container {
    Container {
        name: SIDECAR_NAME.into(),
        image: Some(t.image.clone()),
        image_pull_policy: Some(t.image_pull_policy.clone()),
        restart_policy: Some("Always".into()),
        args: Some(vec![contract::CLUSTER_SUBCOMMAND.into()]),
        env: Some(
            contract::POD_FIELDS
                .iter()
                .map(|(name, path)| field_env(name, path))
                .chain([
                    plain_env(contract::SEQUENCE_ENV, sequence.into()),
                    plain_env(contract::LISTEN_ENV, contract::listen_addr(t.port)),
                    plain_env(contract::LISTEN_UNIX_ENV, SOCKET_PATH.into()),
                    plain_env(
                        contract::PROBE_LISTEN_ENV,
                        contract::probe_listen_addr(t.probe_port),
                    ),
                    plain_env(contract::STATE_DIR_ENV, STATE_DIR.into()),
                    plain_env(contract::LOG_FORMAT_ENV, "json".into()),
                ])
                .collect(),
        ),
        ports: Some(vec![
            ContainerPort {
                name: Some(contract::PROBE_PORT_NAME.into()),
                container_port: t.probe_port.into(),
                protocol: Some("TCP".into()),
                ..Default::default()
            },
            // A strict sequence's oracle takes forwarded requests here, on the pod IP
            // (`POD_IP` from the downward API; the sidecar's default port, so no variable).
            ContainerPort {
                name: Some(contract::ORACLE_PORT_NAME.into()),
                container_port: contract::DEFAULT_ORACLE_PORT.into(),
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        startup_probe: match app_start {
            AppStart::WhenSidecarReady => Some(wait_ready_probe(t.probe_port)),
            AppStart::AtOnce => None,
        },
        readiness_probe: Some(http_probe(
            contract::READYZ_PATH,
            t.probe_port,
            READINESS_PERIOD_SECONDS,
            READINESS_TIMEOUT_SECONDS,
        )),
        liveness_probe: Some(http_probe(
            contract::HEALTHZ_PATH,
            t.probe_port,
            LIVENESS_PERIOD_SECONDS,
            LIVENESS_TIMEOUT_SECONDS,
        )),
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
        volume_mounts: Some(
            [
                VolumeMount {
                    name: STATE_VOLUME.into(),
                    mount_path: STATE_DIR.into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: SOCKET_VOLUME.into(),
                    mount_path: SOCKET_DIR.into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: contract::ORACLE_TOKEN_VOLUME.into(),
                    mount_path: contract::ORACLE_TOKEN_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain(token_volume.map(|name| VolumeMount {
                name: name.into(),
                mount_path: TOKEN_MOUNT_PATH.into(),
                read_only: Some(true),
                ..Default::default()
            }))
            .collect(),
        ),
        ..Default::default()
    }
}

mod oracle_token;
#[cfg(test)]
mod tests;
