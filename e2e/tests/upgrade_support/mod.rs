//! What the upgrade test (`e2e/tests/upgrade.rs`) runs beside the upgrade and measures:
//! - [`Traffic`]: clients that take IDs from an app's ready pods all the time, like a
//!   Service would spread them, retry on another pod after a failed answer, and record
//!   every answer, classified;
//! - [`AdmissionProbe`]: a labelled pod sent through admission every second
//!   (`--dry-run=server`: the mutating webhook runs, nothing is created), recording
//!   whether the sidecar was injected and by which version.
//!
//! Both are bounded in time and stop when asked; phases ([`Phases`]) cut their records
//! into the parts of the scenario the figures are given for.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use kubeflake_crds::contract::{INJECTED_ANNOTATION, SIDECAR_NAME};
use kubeflake_e2e::{Cluster, TestNamespace};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::node_support::{Ledger, ids_in, ready_pods};

/// The longest any recorder runs (the whole scenario takes a few minutes).
const MAX_RUN: Duration = Duration::from_secs(30 * 60);
/// IDs per request.
const BATCH: u32 = 20;
/// The longest one request may take (the example app gives up on its sidecar long before).
const REQUEST_LIMIT: Duration = Duration::from_secs(20);

/// What one request got.
#[derive(Debug, Clone)]
pub enum Answer {
    /// IDs, in the order the answer gave them, all recorded in the ledger too.
    Ids(Vec<u64>),
    /// An answer the API documents as retryable (503 not ready to issue, 409 `after` not
    /// yet honoured), retried by the client on the next pod.
    Retryable(String),
    /// The pod was being deleted or gone when the request failed (a Service would have
    /// taken it out of its endpoints): retried on the next pod.
    PodLeaving(String),
    /// Anything else: a failure the upgrade caused.
    Failed(String),
}

/// One recorded answer.
#[derive(Debug, Clone)]
pub struct Record {
    pub at: Instant,
    pub client: usize,
    pub pod: String,
    pub answer: Answer,
}

/// Named instants of the scenario; a phase lasts until the next one begins.
#[derive(Clone, Default)]
pub struct Phases {
    marks: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl Phases {
    pub fn begin(&self, name: &str) {
        eprintln!("upgrade: phase {name}");
        self.lock().push((name.to_owned(), Instant::now()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Instant)>> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The phase an instant falls in ("before" ahead of the first mark).
    pub fn of(&self, at: Instant) -> String {
        self.lock()
            .iter()
            .rev()
            .find(|(_, start)| *start <= at)
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| "before".to_owned())
    }

    pub fn names(&self) -> Vec<String> {
        self.lock().iter().map(|(n, _)| n.clone()).collect()
    }
}

/// Clients taking IDs from the ready pods of one app, until stopped.
pub struct Traffic {
    pub app: String,
    /// When the clients started (a client's first pause counts from here).
    pub started: Instant,
    pub ledger: Ledger,
    records: Arc<Mutex<Vec<Record>>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Traffic {
    /// Starts `clients` clients on the ready pods of Deployment `app`. They ask through a
    /// client of their own that never retries by itself: kube's default client repeats a
    /// 503 after its Retry-After, which would hide the refusals the figures count (and hold
    /// a request for as long as a pod keeps refusing).
    pub fn start(
        cluster: &Cluster,
        ns: &TestNamespace,
        app: &str,
        clients: usize,
    ) -> Result<Traffic> {
        let mut config = cluster.config().clone();
        config.default_retry = false;
        let asking = TestNamespace {
            name: ns.name.clone(),
            client: kube::Client::try_from(config)?,
        };
        let ns = &asking;
        let (stop, stopped) = watch::channel(false);
        let ledger = Ledger::default();
        let records = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..clients)
            .map(|client| {
                let (ns, app, ledger, records, stopped) = (
                    TestNamespace {
                        name: ns.name.clone(),
                        client: ns.client.clone(),
                    },
                    app.to_owned(),
                    ledger.clone(),
                    records.clone(),
                    stopped.clone(),
                );
                tokio::spawn(run_client(client, ns, app, ledger, records, stopped))
            })
            .collect();
        Ok(Traffic {
            app: app.to_owned(),
            started: Instant::now(),
            ledger,
            records,
            stop,
            tasks,
        })
    }

    /// Stops the clients and returns every record, in time order.
    pub async fn stop(self) -> Vec<Record> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            if let Err(e) = task.await {
                eprintln!("upgrade: a client of {} ended abnormally: {e}", self.app);
            }
        }
        let mut records = self
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        records.sort_by_key(|r| r.at);
        records
    }

