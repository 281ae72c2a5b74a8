//! Scale at cluster size, ignored by default (minutes of a busy machine); the figures and
//! the command are in docs/scale.md:
//!
//! ```text
//! cargo test -p kubeflake-e2e --test scale_cluster -- --ignored --nocapture ten_thousand
//! ```
//!
//! 10,000 labelled pods over 20 IdSequences in 20 of 50 namespaces (4 sequences with
//! `workerBits: 12` take 1,500 pods each, 16 with the default 10 take 250), 1,000
//! unlabelled bystander pods in the other 30 namespaces, and one operator watching every
//! namespace, as a cluster runs it. Pods here are API objects (no kubelet), so the
//! sidecars' lease writes are played by this test: the first renewal as soon as a pod is
//! given a slot, then one every third of the lease duration (jittered by up to ±10 %),
//! which is what `sidecar/src/cluster/holder.rs` does.
//!
//! Phases: assignment (every pod created, 32 in flight, until each holds a slot), a steady
//! window (nothing changes but renewals), churn (1,000 pods deleted and 1,000 created at
//! once while the rest hold their slots). Reported, never asserted: times, the operator's
//! RSS and CPU seconds, API server and etcd CPU seconds, API requests by resource and
//! verb, etcd's database size, and what `kubectl get idseq -A` and `kubectl kubeflake
//! slots` cost. Asserted: correctness and counts (every pod holds exactly one slot, no
//! slot goes from a live pod to another, operator lease writes per pod, status writes and
//! reconcile passes in the steady window).
//!
//! Sizes can be changed for a quicker look: `KUBEFLAKE_SCALE_PODS` (10000),
//! `KUBEFLAKE_SCALE_CHURN` (1000), `KUBEFLAKE_SCALE_STEADY_SECS` (60),
//! `KUBEFLAKE_SCALE_LEASE_SECS` (120, the default lease duration).
//!
//! To show that a pass costs what its own sequence has, whatever the other sequences
//! hold: `KUBEFLAKE_SCALE_SEQUENCES` (20, at most 40) sequences of
//! `KUBEFLAKE_SCALE_PODS_PER_SEQUENCE` pods each (unset: the mix above, each sequence as
//! many pods as in the 20-sequence run), e.g. 1 and 20 sequences of 500; the report gives
//! the steady window's operator CPU and time per reconcile pass.
//!
//! The report gives when the last pod was created and when every pod held a slot, both
//! from the first create, and the lag between them: the time a pod is seen holding is the
//! watch event of its slot Lease (the lease tracker's), not the poll that noticed it.
//!
//! One piece although long: the phases share the lease tracker, the renewer and the
//! measurement helpers, and read best top to bottom.

mod operator_support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::Tick;
use kubeflake_crds::sequence::SequenceParams;
use kubeflake_crds::slot_lease::{self, SEQUENCE_LABEL, SlotLease};
use kubeflake_e2e::exposition;
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use serde_json::json;

const NAMESPACES: usize = 50;
/// At most this many namespaces hold a sequence; bystanders go to the others.
const MAX_SEQUENCES: usize = 40;
/// Sequences with workerBits 12 (4,096 slots) in the default mix; the others have the
/// default 10 (1,024).
const WIDE: usize = 4;
/// Writes in flight when the test creates or deletes pods.
const IN_FLIGHT: usize = 32;
/// Renewals in flight (the sidecars' writes, played by the test).
const RENEWALS_IN_FLIGHT: usize = 32;
/// How long any phase may take before the test fails.
const PHASE_LIMIT: Duration = Duration::from_secs(1800);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Sizes {
    pods: usize,
    churn: usize,
    steady: Duration,
    lease_secs: u64,
    sequences: usize,
    /// Every sequence this many pods; `None`: the default mix.
    per_sequence: Option<usize>,
}

impl Sizes {
    fn from_env() -> Sizes {
        Sizes {
            pods: env_usize("KUBEFLAKE_SCALE_PODS", 10_000),
            churn: env_usize("KUBEFLAKE_SCALE_CHURN", 1_000),
            steady: Duration::from_secs(env_usize("KUBEFLAKE_SCALE_STEADY_SECS", 60) as u64),
            lease_secs: env_usize("KUBEFLAKE_SCALE_LEASE_SECS", 120) as u64,
            sequences: env_usize("KUBEFLAKE_SCALE_SEQUENCES", 20).clamp(1, MAX_SEQUENCES),
            per_sequence: std::env::var("KUBEFLAKE_SCALE_PODS_PER_SEQUENCE")
                .ok()
                .and_then(|v| v.parse().ok()),
        }
    }

    /// Pods of sequence `i`: as set, or in the default mix 15 % of all for each wide one,
    /// 2.5 % for each other.
    fn pods_of(&self, i: usize) -> usize {
        match self.per_sequence {
            Some(n) => n,
            None if i < WIDE => self.pods * 3 / 20,
            None => self.pods / 40,
        }
    }

    /// Whether sequence `i` has workerBits 12 (4,096 slots) rather than 10.
    fn wide(&self, i: usize) -> bool {
        match self.per_sequence {
            Some(n) => n > 1000,
            None => i < WIDE,
        }
    }

    fn wide_count(&self) -> usize {
        (0..self.sequences).filter(|i| self.wide(*i)).count()
    }
}

