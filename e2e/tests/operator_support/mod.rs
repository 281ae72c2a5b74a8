//! Helpers for the operator e2e tests: run `kubeflake-operator` processes scoped to a test
//! namespace, create sequences and pods, and record every version of every slot lease.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kubeflake_crds::IdSequence;
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, SlotLease};
use kubeflake_e2e::exposition;
use kubeflake_e2e::process::{Process, ProcessSpec};
use kubeflake_e2e::{Cluster, TestNamespace};

/// A workspace binary of the profile the tests run in (target/debug or target/release).
///
/// `cargo test --workspace` (scripts/test.sh) builds every binary before any test runs, so
/// normally this only finds it. When the binary is missing, or older than a source file
/// of the product crates or than Cargo.lock (a developer ran `cargo test -p kubeflake-e2e
/// --test X` after changing the sidecar), it is built first: an e2e test never starts a
/// stale binary. A
/// fresh binary is never rebuilt, because a `cargo build` unifies features differently
/// from `cargo test` and would relink it in the middle of a measured run.
pub fn workspace_binary(name: &str) -> PathBuf {
    static CHECKED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let path = profile_dir.join(name);
    let mut checked = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
    if !checked.iter().any(|b| b == name) {
        let built = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let stale = match built {
            None => true,
            Some(built) => {
                ["crds", "sidecar", "operator", "kubectl-kubeflake"]
                    .iter()
                    .any(|krate| newer_source(&root.join(krate), built))
                    || modified_after(&root.join("Cargo.lock"), built)
            }
        };
        if stale {
            let mut cargo = std::process::Command::new(env!("CARGO"));
            // From the workspace root, where every member's binaries are in reach.
            cargo
                .current_dir(root)
                .args(["build", "-q", "--locked", "--bin", name]);
            if profile_dir.ends_with("release") {
                cargo.arg("--release");
            }
            let status = cargo.status().expect("cargo runs");
            assert!(status.success(), "cannot build {name}");
        }
        checked.push(name.to_string());
    }
    path
}

fn modified_after(path: &std::path::Path, than: std::time::SystemTime) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|m| m > than)
}

/// Whether a Rust source or manifest under `dir` (its `src` and `Cargo.toml`) was changed
/// after `than`.
fn newer_source(dir: &std::path::Path, than: std::time::SystemTime) -> bool {
    let newer = |p: &std::path::Path| modified_after(p, than);
    if newer(&dir.join("Cargo.toml")) {
        return true;
    }
    let mut pending = vec![dir.join("src")];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                pending.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") && newer(&p) {
                return true;
            }
        }
    }
    false
}

/// What every operator these helpers start is given unless its arguments name a Lease
/// policy (`--lease-policy <name>`, as e2e/tests/lease_policy_guard.rs does): these tests
/// pin the operator's own rules (1, 9, 10, 13, 15) in namespaces where no Lease policy is
/// bound, or one the operator is not told of (faults.rs binds its own). The policy is
/// cluster-scoped, so binding one per test would also constrain other tests' deliberate
/// writes. The chart's operator (`chart_support::ChartOperator`, the node tests) runs as
/// installed: with the policy, and checking it.
pub const WITHOUT_LEASE_POLICY: &str = "--unsafe-without-lease-policy";

