//! Where a pod's start-up time goes, per pod, on the real node (measured, never asserted):
//! the same pod (the node's pause image as the app) nine ways, created N at once,
//!
//! - **plain**: the app container alone;
//! - **idle sidecar**: plus the pause image as a native sidecar (an init container with
//!   `restartPolicy: Always`, no probes): what any native sidecar costs;
//! - **idle sidecar + hook**: the same idle sidecar with a postStart exec hook that returns
//!   at once (`/pause -v`): what any design that holds the app with a hook pays (the
//!   `runc exec`, the kubelet's wait for it) before the sidecar's own work;
//! - **kubeflake**: the `kubeflake.io/sequence` label, so the webhook injects the sidecar
//!   with its startup probe (a long poll of `/readyz` every second, which holds the app),
//!   the operator assigns a slot Lease and the sidecar takes it;
//! - **kubeflake, hook**: the same injected pod (read once through a server-side dry run
//!   of the kubeflake pod, so it is the webhook's own output) with the startup probe
//!   replaced by the postStart hook that 0.1.0 injected (`kubeflake-sidecar wait-ready`,
//!   which long-polls the same `/readyz` until it answers 200). The other way to hold the
//!   app (docs/install.md, "Why a startup probe and not a hook"), measured beside it;
//! - **idle sidecar + probes**: the idle sidecar with the three probes the webhook gives
//!   kubeflake's sidecar (startup, readiness, liveness: the same periods, timeouts and
//!   thresholds, read from the dry run), each pointed at a port that answers at once (a
//!   TCP connect to the kubelet's own port on the bridge address). What holding the app
//!   with a startup probe costs in Kubernetes itself (the kubelet's steps and prober
//!   ticks), before any work of kubeflake's: the floor of the design kubeflake uses, as
//!   "idle sidecar + hook" is the floor of the hook;
//! - **idle sidecar, as injected**: the webhook's pod itself (the sidecar's security
//!   context, volumes, environment, ports and resources, and what it gives the app
//!   container) with the pause binary as the sidecar's process, the probes of "idle
//!   sidecar + probes" and no sequence label: what the injected pod's shape costs, so that
//!   "kubeflake over idle sidecar, as injected" is the sidecar's own work, its API
//!   requests, the webhook call and the operator's;
//! - **kubeflake, joined** (`kubeflake-joined`): the kubeflake pod in a second IdSequence
//!   of the same namespace, joined to an ID space whose hub is a second control plane
//!   (e2e/tests/bench_startup_support/): whether a member starts pods as fast as a lone
//!   cluster; `KUBEFLAKE_BENCH_HUB=away` switches the hub off after the join, so that no
//!   joined pod's start can wait on it;
//! - **the same, again** (`idle-injected-again`): "idle sidecar, as injected" once more,
//!   as a variant of its own. Two identical variants differ only by the rounds' noise, so
//!   "the same, again, over idle sidecar, as injected" is what a difference between two
//!   variants must exceed to say anything;
//!
//! alternating (plain, idle sidecar, idle sidecar + hook, idle sidecar + probes, idle
//! sidecar as injected, the same again, kubeflake, kubeflake with the hook, kubeflake
//! joined, plain, ...)
//! for a number of rounds, each round starting one variant later than the last (the
//! second round with idle sidecar, ..., and plain last), so that no variant always
//! follows the same one; every pod deleted between rounds: gone from the API server, and
//! its sandbox removed from the node by the kubelet's garbage collection (up to a minute
//! later), so no round shares the CPU with the removal of the last one's sandboxes. Each
//! pod's stages, in ms, come from three sources on this machine's one clock:
//!
//! - **a watch on the pods**: the local receive time of the first event that shows a stage
//!   (the objects' own times have whole seconds only): scheduled (`spec.nodeName`),
//!   sandbox ready (`PodReadyToStartContainers`), sidecar running, started
//!   (`started=true`: its startup probe passed, or its postStart hook returned) and ready,
//!   app running, pod Ready. This is
//!   when the API server learnt of it: the kubelet writes a pod's status in batches, so
//!   several stages often arrive in one event, up to a second after they happened;
//! - **the kernel**: the start of each container's first process and of the sandbox's,
//!   from `/proc/<pid>/stat` and the pod's cgroup (10 ms resolution), read while the pods
//!   run: when the kubelet actually started each container;
//! - **the slot Lease** (kubeflake only, a watch on the sequence's Leases):
//!   `spec.acquireTime` (the operator's clock when it wrote the assignment), the watch's
//!   receive time of that write, and `spec.renewTime` of the sidecar's first write (the
//!   fence it writes as soon as it has seen the Lease), both microseconds.
//!
//! Printed as markdown for docs/benchmarks.md: per N, each stage from "created" (the
//! create call's return) and from the stage it follows (p50 / p99 / max), "kubeflake over
//! idle sidecar", "kubeflake over idle sidecar + hook" and "idle sidecar + hook over idle
//! sidecar" for created -> Ready, each round, host CPU per variant (`/proc/stat`,
//! `/proc/<pid>/stat`), and the increase of the kubelet's own histograms (through the API
//! server's node proxy) and the operator's (pod proxy) over each variant's rounds, and the
//! API server's requests per pod by verb and resource (its `/metrics`). Only
//! that every pod became Ready (within 5 minutes a round) is asserted. Ignored by default:
//!
//!   cargo test -p kubeflake-e2e --test bench_startup -- --ignored --nocapture
//!
//! Settings (environment): `KUBEFLAKE_BENCH_PODS` (pods created at once, a comma list,
//! default `20,100`), `KUBEFLAKE_BENCH_ROUNDS` (rounds per variant and size, default 3),
//! `KUBEFLAKE_BENCH_WARMUP` (pods per variant started once before measuring, default 1;
//! 0 skips), `KUBEFLAKE_BENCH_VARIANTS` (a comma list of the variants' labels to run, e.g.
//! `idle-probes,idle-injected,kubeflake`; default all), `KUBEFLAKE_BENCH_METRICS=0`
//! (skip the kubelet and operator metrics),
//! `KUBEFLAKE_BENCH_OUT=<file>` (append every pod's stages, in ms from "created", as JSON
//! lines), `KUBEFLAKE_BENCH_SET` (a comma list of chart values, as `helm --set` takes
//! them, e.g. `sidecar.resources.requests.cpu=100m`).
//!
//! One file although long: it is one benchmark, run by hand, and the pod watch, the Lease
//! watch, the /proc readings, the metrics scrapes and the report all describe the same
//! rounds. Top to bottom: the variants' pods; what the watches and /proc see; the stages
//! (one table row each); statistics; host CPU; the kubelet's and operator's metrics; one
//! round; the markdown report; the test itself.

mod bench_startup_support;
mod chart_support;
mod hub_support;
mod node_support;
mod operator_support;
mod policy_support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bench_startup_support::JOINED_SEQUENCE;
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::contract::SIDECAR_NAME;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_e2e::addresses::{BRIDGE_IP, NODE_NAME};
use kubeflake_e2e::node::{self, PAUSE_IMAGE};
use kubeflake_e2e::{Cluster, TestNamespace};
use node_support::helm_install;
use operator_support::create_sequence;

// ---------------------------------------------------------------------------------------
// The variants' pods

const RELEASE: &str = "startup";
const RELEASE_NAMESPACE: &str = "kubeflake-startup";
const SEQUENCE: &str = "startup";
/// Label on every benchmark pod: its variant.
const VARIANT_LABEL: &str = "kubeflake-bench/variant";
const IDLE_SIDECAR: &str = "idle-sidecar";
/// The idle sidecar's postStart hook in the "idle sidecar + hook" variant: the node's
/// pause binary prints its version and exits 0 at once (e2e/images/pause.c).
const RETURNING_HOOK: [&str; 2] = ["/pause", "-v"];
/// Where the "idle sidecar + probes" variant's probes connect (on the bridge address): the
/// kubelet's own port, which accepts at once while the node runs. The pause image listens
/// nowhere, and the kubelet's prober connects from the node, not from the pod.
const ANSWERING_PORT: u16 = 10250;
/// A round's pods must all be Ready within this.
const READY_LIMIT: Duration = Duration::from_secs(300);
/// A round's pods must all be gone within this after the delete.
const GONE_LIMIT: Duration = Duration::from_secs(180);
/// After the pods are Ready, how long to wait for the Lease watch to show every
/// sidecar's first write (it is not asserted).
const LEASE_GRACE: Duration = Duration::from_secs(10);
/// Pause between rounds, once the pods are gone and the node has torn them down, so the
/// node settles.
const SETTLE: Duration = Duration::from_secs(3);
/// How long to wait, once a round's pods are gone from the API server, for the node to
/// remove their sandboxes ([`dead_sandboxes`]: the kubelet's garbage collection runs once a
/// minute); past it the next round starts anyway, and the report says so.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(150);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Variant {
    Plain,
    Idle,
    IdleHook,
    IdleProbes,
    IdleInjected,
    /// The same pods as [`Variant::IdleInjected`], run as a variant of their own: what two
    /// identical variants differ by from round to round, the noise any difference between
    /// variants is read against.
    IdleInjectedAgain,
    Kubeflake,
    KubeflakeHook,
    /// [`Variant::Kubeflake`]'s pod in a sequence joined to a hub.
    KubeflakeJoined,
}

