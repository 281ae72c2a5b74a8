//! Helpers for the real-node tests (`e2e/tests/node.rs`): the chart installed with the
//! images built here, the example app as a Deployment, IDs fetched from the app through
//! the API server's pod proxy, and the IDs checked for duplicates and decoded to slots.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_crds::{Id, Layout};
use kubeflake_e2e::node::{EXAMPLE_APP_IMAGE, OPERATOR_IMAGE, SIDECAR_IMAGE};
use kubeflake_e2e::{Cluster, TestNamespace};
use tokio::sync::{Mutex as AsyncMutex, MutexGuard, OnceCell};

use crate::chart_support::{CHART, helm, set_args};
use crate::operator_support::eventually;

/// The release every test shares, installed once per test binary.
pub const RELEASE: &str = "kf";
pub const RELEASE_NAMESPACE: &str = "kubeflake-system";

/// Pod starts, rollouts and slot reclaims on a 2-core machine that may be compiling.
pub const LIMIT: Duration = Duration::from_secs(180);

/// The node has 2 cores: the tests take turns (each holds this for its whole run).
pub async fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: AsyncMutex<()> = AsyncMutex::const_new(());
    TURN.lock().await
}

fn split_image(image: &str) -> (&str, &str) {
    image.rsplit_once(':').expect("images are tagged")
}

/// `--set` values that point the chart at the images built here, never pulled.
pub fn local_image_values() -> Vec<String> {
    image_values(OPERATOR_IMAGE, SIDECAR_IMAGE)
}

/// `--set` values that point the chart at these operator and sidecar images on the node
/// (`repository:tag`), never pulled.
pub fn image_values(operator: &str, sidecar: &str) -> Vec<String> {
    let (operator, operator_tag) = split_image(operator);
    let (sidecar, sidecar_tag) = split_image(sidecar);
    vec![
        format!("operator.image.repository={operator}"),
        format!("operator.image.tag={operator_tag}"),
        "operator.image.pullPolicy=Never".to_owned(),
        format!("sidecar.image.repository={sidecar}"),
        format!("sidecar.image.tag={sidecar_tag}"),
        "sidecar.image.pullPolicy=Never".to_owned(),
    ]
}

/// `helm install <release>` of this tree's chart with the node's images and `--wait`;
/// on failure the pods and events of `namespace` say why.
pub async fn helm_install(
    cluster: &Cluster,
    release: &str,
    namespace: &str,
    extra: &[&str],
) -> Result<String> {
    let mut values = local_image_values();
    values.extend(extra.iter().map(|s| (*s).to_owned()));
    helm_wait(cluster, "install", release, CHART, namespace, &values).await
}

/// `helm <verb> <release> <chart> -n <namespace> --create-namespace --wait` with `--set`
/// `values` (install or upgrade); its output, or on failure what helm said with the pods and
/// events of `namespace`.
pub async fn helm_wait(
    cluster: &Cluster,
    verb: &str,
    release: &str,
    chart: &str,
    namespace: &str,
    values: &[String],
) -> Result<String> {
    let value_refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let sets = set_args(&value_refs);
    let mut args = vec![
        verb,
        release,
        chart,
        "--namespace",
        namespace,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
    ];
    args.extend(sets.iter().map(String::as_str));
    let out = helm(cluster, &args).await?;
    if !out.success() {
        bail!(
            "helm {verb} {release} failed:\n{}{}\n{}",
            out.stdout,
            out.stderr,
            namespace_state(cluster, namespace).await
        );
    }
    Ok(out.stdout)
}

/// The pods and events of `namespace` as kubectl prints them, for failure messages.
pub async fn namespace_state(cluster: &Cluster, namespace: &str) -> String {
    let mut text = String::new();
    for args in [
        ["get", "pods", "-n", namespace, "-o", "wide"].as_slice(),
        ["get", "events", "-n", namespace, "--sort-by=.lastTimestamp"].as_slice(),
    ] {
        match cluster.kubectl(args).await {
            Ok(out) => {
                text.push_str(&out.stdout);
                text.push_str(&out.stderr);
            }
            Err(e) => text.push_str(&format!("kubectl {}: {e:#}\n", args.join(" "))),
        }
    }
    text
}

