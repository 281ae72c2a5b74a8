//! Linearizability of strict sequences (issue 17): with `segment.strict: true` every
//! request is one compare-and-set write of the counter Lease, so values increase across
//! all sidecars in real-time order: if a call returned before another was invoked,
//! anywhere, the later one got the larger value; and no value is returned twice.
//!
//! Load: client threads each call the sidecars in turn (sidecar `c`, then `c + 1`, ...),
//! `GET /id` and every fourth time `GET /ids?count=3`, in rounds of a few calls per client
//! that end at a barrier. Every reply read completely is recorded with its call and return
//! time ([`History`]); two checkers judge the history: the harness's own exact check
//! ([`check`]) and porcupine (`e2e/linearizability/`, [`porcupine`]), which searches for a
//! linearization itself. The barriers leave instants with no call in flight, where the
//! porcupine checker cuts the history so that its search stays small.
//!
//! The second test runs the same load against a plain Segment sequence, whose sidecars
//! serve from blocks of their own: both checkers must find the violation, so the first
//! test's pass means something.
//!
//! Its own test binary: the first test restarts the API server.
//! `cargo test -p kubeflake-e2e --test linearizability -- --nocapture`

mod operator_support;
mod sidecar_support;

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kubeflake_crds::IdSequence;
use kubeflake_e2e::linearizability::{History, Op, Verdict, Violation, check, porcupine};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use serde_json::json;
use sidecar_support::{Sidecar, request};

/// One test at a time: the first restarts the API server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Calls per client between two barriers.
const CALLS_PER_ROUND: usize = 3;
/// A hard bound on rounds, whatever the clock says.
const MAX_ROUNDS: usize = 100_000;

/// What one client thread saw, besides the recorded operations.
#[derive(Debug, Default, Clone)]
struct ClientStats {
    /// Replies with values, per sidecar.
    served: Vec<u64>,
    /// Non-200 answers (503 while the API server is down).
    refused: u64,
    /// Connections refused or broken (a sidecar being killed and restarted).
    broken: u64,
}

/// Client threads calling the sidecars in turn, recording into one history.
struct Load {
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<ClientStats>>,
}

impl Load {
    /// `clients` threads over the sidecars on `ports`, for at most `limit`.
    fn start(ports: &[u16], clients: usize, limit: Duration) -> Load {
        let history = Arc::new(History::new());
        let stop = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(clients));
        let halt = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + limit;
        let threads = (0..clients)
            .map(|c| {
                let (history, stop, barrier, halt) =
                    (history.clone(), stop.clone(), barrier.clone(), halt.clone());
                let ports = ports.to_vec();
                std::thread::spawn(move || {
                    client(c, &ports, &history, &barrier, &halt, || {
                        stop.load(Ordering::Relaxed) || Instant::now() >= deadline
                    })
                })
            })
            .collect();
        Load {
            history,
            stop,
            threads,
        }
    }

    /// Stops the clients at their next barrier; returns the operations and the stats.
    fn finish(self) -> (Vec<Op>, Vec<ClientStats>) {
        self.stop.store(true, Ordering::Relaxed);
        let stats = self
            .threads
            .into_iter()
            .map(|t| t.join().expect("a client thread panicked"))
            .collect();
        (self.history.ops(), stats)
    }
}

/// One client: rounds of [`CALLS_PER_ROUND`] calls, each to the next sidecar, then a
/// barrier, until `done` (decided by one thread per round, so all stop together).
fn client(
    c: usize,
    ports: &[u16],
    history: &History,
    barrier: &Barrier,
    halt: &AtomicBool,
    done: impl Fn() -> bool,
) -> ClientStats {
    let mut stats = ClientStats {
        served: vec![0; ports.len()],
        ..ClientStats::default()
    };
    let mut conns: Vec<Option<BufReader<TcpStream>>> = ports.iter().map(|_| None).collect();
    let mut call_no: usize = 0;
    for _round in 0..MAX_ROUNDS {
        for _ in 0..CALLS_PER_ROUND {
            call_no += 1;
            let s = (c + call_no) % ports.len();
            let target = if call_no.is_multiple_of(4) {
                "/ids?count=3"
            } else {
                "/id"
            };
            if conns[s].is_none() {
                conns[s] = connect(ports[s]);
            }
            let Some(conn) = conns[s].as_mut() else {
                stats.broken += 1;
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let call = history.call(c as u32);
            match request(conn, target) {
                Some((200, body)) => {
                    let values: Vec<u64> = body.lines().filter_map(|l| l.parse().ok()).collect();
                    history.returned(call, &values);
                    stats.served[s] += 1;
                }
                // A refused or broken call returned no value: nobody saw one, so it is not
                // recorded (a value it may have taken is a gap, never seen twice).
                Some(_) => {
                    stats.refused += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                None => {
                    conns[s] = None;
                    stats.broken += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        if barrier.wait().is_leader() {
            halt.store(done(), Ordering::SeqCst);
        }
        barrier.wait();
        if halt.load(Ordering::SeqCst) {
            break;
        }
    }
    stats
}

fn connect(port: u16) -> Option<BufReader<TcpStream>> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream.set_nodelay(true).ok()?;
    Some(BufReader::new(stream))
}

/// Creates a Segment sequence from raw JSON (so that no field is lost on the way through
/// the typed client) and returns its `spec.segment` as the API server stored it.
async fn create_raw_sequence(
    ns: &TestNamespace,
    name: &str,
    segment: serde_json::Value,
) -> Result<serde_json::Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &ApiResource::erase::<IdSequence>(&()),
    );
    let seq: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
        "metadata": {"name": name},
        "spec": {"mode": "Segment", "segment": segment},
    }))?;
    let created = api.create(&PostParams::default(), &seq).await?;
    Ok(created.data["spec"]["segment"].clone())
}