impl Variant {
    const ALL: [Variant; 9] = [
        Variant::Plain,
        Variant::Idle,
        Variant::IdleHook,
        Variant::IdleProbes,
        Variant::IdleInjected,
        Variant::IdleInjectedAgain,
        Variant::Kubeflake,
        Variant::KubeflakeHook,
        Variant::KubeflakeJoined,
    ];

    fn label(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Idle => "idle",
            Variant::IdleHook => "idle-hook",
            Variant::IdleProbes => "idle-probes",
            Variant::IdleInjected => "idle-injected",
            Variant::IdleInjectedAgain => "idle-injected-again",
            Variant::Kubeflake => "kubeflake",
            Variant::KubeflakeHook => "kubeflake-hook",
            Variant::KubeflakeJoined => "kubeflake-joined",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Idle => "idle sidecar",
            Variant::IdleHook => "idle sidecar + hook",
            Variant::IdleProbes => "idle sidecar + probes",
            Variant::IdleInjected => "idle sidecar, as injected",
            Variant::IdleInjectedAgain => "the same, again",
            Variant::Kubeflake => "kubeflake",
            Variant::KubeflakeHook => "kubeflake, hook",
            Variant::KubeflakeJoined => "kubeflake, joined",
        }
    }

    fn has_sidecar(self) -> bool {
        self != Variant::Plain
    }

    /// Whether the pod has kubeflake's sidecar (and so a slot Lease).
    fn is_kubeflake(self) -> bool {
        matches!(
            self,
            Variant::Kubeflake | Variant::KubeflakeHook | Variant::KubeflakeJoined
        )
    }

    /// Whether the pod is made with what the webhook injects ([`injected_template`]).
    fn is_from_webhook(self) -> bool {
        matches!(
            self,
            Variant::KubeflakeHook
                | Variant::IdleProbes
                | Variant::IdleInjected
                | Variant::IdleInjectedAgain
        )
    }

    /// The pod of every variant but those made with the webhook's output (from this
    /// one's pods by [`injected_template`]): the same app container in every variant.
    fn pod(self, name: &str) -> Result<Pod> {
        let mut labels = serde_json::json!({VARIANT_LABEL: self.label()});
        if self == Variant::Kubeflake {
            labels[SEQUENCE_LABEL] = serde_json::json!(SEQUENCE);
        }
        if self == Variant::KubeflakeJoined {
            labels[SEQUENCE_LABEL] = serde_json::json!(JOINED_SEQUENCE);
        }
        let mut spec = serde_json::json!({
            "terminationGracePeriodSeconds": 10,
            "containers": [{"name": "app", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        });
        if matches!(
            self,
            Variant::Idle | Variant::IdleHook | Variant::IdleProbes
        ) {
            spec["initContainers"] = serde_json::json!([{
                "name": IDLE_SIDECAR, "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                "restartPolicy": "Always",
            }]);
        }
        if self == Variant::IdleHook {
            spec["initContainers"][0]["lifecycle"] =
                serde_json::json!({"postStart": {"exec": {"command": RETURNING_HOOK}}});
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }))
        .context("benchmark pod")
    }
}

/// The postStart hook's command as 0.1.0's webhook injected it, from the fixture the
/// previous-release contract test reads (sidecar/tests/previous_release_contract.rs).
fn previous_hook() -> Result<serde_json::Value> {
    let fixture: serde_json::Value = serde_json::from_str(include_str!(
        "../../sidecar/tests/fixtures/injected-0.1.0.json"
    ))
    .context("sidecar/tests/fixtures/injected-0.1.0.json")?;
    let hook = fixture["postStart"].clone();
    if !hook.is_array() {
        bail!("injected-0.1.0.json has no postStart command");
    }
    Ok(hook)
}

/// The kubeflake variant's pod as the webhook makes it: a server-side dry run (nothing is
/// stored, the operator assigns nothing), read once for every variant made from it.
async fn webhook_dry_run(pods: &Api<Pod>) -> Result<Pod> {
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    pods.create(&dry_run, &Variant::Kubeflake.pod("template")?)
        .await
        .context("dry-run create of the kubeflake pod (to read the webhook's output)")
}

/// The pod of a variant made with the webhook's output (`injected`, [`webhook_dry_run`]):
///
/// - [`Variant::KubeflakeHook`]: the injected pod with the startup probe replaced by the
///   postStart hook 0.1.0 injected: `kubeflake-sidecar wait-ready` on the probe's port,
///   which long-polls `/readyz` until it answers 200. What the API server adds itself
///   (the service account token volume, priority) is left out, so it adds it again at
///   each create; the webhook finds the sidecar already there and leaves the pod as it is;
/// - [`Variant::IdleProbes`]: the idle sidecar's pod with the injected sidecar's startup,
///   readiness and liveness probes (periods, timeouts, thresholds as injected), each a TCP
///   connect to [`ANSWERING_PORT`] on the bridge address instead, which answers at once;
/// - [`Variant::IdleInjected`]: the injected pod itself (the sidecar's security context,
///   volumes, environment, ports, resources; what the webhook gives the app container)
///   with the sidecar's process replaced by the pause binary and its probes as in
///   [`Variant::IdleProbes`], and no sequence label (so no webhook call, no slot): what the
///   injected pod's shape costs, before the sidecar's own work.
fn injected_template(injected: &Pod, variant: Variant) -> Result<serde_json::Value> {
    let mut spec = serde_json::to_value(
        injected
            .spec
            .as_ref()
            .context("the dry run returned no spec")?,
    )?;
    let spec_map = spec.as_object_mut().context("pod spec")?;
    for server_set in ["priority", "preemptionPolicy"] {
        spec_map.remove(server_set);
    }
    let token_volume = |name: &serde_json::Value| {
        name.as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    if let Some(volumes) = spec_map.get_mut("volumes").and_then(|v| v.as_array_mut()) {
        volumes.retain(|v| !token_volume(&v["name"]));
    }
    let mut sidecar_at = None;
    for list in ["initContainers", "containers"] {
        for (i, c) in spec_map
            .get_mut(list)
            .and_then(|v| v.as_array_mut())
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(mounts) = c.get_mut("volumeMounts").and_then(|m| m.as_array_mut()) {
                mounts.retain(|m| !token_volume(&m["name"]));
            }
            if c["name"] == SIDECAR_NAME {
                sidecar_at = Some((list, i));
            }
        }
    }
    let sidecar = sidecar_at
        .and_then(|(list, i)| spec_map.get_mut(list)?.get_mut(i)?.as_object_mut())
        .with_context(|| {
            format!("the dry run did not inject {SIDECAR_NAME}: is the webhook installed?")
        })?;
    match variant {
        Variant::KubeflakeHook => {
            sidecar
                .remove("startupProbe")
                .context("the injected sidecar has no startup probe")?;
            sidecar.insert(
                "lifecycle".into(),
                serde_json::json!({"postStart": {"exec": {"command": previous_hook()?}}}),
            );
        }
        Variant::IdleProbes => {
            let mut pod = serde_json::to_value(Variant::IdleProbes.pod("template")?)?;
            let idle = pod["spec"]["initContainers"][0]
                .as_object_mut()
                .context("the idle sidecar")?;
            answering_probes(sidecar, idle)?;
            return Ok(pod);
        }
        Variant::IdleInjected | Variant::IdleInjectedAgain => {
            let probes = sidecar.clone();
            answering_probes(&probes, sidecar)?;
            sidecar.remove("args");
            sidecar.insert("image".into(), serde_json::json!(PAUSE_IMAGE));
            sidecar.insert("imagePullPolicy".into(), serde_json::json!("Never"));
            sidecar.insert("command".into(), serde_json::json!(["/pause"]));
            // No sequence label: the webhook and the operator leave the pod alone.
            return Ok(serde_json::json!({
                "metadata": {"labels": {VARIANT_LABEL: variant.label()}},
                "spec": spec,
            }));
        }
        _ => bail!("{} is not made from the webhook's pod", variant.title()),
    }
    Ok(serde_json::json!({
        "metadata": {
            "labels": {
                VARIANT_LABEL: variant.label(),
                SEQUENCE_LABEL: SEQUENCE,
            },
            "annotations": injected.metadata.annotations,
        },
        "spec": spec,
    }))
}

/// Sets `into`'s startup, readiness and liveness probes to those of the injected
/// `sidecar` (periods, timeouts, thresholds), each a TCP connect to [`ANSWERING_PORT`] on
/// the bridge address instead, which answers at once.
fn answering_probes(
    sidecar: &serde_json::Map<String, serde_json::Value>,
    into: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    for kind in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let mut probe = sidecar
            .get(kind)
            .and_then(|p| p.as_object())
            .with_context(|| format!("the injected sidecar has no {kind}"))?
            .clone();
        for handler in ["httpGet", "tcpSocket", "exec", "grpc"] {
            probe.remove(handler);
        }
        probe.insert(
            "tcpSocket".into(),
            serde_json::json!({"host": BRIDGE_IP.to_string(), "port": ANSWERING_PORT}),
        );
        into.insert(kind.into(), serde_json::Value::Object(probe));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// What the watches and /proc see

/// Wall-clock milliseconds (the Lease times are the operator's and sidecar's wall clocks,
/// on this same machine).
fn now_ms() -> f64 {
    Utc::now().timestamp_micros() as f64 / 1000.0
}

fn micro_ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime) -> f64 {
    t.0.as_microsecond() as f64 / 1000.0
}