/// The shared release, installed on first use (and kept for the whole test binary).
pub async fn shared_release(cluster: &'static Cluster) -> Result<()> {
    static INSTALLED: OnceCell<Result<(), String>> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            helm_install(cluster, RELEASE, RELEASE_NAMESPACE, &[])
                .await
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        })
        .await
        .clone()
        .map_err(anyhow::Error::msg)
}

/// A test's turn on the node: the shared release installed, and a fresh namespace that
/// holds the IdSequence `sequence`. The turn ends when this is dropped.
pub struct OnTheNode {
    _turn: MutexGuard<'static, ()>,
    pub cluster: &'static Cluster,
    pub ns: TestNamespace,
}

/// Waits for the node, installs the shared release if needed, and makes a namespace
/// `<prefix>-...` with the IdSequence `sequence` of `spec`.
pub async fn on_the_node(
    cluster: &'static Cluster,
    prefix: &str,
    sequence: &str,
    spec: serde_json::Value,
) -> Result<OnTheNode> {
    let turn = one_at_a_time().await;
    shared_release(cluster).await?;
    let ns = cluster.namespace(prefix).await?;
    crate::operator_support::create_sequence(&ns, sequence, spec).await?;
    Ok(OnTheNode {
        _turn: turn,
        cluster,
        ns,
    })
}

impl OnTheNode {
    /// Deploys the example app as `name` with `replicas` pods in `sequence`, and waits for
    /// the rollout.
    pub async fn deploy_app(&self, name: &str, sequence: &str, replicas: u32) -> Result<()> {
        apply(
            self.cluster,
            &self.ns.name,
            &app_deployment(name, sequence, replicas),
        )
        .await?;
        rollout(self.cluster, &self.ns.name, name).await
    }
}

/// A Deployment of the example app whose pods take part in `sequence`.
pub fn app_deployment(name: &str, sequence: &str, replicas: u32) -> String {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, SEQUENCE_LABEL: sequence}},
                "spec": {
                    "terminationGracePeriodSeconds": 20,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"}
                    },
                    "containers": [{
                        "name": "app",
                        "image": EXAMPLE_APP_IMAGE,
                        "imagePullPolicy": "Never",
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 2},
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}
                        }
                    }]
                }
            }
        }
    })
    .to_string()
}

/// `kubectl apply -f -` of one object in `ns`.
pub async fn apply(cluster: &Cluster, ns: &str, object: &str) -> Result<()> {
    cluster
        .kubectl_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(object))
        .await?
        .ok()?;
    Ok(())
}

/// `kubectl rollout status` of a Deployment; on failure the pods and events say why.
pub async fn rollout(cluster: &Cluster, ns: &str, deployment: &str) -> Result<()> {
    let out = cluster
        .kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{deployment}"),
            "-n",
            ns,
            &format!("--timeout={}s", LIMIT.as_secs()),
        ])
        .await?;
    if !out.success() {
        let pods = cluster
            .kubectl(&["get", "pods", "-n", ns, "-o", "wide"])
            .await?;
        let events = cluster
            .kubectl(&["get", "events", "-n", ns, "--sort-by=.lastTimestamp"])
            .await?;
        bail!(
            "rollout of {deployment} did not finish: {}\npods:\n{}\nevents:\n{}",
            out.stderr,
            pods.stdout,
            events.stdout
        );
    }
    Ok(())
}

/// The running, ready pods of a Deployment (by its `app` label), not being deleted.
pub async fn ready_pods(ns: &TestNamespace, app: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect())
}

/// One ready pod of the Deployment `app`.
pub async fn first_ready_pod(ns: &TestNamespace, app: &str) -> Result<Pod> {
    ready_pods(ns, app)
        .await?
        .into_iter()
        .next()
        .with_context(|| format!("no ready pod of {app} in {}", ns.name))
}

/// The example app's JSON answer to `path` in `pod`, through the API server's pod proxy.
pub async fn app_answer(ns: &TestNamespace, pod: &str, path: &str) -> Result<serde_json::Value> {
    let text = proxied_get(ns, pod, 8080, path).await?;
    serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))
}

