//! Segment mode against the real control plane: `kubeflake-sidecar cluster` processes claim
//! blocks from one Segment sequence's counter Lease, created by a real operator, while
//! load generators collect every value. The checker proves: no value issued twice, each
//! sidecar's values increasing (per connection), and every gap explained by a block that
//! was abandoned (still buffered at the end, or dropped with a refused batch).
//!
//! Tests of this binary run one at a time (one of them restarts the API server).
//! The write-load benchmark is ignored by default:
//! `cargo test -p kubeflake-e2e --test segment -- --ignored --nocapture`
//! (`KUBEFLAKE_RATE` requests/s, `KUBEFLAKE_SIDECARS`, `KUBEFLAKE_BLOCK` to change it).

mod operator_support;
mod sidecar_support;

use std::collections::HashSet;
use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kubeflake_crds::IdSequence;
use kubeflake_crds::segment_counter::{Counter, counter_name};
use kubeflake_e2e::exposition;
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use serde_json::json;
use sidecar_support::{Sidecar, get, request};

/// One test at a time: the fault test restarts the API server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Calls one sidecar in a loop until stopped: one `GET /id`, then `batches` calls of
/// `GET /ids?count=batch`, optionally paced to `per_second` requests.
struct Load {
    stop: Arc<AtomicBool>,
    /// Values received, split per connection (a new connection after a restart).
    values: Arc<Mutex<Vec<Vec<u64>>>>,
    refusals: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, batch: u64, per_second: Option<f64>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let values: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
        let refusals = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let (s, v, r, q) = (
            stop.clone(),
            values.clone(),
            refusals.clone(),
            requests.clone(),
        );
        let thread = std::thread::spawn(move || {
            let pace = per_second.map(|r| Duration::from_secs_f64(1.0 / r));
            let started = Instant::now();
            let mut i: u64 = 0;
            while !s.load(Ordering::Relaxed) {
                let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = stream.set_nodelay(true);
                let mut conn = BufReader::new(stream);
                v.lock().unwrap().push(Vec::new());
                while !s.load(Ordering::Relaxed) {
                    i += 1;
                    if let Some(p) = pace {
                        let due = started + p.mul_f64(i as f64);
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                    }
                    let target = if i.is_multiple_of(10) || batch == 1 {
                        "/id".to_string()
                    } else {
                        format!("/ids?count={batch}")
                    };
                    let Some((status, body)) = request(&mut conn, &target) else {
                        break;
                    };
                    q.fetch_add(1, Ordering::Relaxed);
                    if status == 200 {
                        let got = body.lines().filter_map(|l| l.parse::<u64>().ok());
                        v.lock()
                            .unwrap()
                            .last_mut()
                            .expect("a connection")
                            .extend(got);
                    } else {
                        r.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        });
        Load {
            stop,
            values,
            refusals,
            requests,
            thread: Some(thread),
        }
    }

    fn count(&self) -> usize {
        self.values.lock().unwrap().iter().map(Vec::len).sum()
    }

    fn finish(mut self) -> Vec<Vec<u64>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.values.lock().unwrap())
    }
}

/// What the checker found.
#[derive(Debug, Default)]
struct Checked {
    values: usize,
    duplicates: usize,
    order_violations: usize,
    lowest: u64,
    highest: u64,
}

/// Uniqueness over everything; strictly increasing within each connection.
fn check(all: &[Vec<Vec<u64>>]) -> Checked {
    let mut seen: HashSet<u64> = HashSet::new();
    let mut c = Checked {
        lowest: u64::MAX,
        ..Checked::default()
    };
    for connections in all {
        for values in connections {
            for w in values.windows(2) {
                if w[1] <= w[0] {
                    c.order_violations += 1;
                }
            }
            for &v in values {
                c.values += 1;
                c.lowest = c.lowest.min(v);
                c.highest = c.highest.max(v);
                if !seen.insert(v) {
                    c.duplicates += 1;
                }
            }
        }
    }
    c
}

