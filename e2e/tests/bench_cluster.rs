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
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
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

/// Closed-loop clients: `clients` threads, client `i` on its own keep-alive connection to
/// `ports[i % ports.len()]`, each asking `target` as fast as it is answered for `window`.
/// Returns the successful answers; the first failure ends the benchmark with its answer.
fn closed_loop(ports: &[u16], clients: usize, target: &str, window: Duration) -> Result<u64> {
    let deadline = Instant::now() + window;
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (port, target) = (ports[i % ports.len()], target.to_string());
            std::thread::spawn(move || -> Result<u64> {
                let stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                let mut conn = std::io::BufReader::new(stream);
                let mut ok = 0u64;
                while Instant::now() < deadline {
                    match sidecar_support::request(&mut conn, &target) {
                        Some((200, _)) => ok += 1,
                        other => bail!("{target} on port {port}: {other:?}"),
                    }
                }
                Ok(ok)
            })
        })
        .collect();
    let mut total = 0;
    for t in threads {
        total += t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
    }
    Ok(total)
}

/// Lease writes (PATCH and PUT) the API server answered so far, and how many were 409.
async fn lease_writes(client: &kube::Client) -> Result<(f64, f64)> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let (mut writes, mut conflicts) = (0.0, 0.0);
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("resource=\"leases\""))
        .filter(|l| l.contains("verb=\"PATCH\"") || l.contains("verb=\"PUT\""))
    {
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        writes += value;
        if line.contains("code=\"409\"") {
            conflicts += value;
        }
    }
    Ok((writes, conflicts))
}

/// Issue 17 item 4: strict values/s with 1, 4 and 16 clients over 1 and 4 sidecars, the
/// API writes they cost, and a plain segment sequence beside them (same clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark for bench/run: about 2 minutes; run it by name"]
async fn bench_strict_sequence_values_per_second_and_api_writes() -> Result<()> {
    let window = Duration::from_secs(env_number("KUBEFLAKE_BENCH_STRICT_SECS", 10));
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("bench-strict").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    let mut table = String::from(
        "| sequence | sidecars | clients | values/s | lease writes/s | of which 409 | values per write |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let runs: [(&str, serde_json::Value, &[usize]); 2] = [
        ("strict", json!({"strict": true}), &[1, 4, 16]),
        ("segment", json!({"blockSize": 1000}), &[16]),
    ];
    for (kind, segment, client_counts) in runs {
        for sidecar_count in [1usize, 4] {
            let name = format!("{kind}-{sidecar_count}");
            create_sequence(&ns, &name, json!({"mode": "Segment", "segment": segment})).await?;
            let pods = create_pods(&ns, &name, &name, sidecar_count).await?;
            let sidecars = Sidecar::start_all_ready(cluster, &ns.name, &pods, &name).await?;
            let ports: Vec<u16> = sidecars.iter().map(|s| s.port).collect();
            for &clients in client_counts {
                // Warm-up: connections, the first claims.
                closed_loop(&ports, clients, "/id", Duration::from_secs(1))?;
                let before = lease_writes(&ns.client).await?;
                let started = Instant::now();
                let values = {
                    let ports = ports.clone();
                    tokio::task::spawn_blocking(move || closed_loop(&ports, clients, "/id", window))
                        .await??
                };
                let secs = started.elapsed().as_secs_f64();
                let after = lease_writes(&ns.client).await?;
                let (writes, conflicts) = (after.0 - before.0, after.1 - before.1);
                let figure = json!({
                    "figure": "strict", "sequence": kind, "sidecars": sidecar_count,
                    "clients": clients, "values_per_sec": values as f64 / secs,
                    "lease_writes_per_sec": writes / secs, "conflicts_per_sec": conflicts / secs,
                });
                report(figure);
                table.push_str(&format!(
                    "| {kind} | {sidecar_count} | {clients} | {:.0} | {:.0} | {:.0} | {:.1} |\n",
                    values as f64 / secs,
                    writes / secs,
                    conflicts / secs,
                    values as f64 / (writes - conflicts).max(1.0),
                ));
                assert!(values > 0, "{kind}: no value in the window");
            }
            drop(sidecars);
        }
    }
    println!("{table}");
    Ok(())
}