/// The value of the unlabelled metric `name` on the sidecar of `pod` (its `/metrics` on
/// the probe port, through the API server's pod proxy); `None` when it is not exported.
pub async fn sidecar_metric(ns: &TestNamespace, pod: &str, name: &str) -> Result<Option<f64>> {
    let port = kubeflake_crds::contract::DEFAULT_PROBE_PORT;
    let text = proxied_get(ns, pod, port, "/metrics").await?;
    Ok(kubeflake_e2e::exposition::value(&text, name))
}

/// `GET path` on `port` of `pod`, through the API server's pod proxy (the API server
/// reaches the pod on the bridge), with the namespace's client.
async fn proxied_get(ns: &TestNamespace, pod: &str, port: u16, path: &str) -> Result<String> {
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod}:{port}/proxy{path}",
        ns.name
    );
    let request = http::Request::get(&path).body(Vec::new())?;
    let text = ns.client.request_text(request).await;
    text.with_context(|| format!("GET {path}"))
}

/// Asks the example app in `pod` for `count` IDs, through the API server's pod proxy
/// (the API server reaches the pod on the bridge), with the namespace's client.
pub async fn ids_from_pod(ns: &TestNamespace, pod: &str, count: u32) -> Result<Vec<u64>> {
    let body = app_answer(ns, pod, &format!("/ids?count={count}")).await?;
    ids_in(&body, count).map_err(|e| anyhow::anyhow!("{pod}: {e}"))
}

/// The IDs of an answer of `GET /ids?count={count}` (`{"ids": ["1", ...]}`, decimal
/// strings), exactly `count` of them, or what is wrong with the answer.
pub fn ids_in(body: &serde_json::Value, count: u32) -> Result<Vec<u64>, String> {
    let ids = body["ids"]
        .as_array()
        .ok_or_else(|| format!("no ids in {body}"))?
        .iter()
        .map(|v| {
            v.as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| format!("not an ID: {v}"))
        })
        .collect::<Result<Vec<u64>, String>>()?;
    if ids.len() != count as usize {
        return Err(format!("asked for {count} IDs, got {}", ids.len()));
    }
    Ok(ids)
}

/// Every ID the tests were given, with the pod that gave it: a duplicate is found the
/// moment it is added.
#[derive(Clone, Default)]
pub struct Ledger {
    inner: Arc<Mutex<LedgerInner>>,
}

#[derive(Default)]
struct LedgerInner {
    seen: HashMap<u64, String>,
    duplicates: Vec<String>,
    per_pod: BTreeMap<String, Vec<u64>>,
}

impl Ledger {
    pub fn add(&self, pod: &str, ids: &[u64]) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for &id in ids {
            if let Some(first) = inner.seen.insert(id, pod.to_owned()) {
                let line = format!("{id} from {pod}, first from {first}");
                inner.duplicates.push(line);
            }
            inner.per_pod.entry(pod.to_owned()).or_default().push(id);
        }
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seen
            .len()
    }

    pub fn duplicates(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .duplicates
            .clone()
    }

    pub fn pods(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .per_pod
            .len()
    }

    /// The pods that gave IDs, by name.
    pub fn pod_names(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .per_pod
            .keys()
            .cloned()
            .collect()
    }

    /// IDs of one pod, in the order they were received.
    pub fn of(&self, pod: &str) -> Vec<u64> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .per_pod
            .get(pod)
            .cloned()
            .unwrap_or_default()
    }
}

/// How long the collector waits for one pod's answer. A pod that is going away can
/// keep a request through the API server's proxy open for its whole dial timeout; the
/// collector must not stall on it while the pods it is meant to see come and go.
const COLLECT_ANSWER_LIMIT: Duration = Duration::from_secs(3);