    /// The last `n` answers, as lines (for a failure message).
    pub fn last_answers(&self, n: usize) -> String {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let skip = records.len().saturating_sub(n);
        records
            .iter()
            .skip(skip)
            .map(|r| format!("{}: {:?}\n", r.pod, r.answer))
            .collect()
    }

    /// IDs received so far.
    pub fn ids(&self) -> usize {
        self.ledger.len()
    }
}

async fn run_client(
    client: usize,
    ns: TestNamespace,
    app: String,
    ledger: Ledger,
    records: Arc<Mutex<Vec<Record>>>,
    stopped: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut turn = client;
    let mut failed_in_a_row = 0;
    while !*stopped.borrow() && started.elapsed() < MAX_RUN {
        let pods = match ready_pods(&ns, &app).await {
            Ok(pods) if !pods.is_empty() => pods,
            // No ready pod (or the list failed): the client waits, its pause grows.
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        turn += 1;
        let pod = pods[turn % pods.len()].name_any();
        let answer = match take_ids(&ns, &pod, BATCH).await {
            Ok(ids) => {
                ledger.add(&pod, &ids);
                Answer::Ids(ids)
            }
            Err(failure) => classify(&ns, &pod, failure).await,
        };
        let retry = !matches!(answer, Answer::Ids(_));
        records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Record {
                at: Instant::now(),
                client,
                pod,
                answer,
            });
        // A failed request is retried at once on the next pod, until every pod has failed
        // in a row (a strict sequence's old sidecars all refuse during an upgrade): then the
        // client waits as after a served one, instead of spinning.
        failed_in_a_row = if retry { failed_in_a_row + 1 } else { 0 };
        if !retry || failed_in_a_row >= pods.len() {
            failed_in_a_row = 0;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A request that got no IDs: the HTTP status if there was an answer, and what was said.
struct Failure {
    status: Option<u16>,
    text: String,
}

/// `GET /ids?count=N` of the example app in `pod`, through the API server's pod proxy,
/// keeping the status and body of an error answer (the app's `{"error": ...}` is no
/// Kubernetes Status, which kube's own error handling would need to keep them).
async fn take_ids(ns: &TestNamespace, pod: &str, count: u32) -> Result<Vec<u64>, Failure> {
    use http_body_util::BodyExt;
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod}:8080/proxy/ids?count={count}",
        ns.name
    );
    let failure = |status: Option<u16>, text: String| Failure { status, text };
    let request = http::Request::get(&path)
        .body(kube::client::Body::empty())
        .map_err(|e| failure(None, e.to_string()))?;
    let exchange = async {
        let response = ns
            .client
            .send(request)
            .await
            .map_err(|e| failure(None, format!("GET {path}: {e}")))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| failure(Some(status), format!("reading the answer: {e}")))?
            .to_bytes();
        Ok((status, body))
    };
    let (status, body) = tokio::time::timeout(REQUEST_LIMIT, exchange)
        .await
        .map_err(|_| {
            failure(
                None,
                format!("GET {path}: no answer within {REQUEST_LIMIT:?}"),
            )
        })??;
    let text = String::from_utf8_lossy(&body).into_owned();
    if !(200..300).contains(&status) {
        return Err(failure(Some(status), text.trim().to_owned()));
    }
    serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| e.to_string())
        .and_then(|body| ids_in(&body, count))
        .map_err(|e| failure(Some(status), format!("{e}: {text}")))
}

