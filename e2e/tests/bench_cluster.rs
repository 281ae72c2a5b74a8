//! Benchmark figures from a real control plane (not part of `scripts/test.sh`: every test
//! here is `#[ignore]`; `bench/run` runs them by name and collects the `BENCH {json}` lines
//! they print into docs/benchmarks.md). They assert only what must hold for the figures to
//! mean anything (every sidecar became ready, every pod got a slot), never a timing.
//!
//! Run: `cargo test --release -p kubeflake-e2e --test bench_cluster -- --ignored --nocapture --test-threads=1`
//! (`KUBEFLAKE_BENCH_SIDECARS`, default 100; `KUBEFLAKE_BENCH_PODS`, default 1000;
//! `KUBEFLAKE_BENCH_WINDOW_SECS`, default 30).

mod operator_support;
mod sidecar_support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kubeflake_bench::load::{self, Peer, Plan};
use kubeflake_bench::stats::Summary;
use kubeflake_bench::target::{Target, Targets};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_crds::strict_oracle;
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;
use sidecar_support::Sidecar;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Prints one figure for `bench/run`.
fn report(figure: serde_json::Value) {
    println!("BENCH {figure}");
}

/// A `kB` field of /proc/<pid>/status (VmRSS, VmHWM).
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(&format!("{field}:")))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// User plus system CPU seconds a process has used so far (/proc/<pid>/stat).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / per_second.max(1) as f64)
}

/// The q-quantile (nearest rank) of sorted seconds.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Creates `count` pods at once (16 requests in flight), returning each with the instant
/// its create call returned.
async fn create_pods_timed(
    ns: &kubeflake_e2e::TestNamespace,
    sequence: &str,
    count: usize,
) -> Result<Vec<(Pod, Instant)>> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let created: Vec<Result<(Pod, Instant)>> = futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("b-{i}"), "labels": {SEQUENCE_LABEL: sequence}},
                    "spec": {"containers": [{"name": "app", "image": "example.invalid/app"}]},
                }))?;
                let pod = api.create(&PostParams::default(), &pod).await?;
                Ok((pod, Instant::now()))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    created
        .into_iter()
        .collect::<Result<_>>()
        .context("creating pods")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark for bench/run: about 2 minutes; run it by name"]