/// A `kubeflake-operator` process watching one namespace. Killed when dropped. Started
/// with [`WITHOUT_LEASE_POLICY`] unless the arguments name a policy.
pub struct Operator {
    pub process: Process,
    pub metrics_port: u16,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Operator {
    pub fn start(cluster: &Cluster, ns: &str, tag: &str) -> Result<Operator> {
        Operator::start_with(cluster, ns, tag, &[])
    }

    /// Like [`Operator::start`], but this process alone (and its restarts) authenticates
    /// with `kubeconfig` (for instance a service account's token:
    /// `policy_support::token_kubeconfig`) instead of the admin's.
    pub fn start_as(cluster: &Cluster, ns: &str, tag: &str, kubeconfig: &Path) -> Result<Operator> {
        Operator::start_process(
            cluster,
            &format!("{ns}-{tag}"),
            tag,
            &["--namespace", ns],
            Some(kubeconfig),
        )
    }

    /// Like [`Operator::start_as`], with extra command-line arguments (an operator of
    /// another control plane than the shared one: its own admin kubeconfig).
    pub fn start_as_with(
        cluster: &Cluster,
        ns: &str,
        tag: &str,
        kubeconfig: &Path,
        extra: &[&str],
    ) -> Result<Operator> {
        let args: Vec<&str> = ["--namespace", ns].iter().chain(extra).copied().collect();
        Operator::start_process(
            cluster,
            &format!("{ns}-{tag}"),
            tag,
            &args,
            Some(kubeconfig),
        )
    }

    /// Like [`Operator::start`], with extra command-line arguments.
    pub fn start_with(cluster: &Cluster, ns: &str, tag: &str, extra: &[&str]) -> Result<Operator> {
        let args: Vec<&str> = ["--namespace", ns].iter().chain(extra).copied().collect();
        Operator::start_args(cluster, &format!("{ns}-{tag}"), tag, &args)
    }

    /// An operator watching every namespace, as a cluster runs it.
    pub fn start_cluster_wide(cluster: &Cluster, tag: &str, extra: &[&str]) -> Result<Operator> {
        Operator::start_args(cluster, &format!("all-{tag}"), tag, extra)
    }

    fn start_args(cluster: &Cluster, log: &str, tag: &str, extra: &[&str]) -> Result<Operator> {
        Operator::start_process(cluster, log, tag, extra, None)
    }

    fn start_process(
        cluster: &Cluster,
        log: &str,
        tag: &str,
        extra: &[&str],
        kubeconfig: Option<&Path>,
    ) -> Result<Operator> {
        let port = free_port();
        let bin = workspace_binary("kubeflake-operator");
        let mut args: Vec<OsString> = Vec::new();
        let program = match kubeconfig {
            Some(path) => {
                // Through /usr/bin/env: the environment of this process only.
                let mut assignment = OsString::from("KUBECONFIG=");
                assignment.push(path);
                args.push(assignment);
                args.push(bin.into_os_string());
                PathBuf::from("/usr/bin/env")
            }
            None => bin,
        };
        args.extend(
            [
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--instance",
                tag,
                "--log-format",
                "json",
            ]
            .iter()
            .chain(extra)
            .map(OsString::from),
        );
        if !extra.contains(&"--lease-policy") {
            args.push(WITHOUT_LEASE_POLICY.into());
        }
        let spec = ProcessSpec {
            name: format!("kubeflake-operator-{tag}"),
            program,
            args,
            log: cluster.dir().join(format!("operator-{log}.log")),
        };
        if kubeconfig.is_none() {
            // The process inherits KUBECONFIG from here.
            // SAFETY: tests in this binary only ever set it to the same value.
            unsafe { std::env::set_var("KUBECONFIG", cluster.kubeconfig()) };
        }
        Ok(Operator {
            process: Process::start(spec)?,
            metrics_port: port,
        })
    }

    /// The value of one unlabelled metric (0 when absent or unreachable).
    pub fn metric(&self, name: &str) -> f64 {
        exposition::value(&self.metrics(), name).unwrap_or(0.0)
    }

    /// The value of one labelled series, chosen by a `key="value"` fragment of its labels
    /// (0 when absent or unreachable).
    pub fn metric_with(&self, name: &str, label: &str) -> f64 {
        exposition::value_with(&self.metrics(), name, label).unwrap_or(0.0)
    }

    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)) else {
            return String::new();
        };
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.process.kill();
    }
}

/// Applies the CRD once per test binary and waits until it is served.
pub async fn install_crd(cluster: &Cluster) -> Result<()> {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_try_init(|| async {
        let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/idsequence.yaml");
        cluster
            .kubectl(&["apply", "--server-side", "-f", crd])
            .await?
            .ok()?;
        cluster
            .wait_crd_established("idsequences.kubeflake.io")
            .await?;
        Ok::<(), anyhow::Error>(())
    })
    .await?;
    Ok(())
}