/// Asks every ready app pod at once for 50 IDs into `ledger`, each answer bounded by
/// [`COLLECT_ANSWER_LIMIT`]; returns (answered, failed). A failure (a pod going away, an
/// answer too slow) is counted, not raised.
pub async fn collect_from_ready_pods(
    ns: &TestNamespace,
    app: &str,
    ledger: &Ledger,
) -> (usize, usize) {
    let Ok(pods) = ready_pods(ns, app).await else {
        return (0, 1);
    };
    let answers = futures::future::join_all(pods.iter().map(|pod| async move {
        let name = pod.name_any();
        let answer = tokio::time::timeout(COLLECT_ANSWER_LIMIT, ids_from_pod(ns, &name, 50)).await;
        (name, answer)
    }))
    .await;
    let (mut ok, mut failed) = (0, 0);
    for (name, answer) in answers {
        match answer {
            Ok(Ok(ids)) => {
                ledger.add(&name, &ids);
                ok += 1;
            }
            Ok(Err(_)) | Err(_) => failed += 1,
        }
    }
    (ok, failed)
}

/// Waits (bounded by [`LIMIT`]) until the Deployment `app` has `replicas` ready pods not
/// being deleted, then asks each for 50 IDs into `ledger` and fails on the first that
/// does not answer: for a moment when the pods are settled (after a rollout, a scale or
/// a delete), so that every pod of each step is in the ledger whatever the background
/// collector managed to see.
pub async fn ids_of_every_ready_pod(
    ns: &TestNamespace,
    app: &str,
    replicas: usize,
    ledger: &Ledger,
) -> Result<()> {
    let what = format!("{replicas} ready pods of {app}");
    let pods = eventually(LIMIT, &what, || async {
        let pods = ready_pods(ns, app).await?;
        Ok((pods.len() == replicas).then_some(pods))
    })
    .await?;
    for pod in &pods {
        let name = pod.name_any();
        ledger.add(&name, &ids_from_pod(ns, &name, 50).await?);
    }
    Ok(())
}

/// Collects IDs from every ready app pod every 250 ms into `ledger` (see
/// [`collect_from_ready_pods`]) until the returned sender is dropped or sent to; returns
/// (answered, failed) in total.
pub fn collect_in_background(
    ns: TestNamespace,
    app: String,
    ledger: Ledger,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<(usize, usize)>,
) {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let (mut ok, mut failed) = (0usize, 0usize);
        // Bounded: at most 4800 rounds, each at most a list and COLLECT_ANSWER_LIMIT.
        for _ in 0..4800 {
            if !matches!(
                stopped.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty)
            ) {
                break;
            }
            let (answered, not) = collect_from_ready_pods(&ns, &app, &ledger).await;
            ok += answered;
            failed += not;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (ok, failed)
    });
    (stop, task)
}

/// The worker slot an ID carries, in the default layout of a sequence.
pub fn slot_of(layout: &Layout, id: u64) -> Result<u32> {
    let parts = layout.decode(Id::new(id)?)?;
    Ok(parts.slot.0)
}

/// Deletes the test's namespace and waits (bounded) until it is gone, so the next test
/// has the node to itself; pods still there after [`LIMIT`] (a pod held in its hook does
/// not end on a graceful delete) are force-deleted. A failure is printed, not raised: the
/// result is the test's.
pub async fn delete_namespace(cluster: &Cluster, ns: &TestNamespace) {
    let delete = |wait: u64| {
        let timeout = format!("--timeout={wait}s");
        async move {
            let out = cluster
                .kubectl(&["delete", "namespace", &ns.name, "--wait=true", &timeout])
                .await;
            match out {
                Ok(out) if out.success() => true,
                Ok(out) => {
                    eprintln!("namespace {} not deleted: {}", ns.name, out.stderr.trim());
                    false
                }
                Err(e) => {
                    eprintln!("namespace {} not deleted: {e:#}", ns.name);
                    false
                }
            }
        }
    };
    if delete(LIMIT.as_secs()).await {
        return;
    }
    let left = cluster
        .kubectl(&["get", "pods", "-n", &ns.name, "-o", "wide"])
        .await
        .map(|o| o.stdout)
        .unwrap_or_default();
    eprintln!("force-deleting the pods left in {}:\n{left}", ns.name);
    let _ = cluster
        .kubectl(&[
            "delete",
            "pods",
            "--all",
            "-n",
            &ns.name,
            "--force",
            "--grace-period=0",
        ])
        .await;
    delete(60).await;
}