async fn bench_hundred_pods_to_ready_and_api_load_of_n_sidecars() -> Result<()> {
    let n = env_number("KUBEFLAKE_BENCH_SIDECARS", 100) as usize;
    let window = Duration::from_secs(env_number("KUBEFLAKE_BENCH_WINDOW_SECS", 30));
    const LEASE_SECONDS: u64 = 30;
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("bench").await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(
        &ns,
        "ids",
        json!({"lease": {"durationSeconds": LEASE_SECONDS}}),
    )
    .await?;

    // Pods are created at once, and each pod's sidecar is started as soon as the pod
    // exists (as a kubelet would start its containers; there is no kubelet here).
    let pods = create_pods_timed(&ns, "ids", n).await?;
    let mut sidecars = Vec::with_capacity(n);
    for (pod, _) in &pods {
        sidecars.push(Sidecar::start(cluster, &ns.name, pod, "ids", false)?);
    }
    let mut ready_at: Vec<Option<Instant>> = vec![None; n];
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut slowest_round = Duration::ZERO;
    while ready_at.iter().any(Option::is_none) {
        if Instant::now() > deadline {
            bail!(
                "only {} of {n} sidecars ready after 180 s",
                ready_at.iter().flatten().count()
            );
        }
        let round = Instant::now();
        for (i, sidecar) in sidecars.iter().enumerate() {
            if ready_at[i].is_none() && sidecar.ready() {
                ready_at[i] = Some(Instant::now());
            }
        }
        slowest_round = slowest_round.max(round.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut secs: Vec<f64> = pods
        .iter()
        .zip(&ready_at)
        .filter_map(|((_, created), ready)| {
            Some(ready.as_ref()?.duration_since(*created).as_secs_f64())
        })
        .collect();
    secs.sort_by(f64::total_cmp);
    report(json!({
        "figure": "pod_created_to_sidecar_ready",
        "pods": n,
        "p50_s": quantile(&secs, 0.5),
        "p99_s": quantile(&secs, 0.99),
        "max_s": quantile(&secs, 1.0),
        "poll_resolution_ms": slowest_round.as_secs_f64() * 1000.0 + 10.0,
    }));

    // API load in steady state: past the first renewals, over a fixed window.
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS / 3 + 2)).await;
    let before = request_counts(&ns.client).await?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = request_counts(&ns.client).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut per_second = serde_json::Map::new();
    let mut total = 0.0;
    for (key, value) in &after {
        let delta = value - before.get(key).copied().unwrap_or(0.0);
        if delta > 0.0 {
            per_second.insert(format!("{} {}", key.1, key.0), json!(delta / elapsed));
            total += delta;
        }
    }
    let lease_writes = ["PUT", "POST", "PATCH"]
        .iter()
        .map(|verb| {
            let key = ("leases".to_string(), verb.to_string());
            after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
        })
        .sum::<f64>();
    let mut rss_kb: Vec<u64> = sidecars
        .iter()
        .filter_map(|s| status_kb(s.process.pid()?, "VmRSS"))
        .collect();
    rss_kb.sort_unstable();
    let median_rss_kb = rss_kb.get(rss_kb.len() / 2).copied();
    let operator_rss_kb = operator.process.pid().and_then(|p| status_kb(p, "VmRSS"));
    report(json!({
        "figure": "steady_state_api_load",
        "sidecars": n,
        "lease_duration_s": LEASE_SECONDS,
        "window_s": elapsed,
        "api_requests_per_s": total / elapsed,
        "lease_writes_per_s": lease_writes / elapsed,
        "formula_lease_writes_per_s": n as f64 * 3.0 / LEASE_SECONDS as f64,
        "by_verb_and_resource_per_s": per_second,
        "cluster_sidecar_rss_kb_median": median_rss_kb,
        "operator_rss_kb": operator_rss_kb,
    }));

    // Start-up to ready in cluster mode, slot already held: stop a sidecar gracefully,
    // start it again, time until /readyz answers 200.
    let mut restarts = Vec::new();
    for sidecar in sidecars.iter().take(5) {
        sidecar.process.stop(Duration::from_secs(5));
        let spawned = Instant::now();
        sidecar.process.restart()?;
        eventually(
            Duration::from_secs(60),
            "the restarted sidecar ready",
            || async { Ok(sidecar.ready().then_some(())) },
        )
        .await?;
        restarts.push(spawned.elapsed().as_secs_f64());
    }
    restarts.sort_by(f64::total_cmp);
    report(json!({
        "figure": "cluster_sidecar_restart_to_ready",
        "runs": restarts.len(),
        "median_s": quantile(&restarts, 0.5),
        "min_s": quantile(&restarts, 0.0),
        "max_s": quantile(&restarts, 1.0),
    }));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark for bench/run: about a minute; run it by name"]
async fn bench_operator_memory_and_cpu_with_a_thousand_pods() -> Result<()> {
    let pods = env_number("KUBEFLAKE_BENCH_PODS", 1000) as usize;
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("opbench").await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    let pid = operator
        .process
        .pid()
        .context("the operator exited at once")?;
    // A sequence with room for every pod (the default has 1,024 slots).
    create_sequence(&ns, "big", json!({})).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = status_kb(pid, "VmRSS");
    let cpu_before = cpu_seconds(pid).context("operator /proc/<pid>/stat")?;
    let started = Instant::now();
    let created: Vec<Pod> = create_pods(&ns, "big", "p", pods).await?;
    let uids: Vec<String> = created.iter().filter_map(|p| p.uid()).collect();
    all_assigned(&ns, "big", &uids, Duration::from_secs(300)).await?;
    let assigned_after = started.elapsed().as_secs_f64();
    let cpu_assign = cpu_seconds(pid).context("operator /proc/<pid>/stat")? - cpu_before;
    // Steady state: nothing changes; what does holding 1,000 slots cost?
    let steady = Duration::from_secs(20);
    let cpu_steady_before = cpu_seconds(pid).context("operator /proc/<pid>/stat")?;
    tokio::time::sleep(steady).await;
    let cpu_steady = cpu_seconds(pid).context("operator /proc/<pid>/stat")? - cpu_steady_before;
    report(json!({
        "figure": "operator_with_pods",
        "pods": pods,
        "all_assigned_s": assigned_after,
        "rss_kb_idle": idle_rss,
        "rss_kb_with_pods": status_kb(pid, "VmRSS"),
        "hwm_kb": status_kb(pid, "VmHWM"),
        "cpu_s_assigning": cpu_assign,
        "cpu_s_per_s_steady": cpu_steady / steady.as_secs_f64(),
    }));
    Ok(())
}

/// How a closed loop treats its clients.
#[derive(Debug, Clone)]
struct Clients {
    /// Client `i` starts on `ports[i % ports.len()]`.
    ports: Vec<u16>,
    count: usize,
    /// With `survive`, a client whose connection breaks (its sidecar was killed) moves to
    /// the next port and goes on; without, the first broken connection ends the run.
    survive: bool,
    /// Every client's values must increase (a strict sequence, even across sidecars).
    increasing: bool,
}

/// What closed-loop clients saw in one window.
#[derive(Debug, Default)]
struct Load {
    /// 200 answers, one value each.
    values: u64,
    /// Answers other than 200 (a strict sequence refuses with 503 while no oracle serves);
    /// the client waits [`REFUSED_PAUSE`] before asking again.
    refused: u64,
    /// Connections that broke or could not be made.
    broken: u64,
    /// When every 200 answer arrived, after the start of the window, sorted.
    successes: Vec<Duration>,
}

/// What a refused client (or one whose connection broke) waits before asking again.
const REFUSED_PAUSE: Duration = Duration::from_millis(5);

/// The longest time without a 200 answer in `successes` (sorted), among the intervals that
/// end after `after`: between two successive answers, or from the last answer to `end`.
/// Returns where it began and ended.
fn longest_gap(successes: &[Duration], after: Duration, end: Duration) -> (Duration, Duration) {
    let mut best = (Duration::ZERO, Duration::ZERO);
    // The last request may have been answered after `end`: then there is no tail.
    let tail = successes.last().map(|&last| (last, end.max(last)));
    for (from, to) in successes.windows(2).map(|w| (w[0], w[1])).chain(tail) {
        if to > after && to - from > best.1 - best.0 {
            best = (from, to);
        }
    }
    best
}

/// Closed-loop clients for the hand-over: one thread per client, each on its own keep-alive
/// connection, asking `target` as fast as it is answered from `start` for `window`, and
/// with `survive` moving on to the next sidecar when its own is killed (the throughput
/// rows use the load generator instead: [`drive`]).
fn closed_loop(clients: &Clients, target: &str, start: Instant, window: Duration) -> Result<Load> {
    let deadline = start + window;
    let threads: Vec<_> = (0..clients.count)
        .map(|i| {
            let (clients, target) = (clients.clone(), target.to_string());
            std::thread::spawn(move || -> Result<Load> {
                let mut load = Load::default();
                let mut at = i % clients.ports.len();
                let mut conn = None;
                let mut last: Option<u64> = None;
                while Instant::now() < deadline {
                    let port = clients.ports[at];
                    let Some(c) = conn.as_mut() else {
                        match std::net::TcpStream::connect(("127.0.0.1", port)) {
                            Ok(stream) => {
                                stream.set_nodelay(true)?;
                                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                                conn = Some(std::io::BufReader::new(stream));
                            }
                            Err(_) if clients.survive => {
                                load.broken += 1;
                                at = (at + 1) % clients.ports.len();
                                std::thread::sleep(REFUSED_PAUSE);
                            }
                            Err(e) => bail!("connecting to port {port}: {e}"),
                        }
                        continue;
                    };
                    match sidecar_support::request(c, &target) {
                        Some((200, body)) => {
                            let arrived = Instant::now();
                            let value: u64 = body.trim().parse().with_context(|| {
                                format!("{target} on port {port} answered {body:?}")
                            })?;
                            if clients.increasing
                                && let Some(previous) = last
                                && value <= previous
                            {
                                bail!(
                                    "client {i}: {value} from port {port} after {previous}: \
                                     a strict sequence went backwards"
                                );
                            }
                            last = Some(value);
                            load.values += 1;
                            load.successes.push(arrived - start);
                        }
                        Some(_) => {
                            load.refused += 1;
                            std::thread::sleep(REFUSED_PAUSE);
                        }
                        None if clients.survive => {
                            load.broken += 1;
                            conn = None;
                            at = (at + 1) % clients.ports.len();
                            std::thread::sleep(REFUSED_PAUSE);
                        }
                        None => bail!("{target} on port {port}: the connection broke"),
                    }
                }
                Ok(load)
            })
        })
        .collect();
    let mut all = Load::default();
    for t in threads {
        let load = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        all.values += load.values;
        all.refused += load.refused;
        all.broken += load.broken;
        all.successes.extend(load.successes);
    }
    all.successes.sort_unstable();
    Ok(all)
}

/// Lease requests the API server answered so far.
#[derive(Debug, Clone, Copy, Default)]
struct LeaseRequests {
    /// PATCH and PUT.
    writes: f64,
    /// Writes answered 409 Conflict.
    conflicts: f64,
    /// GET (single Leases: a watch's list is a LIST, its events no request).
    reads: f64,
    /// Lease events the API server sent to watchers (`apiserver_watch_events_total`).
    watch_events: f64,
}

impl std::ops::Sub for LeaseRequests {
    type Output = LeaseRequests;
    fn sub(self, before: LeaseRequests) -> LeaseRequests {
        LeaseRequests {
            writes: self.writes - before.writes,
            conflicts: self.conflicts - before.conflicts,
            reads: self.reads - before.reads,
            watch_events: self.watch_events - before.watch_events,
        }
    }
}

/// Lease requests the API server answered so far, from its `apiserver_request_total`.
async fn lease_requests(client: &kube::Client) -> Result<LeaseRequests> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut total = LeaseRequests::default();
    let value = |line: &str| -> f64 {
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    // `resource` since Kubernetes 1.30 (`kind` before).
    total.watch_events = text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_watch_events_total{")
                && (l.contains("resource=\"leases\"") || l.contains("kind=\"Lease\""))
        })
        .map(value)
        .sum();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("resource=\"leases\""))
    {
        let value = value(line);
        if line.contains("verb=\"PATCH\"") || line.contains("verb=\"PUT\"") {
            total.writes += value;
            if line.contains("code=\"409\"") {
                total.conflicts += value;
            }
        } else if line.contains("verb=\"GET\"") {
            total.reads += value;
        }
    }
    Ok(total)
}