pub async fn create_sequence(
    ns: &TestNamespace,
    name: &str,
    spec: serde_json::Value,
) -> Result<IdSequence> {
    let api: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let seq: IdSequence = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
        "metadata": {"name": name}, "spec": spec,
    }))?;
    Ok(api.create(&PostParams::default(), &seq).await?)
}

/// Creates labelled pods (API objects only: no kubelet runs them). Up to 16 at once.
pub async fn create_pods(
    ns: &TestNamespace,
    sequence: &str,
    prefix: &str,
    count: usize,
) -> Result<Vec<Pod>> {
    create_pods_as(ns, sequence, prefix, count, None).await
}

/// Like [`create_pods`]; with `account`, the pods run as that service account (which must
/// exist), so that tokens bound to them can be made for it.
pub async fn create_pods_as(
    ns: &TestNamespace,
    sequence: &str,
    prefix: &str,
    count: usize,
    account: Option<&str>,
) -> Result<Vec<Pod>> {
    create_pods_with(ns, sequence, prefix, count, account, serde_json::json!({})).await
}

/// Like [`create_pods_as`], with `annotations` (a JSON object) on every pod from its
/// creation on (as the webhook's `kubeflake.io/injected` is).
pub async fn create_pods_with(
    ns: &TestNamespace,
    sequence: &str,
    prefix: &str,
    count: usize,
    account: Option<&str>,
    annotations: serde_json::Value,
) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            let mut pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": format!("{prefix}-{i}"),
                    "labels": {SEQUENCE_LABEL: sequence},
                    "annotations": annotations,
                },
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app"}]},
            }))
            .expect("a valid pod");
            if let Some(spec) = pod.spec.as_mut() {
                spec.service_account_name = account.map(str::to_string);
            }
            async move { api.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .context("creating pods")
}

pub async fn slot_leases(ns: &TestNamespace, sequence: &str) -> Result<Vec<SlotLease>> {
    let api: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let list = api
        .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}={sequence}")))
        .await?;
    Ok(list
        .items
        .iter()
        .map(SlotLease::parse)
        .collect::<Result<_, _>>()?)
}

/// Polls `check` every 200 ms until it returns `Some`, or fails after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until every pod in `uids` holds exactly one slot, and returns uid -> slot.
pub async fn all_assigned(
    ns: &TestNamespace,
    sequence: &str,
    uids: &[String],
    limit: Duration,
) -> Result<HashMap<String, u32>> {
    eventually(limit, "every pod to hold exactly one slot", || async {
        let leases = slot_leases(ns, sequence).await?;
        let mut held: HashMap<String, Vec<u32>> = HashMap::new();
        for l in &leases {
            if let Some(h) = &l.holder {
                held.entry(h.clone()).or_default().push(l.slot.0);
            }
        }
        let done = uids
            .iter()
            .all(|u| held.get(u).is_some_and(|s| s.len() == 1));
        Ok(done.then(|| held.into_iter().map(|(u, s)| (u, s[0])).collect()))
    })
    .await
}

/// Every version of every slot lease in a namespace, in the order etcd committed them.
#[derive(Clone, Default)]
pub struct LeaseHistory {
    pub versions: Arc<Mutex<Vec<LeaseVersion>>>,
}

/// One recorded version of a slot lease: its name and its holder.
pub type LeaseVersion = (String, Option<String>);