/// A namespace with an operator, one sequence, `n` pods and their sidecars, all ready.
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
    let stored = create_raw_sequence(&ns, sequence, segment.clone()).await?;
    for (key, value) in segment.as_object().into_iter().flatten() {
        ensure!(
            stored.get(key) == Some(value),
            "the API server stored spec.segment {stored} for {segment}: the CRD has no \
             segment.{key} (crds/idsequence.yaml older than strict sequences?)"
        );
    }
    let pods = create_pods(&ns, sequence, "app", n).await?;
    let sidecars = Sidecar::start_all_ready(cluster, &ns.name, &pods, sequence).await?;
    Ok((ns, operator, sidecars))
}

/// Both checkers' verdicts on one history; the history file is kept in the cluster's
/// directory (`KUBEFLAKE_E2E_KEEP_DIR=1` keeps it after the run).
fn judge(cluster: &Cluster, name: &str, ops: &[Op]) -> Result<(Result<(), Violation>, Verdict)> {
    let file = cluster.dir().join(format!("{name}.jsonl"));
    let started = Instant::now();
    let own = check(ops);
    let own_took = started.elapsed();
    let started = Instant::now();
    let verdict = porcupine(ops, &file, None)?;
    eprintln!(
        "{name}: {} operations written to {}\n{name}: own checker ({own_took:.1?}): {}\n\
         {name}: porcupine ({:.1?}): {verdict:?}",
        ops.len(),
        file.display(),
        match &own {
            Ok(()) => "linearizable".to_string(),
            Err(e) => e.to_string(),
        },
        started.elapsed()
    );
    Ok((own, verdict))
}