/// The oracle Lease of a strict sequence while it names a pod (`None`: no such Lease, or
/// it names nobody).
async fn oracle_holder(client: &kube::Client, ns: &str, sequence: &str) -> Result<Option<Lease>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    Ok(api
        .get_opt(&strict_oracle::oracle_name(sequence))
        .await?
        .filter(|l| holder(l).is_some()))
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

/// Seconds from an environment variable (fractions allowed).
fn env_secs(name: &str, default: f64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(default);
    Duration::from_secs_f64(secs)
}

/// Issues 17 and 24: strict values/s and p50/p99 latency with 1, 4 and 16 clients over 1
/// and 4 sidecars, the API writes they cost, a plain segment sequence and Snowflake IDs
/// (no coordination: the ceiling of this many sidecars) beside them (16 clients); then the
/// hand-over gap: with 16 clients on 4 sidecars, the oracle's process is killed
/// (`kill -9`) and the longest time without a value is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark for bench/run: about 3 minutes; run it by name"]
async fn bench_strict_sequence_values_per_second_and_api_writes() -> Result<()> {
    let window = env_secs("KUBEFLAKE_BENCH_STRICT_SECS", 10.0);
    // The hand-over: load for `steady` before the kill and `recover` after it.
    let steady = Duration::from_secs(2);
    let recover = env_secs("KUBEFLAKE_BENCH_STRICT_HANDOVER_SECS", 15.0);
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("bench-strict").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    let mut table = String::from(
        "| sequence | sidecars | transport | clients | on the oracle | values/s | p50 us | p99 us | refused | sidecars' CPU us per value | lease writes/s | of which 409 | lease reads/s |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    // Snowflake IDs beside them: every sidecar serves from its own memory, with no
    // coordination at all, so its row is what this many sidecar processes can serve on this
    // machine, the ceiling of any design for a sequence (strict or not).
    let runs: [(&str, serde_json::Value, &[usize]); 3] = [
        (
            "strict",
            json!({"mode": "Segment", "segment": {"strict": true}}),
            &[1, 4, 16],
        ),
        (
            "segment",
            json!({"mode": "Segment", "segment": {"blockSize": 1000}}),
            &[16],
        ),
        ("snowflake", json!({}), &[16]),
    ];
    for (kind, spec, client_counts) in runs {
        let strict = kind == "strict";
        for sidecar_count in [1usize, 4] {
            let name = format!("{kind}-{sidecar_count}");
            create_sequence(&ns, &name, spec.clone()).await?;
            let pods = create_pods(&ns, &name, &name, sidecar_count).await?;
            let mut sidecars =
                Sidecar::start_all_ready_with_sockets(cluster, &ns.name, &pods, &name).await?;
            // Ready is not serving: a strict sidecar may refuse until it knows its oracle.
            eventually(
                Duration::from_secs(60),
                &format!("every sidecar of {name} answering GET /id"),
                || async {
                    Ok(sidecars
                        .iter()
                        .all(|s| {
                            sidecar_support::get(s.port, "/id")
                                .is_ok_and(|(status, _)| status == 200)
                        })
                        .then_some(()))
                },
            )
            .await?;
            // The oracle's sidecar last: one client then asks a sidecar that forwards, as
            // most clients of a sequence with many pods do.
            let oracle = match strict {
                true => oracle_holder(&ns.client, &ns.name, &name).await?,
                false => None,
            };
            let oracle_uid = oracle.as_ref().and_then(holder).map(str::to_string);
            sidecars.sort_by_key(|s| Some(&s.uid) == oracle_uid.as_ref());
            for transport in Transport::ALL {
                let addrs = transport.targets(&sidecars)?;
                for &count in client_counts {
                    let before = lease_requests(&ns.client).await?;
                    let cpu_before = sidecars_cpu_seconds(&sidecars)?;
                    let started = Instant::now();
                    let load = drive(&addrs, count, strict, window).await?;
                    let secs = started.elapsed().as_secs_f64();
                    let cpu = sidecars_cpu_seconds(&sidecars)? - cpu_before;
                    let requests = lease_requests(&ns.client).await? - before;
                    // What serving one value cost the sidecars together (forwarding shows
                    // here: the oracle's and the forwarder's work for one value). The CPU
                    // counts the warm-up second too, taken to serve at the window's rate.
                    let cpu_us_per_value =
                        cpu * 1e6 / (load.ids_per_s * (load.secs + 1.0)).max(1.0);
                    let on_oracle = oracle_uid.as_ref().map(|_| {
                        (0..count)
                            .filter(|i| i % sidecar_count == sidecar_count - 1)
                            .count()
                    });
                    let values_per_sec = load.ids_per_s;
                    report(json!({
                        "figure": "strict", "sequence": kind, "sidecars": sidecar_count,
                        "transport": transport.name(),
                        "clients": count, "clients_on_oracle": on_oracle,
                        "values_per_sec": values_per_sec, "p50_us": load.p50_us,
                        "p99_us": load.p99_us, "refused": load.refused, "secs": load.secs,
                        "sidecar_cpu_us_per_value": cpu_us_per_value,
                        "lease_writes_per_sec": requests.writes / secs,
                        "conflicts_per_sec": requests.conflicts / secs,
                        "lease_reads_per_sec": requests.reads / secs,
                    }));
                    table.push_str(&format!(
                        "| {kind} | {sidecar_count} | {} | {count} | {} | {values_per_sec:.0} | {:.0} | {:.0} | {} | {cpu_us_per_value:.1} | {:.0} | {:.0} | {:.1} |\n",
                        transport.name(),
                        on_oracle.map_or("-".to_string(), |n| n.to_string()),
                        load.p50_us,
                        load.p99_us,
                        load.refused,
                        requests.writes / secs,
                        requests.conflicts / secs,
                        requests.reads / secs,
                    ));
                    assert!(load.ids > 0, "{kind}: no value in the window");
                }
            }
            if strict && sidecar_count > 1 {
                for after_kill in [AfterKill::RestartInPlace, AfterKill::Nothing] {
                    let line = handover(&ns, &name, &sidecars, steady, recover, after_kill).await?;
                    table.push_str(&format!("\n{line}\n"));
                }
            }
            drop(sidecars);
        }
    }
    println!("{table}");
    Ok(())
}

/// How the load generator reaches the sidecars: over TCP as most apps do, or over each
/// sidecar's Unix socket (`--listen-unix`, what `KUBEFLAKE_SOCKET` offers an app), the
/// two transports PostgreSQL's `nextval()` is measured over in the same section.
#[derive(Debug, Clone, Copy)]
enum Transport {
    Tcp,
    Unix,
}

impl Transport {
    const ALL: [Transport; 2] = [Transport::Tcp, Transport::Unix];

    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
        }
    }

    /// Every sidecar's address on this transport, in the sidecars' order.
    fn targets(self, sidecars: &[Sidecar]) -> Result<Targets> {
        let targets = sidecars
            .iter()
            .map(|s| match self {
                Transport::Tcp => Ok(Target::Tcp(([127, 0, 0, 1], s.port).into())),
                Transport::Unix => s
                    .socket
                    .clone()
                    .map(Target::Unix)
                    .context("the sidecars were started without --listen-unix"),
            })
            .collect::<Result<Vec<_>>>()?;
        Targets::new(targets).map_err(anyhow::Error::msg)
    }
}