/// Why a request failed: a documented retryable answer, a pod on its way out, or neither.
async fn classify(ns: &TestNamespace, pod: &str, failure: Failure) -> Answer {
    let text = match failure.status {
        Some(status) => format!("HTTP {status}: {}", failure.text),
        None => failure.text,
    };
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    match pods.get_opt(pod).await {
        Ok(None) => return Answer::PodLeaving(format!("gone: {text}")),
        Ok(Some(p)) if p.metadata.deletion_timestamp.is_some() => {
            return Answer::PodLeaving(format!("deleting: {text}"));
        }
        _ => {}
    }
    // The example app's documented retryable answers (examples/app/src/app.rs): 503 when
    // its sidecar is not ready to issue, 409 when `after` cannot be honoured yet; both
    // carry Retry-After and a JSON error.
    match failure.status {
        Some(503 | 409) if text.contains("\"error\"") => Answer::Retryable(text),
        _ => {
            // What the pod's sidecar said last, for whoever reads the failure.
            let params = kube::api::LogParams {
                container: Some(SIDECAR_NAME.to_owned()),
                tail_lines: Some(15),
                ..Default::default()
            };
            let said = match pods.logs(pod, &params).await {
                Ok(log) => log,
                Err(e) => format!("(its sidecar's log: {e})"),
            };
            Answer::Failed(format!("{text}\n  its sidecar said last:\n{said}"))
        }
    }
}

/// What a phase's records add up to, for the test's assertions and its printed figures.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub requests: usize,
    pub ids: usize,
    pub retryable: usize,
    pub pod_leaving: usize,
    pub failed: Vec<String>,
    /// The longest time one client went without a served request.
    pub longest_pause: Duration,
}

/// Figures per phase (in the order the phases began) and for the whole run.
pub fn figures(
    records: &[Record],
    phases: &Phases,
    started: Instant,
) -> (Vec<(String, Figures)>, Figures) {
    let mut by_phase: BTreeMap<String, Figures> = BTreeMap::new();
    let mut total = Figures::default();
    let mut last_served: BTreeMap<usize, Instant> = BTreeMap::new();
    for record in records {
        let phase = phases.of(record.at);
        for figures in [by_phase.entry(phase).or_default(), &mut total] {
            figures.requests += 1;
            match &record.answer {
                Answer::Ids(ids) => figures.ids += ids.len(),
                Answer::Retryable(_) => figures.retryable += 1,
                Answer::PodLeaving(_) => figures.pod_leaving += 1,
                Answer::Failed(why) => figures.failed.push(format!("{}: {why}", record.pod)),
            }
        }
        if matches!(record.answer, Answer::Ids(_)) {
            let since = last_served
                .insert(record.client, record.at)
                .unwrap_or(started);
            let pause = record.at.saturating_duration_since(since);
            let phase = phases.of(record.at);
            for figures in [by_phase.entry(phase).or_default(), &mut total] {
                figures.longest_pause = figures.longest_pause.max(pause);
            }
        }
    }
    let ordered = phases
        .names()
        .into_iter()
        .map(|name| {
            let f = by_phase.remove(&name).unwrap_or_default();
            (name, f)
        })
        .collect();
    (ordered, total)
}

/// Where one client's answers broke real-time order (docs/safety.md rule 13): a client
/// asks again only after its last answer came, so every value it is given must be above
/// every value it was given before, whichever pod answered.
pub fn out_of_order(records: &[Record]) -> Vec<String> {
    let mut last: BTreeMap<usize, (u64, &str)> = BTreeMap::new();
    let mut problems = Vec::new();
    for record in records {
        let Answer::Ids(ids) = &record.answer else {
            continue;
        };
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            problems.push(format!(
                "{} gave {} then {} in one answer",
                record.pod, w[0], w[1]
            ));
        }
        let (Some(&first), Some(&top)) = (ids.first(), ids.last()) else {
            continue;
        };
        if let Some((before, from)) = last.get(&record.client)
            && first <= *before
        {
            problems.push(format!(
                "client {}: {} gave {first} after {from} had given {before}",
                record.client, record.pod
            ));
        }
        last.insert(record.client, (top, &record.pod));
    }
    problems
}