fn served_per_sidecar(stats: &[ClientStats], sidecars: usize) -> Vec<u64> {
    (0..sidecars)
        .map(|s| stats.iter().map(|c| c.served[s]).sum())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_values_are_linearizable_across_sidecars_through_kill9_and_an_api_server_restart()
-> Result<()> {
    let _serial = SERIAL.lock().await;
    const SEQUENCE: &str = "strict";
    const SIDECARS: usize = 4;
    const CLIENTS: usize = 12;
    const MIN_OPS: usize = 500;
    let cluster = Cluster::shared();
    let (_ns, _operator, sidecars) = setup(
        cluster,
        "lin-strict",
        SEQUENCE,
        json!({"strict": true}),
        SIDECARS,
    )
    .await?;
    let ports: Vec<u16> = sidecars.iter().map(|s| s.port).collect();
    // At most 60 s; stopped 10 s after the API server is back (about 30 s in all).
    let load = Load::start(&ports, CLIENTS, Duration::from_secs(60));
    let history = load.history.clone();

    tokio::time::sleep(Duration::from_secs(6)).await;
    let victim = &sidecars[1];
    eprintln!(
        "strict: kill -9 of {} and a restart with the same pod",
        victim.pod
    );
    victim.process.kill();
    victim.process.restart()?;
    eventually(
        Duration::from_secs(30),
        "the restarted sidecar ready",
        || async {
            victim.process.check_running()?;
            Ok(victim.ready().then_some(()))
        },
    )
    .await?;
    let sidecar_back = history.now();

    tokio::time::sleep(Duration::from_secs(4)).await;
    eprintln!("strict: restarting kube-apiserver");
    let apiserver_down = history.now();
    cluster.restart_apiserver().await?;
    let apiserver_back = history.now();
    eprintln!(
        "strict: kube-apiserver back after {:.1} s",
        (apiserver_back - apiserver_down) as f64 / 1e9
    );

    tokio::time::sleep(Duration::from_secs(10)).await;
    let (ops, stats) = tokio::task::spawn_blocking(move || load.finish()).await?;
    let served = served_per_sidecar(&stats, SIDECARS);
    let refused: u64 = stats.iter().map(|s| s.refused).sum();
    let broken: u64 = stats.iter().map(|s| s.broken).sum();
    let after_sidecar = ops.iter().filter(|o| o.call > sidecar_back).count();
    let after_apiserver = ops.iter().filter(|o| o.call > apiserver_back).count();
    let values: u64 = ops.iter().map(|o| o.hi - o.lo + 1).sum();
    eprintln!(
        "strict: {} operations recorded ({values} values), per sidecar {served:?}; {refused} \
         refused, {broken} broken or refused connections (not recorded); {after_sidecar} \
         called after the restarted sidecar was ready, {after_apiserver} after the API \
         server was back",
        ops.len()
    );
    let (own, verdict) = judge(cluster, "strict", &ops)?;

    ensure!(
        ops.len() >= MIN_OPS,
        "too few operations to say anything: {} (want {MIN_OPS})",
        ops.len()
    );
    ensure!(
        served.iter().all(|n| *n >= 20),
        "every sidecar served: {served:?}"
    );
    ensure!(
        after_sidecar >= 20 && after_apiserver >= 20,
        "the load went on after the faults: {after_sidecar} operations after the sidecar \
         restart, {after_apiserver} after the API server restart"
    );
    if let Err(e) = own {
        bail!("the own checker: {e}");
    }
    match verdict {
        Verdict::Linearizable(_) => Ok(()),
        other => bail!("porcupine: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkers_catch_values_served_from_prefetched_blocks() -> Result<()> {
    let _serial = SERIAL.lock().await;
    const SEQUENCE: &str = "blocks";
    const SIDECARS: usize = 3;
    const CLIENTS: usize = 6;
    let cluster = Cluster::shared();
    // Plain segment mode: each sidecar serves from its own block of 100, so a client that
    // calls sidecar 0, then 1, then 2, then 0 again gets a value lower than one it saw.
    let (_ns, _operator, sidecars) = setup(
        cluster,
        "lin-blocks",
        SEQUENCE,
        json!({"blockSize": 100}),
        SIDECARS,
    )
    .await?;
    let ports: Vec<u16> = sidecars.iter().map(|s| s.port).collect();
    let load = Load::start(&ports, CLIENTS, Duration::from_secs(20));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (ops, stats) = tokio::task::spawn_blocking(move || load.finish()).await?;
    let served = served_per_sidecar(&stats, SIDECARS);
    eprintln!(
        "blocks: {} operations recorded, per sidecar {served:?}",
        ops.len()
    );
    ensure!(
        served.iter().all(|n| *n >= 20),
        "every sidecar served: {served:?}"
    );
    let (own, verdict) = judge(cluster, "blocks", &ops)?;
    // The certain violation, not only interleaved runs of batches spanning two blocks.
    ensure!(
        matches!(own, Err(Violation::RealTimeOrder { .. })),
        "the own checker did not find a value below one returned before: {own:?}"
    );
    match verdict {
        Verdict::NotLinearizable(_) => Ok(()),
        other => bail!("porcupine did not catch values served from blocks: {other:?}"),
    }
}

#[test]
fn porcupine_agrees_with_the_own_checker_on_small_histories() -> Result<()> {
    let op = |client, call, ret, lo, hi| Op {
        client,
        call,
        ret,
        lo,
        hi,
    };
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("h.jsonl");
    let cases = [
        // Concurrent: either order.
        (vec![op(0, 0, 100, 8, 8), op(1, 10, 90, 5, 5)], true),
        // Called after the other returned, below it.
        (vec![op(0, 0, 100, 8, 8), op(1, 101, 200, 5, 5)], false),
        // A value twice.
        (vec![op(0, 0, 100, 4, 6), op(1, 0, 100, 6, 6)], false),
        // Two stretches with nothing in flight between them; the second below the first.
        (
            vec![
                op(0, 0, 100, 8, 9),
                op(1, 50, 90, 5, 5),
                op(0, 200, 300, 7, 7),
                op(1, 210, 290, 20, 20),
            ],
            false,
        ),
    ];
    for (ops, linearizable) in cases {
        let own = check(&ops);
        let verdict = porcupine(&ops, &file, None)?;
        ensure!(
            own.is_ok() == linearizable,
            "own checker on {ops:?}: {own:?}"
        );
        ensure!(
            matches!(verdict, Verdict::Linearizable(_)) == linearizable
                && !matches!(verdict, Verdict::Unknown(_)),
            "porcupine on {ops:?}: {verdict:?}"
        );
    }
    Ok(())
}