async fn counter(ns: &TestNamespace, sequence: &str) -> Result<Counter> {
    let api: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(Counter::parse(&api.get(&counter_name(sequence)).await?)?)
}

/// The value of one unlabelled metric of a sidecar (0 when absent).
fn metric(port: u16, name: &str) -> u64 {
    get(port, "/metrics")
        .map(|(_, text)| exposition::value(&text, name).unwrap_or(0.0) as u64)
        .unwrap_or(0)
}

/// Creates a Segment sequence, an operator, `n` pods and their sidecars; waits until
/// every sidecar is ready.
async fn setup(
    cluster: &'static Cluster,
    prefix: &str,
    sequence: &str,
    segment: serde_json::Value,
    n: usize,
) -> Result<(TestNamespace, Operator, Vec<Sidecar>)> {
    install_crd(cluster).await?;
    let ns = cluster.namespace(prefix).await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(
        &ns,
        sequence,
        json!({"mode": "Segment", "segment": segment}),
    )
    .await?;
    // Labelled like Snowflake pods: the operator must still not give them slots.
    let pods = create_pods(&ns, sequence, "app", n).await?;
    let sidecars = Sidecar::start_all_ready(cluster, &ns.name, &pods, sequence).await?;
    Ok((ns, operator, sidecars))
}