/// CPU seconds all `sidecars` have used so far.
fn sidecars_cpu_seconds(sidecars: &[Sidecar]) -> Result<f64> {
    sidecars
        .iter()
        .map(|s| {
            s.process
                .pid()
                .and_then(cpu_seconds)
                .with_context(|| format!("the CPU time of sidecar {}", s.pod))
        })
        .sum()
}

/// `count` closed-loop connections spread over `addrs` in turn (connection `i` on
/// `addrs[i mod n]`), each `GET /id` as fast as it is answered, for a second of warm-up and
/// then `window`: the load generator and settings `bench/run` measures PostgreSQL's
/// `nextval()` with (one client thread, keep-alive, HDR latencies). With `increasing`,
/// every connection's values must increase, or the run fails.
async fn drive(
    addrs: &Targets,
    count: usize,
    increasing: bool,
    window: Duration,
) -> Result<Summary> {
    let peer = Peer::Http {
        addrs: addrs.clone(),
        path: "/id".to_string(),
        ids_per_answer: 1,
        increasing,
    };
    let plan = Plan {
        connections: count,
        warmup: Duration::from_secs(1),
        measure: window,
    };
    tokio::task::spawn_blocking(move || -> Result<Summary> {
        // Its own runtime of one thread, as `kubeflake-loadgen --threads 1`.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        Ok(runtime.block_on(load::run(&peer, "strict", plan))?)
    })
    .await?
}