/// One sequence of the run.
struct Sequence {
    ns: TestNamespace,
    name: String,
    params: SequenceParams,
    capacity: u64,
}

// ---------------------------------------------------------------------------------------
// Measurements

/// CPU seconds (user + system) and resident memory of a process, from /proc.
#[derive(Clone, Copy, Debug, Default)]
struct ProcStats {
    cpu_secs: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
}

fn proc_stats(pid: Option<u32>) -> ProcStats {
    let Some(pid) = pid else {
        return ProcStats::default();
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at the state, field 3.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the state.
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    ProcStats {
        cpu_secs: (ticks(11) + ticks(12)) / hz.max(1.0),
        rss_mib: kib("VmRSS:") / 1024.0,
        peak_rss_mib: kib("VmHWM:") / 1024.0,
    }
}

/// `GET <url>/metrics` over plain HTTP (etcd, the operator).
fn http_metrics(host_port: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(host_port) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The value of a label in one exposition line.
fn label<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
}

/// `apiserver_request_total` summed by (resource[/subresource], verb), every resource.
async fn all_request_counts(client: &Client) -> Result<BTreeMap<(String, String), f64>> {
    let text = apiserver_metrics(client).await?;
    let mut counts = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let resource = label(line, "resource");
        if resource.is_empty() {
            continue; // /version, /healthz, /metrics ...
        }
        let sub = label(line, "subresource");
        let key = if sub.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{sub}")
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *counts
            .entry((key, label(line, "verb").to_string()))
            .or_insert(0.0) += value;
    }
    Ok(counts)
}

async fn apiserver_metrics(client: &Client) -> Result<String> {
    Ok(client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?)
}

/// Everything measured at one instant.
struct Snapshot {
    at: Instant,
    requests: BTreeMap<(String, String), f64>,
    operator: ProcStats,
    apiserver: ProcStats,
    etcd: ProcStats,
    reconciles: f64,
    reconcile_secs: f64,
    /// CPU seconds of the passes' own computing (`kubeflake_operator_pass_cpu_seconds`), and
    /// how many passes it covers.
    pass_cpu: (f64, f64),
    /// Renewals sent, read just before and just after the API server's counts: at 250/s
    /// the read takes long enough for the difference to matter.
    renewals: (u64, u64),
}

struct Probe<'a> {
    cluster: &'a Cluster,
    client: Client,
    operator: &'a Operator,
    renewals: Arc<RenewCounts>,
}

impl Probe<'_> {
    fn pid(&self, name: &str) -> Option<u32> {
        self.cluster
            .pids()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let metrics = self.operator.metrics();
        let renewals_before = self.renewals.attempts();
        let requests = all_request_counts(&self.client).await?;
        let renewals_after = self.renewals.attempts();
        Ok(Snapshot {
            at: Instant::now(),
            requests,
            operator: proc_stats(self.operator.process.pid()),
            apiserver: proc_stats(self.pid("kube-apiserver")),
            etcd: proc_stats(self.pid("etcd")),
            reconciles: exposition::sum(&metrics, "kubeflake_operator_reconciles_total"),
            reconcile_secs: exposition::sum(
                &metrics,
                "kubeflake_operator_reconcile_duration_seconds_sum",
            ),
            pass_cpu: (
                exposition::sum(&metrics, "kubeflake_operator_pass_cpu_seconds_sum"),
                exposition::sum(&metrics, "kubeflake_operator_pass_cpu_seconds_count"),
            ),
            renewals: (renewals_before, renewals_after),
        })
    }
}

/// What happened between two snapshots.
struct Window {
    secs: f64,
    requests: BTreeMap<(String, String), f64>,
    operator_cpu: f64,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    operator_rss: f64,
    operator_peak_rss: f64,
    reconciles: f64,
    reconcile_secs: f64,
    /// CPU seconds of the passes' own computing, and the passes measured.
    pass_cpu: (f64, f64),
    /// Renewals sent in the window (midpoints of the two brackets).
    renewals: u64,
    /// How far the renewals counted may be off the ones the API server counted: half of
    /// each bracket plus the renewals in flight at either end.
    renewals_uncertainty: u64,
}

impl Window {
    fn between(a: &Snapshot, b: &Snapshot) -> Window {
        let mut requests = BTreeMap::new();
        for (key, value) in &b.requests {
            let delta = value - a.requests.get(key).copied().unwrap_or(0.0);
            if delta > 0.0 {
                requests.insert(key.clone(), delta);
            }
        }
        Window {
            secs: b.at.duration_since(a.at).as_secs_f64(),
            requests,
            operator_cpu: b.operator.cpu_secs - a.operator.cpu_secs,
            apiserver_cpu: b.apiserver.cpu_secs - a.apiserver.cpu_secs,
            etcd_cpu: b.etcd.cpu_secs - a.etcd.cpu_secs,
            operator_rss: b.operator.rss_mib,
            operator_peak_rss: b.operator.peak_rss_mib,
            reconciles: b.reconciles - a.reconciles,
            reconcile_secs: b.reconcile_secs - a.reconcile_secs,
            pass_cpu: (b.pass_cpu.0 - a.pass_cpu.0, b.pass_cpu.1 - a.pass_cpu.1),
            renewals: (b.renewals.0 + b.renewals.1) / 2 - (a.renewals.0 + a.renewals.1) / 2,
            renewals_uncertainty: (a.renewals.1 - a.renewals.0).div_ceil(2)
                + (b.renewals.1 - b.renewals.0).div_ceil(2)
                + 2 * RENEWALS_IN_FLIGHT as u64,
        }
    }