/// What the watches saw of one pod: wall-clock ms of the first sight of each stage.
#[derive(Clone, Debug, Default)]
struct PodTimes {
    sent: Option<f64>,
    created: Option<f64>,
    uid: Option<String>,
    scheduled: Option<f64>,
    sandbox: Option<f64>,
    sidecar_running: Option<f64>,
    sidecar_started: Option<f64>,
    sidecar_ready: Option<f64>,
    app_running: Option<f64>,
    ready: Option<f64>,
    /// Container name -> runtime ID (without `containerd://`), from the latest status.
    container_ids: HashMap<String, String>,
}

/// What the Lease watch saw of one holder (pod UID).
#[derive(Clone, Debug, Default)]
struct LeaseTimes {
    /// `spec.acquireTime`: the operator's clock when it wrote the assignment.
    written: Option<f64>,
    /// When the watch delivered the assignment.
    written_seen: Option<f64>,
    /// `spec.renewTime` of the first write after the assignment: the sidecar's first
    /// fence write, made as soon as it saw the Lease (its clock).
    taken: Option<f64>,
}

#[derive(Default)]
struct Recorder {
    pods: HashMap<String, PodTimes>,
    leases: HashMap<String, LeaseTimes>,
    watch_restarts: usize,
}

type Shared = Arc<Mutex<Recorder>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Recorder> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

fn first(slot: &mut Option<f64>, seen: bool, at: f64) {
    if seen && slot.is_none() {
        *slot = Some(at);
    }
}

fn observe_pod(times: &mut PodTimes, pod: &Pod, at: f64) {
    let spec_node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
    let status = pod.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let condition = |kind: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
    };
    first(
        &mut times.scheduled,
        spec_node.is_some() || condition("PodScheduled"),
        at,
    );
    first(
        &mut times.sandbox,
        condition("PodReadyToStartContainers"),
        at,
    );
    first(&mut times.ready, condition("Ready"), at);
    let running = |s: &k8s_openapi::api::core::v1::ContainerStatus| {
        s.state.as_ref().is_some_and(|st| st.running.is_some())
    };
    let init = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[]);
    let main = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[]);
    for s in init
        .iter()
        .filter(|s| s.name == SIDECAR_NAME || s.name == IDLE_SIDECAR)
    {
        first(&mut times.sidecar_running, running(s), at);
        first(&mut times.sidecar_started, s.started == Some(true), at);
        first(&mut times.sidecar_ready, s.ready, at);
    }
    for s in main.iter().filter(|s| s.name == "app") {
        first(&mut times.app_running, running(s), at);
    }
    for s in init.iter().chain(main) {
        if let Some(id) = s.container_id.as_deref().filter(|id| !id.is_empty()) {
            let id = id.rsplit_once("://").map_or(id, |(_, id)| id);
            times.container_ids.insert(s.name.clone(), id.to_owned());
        }
    }
}

/// The IDs of the processes alive now, from `/proc`.
fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse().ok())
        .collect()
}

/// How many containerd shims run on the node: one per running pod sandbox.
fn shim_count() -> usize {
    pids()
        .into_iter()
        .filter(|&pid| ProcStat::read(pid).is_some_and(|stat| stat.comm == "containerd-shim"))
        .count()
}

/// Pod sandboxes containerd still keeps that no longer run: those of deleted pods, until
/// the kubelet's container garbage collection (once a minute) removes them, which runs
/// the CNI plugins' DEL, runc and unmounts for each. A round that starts before that shares
/// the CPU with it: the next variant would pay for the last one's pods. Counted as the
/// CRI plugin's sandbox directories beyond the shims that run.
fn dead_sandboxes() -> usize {
    let dir = format!(
        "{}/containerd/io.containerd.grpc.v1.cri/sandboxes",
        node::ROOT
    );
    let kept = std::fs::read_dir(dir).map_or(0, |entries| entries.flatten().count());
    kept.saturating_sub(shim_count())
}

/// `/proc/<pid>/stat`: the command name and the fields after it.
struct ProcStat {
    comm: String,
    /// Fields 3 onwards, as text.
    rest: Vec<String>,
}

impl ProcStat {
    fn read(pid: u32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (open, close) = (text.find('(')?, text.rfind(')')?);
        Some(ProcStat {
            comm: text[open + 1..close].to_owned(),
            rest: text[close + 1..]
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        })
    }

    /// Field `n` (numbered from 1, as in proc(5); 3 or more) as a number.
    fn field(&self, n: usize) -> Option<u64> {
        self.rest.get(n - 3)?.parse().ok()
    }
}

/// Clock ticks per second (`/proc` times are in these).
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// The start of each container's first process, by pod UID and container ID, from
/// `/proc/<pid>/stat` (field 22, in clock ticks of CLOCK_BOOTTIME; 10 ms resolution) and
/// `/proc/<pid>/cgroup` (the kubelet's cgroupfs path `.../pod<uid>/<container id>`), as
/// wall-clock ms. The process of a runc container is forked by `runc create`, which
/// containerd's CRI runs inside StartContainer, just before the start: so this is when
/// the kubelet started the container, whatever the pod's status says later. The sandbox is
/// the pod's cgroup member that is none of its containers.
fn container_process_starts() -> HashMap<(String, String), f64> {
    let mut real = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut boot = real;
    // SAFETY: valid pointers to timespec values owned here.
    unsafe {
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut real);
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut boot);
    }
    let ms = |t: &libc::timespec| t.tv_sec as f64 * 1000.0 + t.tv_nsec as f64 / 1e6;
    let offset = ms(&real) - ms(&boot);
    let hz = clock_ticks();
    let mut out: HashMap<(String, String), f64> = HashMap::new();
    for pid in pids() {
        let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        let Some((uid, container)) = cgroup.lines().find_map(|line| {
            let path = line.splitn(3, ':').nth(2)?;
            let mut parts = path.split('/').skip_while(|c| !c.starts_with("pod"));
            let uid = parts.next()?.strip_prefix("pod")?.replace('_', "-");
            let container = parts.next()?.to_owned();
            Some((uid, container))
        }) else {
            continue;
        };
        let Some(start) = ProcStat::read(pid).and_then(|stat| stat.field(22)) else {
            continue;
        };
        let at = start as f64 / hz * 1000.0 + offset;
        let slot = out.entry((uid, container)).or_insert(at);
        *slot = slot.min(at);
    }
    out
}

fn observe_lease(recorder: &mut Recorder, lease: &Lease, at: f64) {
    let Some(spec) = lease.spec.as_ref() else {
        return;
    };
    let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        return;
    };
    let Some(acquired) = spec.acquire_time.as_ref().map(micro_ms) else {
        return;
    };
    let times = recorder.leases.entry(holder.to_owned()).or_default();
    if times.written.is_none() {
        times.written = Some(acquired);
        times.written_seen = Some(at);
    }
    if let Some(renewed) = spec.renew_time.as_ref().map(micro_ms)
        && renewed > acquired
        && times.taken.is_none()
    {
        times.taken = Some(renewed);
    }
}

/// Watches `api` (from a fresh list) until aborted, handing every object to `seen` with
/// its receive time. Resumes from the last resourceVersion when a watch ends; re-lists
/// on 410 Gone (versions in between are then missed, and counted).
fn spawn_watch<K>(
    api: Api<K>,
    params: WatchParams,
    shared: Shared,
    seen: fn(&mut Recorder, &K, f64),
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut from = String::new();
        // Bounded: a watch lasts up to 280 s, a benchmark run some hours at most.
        for _ in 0..100_000 {
            if from.is_empty() {
                match api.list_metadata(&ListParams::default().limit(1)).await {
                    Ok(list) => from = list.metadata.resource_version.unwrap_or_default(),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
            let Ok(stream) = api.watch(&params, &from).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Some(Ok(event)) = stream.next().await {
                let at = now_ms();
                let object = match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
                    WatchEvent::Bookmark(b) => {
                        from = b.metadata.resource_version;
                        continue;
                    }
                    WatchEvent::Error(e) => {
                        if e.code == 410 {
                            from.clear();
                        }
                        lock(&shared).watch_restarts += 1;
                        break;
                    }
                };
                if let Some(rv) = object.meta().resource_version.clone() {
                    from = rv;
                }
                seen(&mut lock(&shared), &object, at);
            }
        }
    })
}

// ---------------------------------------------------------------------------------------
// The stages

/// One pod's stages, in wall-clock ms.
#[derive(Clone, Debug)]
struct Timeline {
    sent: f64,
    created: f64,
    scheduled: Option<f64>,
    sandbox_process: Option<f64>,
    sandbox: Option<f64>,
    sidecar_process: Option<f64>,
    sidecar_running: Option<f64>,
    app_process: Option<f64>,
    slot_written: Option<f64>,
    slot_seen: Option<f64>,
    slot_taken: Option<f64>,
    sidecar_started: Option<f64>,
    sidecar_ready: Option<f64>,
    app_running: Option<f64>,
    ready: Option<f64>,
}

impl Timeline {
    /// created -> Ready, ms.
    fn to_ready(&self) -> Option<f64> {
        Some(self.ready? - self.created)
    }