/// What follows the oracle's `kill -9` in [`handover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterKill {
    /// The process is started again at once with its pod's identity and state dir, as the
    /// kubelet restarts a killed container: it takes its own Lease back (rule 13).
    RestartInPlace,
    /// Nothing: the pod is gone for good, another sidecar takes over once the Lease lapsed.
    Nothing,
}

/// The hand-over gap: 4 connections per sidecar for `steady`, then the oracle's process is
/// killed (`kill -9`), restarted or not (`after_kill`), and the load goes on for `recover`;
/// a client whose sidecar died moves to the next one. Reports the longest time without a
/// value from the kill on, and what the clients were refused meanwhile. Fails if values
/// never flowed again.
async fn handover(
    ns: &kubeflake_e2e::TestNamespace,
    sequence: &str,
    sidecars: &[Sidecar],
    steady: Duration,
    recover: Duration,
    after_kill: AfterKill,
) -> Result<String> {
    let lease = oracle_holder(&ns.client, &ns.name, sequence)
        .await?
        .with_context(|| {
            format!(
                "no oracle Lease {} naming a pod: the hand-over needs the strict oracle (issue 24)",
                strict_oracle::oracle_name(sequence)
            )
        })?;
    let old = holder(&lease).unwrap_or_default().to_string();
    let old_term = lease.spec.as_ref().and_then(|s| s.lease_transitions);
    let lease_secs = lease.spec.as_ref().and_then(|s| s.lease_duration_seconds);
    let oracle = sidecars
        .iter()
        .position(|s| s.uid == old)
        .with_context(|| format!("the oracle Lease names pod {old}, no sidecar of {sequence}"))?;
    let clients = Clients {
        ports: sidecars.iter().map(|s| s.port).collect(),
        count: 4 * sidecars.len(),
        survive: true,
        increasing: true,
    };
    let window = steady + recover;
    let start = Instant::now();
    let load = {
        let clients = clients.clone();
        tokio::task::spawn_blocking(move || closed_loop(&clients, "/id", start, window))
    };
    tokio::time::sleep_until((start + steady).into()).await;
    let killed = start.elapsed();
    sidecars[oracle].process.kill();
    if after_kill == AfterKill::RestartInPlace {
        sidecars[oracle].process.restart()?;
    }
    // Until the Lease is in a new term (polled every 20 ms).
    let mut new_oracle_after = None;
    while start.elapsed() < window {
        if let Some(l) = oracle_holder(&ns.client, &ns.name, sequence).await?
            && l.spec.as_ref().and_then(|s| s.lease_transitions) != old_term
            && holder(&l).is_some()
        {
            new_oracle_after = Some(start.elapsed() - killed);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let load = load.await??;
    let (from, to) = longest_gap(&load.successes, killed, window);
    let (before_from, before_to) = longest_gap(
        &load
            .successes
            .iter()
            .copied()
            .filter(|&t| t <= killed)
            .collect::<Vec<_>>(),
        Duration::ZERO,
        killed,
    );
    let flowed_again = load
        .successes
        .last()
        .is_some_and(|&t| t > killed && to < window);
    let rel = |t: Duration| t.as_secs_f64() - killed.as_secs_f64();
    report(json!({
        "figure": "strict_handover", "after_kill": format!("{after_kill:?}"),
        "sidecars": sidecars.len(), "clients": clients.count,
        "lease_duration_s": lease_secs, "killed_after_s": killed.as_secs_f64(),
        "window_s": window.as_secs_f64(), "values": load.values,
        "longest_gap_s": (to - from).as_secs_f64(),
        "gap_from_s": rel(from), "gap_to_s": rel(to),
        "longest_gap_before_kill_s": (before_to - before_from).as_secs_f64(),
        "new_oracle_after_s": new_oracle_after.map(|d| d.as_secs_f64()),
        "refused": load.refused, "broken": load.broken,
        "values_flowed_again": flowed_again,
    }));
    if !flowed_again {
        bail!(
            "no value for {:.1} s after the oracle of {sequence} was killed (the window ended)",
            (window - killed).as_secs_f64()
        );
    }
    Ok(format!(
        "hand-over ({} sidecars, {} clients, oracle killed {:.1} s in, {}): longest gap {:.3} s \
         (from {:+.3} s to {:+.3} s after the kill), a new term began after {}, {} refused, \
         {} broken connections; longest gap before the kill {:.3} s",
        sidecars.len(),
        clients.count,
        killed.as_secs_f64(),
        match after_kill {
            AfterKill::RestartInPlace => "restarted at once in its pod",
            AfterKill::Nothing => "not restarted",
        },
        (to - from).as_secs_f64(),
        rel(from),
        rel(to),
        new_oracle_after.map_or("-".to_string(), |d| format!("{:.3} s", d.as_secs_f64())),
        load.refused,
        load.broken,
        (before_to - before_from).as_secs_f64(),
    ))
}

/// What every Segment sidecar's watch of its counter Lease costs (docs/safety.md rule 22:
/// each follows the counter so that it knows how far the others claimed): 1, 4 and 16
/// sidecars of one sequence with small blocks (100 values, so claims are frequent) under
/// 16 clients for the window. Each claim is one Lease write and one watch event to every
/// watcher (each sidecar and the operator); the figures per claim show how that grows
/// with the sidecars: watch events, the API server's CPU, the sidecars' CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: about 1 minute; run it by name"]
async fn bench_segment_counter_watch_fan_out() -> Result<()> {
    let window = env_secs("KUBEFLAKE_BENCH_WATCH_SECS", 10.0);
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("bench-watch").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    let apiserver = cluster
        .pids()
        .into_iter()
        .find(|(name, _)| name == "kube-apiserver")
        .map(|(_, pid)| pid)
        .context("the API server's process")?;
    let mut table = String::from(
        "| sidecars | values/s | claims/s | Lease watch events/s | watch events per claim | API server CPU per claim | sidecars' CPU per claim |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for sidecar_count in [1usize, 4, 16] {
        let name = format!("watch-{sidecar_count}");
        let spec = json!({"mode": "Segment", "segment": {"blockSize": 100}});
        create_sequence(&ns, &name, spec).await?;
        let pods = create_pods(&ns, &name, &name, sidecar_count).await?;
        let sidecars =
            Sidecar::start_all_ready_with_sockets(cluster, &ns.name, &pods, &name).await?;
        let addrs = Transport::Tcp.targets(&sidecars)?;
        let before = lease_requests(&ns.client).await?;
        let api_before = cpu_seconds(apiserver).context("the API server's CPU time")?;
        let cpu_before = sidecars_cpu_seconds(&sidecars)?;
        let started = Instant::now();
        let load = drive(&addrs, 16, false, window).await?;
        let secs = started.elapsed().as_secs_f64();
        let api_cpu = cpu_seconds(apiserver).context("the API server's CPU time")? - api_before;
        let cpu = sidecars_cpu_seconds(&sidecars)? - cpu_before;
        let requests = lease_requests(&ns.client).await? - before;
        let claims = (requests.writes - requests.conflicts).max(1.0);
        let events_per_claim = requests.watch_events / claims;
        let api_us = api_cpu * 1e6 / claims;
        let sidecars_us = cpu * 1e6 / claims;
        report(json!({
            "figure": "segment_watch", "sidecars": sidecar_count,
            "values_per_sec": load.ids_per_s, "claims_per_sec": claims / secs,
            "lease_watch_events_per_sec": requests.watch_events / secs,
            "watch_events_per_claim": events_per_claim,
            "apiserver_cpu_us_per_claim": api_us, "sidecar_cpu_us_per_claim": sidecars_us,
            "secs": secs,
        }));
        table.push_str(&format!(
            "| {sidecar_count} | {:.0} | {:.0} | {:.0} | {events_per_claim:.1} | {api_us:.0} µs | {sidecars_us:.0} µs |\n",
            load.ids_per_s,
            claims / secs,
            requests.watch_events / secs,
        ));
        assert!(load.ids > 0, "{name}: no value in the window");
        drop(sidecars);
    }
    println!("{table}");
    Ok(())
}