    fn count(&self, resource: &str, verbs: &[&str]) -> f64 {
        self.requests
            .iter()
            .filter(|((r, v), _)| r == resource && verbs.contains(&v.as_str()))
            .map(|(_, n)| n)
            .sum()
    }

    /// Lease writes by the operator: all lease writes less the test's renewals (give or
    /// take `renewals_uncertainty`).
    fn operator_lease_writes(&self) -> f64 {
        self.count("leases", &["POST", "PUT", "PATCH"]) - self.renewals as f64
    }

    fn table(&self, title: &str) -> String {
        let mut out = format!(
            "#### {title}: {:.1} s\n\n| resource | verb | requests | per second |\n|---|---|---:|---:|\n",
            self.secs
        );
        for ((resource, verb), n) in &self.requests {
            out.push_str(&format!(
                "| {resource} | {verb} | {n} | {:.1} |\n",
                n / self.secs.max(0.001)
            ));
        }
        out.push_str(&format!(
            "\n| | |\n|---|---:|\n\
             | renewals played for the sidecars (lease PUTs sent) | {} |\n\
             | operator lease writes (lease writes less renewals) | {} ± {} |\n\
             | operator reconcile passes | {} |\n\
             | time in reconcile passes (s) | {:.1} |\n\
             | operator CPU (s) | {:.1} |\n\
             | per reconcile pass: time; operator CPU (all of it, watch events included) | {:.2} ms; {:.2} ms |\n\
             | per Snowflake pass: CPU of its own computing (cache reads, silence, plan; metric), passes | {:.3} ms, {} |\n\
             | kube-apiserver CPU (s) | {:.1} |\n\
             | etcd CPU (s) | {:.1} |\n\
             | operator RSS at the end (MiB) | {:.1} |\n\
             | operator peak RSS so far (MiB) | {:.1} |\n",
            self.renewals,
            self.operator_lease_writes(),
            self.renewals_uncertainty,
            self.reconciles,
            self.reconcile_secs,
            self.operator_cpu,
            1000.0 * self.reconcile_secs / self.reconciles.max(1.0),
            1000.0 * self.operator_cpu / self.reconciles.max(1.0),
            1000.0 * self.pass_cpu.0 / self.pass_cpu.1.max(1.0),
            self.pass_cpu.1,
            self.apiserver_cpu,
            self.etcd_cpu,
            self.operator_rss,
            self.operator_peak_rss,
        ));
        out
    }
}

// ---------------------------------------------------------------------------------------
// The lease tracker: one watch of every slot lease (label-selected), a cache, and the
// history of holders in etcd's order. The renewer and every check read it, so waiting costs
// the API server nothing.