    /// One JSON line: every stage in ms from "created" (null when not seen).
    fn json(&self, variant: Variant, n: usize, tag: &str) -> serde_json::Value {
        let mut line = serde_json::json!({
            "variant": variant.label(), "pods": n, "round": tag,
            "created_unix_ms": self.created,
        });
        for stage in STAGES {
            line[stage.name] = serde_json::json!(
                stage
                    .since_start(self)
                    .map(|ms| (ms * 1000.0).round() / 1000.0)
            );
        }
        line
    }
}

type At = fn(&Timeline) -> Option<f64>;

/// The variants a stage is seen in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Applies {
    /// Every variant.
    Every,
    /// Every variant with a sidecar (all but plain).
    WithSidecar,
    /// Kubeflake alone (the slot Lease).
    KubeflakeOnly,
}

impl Applies {
    fn to(self, variant: Variant) -> bool {
        match self {
            Applies::Every => true,
            Applies::WithSidecar => variant.has_sidecar(),
            Applies::KubeflakeOnly => variant.is_kubeflake(),
        }
    }
}

/// A row of the tables: when a stage was first seen, and the stage its step is timed
/// from.
struct Stage {
    name: &'static str,
    at: At,
    from_name: &'static str,
    from: At,
    applies: Applies,
}

const fn stage(
    name: &'static str,
    at: At,
    from_name: &'static str,
    from: At,
    applies: Applies,
) -> Stage {
    Stage {
        name,
        at,
        from_name,
        from,
        applies,
    }
}

/// Every stage, in the tables' order, one per line: name, when it was seen, the stage its
/// step is timed from (name, when), the variants it is seen in. The first row is the create
/// call itself, timed from its sending.
#[rustfmt::skip]
const STAGES: &[Stage] = &[
    stage("create call (sent -> returned)", |t| Some(t.created), "sent", |t| Some(t.sent), Applies::Every),
    stage("scheduled (watch: `spec.nodeName`)", |t| t.scheduled, "created", |t| Some(t.created), Applies::Every),
    stage("sandbox process started (/proc)", |t| t.sandbox_process, "scheduled", |t| t.scheduled, Applies::Every),
    stage("sandbox ready (watch: `PodReadyToStartContainers`)", |t| t.sandbox, "sandbox process started", |t| t.sandbox_process, Applies::Every),
    stage("sidecar process started (/proc)", |t| t.sidecar_process, "sandbox process started", |t| t.sandbox_process, Applies::WithSidecar),
    stage("sidecar running (watch)", |t| t.sidecar_running, "sidecar process started", |t| t.sidecar_process, Applies::WithSidecar),
    stage("slot: Lease written by the operator (`acquireTime`)", |t| t.slot_written, "created", |t| Some(t.created), Applies::KubeflakeOnly),
    stage("slot: Lease write seen (watch)", |t| t.slot_seen, "Lease written", |t| t.slot_written, Applies::KubeflakeOnly),
    stage("slot: sidecar's first Lease write (`renewTime`)", |t| t.slot_taken, "the later of sidecar process started and Lease written", |t| Some(t.sidecar_process?.max(t.slot_written?)), Applies::KubeflakeOnly),
    stage("sidecar started (watch: `started=true`)", |t| t.sidecar_started, "sidecar running", |t| t.sidecar_running, Applies::WithSidecar),
    stage("sidecar ready (watch: `ready=true`)", |t| t.sidecar_ready, "sidecar started", |t| t.sidecar_started, Applies::WithSidecar),
    stage("app process started (/proc)", |t| t.app_process, "kubeflake: sidecar's first Lease write; idle: sidecar process started; plain: sandbox process started", |t| t.slot_taken.or(t.sidecar_process).or(t.sandbox_process), Applies::Every),
    stage("app running (watch)", |t| t.app_running, "app process started", |t| t.app_process, Applies::Every),
    stage("pod Ready (watch)", |t| t.ready, "app running", |t| t.app_running, Applies::Every),
];

impl Stage {
    /// ms to this stage from the create call's return (the first row: from its sending).
    fn since_start(&self, t: &Timeline) -> Option<f64> {
        let at = (self.at)(t)?;
        let start = if self.from_name == "sent" {
            t.sent
        } else {
            t.created
        };
        Some(at - start)
    }

    /// ms to this stage from the stage it follows.
    fn step(&self, t: &Timeline) -> Option<f64> {
        Some((self.at)(t)? - (self.from)(t)?)
    }
}

// ---------------------------------------------------------------------------------------
// Statistics

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    sorted[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]
}

/// p50, p99 and max, or None without values.
fn summary(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some((
        quantile(&values, 0.5),
        quantile(&values, 0.99),
        quantile(&values, 1.0),
    ))
}

/// "p50 / p99 / max" of ms values, in seconds.
fn seconds((p50, p99, max): (f64, f64, f64)) -> String {
    format!(
        "{:.2} / {:.2} / {:.2}",
        p50 / 1000.0,
        p99 / 1000.0,
        max / 1000.0
    )
}

/// "p50 / p99 / max" in seconds, with "(k of n)" when some pods lack the stage.
fn cell(values: Vec<f64>, pods: usize) -> String {
    let k = values.len();
    match summary(values) {
        None => "-".to_owned(),
        Some(quantiles) => {
            let mut s = seconds(quantiles);
            if k < pods {
                s.push_str(&format!(" ({k} of {pods})"));
            }
            s
        }
    }
}

// ---------------------------------------------------------------------------------------
// Host CPU

/// CPU use of the whole machine and of each process (by command name) over a window.
struct CpuSnapshot {
    stat: Vec<u64>,
    procs: HashMap<(u32, u64), (String, u64)>,
}

fn cpu_snapshot() -> CpuSnapshot {
    let stat = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines().next().map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default();
    let procs = pids()
        .into_iter()
        .filter_map(|pid| {
            let stat = ProcStat::read(pid)?;
            // Fields 14 (utime), 15 (stime) and 22 (starttime).
            let (utime, stime, start) = (stat.field(14)?, stat.field(15)?, stat.field(22)?);
            Some(((pid, start), (stat.comm, utime + stime)))
        })
        .collect();
    CpuSnapshot { stat, procs }
}

/// CPU used over some windows, summed.
#[derive(Default, Clone)]
struct CpuUse {
    wall_s: f64,
    busy_ticks: u64,
    iowait_ticks: u64,
    total_ticks: u64,
    /// CPU seconds by command name, of processes alive at the end of a window.
    by_name: BTreeMap<String, f64>,
    load1_max: f64,
}

fn process_group(comm: &str) -> String {
    if comm.starts_with("bench_startup") {
        "this test".to_owned()
    } else {
        comm.to_owned()
    }
}

impl CpuUse {
    fn add(&mut self, before: &CpuSnapshot, after: &CpuSnapshot, wall: Duration) {
        let d = |i: usize| {
            after
                .stat
                .get(i)
                .unwrap_or(&0)
                .saturating_sub(*before.stat.get(i).unwrap_or(&0))
        };
        // user nice system idle iowait irq softirq steal
        let total: u64 = (0..8).map(d).sum();
        let idle = d(3) + d(4);
        self.total_ticks += total;
        self.busy_ticks += total.saturating_sub(idle);
        self.iowait_ticks += d(4);
        self.wall_s += wall.as_secs_f64();
        let hz = clock_ticks();
        for (key, (comm, ticks)) in &after.procs {
            let earlier = before.procs.get(key).map_or(0, |(_, t)| *t);
            let used = ticks.saturating_sub(earlier);
            if used > 0 {
                *self.by_name.entry(process_group(comm)).or_default() += used as f64 / hz;
            }
        }
        let load1 = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0.0);
        self.load1_max = self.load1_max.max(load1);
    }

    fn row(&self, title: &str) -> String {
        let hz = clock_ticks();
        let pct = |ticks: u64| {
            if self.total_ticks == 0 {
                0.0
            } else {
                100.0 * ticks as f64 / self.total_ticks as f64
            }
        };
        let busy_s = self.busy_ticks as f64 / hz;
        let attributed: f64 = self.by_name.values().sum();
        let mut top: Vec<(&String, &f64)> = self.by_name.iter().collect();
        top.sort_by(|a, b| b.1.total_cmp(a.1));
        let mut parts: Vec<String> = top
            .iter()
            .take(8)
            .map(|(name, s)| format!("{name} {s:.1}"))
            .collect();
        parts.push(format!(
            "exited or other {:.1}",
            (busy_s - attributed).max(0.0)
        ));
        format!(
            "| {title} | {:.1} | {busy_s:.1} | {:.0} % | {:.0} % | {:.2} | {} |",
            self.wall_s,
            pct(self.busy_ticks),
            pct(self.iowait_ticks),
            self.load1_max,
            parts.join(", ")
        )
    }
}

// ---------------------------------------------------------------------------------------
// The kubelet's and the operator's metrics