/// A labelled pod sent through admission every second with `--dry-run=server`.
pub struct AdmissionProbe {
    stop: watch::Sender<bool>,
    task: JoinHandle<Vec<(Instant, Result<String, String>)>>,
}

impl AdmissionProbe {
    /// Probes admission of a pod labelled for `sequence` in `ns`.
    pub fn start(cluster: &'static Cluster, ns: &str, sequence: &str) -> AdmissionProbe {
        let (stop, stopped) = watch::channel(false);
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "admission-probe-",
                         "labels": {kubeflake_crds::slot_lease::SEQUENCE_LABEL: sequence}},
            "spec": {"containers": [{"name": "app", "image": kubeflake_e2e::node::EXAMPLE_APP_IMAGE}]}
        })
        .to_string();
        let ns = ns.to_owned();
        let task = tokio::spawn(async move {
            let mut results = Vec::new();
            let started = Instant::now();
            while !*stopped.borrow() && started.elapsed() < MAX_RUN {
                let out = cluster
                    .kubectl_with_stdin(
                        &[
                            "create",
                            "-n",
                            &ns,
                            "--dry-run=server",
                            "-o",
                            "json",
                            "-f",
                            "-",
                        ],
                        Some(&pod),
                    )
                    .await;
                let result = match out {
                    Ok(out) if out.success() => injected_version(&out.stdout),
                    Ok(out) => Err(out.stderr.trim().to_owned()),
                    Err(e) => Err(format!("{e:#}")),
                };
                results.push((Instant::now(), result));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            results
        });
        AdmissionProbe { stop, task }
    }

    /// Stops probing; every probe's instant and the injecting version (or why it failed).
    pub async fn stop(self) -> Vec<(Instant, Result<String, String>)> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The version that injected the sidecar into an admitted pod, or why it was not injected.
fn injected_version(pod_json: &str) -> Result<String, String> {
    let pod: Pod = serde_json::from_str(pod_json).map_err(|e| format!("not a pod: {e}"))?;
    let spec = pod.spec.as_ref().ok_or("admitted pod has no spec")?;
    let has_sidecar = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| c.name == SIDECAR_NAME);
    if !has_sidecar {
        return Err("admitted without the sidecar".to_owned());
    }
    pod.annotations()
        .get(INJECTED_ANNOTATION)
        .cloned()
        .ok_or_else(|| format!("no {INJECTED_ANNOTATION} annotation"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(client: usize, pod: &str, ids: &[u64]) -> Record {
        Record {
            at: Instant::now(),
            client,
            pod: pod.to_owned(),
            answer: Answer::Ids(ids.to_vec()),
        }
    }

    #[test]
    fn rule13_the_order_check_finds_a_value_below_one_the_same_client_was_given_before() {
        let refused = Record {
            answer: Answer::Retryable("HTTP 503".to_owned()),
            ..served(0, "b", &[])
        };
        let in_order = [
            served(0, "a", &[1, 2]),
            refused,
            served(1, "a", &[3]),
            served(0, "b", &[4, 5]),
            served(1, "b", &[6]),
        ];
        assert!(out_of_order(&in_order).is_empty());
        // Another client's larger values do not matter: overlapping requests may get
        // theirs in either order. The same client's do.
        let broken = [
            served(0, "a", &[5]),
            served(1, "b", &[9]),
            served(0, "b", &[7, 6]),
            served(0, "a", &[3]),
        ];
        let problems = out_of_order(&broken);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("gave 7 then 6"), "{problems:?}");
        assert!(
            problems[1].contains("a gave 3 after b had given 6"),
            "{problems:?}"
        );
    }
}