struct Tracker {
    store: Store<Lease>,
    history: LeaseHistory,
    /// Pods seen holding two or more slots of their sequence at once (the operator's
    /// duplicate assignments, released again by its next pass).
    doubles: Mutex<HashSet<String>>,
    /// When the watch first showed each holder (pod UID) holding a slot.
    first_held: Arc<Mutex<HashMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    async fn start(client: Client) -> Result<Tracker> {
        let (store, writer) = reflector::store::<Lease>();
        let history = LeaseHistory::default();
        let versions = history.versions.clone();
        let first_held: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let held_at = first_held.clone();
        let api: Api<Lease> = Api::all(client);
        let stream = watcher(api, watcher::Config::default().labels(SEQUENCE_LABEL))
            .default_backoff()
            .reflect(writer);
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut lists = 0;
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let holder = |l: &Lease| {
                    l.spec
                        .as_ref()
                        .and_then(|s| s.holder_identity.clone())
                        .filter(|h| !h.is_empty())
                };
                let mut v = versions.lock().unwrap();
                match event {
                    watcher::Event::Apply(l) | watcher::Event::InitApply(l) => {
                        if let Some(uid) = holder(&l) {
                            let mut held_at = held_at.lock().unwrap();
                            held_at.entry(uid).or_insert_with(Instant::now);
                        }
                        v.push((l.name_any(), holder(&l)))
                    }
                    watcher::Event::Delete(l) => v.push((l.name_any(), Some("<deleted>".into()))),
                    watcher::Event::Init => {
                        lists += 1;
                        if lists > 1 {
                            v.push(("<resync>".into(), None));
                        }
                    }
                    watcher::Event::InitDone => {}
                }
            }
        });
        let tracker = Tracker {
            store,
            history,
            doubles: Mutex::default(),
            first_held,
            task,
        };
        tokio::time::timeout(Duration::from_secs(60), tracker.store.wait_until_ready())
            .await
            .context("the lease tracker's first list")??;
        Ok(tracker)
    }

    /// Slots held, by sequence and holder uid.
    fn holders(&self) -> HashMap<String, HashMap<String, Vec<u32>>> {
        let mut held: HashMap<String, HashMap<String, Vec<u32>>> = HashMap::new();
        for lease in self.store.state() {
            let Ok(parsed) = SlotLease::parse(&lease) else {
                continue;
            };
            if let Some(uid) = parsed.holder {
                let sequence = lease
                    .labels()
                    .get(SEQUENCE_LABEL)
                    .cloned()
                    .unwrap_or_default();
                held.entry(sequence)
                    .or_default()
                    .entry(uid)
                    .or_default()
                    .push(parsed.slot.0);
            }
        }
        held
    }

    /// The last time one of `uids` was first seen holding a slot (each must have been).
    fn all_held_at(&self, uids: &HashMap<String, Vec<String>>) -> Result<Instant> {
        let held_at = self.first_held.lock().unwrap();
        uids.values()
            .flatten()
            .map(|uid| held_at.get(uid).copied())
            .try_fold(None::<Instant>, |last, at| {
                let at = at?;
                Some(Some(last.map_or(at, |l| l.max(at))))
            })
            .flatten()
            .context("a pod never seen holding a slot")
    }

    /// Waits until every pod of `expect` (sequence -> uids) holds exactly one slot of its
    /// sequence and every uid of `gone` holds none. Pods seen holding two slots are
    /// recorded in `doubles`.
    async fn wait_assigned(
        &self,
        expect: &HashMap<String, Vec<String>>,
        gone: &HashSet<String>,
        limit: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let held = self.holders();
            let mut done = true;
            for (sequence, holders) in &held {
                for (uid, slots) in holders {
                    if slots.len() > 1 {
                        done = false;
                        self.doubles
                            .lock()
                            .unwrap()
                            .insert(format!("{sequence}/{uid}"));
                    }
                    if gone.contains(uid) {
                        done = false;
                    }
                }
            }
            for (sequence, uids) in expect {
                let holders = held.get(sequence);
                if !uids
                    .iter()
                    .all(|u| holders.is_some_and(|h| h.contains_key(u)))
                {
                    done = false;
                }
            }
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                let waiting: usize = expect
                    .iter()
                    .map(|(s, uids)| {
                        uids.iter()
                            .filter(|u| !held.get(s).is_some_and(|h| h.contains_key(*u)))
                            .count()
                    })
                    .sum();
                bail!("after {limit:?}: {waiting} pods still wait for a slot");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// The renewer: the sidecars' lease writes.

#[derive(Default)]
struct RenewCounts {
    /// Counted as each request goes out (not when its batch is done), so that a window's
    /// count matches the API server's within the renewals in flight.
    sent: AtomicU64,
    ok: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    /// Renewals not sent: the cached lease no longer named the holder (`slot_lease::renew`
    /// refused it locally, as the sidecar would). Not API requests, so not in `attempts`.
    refused: AtomicU64,
    /// The most a renewal was started after it was due, in ms.
    max_late_ms: AtomicU64,
}

impl RenewCounts {
    /// Every renewal sent (each a lease PUT the API server counts).
    fn attempts(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// `d` scaled by 0.9-1.1, chosen by hashing `key` (no random crate in the e2e tests).
fn jittered(d: Duration, key: &str) -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(key.as_bytes());
    d.mul_f64(0.9 + (h.finish() % 1000) as f64 / 5000.0)
}

struct Renewer {
    counts: Arc<RenewCounts>,
    /// Holders whose pods the test deleted: their sidecars are gone, nobody renews.
    gone: Arc<Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Renewer {
    fn start(
        client: Client,
        store: Store<Lease>,
        params: HashMap<String, SequenceParams>,
        lease_secs: u64,
    ) -> Renewer {
        let counts = Arc::new(RenewCounts::default());
        let gone: Arc<Mutex<HashSet<String>>> = Arc::default();
        let every = Duration::from_secs(lease_secs) / 3;
        let task = tokio::spawn({
            let counts = counts.clone();
            let gone = gone.clone();
            async move {
                // lease name -> (holder, when the next renewal is due)
                let mut due: HashMap<String, (String, Instant)> = HashMap::new();
                let stop_at = Instant::now() + Duration::from_secs(4 * 3600);
                while Instant::now() < stop_at {
                    let now = Instant::now();
                    let gone_now = gone.lock().unwrap().clone();
                    let mut batch = Vec::new();
                    let mut held = HashSet::new();
                    for lease in store.state() {
                        let Ok(parsed) = SlotLease::parse(&lease) else {
                            continue;
                        };
                        let Some(uid) = parsed.holder.clone() else {
                            continue;
                        };
                        if gone_now.contains(&uid) {
                            continue;
                        }
                        held.insert(parsed.name.clone());
                        let entry = due.entry(parsed.name.clone()).or_insert((uid.clone(), now));
                        if entry.0 != uid {
                            // A new holder: its sidecar writes the fence at once.
                            *entry = (uid.clone(), now);
                        }
                        if entry.1 <= now {
                            let late = now.duration_since(entry.1).as_millis() as u64;
                            counts.max_late_ms.fetch_max(late, Ordering::Relaxed);
                            batch.push((lease, uid));
                        }
                    }
                    due.retain(|name, _| held.contains(name));
                    let results: Vec<(String, RenewResult)> = futures::stream::iter(batch)
                        .map(|(lease, uid)| {
                            let client = client.clone();
                            let counts = counts.clone();
                            let params = lease
                                .labels()
                                .get(SEQUENCE_LABEL)
                                .and_then(|s| params.get(s))
                                .cloned();
                            async move {
                                let name = lease.name_any();
                                let result =
                                    renew(client, &lease, &uid, params, lease_secs, &counts).await;
                                (name, result)
                            }
                        })
                        .buffer_unordered(RENEWALS_IN_FLIGHT)
                        .collect()
                        .await;
                    let after = Instant::now();
                    for (name, result) in results {
                        let next = match result {
                            RenewResult::Ok => {
                                counts.ok.fetch_add(1, Ordering::Relaxed);
                                after + jittered(every, &format!("{name}{after:?}"))
                            }
                            RenewResult::Conflict => {
                                counts.conflicts.fetch_add(1, Ordering::Relaxed);
                                after + Duration::from_secs(1)
                            }
                            RenewResult::Error => {
                                counts.errors.fetch_add(1, Ordering::Relaxed);
                                after + Duration::from_secs(2)
                            }
                            RenewResult::Refused => {
                                counts.refused.fetch_add(1, Ordering::Relaxed);
                                after + Duration::from_secs(1)
                            }
                        };
                        if let Some(entry) = due.get_mut(&name) {
                            entry.1 = next;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        });
        Renewer { counts, gone, task }
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

enum RenewResult {
    Ok,
    Conflict,
    Error,
    /// Not sent: the lease no longer names this holder.
    Refused,
}

/// One sidecar renewal: the fence raised a lease duration ahead, a compare-and-swap.
async fn renew(
    client: Client,
    lease: &Lease,
    uid: &str,
    params: Option<SequenceParams>,
    lease_secs: u64,
    counts: &RenewCounts,
) -> RenewResult {
    let Some(params) = params else {
        return RenewResult::Error;
    };
    let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let tick = params.timebase.tick_at(now_ms).unwrap_or(Tick(0));
    let fence = Tick(tick.0 + params.timebase.ticks_in_ms(lease_secs * 1000));
    let Ok(next) = slot_lease::renew(lease, uid, fence, chrono::Utc::now()) else {
        return RenewResult::Refused;
    };
    let api: Api<Lease> = Api::namespaced(client, &lease.namespace().unwrap_or_default());
    counts.sent.fetch_add(1, Ordering::Relaxed);
    match api
        .replace(&lease.name_any(), &PostParams::default(), &next)
        .await
    {
        Ok(_) => RenewResult::Ok,
        Err(kube::Error::Api(s)) if s.code == 409 => RenewResult::Conflict,
        Err(_) => RenewResult::Error,
    }
}

// ---------------------------------------------------------------------------------------
// Pods

/// A pod as a Deployment would make it: labels, one container with resources, env and a
/// probe (the ServiceAccount admission adds the token volume).
fn pod(name: &str, sequence: Option<&str>) -> Pod {
    let mut labels = serde_json::Map::new();
    labels.insert("app".into(), json!("scale"));
    if let Some(s) = sequence {
        labels.insert(SEQUENCE_LABEL.into(), json!(s));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{
            "name": "app",
            "image": "example.invalid/app:1.0",
            "ports": [{"name": "http", "containerPort": 8080}],
            "env": [
                {"name": "KUBEFLAKE_URL", "value": "http://127.0.0.1:7070"},
                {"name": "LOG_LEVEL", "value": "info"},
            ],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        }]},
    }))
    .expect("a valid pod")
}

/// Creates `(namespace, name, sequence)` pods, `IN_FLIGHT` at once; returns
/// `(namespace, name, uid)` in the order given.
/// The UIDs of created pods (`create_all`'s answer), by the sequence of their namespace.
fn uids_by_sequence(
    pods: &[(String, String, String)],
    seq_of_ns: &HashMap<String, String>,
) -> HashMap<String, Vec<String>> {
    let mut by_seq: HashMap<String, Vec<String>> = HashMap::new();
    for (ns, _, uid) in pods {
        by_seq
            .entry(seq_of_ns[ns].clone())
            .or_default()
            .push(uid.clone());
    }
    by_seq
}

async fn create_all(
    client: &Client,
    pods: Vec<(String, String, Option<String>)>,
) -> Result<Vec<(String, String, String)>> {
    futures::stream::iter(pods)
        .map(|(ns, name, sequence)| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            async move {
                let created = api
                    .create(&PostParams::default(), &pod(&name, sequence.as_deref()))
                    .await
                    .with_context(|| format!("creating pod {ns}/{name}"))?;
                Ok::<_, anyhow::Error>((ns, name, created.uid().unwrap_or_default()))
            }
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await
}

// ---------------------------------------------------------------------------------------
// kubectl at this size

/// Runs a command; returns (seconds, stdout bytes).
async fn timed(mut command: tokio::process::Command) -> Result<(f64, usize)> {
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .context("the command did not finish in 300 s")??;
    let secs = started.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((secs, out.stdout.len()))
}

/// The median of three runs (the first warms kubectl's discovery cache).
async fn median_of_three(make: impl Fn() -> tokio::process::Command) -> Result<(f64, usize)> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(timed(make()).await?);
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(runs[1])
}

/// `to - from` in seconds, negative when `to` came first.
fn duration_between(from: Instant, to: Instant) -> f64 {
    match to.checked_duration_since(from) {
        Some(d) => d.as_secs_f64(),
        None => -from.duration_since(to).as_secs_f64(),
    }
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes of a busy machine: run by hand, see docs/scale.md"]
async fn ten_thousand_pods_over_twenty_sequences_with_churn() -> Result<()> {
    let sizes = Sizes::from_env();
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let client = cluster.client()?;
    let started = Instant::now();

    // 50 namespaces; the first 20 get a sequence each.
    let namespaces: Vec<TestNamespace> = futures::stream::iter(0..NAMESPACES)
        .map(|i| async move { cluster.namespace(&format!("scale-{i:02}")).await })
        .buffered(8)
        .try_collect()
        .await?;
    let operator = Operator::start_cluster_wide(cluster, "scale", &[])?;
    let mut sequences = Vec::new();
    ensure!(
        (0..sizes.sequences).all(|i| sizes.pods_of(i) <= 4000),
        "at most 4,000 pods per sequence (4,096 slots)"
    );
    for (i, ns) in namespaces.iter().take(sizes.sequences).enumerate() {
        let name = format!("seq-{i:02}");
        let layout = if sizes.wide(i) {
            json!({"workerBits": 12, "sequenceBits": 10})
        } else {
            json!({})
        };
        let spec = json!({"layout": layout, "lease": {"durationSeconds": sizes.lease_secs}});
        let created = create_sequence(ns, &name, spec).await?;
        let params = created.spec.params()?;
        sequences.push(Sequence {
            ns: ns.clone(),
            name,
            capacity: params.layout.slot_count(),
            params,
        });
    }
    // Every sequence reconciled once (its status says how many slots it has).
    eventually(
        Duration::from_secs(120),
        "every sequence's status",
        || async {
            for s in &sequences {
                let api: Api<IdSequence> = Api::namespaced(s.ns.client.clone(), &s.ns.name);
                let got = api.get(&s.name).await?;
                if got.status.and_then(|st| st.capacity).is_none() {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;

    let tracker = Tracker::start(client.clone()).await?;
    let params: HashMap<String, SequenceParams> = sequences
        .iter()
        .map(|s| (s.name.clone(), s.params))
        .collect();
    let renewer = Renewer::start(
        client.clone(),
        tracker.store.clone(),
        params,
        sizes.lease_secs,
    );
    let probe = Probe {
        cluster,
        client: client.clone(),
        operator: &operator,
        renewals: renewer.counts.clone(),
    };

    // Bystanders: unlabelled pods in the 30 namespaces without a sequence. The operator's
    // watches select labelled pods only, so these must cost it nothing.
    let bystanders: Vec<(String, String, Option<String>)> = (0..sizes.pods / 10)
        .map(|i| {
            let ns = &namespaces[sizes.sequences + i % (NAMESPACES - sizes.sequences)];
            (ns.name.clone(), format!("bystander-{i}"), None)
        })
        .collect();
    let bystander_count = bystanders.len();
    create_all(&client, bystanders).await?;
    let setup = started.elapsed();

    // ---- Assignment: every labelled pod, round-robin over the sequences.
    let mut wanted: Vec<(String, String, Option<String>)> = Vec::new();
    let most = (0..sizes.sequences)
        .map(|i| sizes.pods_of(i))
        .max()
        .unwrap_or(0);
    for n in 0..most {
        for (i, s) in sequences.iter().enumerate() {
            if n < sizes.pods_of(i) {
                wanted.push((s.ns.name.clone(), format!("p-{n}"), Some(s.name.clone())));
            }
        }
    }
    let seq_of_ns: HashMap<String, String> = sequences
        .iter()
        .map(|s| (s.ns.name.clone(), s.name.clone()))
        .collect();
    let labelled = wanted.len();
    let before = probe.snapshot().await?;
    let created = create_all(&client, wanted).await?;
    let created_at = Instant::now();
    let all_created = created_at.duration_since(before.at);
    let expect = uids_by_sequence(&created, &seq_of_ns);
    tracker
        .wait_assigned(&expect, &HashSet::new(), PHASE_LIMIT)
        .await?;
    let all_held_at = tracker.all_held_at(&expect)?;
    let assigned_in = all_held_at.duration_since(before.at);
    // Negative when the last pods got their slots before the last create returned.
    let assignment_lag = duration_between(created_at, all_held_at);
    tokio::time::sleep(Duration::from_secs(3)).await; // trailing status writes and Events
    let after_assignment = probe.snapshot().await?;
    let assignment = Window::between(&before, &after_assignment);

    // ---- Steady state: nothing changes but the renewals.
    tokio::time::sleep(sizes.steady).await;
    let after_steady = probe.snapshot().await?;
    let steady = Window::between(&after_assignment, &after_steady);

    // ---- Churn: every tenth pod of each sequence deleted, as many new ones created, at
    // once, while the others hold their slots.
    let step = (labelled / sizes.churn.max(1)).max(1);
    let mut nth: HashMap<&str, usize> = HashMap::new();
    let doomed: Vec<(String, String, String)> = created
        .iter()
        .filter(|(ns, _, _)| {
            let n = nth.entry(ns.as_str()).or_default();
            *n += 1;
            n.is_multiple_of(step)
        })
        .take(sizes.churn)
        .cloned()
        .collect();
    let newcomers: Vec<(String, String, Option<String>)> = doomed
        .iter()
        .enumerate()
        .map(|(i, (ns, _, _))| (ns.clone(), format!("c-{i}"), Some(seq_of_ns[ns].clone())))
        .collect();
    let gone: HashSet<String> = doomed.iter().map(|(_, _, uid)| uid.clone()).collect();
    renewer.gone.lock().unwrap().extend(gone.iter().cloned());
    let churn_start = probe.snapshot().await?;
    let delete = futures::stream::iter(doomed.clone())
        .map(|(ns, name, _)| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            async move {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(IN_FLIGHT / 2)
        .try_collect::<Vec<()>>();
    let create = async {
        let created = create_all(&client, newcomers).await;
        (created, Instant::now())
    };
    let (deleted, (new_pods, newcomers_created_at)) = tokio::join!(delete, create);
    deleted.context("deleting pods")?;
    let new_pods = new_pods?;
    let mut expect_after = expect.clone();
    for uids in expect_after.values_mut() {
        uids.retain(|u| !gone.contains(u));
    }
    let newcomers_only = uids_by_sequence(&new_pods, &seq_of_ns);
    for (seq, uids) in &newcomers_only {
        expect_after
            .entry(seq.clone())
            .or_default()
            .extend(uids.iter().cloned());
    }
    tracker
        .wait_assigned(&newcomers_only, &HashSet::new(), PHASE_LIMIT)
        .await?;
    let newcomers_held_at = tracker.all_held_at(&newcomers_only)?;
    let newcomers_in = newcomers_held_at.duration_since(churn_start.at);
    let newcomers_lag = duration_between(newcomers_created_at, newcomers_held_at);
    tracker
        .wait_assigned(&expect_after, &gone, PHASE_LIMIT)
        .await?;
    let churn_in = churn_start.at.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_churn = probe.snapshot().await?;
    let churn = Window::between(&churn_start, &after_churn);

    // ---- Sizes at rest, and what reading them costs.
    let etcd = http_metrics(cluster.etcd_url().trim_start_matches("http://"));
    let db_total = exposition::sum(&etcd, "etcd_mvcc_db_total_size_in_bytes");
    let db_in_use = exposition::sum(&etcd, "etcd_mvcc_db_total_size_in_use_in_bytes");
    let keys = exposition::sum(&etcd, "etcd_debugging_mvcc_keys_total");
    let api_metrics = apiserver_metrics(&client).await?;
    let objects = |resource: &str| {
        api_metrics
            .lines()
            .filter(|l| l.starts_with("apiserver_storage_objects{"))
            .find(|l| label(l, "resource") == resource)
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    let leases_api: Api<Lease> = Api::all(client.clone());
    let sample_lease = leases_api
        .list(
            &kube::api::ListParams::default()
                .labels(SEQUENCE_LABEL)
                .limit(1),
        )
        .await?
        .items
        .into_iter()
        .next()
        .context("a slot lease")?;
    let lease_json_bytes = serde_json::to_vec(&sample_lease)?.len();
    let widest = &sequences[0];
    let get_idseq = median_of_three(|| {
        let mut c = cluster.kubectl_command();
        c.args(["get", "idseq", "-A"]);
        c
    })
    .await?;
    let plugin = workspace_binary("kubectl-kubeflake");
    let slots_cmd = |extra: &[&str]| {
        let mut c = tokio::process::Command::new(&plugin);
        c.args(["slots", &widest.name, "-n", &widest.ns.name])
            .args(extra)
            .env("KUBECONFIG", cluster.kubeconfig())
            .kill_on_drop(true);
        c
    };
    let slots_table = median_of_three(|| slots_cmd(&[])).await?;
    let slots_json = median_of_three(|| slots_cmd(&["-o", "json"])).await?;
    let slots_all = median_of_three(|| slots_cmd(&["--all"])).await?;
    let operator_now = proc_stats(operator.process.pid());

    // ---- Correctness, over the whole run.
    let held = tracker.holders();
    let mut holding = 0usize;
    for s in &sequences {
        let holders = held.get(&s.name).cloned().unwrap_or_default();
        let want = &expect_after[&s.name];
        for uid in want {
            let slots = holders.get(uid).map(Vec::len).unwrap_or(0);
            ensure!(slots == 1, "{}: pod {uid} holds {slots} slots", s.name);
        }
        let distinct: HashSet<u32> = holders.values().flatten().copied().collect();
        ensure!(
            distinct.len() == holders.values().map(Vec::len).sum::<usize>(),
            "{}: a slot held twice",
            s.name
        );
        ensure!(
            holders.len() == want.len(),
            "{}: {} holders for {} pods",
            s.name,
            holders.len(),
            want.len()
        );
        ensure!(holders.len() as u64 <= s.capacity);
        holding += holders.len();
    }
    let gone_list: Vec<String> = gone.iter().cloned().collect();
    let violations = tracker.history.violations(&gone_list);

    // ---- Report.
    let c = &renewer.counts;
    let mut report = format!(
        "\n### Scale: {labelled} labelled pods over {} sequences ({} with workerBits \
         12) in {NAMESPACES} namespaces, {bystander_count} unlabelled bystanders, lease duration \
         {} s\n\n\
         | | |\n|---|---:|\n\
         | setup (namespaces, sequences, bystanders) | {:.1} s |\n\
         | all {labelled} pods created (32 in flight): the last create answered | {:.1} s after the first create |\n\
         | every pod holds a slot (its Lease's watch event) | {:.1} s after the first create |\n\
         | **lag: every pod holds a slot, after the last create** | **{:.2} s** |\n\
         | churn: {} deleted + {} created, new pods all hold a slot | {:.1} s |\n\
         | churn: lag of the new pods' slots after their last create | {:.2} s |\n\
         | churn: and the deleted pods' slots are released | {:.1} s |\n\
         | pods holding a slot at the end | {holding} |\n\
         | pods seen holding two slots at once (operator on a stale cache) | {} |\n\
         | operator write conflicts (metric) | {} |\n\
         | renewals sent (ok / conflict / error), refused locally, most late | {} / {} / {}, {}, {} ms |\n\
         | passes put off for a cache behind the operator's writes (metric) | {} |\n\
         | lease history versions recorded, resyncs | {}, {} |\n\
         | etcd db size (total / in use) | {:.1} MiB / {:.1} MiB |\n\
         | etcd keys | {keys} |\n\
         | objects: leases / pods / idsequences / events | {} / {} / {} / {} |\n\
         | one slot lease, JSON | {lease_json_bytes} bytes |\n\
         | operator RSS now / peak | {:.1} MiB / {:.1} MiB |\n\
         | `kubectl get idseq -A` (median of 3) | {:.2} s, {} bytes |\n\
         | `kubectl kubeflake slots` of a {}-pod sequence | {:.2} s, {} bytes |\n\
         | same, `-o json` | {:.2} s, {} bytes |\n\
         | same, `--all` ({} slots) | {:.2} s, {} bytes |\n\n",
        sizes.sequences,
        sizes.wide_count(),
        sizes.lease_secs,
        setup.as_secs_f64(),
        all_created.as_secs_f64(),
        assigned_in.as_secs_f64(),
        assignment_lag,
        doomed.len(),
        new_pods.len(),
        newcomers_in.as_secs_f64(),
        newcomers_lag,
        churn_in.as_secs_f64(),
        tracker.doubles.lock().unwrap().len(),
        operator.metric("kubeflake_operator_write_conflicts_total"),
        c.ok.load(Ordering::Relaxed),
        c.conflicts.load(Ordering::Relaxed),
        c.errors.load(Ordering::Relaxed),
        c.refused.load(Ordering::Relaxed),
        c.max_late_ms.load(Ordering::Relaxed),
        operator.metric("kubeflake_operator_passes_deferred_total"),
        tracker.history.len(),
        tracker.history.resyncs(),
        db_total / 1048576.0,
        db_in_use / 1048576.0,
        objects("leases.coordination.k8s.io"),
        objects("pods"),
        objects("idsequences.kubeflake.io"),
        objects("events"),
        operator_now.rss_mib,
        operator_now.peak_rss_mib,
        get_idseq.0,
        get_idseq.1,
        sizes.pods_of(0),
        slots_table.0,
        slots_table.1,
        slots_json.0,
        slots_json.1,
        widest.capacity,
        slots_all.0,
        slots_all.1,
    );
    report.push_str(&assignment.table("Assignment"));
    report.push('\n');
    report.push_str(&steady.table("Steady state"));
    report.push('\n');
    report.push_str(&churn.table("Churn"));
    eprintln!("{report}");

    ensure!(violations.is_empty(), "slot history: {violations:#?}");
    let doubles = tracker.doubles.lock().unwrap().len();
    ensure!(
        doubles == 0,
        "{doubles} pods were seen holding two slots: the operator planned on a cache behind its own writes"
    );
    // Counts, never times. One operator write per slot handed out, plus a few conflicts.
    let slack = assignment.renewals_uncertainty as f64;
    let assigned_writes = assignment.operator_lease_writes();
    ensure!(
        assigned_writes >= labelled as f64 - slack
            && assigned_writes <= labelled as f64 * 1.1 + slack,
        "operator lease writes during assignment: {assigned_writes} (± {slack}) for {labelled} pods"
    );
    // Churn: a release per deleted pod and an assignment per new one.
    let churn_writes = churn.operator_lease_writes();
    ensure!(
        churn_writes <= 2.2 * sizes.churn as f64 + churn.renewals_uncertainty as f64,
        "operator lease writes during churn: {churn_writes} for {} pods",
        sizes.churn
    );
    // Steady state: the operator writes nothing, and renewals do not wake it: a sequence is
    // looked at once per requeue (a quarter of the lease duration), give or take two.
    // The API server renews its own identity Lease every 10 s: counted too.
    let steady_slack = steady.renewals_uncertainty as f64 + steady.secs / 10.0 + 2.0;
    ensure!(
        steady.operator_lease_writes() <= steady_slack,
        "operator lease writes in the steady state: {} (± {steady_slack})",
        steady.operator_lease_writes()
    );
    let status_writes = steady.count("idsequences/status", &["PATCH", "PUT", "APPLY"]);
    ensure!(
        status_writes <= sizes.sequences as f64,
        "status writes in the steady state: {status_writes}"
    );
    let requeue = (sizes.lease_secs as f64 / 4.0).clamp(1.0, 30.0);
    let bound = sizes.sequences as f64 * (steady.secs / requeue + 2.0);
    ensure!(
        steady.reconciles <= bound,
        "{} reconcile passes in {:.0} s of steady state (at most {bound:.0} expected): renewals \
         wake the operator",
        steady.reconciles,
        steady.secs
    );
    Ok(())
}