/// Waits until no claim is in flight: the counter stays the same across one second.
async fn quiet_counter(ns: &TestNamespace, sequence: &str) -> Result<Counter> {
    let mut last = counter(ns, sequence).await?;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = counter(ns, sequence).await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    anyhow::bail!("the counter kept moving after the load stopped")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_sidecars_claim_a_million_values_with_no_duplicate_and_only_explained_gaps()
-> Result<()> {
    let _serial = SERIAL.lock().await;
    const SEQUENCE: &str = "orders";
    const TARGET: usize = 1_000_000;
    let cluster = Cluster::shared();
    // Adaptive sizing with a 1 s target so that block sizes move within the test.
    let segment = json!({"start": 1000, "blockSize": 500, "maxBlockSize": 20000,
                         "prefetchPercent": 10, "targetClaimIntervalSeconds": 1});
    let (ns, _operator, sidecars) = setup(cluster, "segment", SEQUENCE, segment, 8).await?;
    let started = Instant::now();
    let loads: Vec<Load> = sidecars
        .iter()
        .map(|s| Load::start(s.port, 1000, None))
        .collect();
    let deadline = started + Duration::from_secs(120);
    while loads.iter().map(Load::count).sum::<usize>() < TARGET && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refusals: u64 = loads
        .iter()
        .map(|l| l.refusals.load(Ordering::Relaxed))
        .sum();
    let requests: u64 = loads
        .iter()
        .map(|l| l.requests.load(Ordering::Relaxed))
        .sum();
    let collected: Vec<Vec<Vec<u64>>> = loads.into_iter().map(Load::finish).collect();
    let secs = started.elapsed().as_secs_f64();
    let end = quiet_counter(&ns, SEQUENCE).await?;
    let buffered: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_buffered_values"))
        .sum();
    let dropped: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_values_dropped_total"))
        .sum();
    let claimed: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_blocks_claimed_total"))
        .sum();
    let conflicts: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_claim_conflicts_total"))
        .sum();
    let sizes: Vec<u64> = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_block_size"))
        .collect();
    ensure!(
        counter(&ns, SEQUENCE).await? == end,
        "a claim landed while the sidecars were measured"
    );
    let c = check(&collected);
    let gaps = (end.next - 1000) - c.values as u64;
    eprintln!(
        "segment: {} values from 8 sidecars in {secs:.1} s ({:.0}/s) in {requests} requests, {refusals} refused; \
         {} duplicates, {} order violations; counter 1000 -> {} after {} claims ({claimed} by the sidecars, \
         {conflicts} CAS conflicts retried); gaps {gaps} = {buffered} still buffered + {dropped} dropped with refused batches; \
         last block sizes {sizes:?}",
        c.values,
        c.values as f64 / secs,
        c.duplicates,
        c.order_violations,
        end.next,
        end.claims,
    );
    ensure!(c.values >= TARGET, "only {} values in 120 s", c.values);
    ensure!(
        c.duplicates == 0,
        "{} values were issued twice",
        c.duplicates
    );
    ensure!(
        c.order_violations == 0,
        "{} values were lower than the one before on the same connection",
        c.order_violations
    );
    ensure!(
        c.lowest >= 1000 && c.highest < end.next,
        "values outside [start, counter)"
    );
    ensure!(
        gaps == buffered + dropped,
        "gaps {gaps} are not all abandoned blocks ({buffered} buffered + {dropped} dropped)"
    );
    ensure!(
        end.claims == claimed,
        "every claim in the counter was made by a sidecar"
    );
    ensure!(
        sizes.iter().any(|s| *s > 500),
        "adaptive sizing grew the blocks under load: {sizes:?}"
    );
    ensure!(
        slot_leases(&ns, SEQUENCE).await?.is_empty(),
        "no slot lease for a Segment sequence"
    );

    // The operator reports the high-water mark and the claims.
    let api: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let status = eventually(
        Duration::from_secs(40),
        "status.segment to show the counter",
        || async {
            let seq = api.get(SEQUENCE).await?;
            let s = seq.status.and_then(|s| s.segment);
            Ok(s.filter(|s| {
                s.next == Some(end.next as i64) && s.blocks_claimed == Some(end.claims as i64)
            }))
        },
    )
    .await?;
    eprintln!("segment: status {status:?}");

    // A graceful stop of every sidecar gives back what the last claimer had left: the
    // counter ends below where it was, never below a value issued.
    for s in &sidecars {
        s.process.stop(Duration::from_secs(10));
    }
    let after = counter(&ns, SEQUENCE).await?;
    eprintln!(
        "segment: counter after SIGTERM of every sidecar: {} (was {})",
        after.next, end.next
    );
    ensure!(after.next > c.highest && after.next <= end.next);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_sidecars_and_of_the_api_server_during_claims_issues_no_value_twice() -> Result<()>
{
    let _serial = SERIAL.lock().await;
    const SEQUENCE: &str = "faulty";
    let cluster = Cluster::shared();
    // Tiny fixed blocks: every sidecar claims about 20 times a second, so each kill below
    // lands while claims are in flight (the claim errors counted at the end prove it).
    let segment = json!({"blockSize": 10});
    let (ns, operator, sidecars) = setup(cluster, "segfault", SEQUENCE, segment, 6).await?;
    let started = Instant::now();
    let loads: Vec<Load> = sidecars
        .iter()
        .map(|s| Load::start(s.port, 10, Some(20.0)))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for round in 0..2 {
        let victim = &sidecars[round * 2];
        eprintln!("segment faults: kill -9 {} and restart it", victim.pod);
        victim.process.kill();
        victim.process.restart()?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("segment faults: kill -9 of the operator, then restart");
    operator.process.kill();
    operator.process.restart()?;
    let mut errors_before_outages = 0;
    for outage in 0..2 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if outage == 0 {
            errors_before_outages = sidecars
                .iter()
                .map(|s| metric(s.port, "kubeflake_segment_claim_errors_total"))
                .sum::<u64>();
        }
        eprintln!(
            "segment faults: kill -9 of the API server ({}), then restart",
            outage + 1
        );
        cluster.kill_apiserver();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cluster.start_apiserver().await?;
    }
    eprintln!("segment faults: kill -9 of a sidecar right after the restart");
    sidecars[5].process.kill();
    sidecars[5].process.restart()?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let claim_errors: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_claim_errors_total"))
        .sum();
    let claims: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_blocks_claimed_total"))
        .sum();
    let refusals: u64 = loads
        .iter()
        .map(|l| l.refusals.load(Ordering::Relaxed))
        .sum();
    let collected: Vec<Vec<Vec<u64>>> = loads.into_iter().map(Load::finish).collect();
    let end = quiet_counter(&ns, SEQUENCE).await?;
    let c = check(&collected);
    let gaps = (end.next - 1) - c.values as u64;
    eprintln!(
        "segment faults: {} values in {:.1} s, {refusals} refused; {} duplicates, {} order \
         violations; counter at {} after {} claims ({claims} by the sidecars still running); \
         {claim_errors} claims failed ({errors_before_outages} before the API server was \
         killed); {gaps} values never issued (blocks abandoned by the killed sidecars, lost \
         claim replies, still buffered)",
        c.values,
        started.elapsed().as_secs_f64(),
        c.duplicates,
        c.order_violations,
        end.next,
        end.claims
    );
    // Enough claims and values that the kills above landed among them. How many the sidecars
    // issue follows the CPU they get (12,011 alone on the project's machine, 4,486 beside a
    // build of the test suite, 2026-12-01): the bar is what any run that did its work passes.
    ensure!(
        c.values > 1_000 && end.claims > 100,
        "too few values to say anything: {} in {} claims",
        c.values,
        end.claims
    );
    ensure!(
        c.duplicates == 0,
        "{} values were issued twice",
        c.duplicates
    );
    ensure!(
        c.order_violations == 0,
        "{} order violations",
        c.order_violations
    );
    ensure!(c.highest < end.next, "a value above the counter was issued");
    ensure!(
        claim_errors > errors_before_outages,
        "no claim failed: the API server kills did not land during claims"
    );
    Ok(())
}

/// The Ready condition of a sequence: (status, reason).
async fn ready_condition(ns: &TestNamespace, sequence: &str) -> Result<Option<(String, String)>> {
    let api: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(api.get(sequence).await?.status.and_then(|s| {
        s.conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status, c.reason))
    }))
}