/// One series of a Prometheus histogram (or a counter: `count` only).
#[derive(Clone, Debug, Default)]
struct Series {
    histogram: bool,
    /// (le, cumulative count), in the order given.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

/// (metric, labels without `le`) -> series.
type MetricMap = BTreeMap<(String, String), Series>;

/// Histograms and counters the tables show. Kubelet runtime operations: only these kinds.
const KUBELET_METRICS: &[&str] = &[
    "kubelet_pod_start_sli_duration_seconds",
    "kubelet_pod_start_duration_seconds",
    "kubelet_pod_start_total_duration_seconds",
    "kubelet_pod_worker_start_duration_seconds",
    "kubelet_pod_worker_duration_seconds",
    "kubelet_pod_status_sync_duration_seconds",
    "kubelet_pleg_relist_duration_seconds",
    "kubelet_pleg_relist_interval_seconds",
    "kubelet_run_podsandbox_duration_seconds",
    "kubelet_runtime_operations_duration_seconds",
    "rest_client_rate_limiter_duration_seconds",
    "rest_client_requests_total",
];
const RUNTIME_OPERATIONS: &[&str] = &[
    "run_podsandbox",
    "create_container",
    "start_container",
    "exec_sync",
    "podsandbox_status",
    "container_status",
];
/// The API server's request and watch-event counters, kept by verb and resource only
/// ([`api_requests`]).
const APISERVER_METRICS: &[&str] = &["apiserver_request_total", "apiserver_watch_events_total"];
const OPERATOR_METRICS: &[&str] = &[
    "kubeflake_operator_pod_to_slot_seconds",
    "kubeflake_webhook_duration_seconds",
    "kubeflake_operator_reconcile_duration_seconds",
    "kubeflake_operator_slot_assignments_total",
    "kubeflake_operator_passes_deferred_total",
    "kubeflake_operator_write_conflicts_total",
    "kubeflake_webhook_requests_total",
];

/// `k="v"` pairs of a label set (values with `\"` escapes).
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(e) = chars.next() {
                        value.push(e);
                    }
                }
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key.trim().to_owned(), value));
    }
    out
}

fn parse_metrics(text: &str, names: &[&str]) -> MetricMap {
    let mut out = MetricMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels, rest) = match (line.find('{'), line.rfind('}')) {
            (Some(open), Some(close)) if open < close => (
                &line[..open],
                parse_labels(&line[open + 1..close]),
                &line[close + 1..],
            ),
            _ => match line.split_once(' ') {
                Some((name, rest)) => (name, Vec::new(), rest),
                None => continue,
            },
        };
        let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let (base, part) = if let Some(b) = name.strip_suffix("_bucket") {
            (b, "bucket")
        } else if let Some(b) = name.strip_suffix("_sum") {
            (b, "sum")
        } else if let Some(b) = name.strip_suffix("_count") {
            (b, "count")
        } else {
            (name, "counter")
        };
        if !names.contains(&base) {
            continue;
        }
        if base == "kubelet_runtime_operations_duration_seconds"
            && !labels
                .iter()
                .any(|(k, v)| k == "operation_type" && RUNTIME_OPERATIONS.contains(&v.as_str()))
        {
            continue;
        }
        let le = labels
            .iter()
            .find(|(k, _)| k == "le")
            .map(|(_, v)| v.clone());
        let mut kept: Vec<(String, String)> =
            labels.into_iter().filter(|(k, _)| k != "le").collect();
        kept.sort();
        let key_labels = kept
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let series = out.entry((base.to_owned(), key_labels)).or_default();
        match part {
            "bucket" => {
                series.histogram = true;
                let le = match le.as_deref() {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::INFINITY),
                    None => f64::INFINITY,
                };
                series.buckets.push((le, value));
            }
            "sum" => {
                series.histogram = true;
                series.sum = value;
            }
            _ => series.count = value,
        }
    }
    out
}

/// `after - before`, series by series (counters that went down count from zero).
fn metrics_delta(before: &MetricMap, after: &MetricMap) -> MetricMap {
    let mut out = MetricMap::new();
    for (key, a) in after {
        let b = before.get(key).cloned().unwrap_or_default();
        let reset = a.count < b.count;
        let minus = |x: f64, y: f64| if reset { x } else { x - y };
        let buckets = a
            .buckets
            .iter()
            .map(|(le, v)| {
                let was = b
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |(_, v)| *v);
                (*le, minus(*v, was))
            })
            .collect();
        out.insert(
            key.clone(),
            Series {
                histogram: a.histogram,
                buckets,
                sum: minus(a.sum, b.sum),
                count: minus(a.count, b.count),
            },
        );
    }
    out
}

fn metrics_add(acc: &mut MetricMap, delta: &MetricMap) {
    for (key, d) in delta {
        let s = acc.entry(key.clone()).or_default();
        s.histogram |= d.histogram;
        s.sum += d.sum;
        s.count += d.count;
        for (le, v) in &d.buckets {
            match s.buckets.iter_mut().find(|(l, _)| l == le) {
                Some((_, have)) => *have += v,
                None => s.buckets.push((*le, *v)),
            }
        }
    }
}

/// The upper bound of the bucket that holds quantile `q` ("<= 0.5", "> 10").
fn bucket_quantile(s: &Series, q: f64) -> String {
    let mut buckets = s.buckets.clone();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let want = q * s.count;
    let mut last_finite = 0.0;
    for (le, cumulative) in &buckets {
        if *cumulative >= want && *cumulative > 0.0 {
            if le.is_finite() {
                return format!("<= {le}");
            }
            return format!("> {last_finite}");
        }
        if le.is_finite() {
            last_finite = *le;
        }
    }
    "-".to_owned()
}

/// The metrics text of `path` (through the API server), or None if it cannot be read.
async fn scrape(client: &Client, path: &str) -> Option<String> {
    let request = http::Request::get(path).body(Vec::new()).ok()?;
    tokio::time::timeout(Duration::from_secs(20), client.request_text(request))
        .await
        .ok()?
        .ok()
}

/// The API server's request counters summed over what does not say what the request was
/// (status code, group, version, scope, component): `verb,resource[/subresource]` ->
/// count; watch events sent, by resource.
fn api_requests(all: MetricMap) -> MetricMap {
    let mut out = MetricMap::new();
    for ((name, labels), series) in all {
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_default()
                .to_owned()
        };
        let what = match name.as_str() {
            // `resource` since Kubernetes 1.30 (`kind` before).
            "apiserver_watch_events_total" => {
                let resource = label("resource");
                let kind = if resource.is_empty() {
                    label("kind")
                } else {
                    resource
                };
                format!("watch events sent: {kind}")
            }
            _ => {
                let sub = label("subresource");
                let resource = label("resource");
                let resource = if sub.is_empty() {
                    resource
                } else {
                    format!("{resource}/{sub}")
                };
                format!("{} {resource}", label("verb"))
            }
        };
        out.entry(("requests".to_owned(), what)).or_default().count += series.count;
    }
    out
}

/// Metrics read before and after a round.
#[derive(Default)]
struct Scrape {
    kubelet: MetricMap,
    operator: MetricMap,
    apiserver: MetricMap,
}

/// The kubelet's metrics (through the API server's node proxy), the summed metrics of
/// every operator replica (through the pod proxy) and the API server's request counts.
async fn scrape_all(client: &Client) -> Scrape {
    let kubelet = scrape(client, &format!("/api/v1/nodes/{NODE_NAME}/proxy/metrics"))
        .await
        .map(|t| parse_metrics(&t, KUBELET_METRICS))
        .unwrap_or_default();
    let mut operator = MetricMap::new();
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for pod in list.items {
            let path = format!(
                "/api/v1/namespaces/{RELEASE_NAMESPACE}/pods/{}:8080/proxy/metrics",
                pod.name_any()
            );
            if let Some(text) = scrape(client, &path).await {
                metrics_add(&mut operator, &parse_metrics(&text, OPERATOR_METRICS));
            }
        }
    }
    let apiserver = scrape(client, "/metrics")
        .await
        .map(|t| api_requests(parse_metrics(&t, APISERVER_METRICS)))
        .unwrap_or_default();
    Scrape {
        kubelet,
        operator,
        apiserver,
    }
}

// ---------------------------------------------------------------------------------------
// One round

/// What one variant's rounds gave, for one N.
#[derive(Default)]
struct Results {
    pods: Vec<Timeline>,
    cpu: CpuUse,
    kubelet: MetricMap,
    operator: MetricMap,
    apiserver: MetricMap,
    /// created -> Ready: (round, p50, p99, max) in ms, and the round's span
    /// (first create sent -> last Ready).
    rounds: Vec<(usize, f64, f64, f64, f64)>,
}

struct Bench {
    cluster: &'static Cluster,
    ns: TestNamespace,
    shared: Shared,
    metrics: bool,
    /// The pods of the variants made with the webhook's output ([`injected_template`]).
    templates: HashMap<Variant, serde_json::Value>,
}

impl Bench {
    /// `variant`'s pod named `name`.
    fn pod(&self, variant: Variant, name: &str) -> Result<Pod> {
        let Some(template) = self.templates.get(&variant) else {
            return variant.pod(name);
        };
        let mut pod = template.clone();
        pod["metadata"]["name"] = serde_json::json!(name);
        serde_json::from_value(pod).with_context(|| format!("benchmark pod ({})", variant.title()))
    }

    /// The kubelet's and the operators' metrics now, for a measured round (none when
    /// `KUBEFLAKE_BENCH_METRICS=0`).
    async fn metrics_now(&self, measured: bool) -> Scrape {
        if self.metrics && measured {
            scrape_all(&self.ns.client).await
        } else {
            Default::default()
        }
    }