impl LeaseHistory {
    /// Starts recording from now (call before anything writes leases).
    pub async fn record(
        client: Client,
        ns: &str,
    ) -> Result<(LeaseHistory, tokio::task::JoinHandle<()>)> {
        let api: Api<Lease> = Api::namespaced(client, ns);
        let start = api
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        let history = LeaseHistory::default();
        let versions = history.versions.clone();
        let task = tokio::spawn(async move {
            // Watches resume from the last version seen, so an API server restart or a
            // watch timeout loses nothing.
            let mut from = start;
            loop {
                let params = WatchParams::default().labels(SEQUENCE_LABEL).timeout(280);
                let Ok(stream) = api.watch(&params, &from).await else {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                };
                let mut stream = stream.boxed();
                while let Some(Ok(event)) = stream.next().await {
                    let (lease, deleted) = match event {
                        WatchEvent::Added(l) | WatchEvent::Modified(l) => (l, false),
                        WatchEvent::Deleted(l) => (l, true),
                        WatchEvent::Bookmark(_) => continue,
                        WatchEvent::Error(e) if e.code == 410 => {
                            // A restarted API server's watch cache starts at the current
                            // revision: re-list and go on from there. Intermediate versions
                            // written in between are not seen; the resync is counted.
                            let Ok(list) = api
                                .list(&ListParams::default().labels(SEQUENCE_LABEL))
                                .await
                            else {
                                break;
                            };
                            let mut v = versions.lock().unwrap();
                            v.push(("<resync>".into(), None));
                            for lease in list.items {
                                let holder = lease
                                    .spec
                                    .and_then(|s| s.holder_identity)
                                    .filter(|h| !h.is_empty());
                                v.push((lease.metadata.name.unwrap_or_default(), holder));
                            }
                            from = list.metadata.resource_version.unwrap_or_default();
                            break;
                        }
                        WatchEvent::Error(_) => break, // e.g. the API server went away: resume
                    };
                    from = lease.metadata.resource_version.clone().unwrap_or_default();
                    let holder = if deleted {
                        Some("<deleted>".to_string())
                    } else {
                        lease
                            .spec
                            .and_then(|s| s.holder_identity)
                            .filter(|h| !h.is_empty())
                    };
                    versions
                        .lock()
                        .unwrap()
                        .push((lease.metadata.name.unwrap_or_default(), holder));
                }
            }
        });
        Ok((history, task))
    }

    /// Replays the history and returns every violation of "a slot goes from one live pod
    /// to another only through a release of a pod that is gone" (pods in `deleted` were
    /// deleted by the test) and of "a live pod's only slot is never taken away".
    pub fn violations(&self, deleted: &[String]) -> Vec<String> {
        let versions = self.versions.lock().unwrap().clone();
        let mut current: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut problems: Vec<String> = Vec::new();
        for (i, (lease, holder)) in versions.iter().enumerate() {
            let previous = current.get(lease).cloned().flatten();
            match (&previous, holder) {
                (Some(a), Some(b)) if a != b && b != "<deleted>" => problems.push(format!(
                    "#{i} {lease}: holder changed directly from {a} to {b}"
                )),
                (Some(a), None) if !deleted.contains(a) => {
                    let holds_another = current
                        .iter()
                        .any(|(l, h)| l != lease && h.as_deref() == Some(a.as_str()));
                    if !holds_another {
                        problems.push(format!(
                            "#{i} {lease}: taken from live pod {a}, its only slot"
                        ));
                    }
                }
                _ => {}
            }
            current.insert(lease.clone(), holder.clone().filter(|h| h != "<deleted>"));
        }
        problems
    }

    /// Pod UID -> every slot number it held at some point.
    pub fn slots_held(&self) -> HashMap<String, std::collections::HashSet<u32>> {
        let mut held: HashMap<String, std::collections::HashSet<u32>> = HashMap::new();
        for (lease, holder) in self.versions.lock().unwrap().iter() {
            let slot = lease.rsplit('-').next().and_then(|n| n.parse().ok());
            if let (Some(h), Some(slot)) = (holder, slot) {
                held.entry(h.clone()).or_default().insert(slot);
            }
        }
        held
    }

    /// How often the recorder had to re-list (after an API server restart).
    pub fn resyncs(&self) -> usize {
        self.versions
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, _)| l == "<resync>")
            .count()
    }

    pub fn len(&self) -> usize {
        self.versions.lock().unwrap().len()
    }
}

/// apiserver_request_total summed by (resource, verb), for kubeflake's resources.
pub async fn request_counts(client: &kube::Client) -> Result<BTreeMap<(String, String), f64>> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut counts = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |name: &str| {
            line.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let resource = label("resource");
        if !["leases", "idsequences", "events", "pods"].contains(&resource.as_str()) {
            continue;
        }
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *counts.entry((resource, label("verb"))).or_insert(0.0) += value;
    }
    Ok(counts)
}