/// Sum of one metric over every sidecar.
fn metric_sum(sidecars: &[Sidecar], name: &str) -> u64 {
    sidecars.iter().map(|s| metric(s.port, name)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_lowered_counter_lease_is_never_recreated_and_no_value_is_issued_twice()
-> Result<()> {
    let _serial = SERIAL.lock().await;
    const SEQUENCE: &str = "lost";
    let cluster = Cluster::shared();
    // Small blocks, so that sidecars claim all the time.
    let segment = json!({"blockSize": 100});
    let (ns, _operator, mut sidecars) = setup(cluster, "seglost", SEQUENCE, segment, 4).await?;
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let lease_name = counter_name(SEQUENCE);
    let mut loads: Vec<Load> = sidecars
        .iter()
        .map(|s| Load::start(s.port, 10, Some(50.0)))
        .collect();
    // The operator has seen the counter in use.
    let seqs: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        Duration::from_secs(40),
        "status.segment with claims",
        || async {
            let seq = seqs.get(SEQUENCE).await?;
            Ok(seq
                .status
                .and_then(|s| s.segment)
                .filter(|s| s.blocks_claimed.unwrap_or(0) > 4)
                .map(|_| ()))
        },
    )
    .await?;

    // Delete right after sidecars claimed above what the status shows, so that the first
    // aid below (raising to status.segment.next) stays under some sidecar's top.
    eventually(
        Duration::from_secs(20),
        "claims after the operator's last look",
        || async {
            let seen = seqs.get(SEQUENCE).await?.status.and_then(|s| s.segment);
            let seen = seen.and_then(|s| s.next).unwrap_or(i64::MAX) as u64;
            Ok((counter(&ns, SEQUENCE).await?.next > seen).then_some(()))
        },
    )
    .await?;
    // 1. `kubectl delete lease`: the operator must not bring it back at start.
    eprintln!("segment lost: deleting {lease_name} while the sidecars serve");
    leases.delete(&lease_name, &Default::default()).await?;
    eventually(
        Duration::from_secs(40),
        "Ready=False CounterLost",
        || async {
            Ok(ready_condition(&ns, SEQUENCE)
                .await?
                .filter(|(s, r)| s == "False" && r == "CounterLost")
                .map(|_| ()))
        },
    )
    .await?;
    ensure!(
        leases.get_opt(&lease_name).await?.is_none(),
        "the operator re-created the lost counter"
    );

    // 2. A cleanup script (or an old backup) brings it back low: running sidecars refuse it.
    eprintln!("segment lost: re-creating it at 1 with no claims, as an old copy would");
    leases
        .create(
            &Default::default(),
            &kubeflake_crds::segment_counter::new_counter(SEQUENCE, &ns.name, 1),
        )
        .await?;
    eventually(
        Duration::from_secs(40),
        "Ready=False CounterWentBack",
        || async {
            Ok(ready_condition(&ns, SEQUENCE)
                .await?
                .filter(|(s, r)| s == "False" && r == "CounterWentBack")
                .map(|_| ()))
        },
    )
    .await?;
    eventually(
        Duration::from_secs(20),
        "a sidecar to refuse the lowered counter",
        || async {
            Ok(
                (metric_sum(&sidecars, "kubeflake_segment_claims_refused_behind_total") > 0)
                    .then_some(()),
            )
        },
    )
    .await?;
    // A sidecar started now has no blocks, so no floor of its own: the claim count the
    // status recorded must stop it.
    let late_pod = create_pods(&ns, SEQUENCE, "late", 1).await?;
    let late = Sidecar::start(cluster, &ns.name, &late_pod[0], SEQUENCE, false)?;
    eventually(
        Duration::from_secs(30),
        "the sidecar started meanwhile to refuse the counter",
        || async {
            late.process.check_running()?;
            Ok(
                (metric(late.port, "kubeflake_segment_claims_refused_behind_total") > 0)
                    .then_some(()),
            )
        },
    )
    .await?;
    ensure!(
        get(late.port, "/id").ok().map(|(status, _)| status) != Some(200),
        "the sidecar started meanwhile served a value from the lowered counter"
    );
    let untouched = counter(&ns, SEQUENCE).await?;
    ensure!(
        (untouched.next, untouched.claims) == (1, 0),
        "nobody may claim from the lowered counter (not the operator either): {untouched:?}"
    );
    loads.push(Load::start(late.port, 10, Some(50.0)));
    sidecars.push(late);

    // 3. The documented recovery: above status.segment.next and every sidecar's claimed
    // top, with the claims count at least the one last seen.
    let last = seqs
        .get(SEQUENCE)
        .await?
        .status
        .and_then(|s| s.segment)
        .ok_or_else(|| anyhow::anyhow!("status.segment was dropped"))?;
    let top = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_claimed_top"))
        .max()
        .unwrap_or(0);
    // A CAS loop all the same: a repair must never overwrite a claim it did not see.
    let recovered = loop {
        let mut lease = leases.get(&lease_name).await?;
        let now = Counter::parse(&lease)?.next;
        let recovered = (last.next.unwrap_or(0) as u64).max(top).max(now) + 10_000;
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(
            kubeflake_crds::segment_counter::NEXT_ANNOTATION.into(),
            recovered.to_string(),
        );
        annotations.insert(
            kubeflake_crds::segment_counter::CLAIMS_ANNOTATION.into(),
            last.blocks_claimed.unwrap_or(0).to_string(),
        );
        match leases
            .replace(&lease_name, &Default::default(), &lease)
            .await
        {
            Ok(_) => break recovered,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    };
    eprintln!(
        "segment lost: recovered at {recovered} (status next {:?}, highest sidecar top {top})",
        last.next
    );
    eventually(Duration::from_secs(40), "Ready=True again", || async {
        Ok(ready_condition(&ns, SEQUENCE)
            .await?
            .filter(|(s, _)| s == "True")
            .map(|_| ()))
    })
    .await?;
    let before = loads.iter().map(Load::count).sum::<usize>();
    eventually(Duration::from_secs(20), "values served again", || async {
        Ok((loads.iter().map(Load::count).sum::<usize>() > before + 1000).then_some(()))
    })
    .await?;

    let collected: Vec<Vec<Vec<u64>>> = loads.into_iter().map(Load::finish).collect();
    let c = check(&collected);
    let behind = metric_sum(&sidecars, "kubeflake_segment_claims_refused_behind_total");
    let dropped = metric_sum(&sidecars, "kubeflake_segment_values_dropped_total");
    eprintln!(
        "segment lost: {} values, {} duplicates, {} order violations; {behind} claims refused \
         below a sidecar's top, {dropped} held values dropped",
        c.values, c.duplicates, c.order_violations
    );
    ensure!(
        c.duplicates == 0,
        "{} values were issued twice",
        c.duplicates
    );
    ensure!(
        c.order_violations == 0,
        "{} order violations",
        c.order_violations
    );
    let after: u64 = collected
        .iter()
        .flatten()
        .flatten()
        .filter(|v| **v >= recovered)
        .count() as u64;
    ensure!(
        after > 0,
        "values from above the recovered counter were served"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: about 1 minute; run it by name"]
async fn api_server_writes_per_second_at_a_given_request_rate() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let env = |name: &str, default: f64| -> f64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = env("KUBEFLAKE_SIDECARS", 8.0) as usize;
    let rate = env("KUBEFLAKE_RATE", 8000.0);
    let block = env("KUBEFLAKE_BLOCK", 1000.0) as u64;
    const WINDOW: Duration = Duration::from_secs(30);
    let cluster = Cluster::shared();
    let segment = json!({"blockSize": block});
    let (ns, _operator, sidecars) = setup(cluster, "segbench", "bench", segment, n).await?;
    let loads: Vec<Load> = sidecars
        .iter()
        .map(|s| Load::start(s.port, 1, Some(rate / n as f64)))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = request_counts(&ns.client).await?;
    let (values_before, started) = (loads.iter().map(Load::count).sum::<usize>(), Instant::now());
    tokio::time::sleep(WINDOW).await;
    let after = request_counts(&ns.client).await?;
    let values = loads.iter().map(Load::count).sum::<usize>() - values_before;
    let secs = started.elapsed().as_secs_f64();
    for load in loads {
        load.finish();
    }
    let delta = |verb: &str| {
        let key = ("leases".to_string(), verb.to_string());
        after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
    };
    let writes = delta("PATCH");
    let claims: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_blocks_claimed_total"))
        .sum();
    let conflicts: u64 = sidecars
        .iter()
        .map(|s| metric(s.port, "kubeflake_segment_claim_conflicts_total"))
        .sum();
    eprintln!(
        "segment bench: {n} sidecars, blockSize {block}: {:.0} values/s served ({:.0} requested), \
         {:.2} lease writes/s (PATCH, 409s included) and {:.2} lease reads/s at the API server \
         (values/s / blockSize = {:.2}/s); over the whole run the sidecars made {claims} claims and met {conflicts} CAS conflicts",
        values as f64 / secs,
        rate,
        writes / secs,
        delta("GET") / secs,
        values as f64 / secs / block as f64
    );
    // For bench/run, which collects `BENCH {json}` lines from stdout.
    println!(
        "BENCH {}",
        json!({
            "figure": "segment_api_writes",
            "sidecars": n,
            "block_size": block,
            "requested_per_s": rate,
            "values_per_s": values as f64 / secs,
            "lease_writes_per_s": writes / secs,
            "lease_reads_per_s": delta("GET") / secs,
            "claims": claims,
            "conflicts": conflicts,
        })
    );
    ensure!(writes > 0.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_segment_specs_are_rejected_and_a_recreated_sequence_continues_above_its_counter()
-> Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("segspec").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    // Rule 11: the API server rejects what the CEL rules forbid, saying what to fix.
    let cases = [
        (
            json!({"segment": {"blockSize": 10}}),
            "segment is set but mode is Snowflake",
        ),
        (
            json!({"mode": "Segment", "segment": {"blockSize": 100, "maxBlockSize": 10}}),
            "segment.maxBlockSize (10) is below segment.blockSize (100)",
        ),
        (
            json!({"mode": "Segment", "segment": {"prefetchPercent": 95}}),
            "prefetchPercent",
        ),
    ];
    for (i, (spec, expected)) in cases.into_iter().enumerate() {
        let err = create_sequence(&ns, &format!("bad-{i}"), spec.clone())
            .await
            .err();
        let text = format!("{err:?}");
        ensure!(
            text.contains(expected),
            "{spec}: expected {expected:?}, got {text}"
        );
    }
    // An unknown mode, sent as raw JSON (the typed client could not even express it).
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &kube::api::ApiResource::erase::<IdSequence>(&()),
    );
    let bad_mode: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
        "metadata": {"name": "bad-mode"}, "spec": {"mode": "Sequence"},
    }))?;
    let err = raw.create(&Default::default(), &bad_mode).await.err();
    let text = format!("{err:?}");
    ensure!(
        text.contains("spec.mode") && text.contains("Unsupported value"),
        "unknown mode: {text}"
    );
    let seq = create_sequence(
        &ns,
        "ids",
        json!({"mode": "Segment", "segment": {"start": 42}}),
    )
    .await?;
    let api: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let change = json!({"spec": {"mode": "Snowflake", "segment": null}});
    let err = api
        .patch(
            "ids",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&change),
        )
        .await
        .err();
    ensure!(
        format!("{err:?}").contains("mode is immutable"),
        "mode change: {err:?}"
    );
    drop(seq);

    // The operator creates the counter at start; a sidecar claims from it.
    let first = eventually(Duration::from_secs(30), "the counter", || async {
        Ok(counter(&ns, "ids").await.ok())
    })
    .await?;
    ensure!(first.next == 42 && first.claims == 0, "{first:?}");
    let pods = create_pods(&ns, "ids", "p", 1).await?;
    let sidecar = Sidecar::start(cluster, &ns.name, &pods[0], "ids", false)?;
    eventually(Duration::from_secs(30), "the sidecar ready", || async {
        Ok(sidecar.ready().then_some(()))
    })
    .await?;
    let (status, body) = get(sidecar.port, "/id")?;
    ensure!(status == 200 && body.trim() == "42", "{status} {body}");
    sidecar.process.kill();

    // Deleting the sequence keeps the counter (no owner reference); the same name again
    // continues above it instead of starting at 42.
    api.delete("ids", &Default::default()).await?;
    eventually(
        Duration::from_secs(30),
        "the sequence to be gone",
        || async { Ok(api.get_opt("ids").await?.is_none().then_some(())) },
    )
    .await?;
    let kept = counter(&ns, "ids").await?;
    ensure!(
        kept.next > 42,
        "the counter survived the deletion: {kept:?}"
    );
    create_sequence(
        &ns,
        "ids",
        json!({"mode": "Segment", "segment": {"start": 42}}),
    )
    .await?;
    let sidecar = Sidecar::start(cluster, &ns.name, &pods[0], "ids", false)?;
    eventually(
        Duration::from_secs(30),
        "the sidecar ready again",
        || async { Ok(sidecar.ready().then_some(())) },
    )
    .await?;
    let (_, body) = get(sidecar.port, "/id")?;
    let again: u64 = body.trim().parse()?;
    eprintln!(
        "segment: first value 42; counter kept at {} after deletion; re-created sequence served {again}",
        kept.next
    );
    ensure!(again >= kept.next, "a re-created sequence repeats no value");
    Ok(())
}