    /// Creates `n` pods of `variant` at once, waits until all are Ready, records their
    /// stages, then deletes them and waits until they are gone and their sandboxes removed.
    async fn round(
        &self,
        variant: Variant,
        n: usize,
        tag: &str,
        results: Option<&mut Results>,
    ) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.ns.client.clone(), &self.ns.name);
        let names: Vec<String> = (0..n)
            .map(|i| format!("{}-{tag}-{i}", variant.label()))
            .collect();
        let before = self.metrics_now(results.is_some()).await;
        let cpu_before = cpu_snapshot();
        let started = Instant::now();
        {
            let mut r = lock(&self.shared);
            for name in &names {
                r.pods.insert(name.clone(), PodTimes::default());
            }
        }
        let created = futures::future::join_all(names.iter().map(|name| {
            let pods = pods.clone();
            let shared = self.shared.clone();
            async move {
                let pod = self.pod(variant, name)?;
                lock(&shared).pods.get_mut(name).context("recorded")?.sent = Some(now_ms());
                let made = pods
                    .create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("create {name}"))?;
                let at = now_ms();
                let mut r = lock(&shared);
                let times = r.pods.get_mut(name).context("recorded")?;
                times.created = Some(at);
                times.uid = made.metadata.uid.clone();
                anyhow::Ok(())
            }
        }))
        .await;
        for c in created {
            c?;
        }

        // Every pod Ready, polled every 100 ms, bounded.
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            let waiting: Vec<String> = {
                let r = lock(&self.shared);
                names
                    .iter()
                    .filter(|n| r.pods.get(*n).is_none_or(|t| t.ready.is_none()))
                    .cloned()
                    .collect()
            };
            if waiting.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                let listing = self
                    .cluster
                    .kubectl(&["get", "pods", "-n", &self.ns.name, "-o", "wide"])
                    .await?;
                let events = self
                    .cluster
                    .kubectl(&[
                        "get",
                        "events",
                        "-n",
                        &self.ns.name,
                        "--sort-by=.lastTimestamp",
                    ])
                    .await?;
                bail!(
                    "{} of {n} {} pods not Ready within {READY_LIMIT:?}: {:?}\npods:\n{}\nevents:\n{}",
                    waiting.len(),
                    variant.title(),
                    waiting.iter().take(10).collect::<Vec<_>>(),
                    listing.stdout,
                    events.stdout
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let wall = started.elapsed();
        let cpu_after = cpu_snapshot();
        let after = self.metrics_now(results.is_some()).await;
        if variant.is_kubeflake() {
            // The Lease watch may lag the pod watch a little: wait for the sidecars' first
            // writes (not asserted; a pod without one shows as missing in the table).
            let deadline = Instant::now() + LEASE_GRACE;
            while Instant::now() < deadline {
                let all = {
                    let r = lock(&self.shared);
                    names.iter().all(|n| {
                        r.pods
                            .get(n)
                            .and_then(|t| t.uid.as_ref())
                            .and_then(|uid| r.leases.get(uid))
                            .is_some_and(|l| l.taken.is_some())
                    })
                };
                if all {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }

        // The container processes are alive now (every pod is Ready): their start times.
        let processes = container_process_starts();
        let timelines: Vec<Timeline> = {
            let r = lock(&self.shared);
            names
                .iter()
                .filter_map(|name| {
                    let p = r.pods.get(name)?;
                    let uid = p.uid.clone()?;
                    let lease = r.leases.get(&uid);
                    let of = |container: Option<&String>| {
                        processes.get(&(uid.clone(), container?.clone())).copied()
                    };
                    let sandbox_process = processes
                        .iter()
                        .filter(|((u, id), _)| {
                            *u == uid && !p.container_ids.values().any(|c| c == id)
                        })
                        .map(|(_, at)| *at)
                        .min_by(f64::total_cmp);
                    Some(Timeline {
                        sent: p.sent?,
                        created: p.created?,
                        scheduled: p.scheduled,
                        sandbox_process,
                        sandbox: p.sandbox,
                        sidecar_process: of(p
                            .container_ids
                            .get(SIDECAR_NAME)
                            .or(p.container_ids.get(IDLE_SIDECAR))),
                        sidecar_running: p.sidecar_running,
                        app_process: of(p.container_ids.get("app")),
                        slot_written: lease.and_then(|l| l.written),
                        slot_seen: lease.and_then(|l| l.written_seen),
                        slot_taken: lease.and_then(|l| l.taken),
                        sidecar_started: p.sidecar_started,
                        sidecar_ready: p.sidecar_ready,
                        app_running: p.app_running,
                        ready: p.ready,
                    })
                })
                .collect()
        };
        let to_ready: Vec<f64> = timelines.iter().filter_map(Timeline::to_ready).collect();
        let first_sent = timelines.iter().map(|t| t.sent).fold(f64::MAX, f64::min);
        let last_ready = timelines
            .iter()
            .filter_map(|t| t.ready)
            .fold(f64::MIN, f64::max);
        let span = last_ready - first_sent;
        let (p50, p99, max) = summary(to_ready).unwrap_or_default();
        println!(
            "round {tag:>10} {:>12}: {n} pods, created -> Ready p50 {:.2} s, p99 {:.2} s, max {:.2} s; first sent -> last Ready {:.2} s",
            variant.title(),
            p50 / 1000.0,
            p99 / 1000.0,
            max / 1000.0,
            span / 1000.0
        );

        // Delete and wait until gone (bounded), then let the node settle.
        let selector = format!("{VARIANT_LABEL}={}", variant.label());
        pods.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&selector),
        )
        .await
        .context("delete the round's pods")?;
        let deadline = Instant::now() + GONE_LIMIT;
        loop {
            let left = pods
                .list_metadata(&ListParams::default().labels(VARIANT_LABEL))
                .await?
                .items
                .len();
            if left == 0 {
                break;
            }
            if Instant::now() > deadline {
                bail!("{left} benchmark pods still there {GONE_LIMIT:?} after the delete");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        {
            let mut r = lock(&self.shared);
            for name in &names {
                r.pods.remove(name);
            }
        }
        let gone = Instant::now();
        loop {
            let kept = dead_sandboxes();
            if kept == 0 {
                println!(
                    "round {tag:>10} {:>12}: sandboxes removed {:.1} s after the pods were gone",
                    variant.title(),
                    gone.elapsed().as_secs_f64()
                );
                break;
            }
            if gone.elapsed() > TEARDOWN_LIMIT {
                println!(
                    "round {tag:>10} {:>12}: {kept} sandboxes still kept {TEARDOWN_LIMIT:?} after the pods were gone; the next round starts anyway",
                    variant.title()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        tokio::time::sleep(SETTLE).await;

        if let Some(path) = std::env::var_os("KUBEFLAKE_BENCH_OUT")
            && results.is_some()
        {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("open {}", path.to_string_lossy()))?;
            for t in &timelines {
                writeln!(file, "{}", t.json(variant, n, tag))?;
            }
        }
        if let Some(results) = results {
            let round = results.rounds.len();
            results.rounds.push((round, p50, p99, max, span));
            results.pods.extend(timelines);
            results.cpu.add(&cpu_before, &cpu_after, wall);
            metrics_add(
                &mut results.kubelet,
                &metrics_delta(&before.kubelet, &after.kubelet),
            );
            metrics_add(
                &mut results.operator,
                &metrics_delta(&before.operator, &after.operator),
            );
            metrics_add(
                &mut results.apiserver,
                &metrics_delta(&before.apiserver, &after.apiserver),
            );
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The report

/// The markdown report for one N.
/// `s` and a line break.
fn push_line(out: &mut String, s: &str) {
    out.push_str(s);
    out.push('\n');
}

/// A table's header: `first`, then one right-aligned column per variant.
fn push_variant_header(out: &mut String, first: &str, variants: &[Variant]) {
    let titles: Vec<&str> = variants.iter().map(|v| v.title()).collect();
    push_line(out, &format!("| {first} | {} |", titles.join(" | ")));
    push_line(out, &format!("|---|{}", "---:|".repeat(variants.len())));
}

fn report(n: usize, rounds: usize, all: &BTreeMap<Variant, Results>) -> String {
    let mut out = String::new();
    let line = push_line;
    line(
        &mut out,
        &format!(
            "### {n} pods created at once, {rounds} round(s) per variant (variants alternating)\n"
        ),
    );
    // The variants run, in the tables' order.
    let variants: Vec<Variant> = all.keys().copied().collect();
    let header = |out: &mut String, first: &str| push_variant_header(out, first, &variants);
    // A stage's cells, one per variant: `value` of each pod, p50 / p99 / max.
    let stage_cells = |stage: &Stage, value: fn(&Stage, &Timeline) -> Option<f64>| {
        variants
            .iter()
            .map(|v| {
                if !stage.applies.to(*v) {
                    return String::new();
                }
                let pods = all.get(v).map_or(&[][..], |r| &r.pods[..]);
                let values = pods.iter().filter_map(|t| value(stage, t)).collect();
                cell(values, pods.len())
            })
            .collect::<Vec<_>>()
            .join(" | ")
    };
    line(
        &mut out,
        "From the create call's return to each stage's first sight, seconds, p50 / p99 / max:\n",
    );
    header(&mut out, "stage");
    for stage in STAGES {
        let cells = stage_cells(stage, Stage::since_start);
        line(&mut out, &format!("| {} | {cells} |", stage.name));
    }
    line(
        &mut out,
        "\nEach stage from the one it follows (per pod, then p50 / p99 / max), seconds:\n",
    );
    header(&mut out, "step");
    for stage in &STAGES[1..] {
        let cells = stage_cells(stage, Stage::step);
        line(
            &mut out,
            &format!("| {} -> {} | {cells} |", stage.from_name, stage.name),
        );
    }

    let to_ready = |v: Variant| {
        summary(
            all.get(&v)
                .map(|r| r.pods.iter().filter_map(Timeline::to_ready).collect())
                .unwrap_or_default(),
        )
    };
    line(
        &mut out,
        "\nCreated -> Ready, differences of the quantiles, seconds:\n",
    );
    line(&mut out, "| | p50 | p99 | max |");
    line(&mut out, "|---|---:|---:|---:|");
    for (title, a, b) in [
        (
            "kubeflake over idle sidecar",
            Variant::Kubeflake,
            Variant::Idle,
        ),
        (
            "kubeflake over idle sidecar + hook",
            Variant::Kubeflake,
            Variant::IdleHook,
        ),
        (
            "idle sidecar + hook over idle sidecar",
            Variant::IdleHook,
            Variant::Idle,
        ),
        ("idle sidecar over plain", Variant::Idle, Variant::Plain),
        ("kubeflake over plain", Variant::Kubeflake, Variant::Plain),
        (
            "kubeflake, hook over idle sidecar",
            Variant::KubeflakeHook,
            Variant::Idle,
        ),
        (
            "kubeflake, hook over kubeflake",
            Variant::KubeflakeHook,
            Variant::Kubeflake,
        ),
        (
            "idle sidecar + probes over idle sidecar",
            Variant::IdleProbes,
            Variant::Idle,
        ),
        (
            "kubeflake over idle sidecar + probes",
            Variant::Kubeflake,
            Variant::IdleProbes,
        ),
        (
            "idle sidecar, as injected over idle sidecar + probes",
            Variant::IdleInjected,
            Variant::IdleProbes,
        ),
        (
            "kubeflake over idle sidecar, as injected",
            Variant::Kubeflake,
            Variant::IdleInjected,
        ),
        (
            "kubeflake, joined over kubeflake",
            Variant::KubeflakeJoined,
            Variant::Kubeflake,
        ),
        (
            "the same, again, over idle sidecar, as injected (the rounds' noise)",
            Variant::IdleInjectedAgain,
            Variant::IdleInjected,
        ),
    ] {
        if let (Some(a), Some(b)) = (to_ready(a), to_ready(b)) {
            line(
                &mut out,
                &format!(
                    "| {title} | {:+.2} | {:+.2} | {:+.2} |",
                    (a.0 - b.0) / 1000.0,
                    (a.1 - b.1) / 1000.0,
                    (a.2 - b.2) / 1000.0
                ),
            );
        }
    }

    line(
        &mut out,
        "\nEach round, created -> Ready (p50 / p99 / max) and first create sent -> last Ready, seconds:\n",
    );
    header(&mut out, "round");
    let most = all.values().map(|r| r.rounds.len()).max().unwrap_or(0);
    for round in 0..most {
        let cells: Vec<String> = variants
            .iter()
            .map(|v| {
                all.get(v).and_then(|r| r.rounds.get(round)).map_or(
                    "-".to_owned(),
                    |&(_, p50, p99, max, span)| {
                        format!("{}; {:.2}", seconds((p50, p99, max)), span / 1000.0)
                    },
                )
            })
            .collect();
        line(
            &mut out,
            &format!("| {} | {} |", round + 1, cells.join(" | ")),
        );
    }

    line(
        &mut out,
        "\nHost CPU from the first create to the last pod Ready, all rounds (2 cores; CPU seconds by process name, of processes alive at the end of each round):\n",
    );
    line(
        &mut out,
        "| variant | wall s | CPU s | busy | iowait | load1 max | CPU s by process |",
    );
    line(&mut out, "|---|---:|---:|---:|---:|---:|---|");
    for &v in &variants {
        if let Some(r) = all.get(&v) {
            line(&mut out, &r.cpu.row(v.title()));
        }
    }

    let metric_rows = |out: &mut String, source: &str, pick: fn(&Results) -> &MetricMap| {
        let mut keys: Vec<(String, String)> =
            all.values().flat_map(|r| pick(r).keys().cloned()).collect();
        keys.sort();
        keys.dedup();
        let mut rows = Vec::new();
        for key in keys {
            for &v in &variants {
                let Some(s) = all.get(&v).and_then(|r| pick(r).get(&key)) else {
                    continue;
                };
                if s.count < 0.5 {
                    continue;
                }
                let labels = if key.1.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", key.1)
                };
                rows.push(if s.histogram {
                    format!(
                        "| {source} | `{}{labels}` | {} | {:.0} | {:.3} | {} | {} |",
                        key.0,
                        v.title(),
                        s.count,
                        s.sum / s.count,
                        bucket_quantile(s, 0.5),
                        bucket_quantile(s, 0.99)
                    )
                } else {
                    format!(
                        "| {source} | `{}{labels}` | {} | {:.0} | | | |",
                        key.0,
                        v.title(),
                        s.count
                    )
                });
            }
        }
        for row in rows {
            line(out, &row);
        }
    };
    let any_metrics = all
        .values()
        .any(|r| !r.kubelet.is_empty() || !r.operator.is_empty());
    if any_metrics {
        line(
            &mut out,
            "\nThe kubelet's and the operator's own metrics over the same windows (increase; histograms: count, mean s, and the bucket bound that holds p50 / p99):\n",
        );
        line(
            &mut out,
            "| source | metric | variant | count | mean s | p50 | p99 |",
        );
        line(&mut out, "|---|---|---|---:|---:|---:|---:|");
        metric_rows(&mut out, "kubelet", |r| &r.kubelet);
        metric_rows(&mut out, "operator", |r| &r.operator);
    }
    api_request_table(&mut out, n, all);
    out
}

/// The API server's requests (and watch events sent) during the rounds, per pod, by verb
/// and resource and variant: what each variant asks of the API server.
fn api_request_table(out: &mut String, n: usize, all: &BTreeMap<Variant, Results>) {
    let mut keys: Vec<&(String, String)> = all.values().flat_map(|r| r.apiserver.keys()).collect();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return;
    }
    let per_pod = |v: Variant, key: &(String, String)| {
        all.get(&v).map_or(0.0, |r| {
            let pods = (n * r.rounds.len()).max(1) as f64;
            r.apiserver.get(key).map_or(0.0, |s| s.count) / pods
        })
    };
    push_line(
        out,
        "\nThe API server's requests from the first create to the last pod Ready, per pod (every client: kubelet, scheduler, controllers, operator, sidecars, this test), and the watch events it sent, by resource:\n",
    );
    let variants: Vec<Variant> = all.keys().copied().collect();
    push_variant_header(out, "request", &variants);
    for key in keys {
        let cells: Vec<f64> = variants.iter().map(|&v| per_pod(v, key)).collect();
        if cells.iter().all(|c| *c < 0.05) {
            continue;
        }
        let cells: Vec<String> = cells.iter().map(|c| format!("{c:.1}")).collect();
        let cells = cells.join(" | ");
        push_line(out, &format!("| {} | {cells} |", key.1));
    }
}

// ---------------------------------------------------------------------------------------
// The test

/// The kubelet's `Unhealthy` Events (failed probes; a waiting startup probe fails once a
/// second) on each variant's measured pods, by size and by probe (the Event's message
/// names it: "Startup probe failed: ..."): the sum of the Events' counts, as the API server
/// stored them (the kubelet's recorder drops and merges some).
async fn unhealthy_events(
    ns: &TestNamespace,
    sizes: &[usize],
    variants: &[Variant],
) -> Result<String> {
    const PROBES: [&str; 3] = ["Startup", "Readiness", "Liveness"];
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    let listed = events
        .list(&ListParams::default().fields("reason=Unhealthy"))
        .await
        .context("list the Unhealthy Events")?;
    let mut out = String::from(
        "\nThe kubelet's Unhealthy Events (failed probes) on the measured pods, counted, startup / readiness / liveness / other:\n\n| pods | ",
    );
    let titles: Vec<&str> = variants.iter().map(|v| v.title()).collect();
    out += &titles.join(" | ");
    out += " |\n|---:|";
    out += &"---|".repeat(variants.len());
    for &n in sizes {
        out += &format!("\n| {n} |");
        for &variant in variants {
            let prefix = format!("{}-n{n}-", variant.label());
            let mut counts = [0; PROBES.len() + 1];
            for e in listed.items.iter().filter(|e| {
                e.involved_object
                    .name
                    .as_deref()
                    .is_some_and(|name| name.starts_with(&prefix))
            }) {
                let message = e.message.as_deref().unwrap_or_default();
                let probe = PROBES
                    .iter()
                    .position(|p| message.starts_with(p))
                    .unwrap_or(PROBES.len());
                counts[probe] += e.count.unwrap_or(1);
            }
            out += &format!(" {} |", counts.map(|c| c.to_string()).join(" / "));
        }
    }
    // Why they failed: a timeout (the node too busy to answer within the probe's
    // timeoutSeconds) or an answer (503: not ready), whatever the pod and address.
    let mut causes: BTreeMap<String, i32> = BTreeMap::new();
    for e in &listed.items {
        let message = e.message.as_deref().unwrap_or_default();
        *causes.entry(without_quoted(message)).or_default() += e.count.unwrap_or(1);
    }
    let mut causes: Vec<(String, i32)> = causes.into_iter().collect();
    causes.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    out += "\n\nTheir messages (URLs and addresses left out), every variant and size, also while the pods were deleted, most frequent first:\n";
    for (message, count) in causes.iter().take(16) {
        out += &format!("\n- {count} x `{message}`");
    }
    Ok(out)
}

/// `message` with every double-quoted part (a probe's URL) replaced by `"…"` and every
/// address (`10.244.0.7:7071`) by `ADDR`, at most 160 characters.
fn without_quoted(message: &str) -> String {
    let mut out = String::new();
    for (i, part) in message.split('"').enumerate() {
        out += if i % 2 == 1 { "\"…\"" } else { part };
    }
    let words: Vec<&str> = out
        .split(' ')
        .map(|word| {
            let address = word.contains('.')
                && word.contains(':')
                && word
                    .trim_end_matches(':')
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.' || c == ':');
            if address { "ADDR" } else { word }
        })
        .collect();
    words.join(" ").chars().take(160).collect()
}

fn env_list(name: &str, default: &[usize]) -> Result<Vec<usize>> {
    match std::env::var(name) {
        Err(_) => Ok(default.to_vec()),
        Ok(text) => text
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .with_context(|| format!("{name}: not a number: {s:?}"))
            })
            .collect(),
    }
}

/// The variants to run, from `KUBEFLAKE_BENCH_VARIANTS` ([`parse_variants`]), default all.
fn env_variants() -> Result<Vec<Variant>> {
    match std::env::var(VARIANTS_ENV) {
        Err(_) => Ok(Variant::ALL.to_vec()),
        Ok(text) => parse_variants(&text),
    }
}

const VARIANTS_ENV: &str = "KUBEFLAKE_BENCH_VARIANTS";

/// A comma list of variant labels, in any order; they run and print in [`Variant::ALL`]'s
/// order. An unknown label or an empty list is refused, naming the setting and the labels.
fn parse_variants(text: &str) -> Result<Vec<Variant>> {
    let mut chosen = Vec::new();
    for label in text.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let Some(v) = Variant::ALL.into_iter().find(|v| v.label() == label) else {
            let known: Vec<&str> = Variant::ALL.iter().map(|v| v.label()).collect();
            bail!(
                "{VARIANTS_ENV}: no variant {label:?}; the variants are {}",
                known.join(", ")
            );
        };
        chosen.push(v);
    }
    if chosen.is_empty() {
        bail!("{VARIANTS_ENV} names no variant");
    }
    Ok(Variant::ALL
        .into_iter()
        .filter(|v| chosen.contains(v))
        .collect())
}

fn env_number(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => text
            .trim()
            .parse()
            .with_context(|| format!("{name}: not a number: {text:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it by hand (see the top of this file)"]
async fn pod_startup_stages_plain_idle_sidecar_idle_with_hook_and_kubeflake_with_startup_probe_or_hook()
-> Result<()> {
    let sizes = env_list("KUBEFLAKE_BENCH_PODS", &[20, 100])?;
    let rounds = env_number("KUBEFLAKE_BENCH_ROUNDS", 3)?.max(1);
    let warmup = env_number("KUBEFLAKE_BENCH_WARMUP", 1)?;
    let metrics = std::env::var("KUBEFLAKE_BENCH_METRICS").as_deref() != Ok("0");
    let variants = env_variants()?;

    // Chart values to set, e.g. the injected sidecar's CPU request (which the "as
    // injected" variants copy, so they keep measuring the same pod shape).
    let sets = std::env::var("KUBEFLAKE_BENCH_SET").unwrap_or_default();
    let sets: Vec<&str> = sets.split(',').filter(|s| !s.is_empty()).collect();

    let joined = variants.contains(&Variant::KubeflakeJoined);
    let hub_away = bench_startup_support::hub_away()?;
    // The joined variant's hub: a second control plane, started beside the node.
    let hub_start = joined.then(bench_startup_support::start_hub);
    let cluster = Cluster::shared_with_node();
    if let Some(start) = hub_start {
        bench_startup_support::hub_started(start)?;
    }
    let hub_secrets = hub_support::on_node::hub_secrets_value();
    let mut sets = sets;
    if joined {
        sets.push(hub_secrets.as_str());
    }
    helm_install(cluster, RELEASE, RELEASE_NAMESPACE, &sets).await?;
    let ns = cluster.namespace("bench-startup").await?;
    // The default layout: 10 worker bits, 1024 slots.
    create_sequence(&ns, SEQUENCE, serde_json::json!({})).await?;
    let _hub = match joined {
        true => Some(bench_startup_support::join(cluster, RELEASE_NAMESPACE, &ns).await?),
        false => None,
    };

    let shared: Shared = Arc::default();
    let pod_watch = spawn_watch(
        Api::<Pod>::namespaced(ns.client.clone(), &ns.name),
        WatchParams::default().labels(VARIANT_LABEL).timeout(280),
        shared.clone(),
        |r, pod: &Pod, at| {
            if let Some(times) = r.pods.get_mut(&pod.name_any()) {
                observe_pod(times, pod, at);
            }
        },
    );
    let lease_watch = spawn_watch(
        Api::<Lease>::namespaced(ns.client.clone(), &ns.name),
        WatchParams::default()
            .labels(&format!(
                "{SEQUENCE_LABEL} in ({SEQUENCE},{JOINED_SEQUENCE})"
            ))
            .timeout(280),
        shared.clone(),
        observe_lease,
    );
    let injected = webhook_dry_run(&Api::namespaced(ns.client.clone(), &ns.name)).await?;
    let mut templates = HashMap::new();
    for &variant in variants.iter().filter(|v| v.is_from_webhook()) {
        templates.insert(variant, injected_template(&injected, variant)?);
    }
    let bench = Bench {
        cluster,
        ns,
        shared: shared.clone(),
        metrics,
        templates,
    };

    let outcome = async {
        // Watches established before the first pod (they list first).
        tokio::time::sleep(Duration::from_secs(1)).await;
        if warmup > 0 {
            for &variant in &variants {
                bench.round(variant, warmup, "warmup", None).await?;
            }
        }
        let mut reports = Vec::new();
        for &n in &sizes {
            let mut all: BTreeMap<Variant, Results> = BTreeMap::new();
            for round in 0..rounds {
                // Each round starts one variant later than the last, so that no variant
                // always follows the same one (a round inherits some of the last one's
                // work on the node: order effects).
                let mut order = variants.clone();
                order.rotate_left(round % variants.len().max(1));
                for &variant in &order {
                    let tag = format!("n{n}-r{}", round + 1);
                    let results = all.entry(variant).or_default();
                    bench.round(variant, n, &tag, Some(results)).await?;
                }
            }
            reports.push(report(n, rounds, &all));
        }
        anyhow::Ok(reports)
    }
    .await;
    pod_watch.abort();
    lease_watch.abort();
    let reports = outcome?;

    println!(
        "\n<!-- {}KUBEFLAKE_BENCH_PODS={} KUBEFLAKE_BENCH_ROUNDS={rounds} cargo test -p kubeflake-e2e --test bench_startup -- --ignored --nocapture; {} -->\n",
        if hub_away {
            "KUBEFLAKE_BENCH_HUB=away "
        } else {
            ""
        },
        sizes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        Utc::now().format("%Y-%m-%d %H:%M UTC")
    );
    for r in reports {
        println!("{r}");
    }
    println!("{}", unhealthy_events(&bench.ns, &sizes, &variants).await?);
    let restarts = lock(&shared).watch_restarts;
    if restarts > 0 {
        println!(
            "(the watches were restarted {restarts} time(s); stages in between may be seen late)"
        );
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(bench.ns.client.clone());
    let _ = namespaces
        .delete(&bench.ns.name, &DeleteParams::default())
        .await;
    Ok(())
}

#[test]
fn unhealthy_messages_are_counted_without_their_urls_and_addresses() {
    assert_eq!(
        without_quoted(
            r#"Readiness probe failed: Get "http://10.244.0.7:7071/readyz": dial tcp 10.244.0.7:7071: connect: connection refused"#
        ),
        r#"Readiness probe failed: Get "…": dial tcp ADDR connect: connection refused"#
    );
    assert_eq!(
        without_quoted("Liveness probe failed: HTTP probe failed with statuscode: 503"),
        "Liveness probe failed: HTTP probe failed with statuscode: 503"
    );
}

#[test]
fn the_variants_setting_keeps_the_tables_order_and_refuses_an_unknown_name_naming_the_known_ones() {
    assert_eq!(
        parse_variants("kubeflake, idle-probes").unwrap(),
        [Variant::IdleProbes, Variant::Kubeflake]
    );
    let err = parse_variants("idle,kubeflak").unwrap_err().to_string();
    assert!(
        err.contains("KUBEFLAKE_BENCH_VARIANTS")
            && err.contains("\"kubeflak\"")
            && err.contains("idle-injected"),
        "{err}"
    );
    let err = parse_variants(" , ").unwrap_err().to_string();
    assert!(err.contains("names no variant"), "{err}");
}
