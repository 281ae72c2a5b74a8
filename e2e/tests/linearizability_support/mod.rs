//! The load, the probes, the faults' bookkeeping and the reports of the linearizability
//! tests (linearizability.rs).
//!
//! - [`Load`]: client threads, each sequential, calling the sidecars in turn (sidecar `c`,
//!   then `c + 1`, ...), in rounds that end at a barrier (instants with nothing in flight,
//!   where porcupine cuts the history) and an optional pause (an oracle serves from
//!   memory: unpaced, 12 clients record 5,000-10,000 operations a second, and porcupine's
//!   memory grows with the whole history: 160,000 operations went past its 2 GiB bound,
//!   though no stretch between barriers held more than 36). A call that does not answer within the load's read
//!   timeout is dropped unrecorded (nobody saw its value), so a stopped sidecar slows the
//!   rounds down without stopping them. Every answer is also kept with the sidecar that
//!   gave it ([`Answer`]).
//! - [`probe`]: one call on its own connection, with a long timeout, recorded into the
//!   same history: how the tests send requests to a stopped oracle that it reads only when
//!   it is resumed.
//! - [`report`]: values served, refused requests, the longest stretch with no value
//!   returned, and [`alternating_clients_saw_increasing_values`].
//! - the oracle Lease as the tests read it ([`oracle`], [`wait_oracle`]) and sidecars
//!   started with extra flags ([`start_sidecars`]).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kubeflake_crds::strict_oracle::{ADDRESS_ANNOTATION, oracle_name};
use kubeflake_e2e::linearizability::{History, Op, Verdict, Violation, check, porcupine};
use kubeflake_e2e::process::Process;
use kubeflake_e2e::{Cluster, TestNamespace};

use crate::operator_support::eventually;
use crate::sidecar_support::{Sidecar, request};

/// Calls per client between two barriers.
pub const CALLS_PER_ROUND: usize = 3;
/// A hard bound on rounds, whatever the clock says.
pub const MAX_ROUNDS: usize = 100_000;
/// Client numbers of probes start here (load clients are numbered from 0).
pub const PROBE_CLIENTS: u32 = 1_000;

/// One answer with values, and the sidecar that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub sidecar: usize,
    pub client: u32,
    /// Nanoseconds on the history's clock, taken right before the call's own stamp and
    /// right after the reply's (within microseconds of the recorded operation's).
    pub call: u64,
    pub ret: u64,
    pub lo: u64,
    pub hi: u64,
}

/// What one client thread saw.
#[derive(Debug, Default, Clone)]
pub struct ClientStats {
    /// Replies with values, per sidecar.
    pub served: Vec<u64>,
    /// Non-200 answers, per sidecar (503 while no oracle serves or the API server is down).
    pub refused: Vec<u64>,
    /// Connections refused or broken, and calls not answered within the read timeout.
    pub broken: u64,
    /// Every answer with values, in the order of the calls (the client is sequential).
    pub answers: Vec<Answer>,
}

/// Client threads calling the sidecars in turn, recording into one history.
pub struct Load {
    pub history: Arc<History>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<ClientStats>>,
}

impl Load {
    /// `clients` threads over the sidecars on `ports`, for at most `limit`; a call not
    /// answered within `read_timeout` is dropped; every client pauses for `pause` after
    /// each round.
    pub fn start(
        ports: &[u16],
        clients: usize,
        limit: Duration,
        read_timeout: Duration,
        pause: Duration,
    ) -> Load {
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
                    let done = || stop.load(Ordering::Relaxed) || Instant::now() >= deadline;
                    let timing = (read_timeout, pause);
                    client(c, &ports, timing, &history, &barrier, &halt, done)
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
    pub fn finish(self) -> (Vec<Op>, Vec<ClientStats>) {
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
/// barrier and a pause, until `done` (decided by one thread per round, so all stop
/// together). `timing`: the read timeout and the pause.
fn client(
    c: usize,
    ports: &[u16],
    (read_timeout, pause): (Duration, Duration),
    history: &History,
    barrier: &Barrier,
    halt: &AtomicBool,
    done: impl Fn() -> bool,
) -> ClientStats {
    let mut stats = ClientStats {
        served: vec![0; ports.len()],
        refused: vec![0; ports.len()],
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
                conns[s] = connect(ports[s], read_timeout);
            }
            let Some(conn) = conns[s].as_mut() else {
                stats.broken += 1;
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let called = history.now();
            let call = history.call(c as u32);
            match request(conn, target) {
                Some((200, body)) => {
                    let values: Vec<u64> = body.lines().filter_map(|l| l.parse().ok()).collect();
                    history.returned(call, &values);
                    stats.served[s] += 1;
                    if let (Some(&lo), Some(&hi)) = (values.first(), values.last()) {
                        stats.answers.push(Answer {
                            sidecar: s,
                            client: c as u32,
                            call: called,
                            ret: history.now(),
                            lo,
                            hi,
                        });
                    }
                }
                // A refused, broken or timed-out call returned no value: nobody saw one,
                // so it is not recorded (a value it may have taken is a gap, never seen).
                Some(_) => {
                    stats.refused[s] += 1;
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
        std::thread::sleep(pause);
    }
    stats
}

fn connect(port: u16, read_timeout: Duration) -> Option<BufReader<TcpStream>> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(read_timeout)).ok()?;
    stream.set_nodelay(true).ok()?;
    Some(BufReader::new(stream))
}

/// What one probe got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probed {
    Value(Answer),
    /// The status of a refusal.
    Refused(u16),
    /// No connection, or no answer within 30 s.
    Broken,
}

/// One `GET /id` to `sidecar` (listening on `port`) from a thread of its own, as client
/// `client` of `history`; the call is stamped after the thread started (so after
/// everything the caller saw returned) and right before the request is sent.
pub fn probe(
    history: &Arc<History>,
    client: u32,
    sidecar: usize,
    port: u16,
) -> std::thread::JoinHandle<Probed> {
    let history = history.clone();
    std::thread::spawn(move || {
        let Some(mut conn) = connect(port, Duration::from_secs(30)) else {
            return Probed::Broken;
        };
        let called = history.now();
        let call = history.call(client);
        match request(&mut conn, "/id") {
            Some((200, body)) => {
                let values: Vec<u64> = body.lines().filter_map(|l| l.parse().ok()).collect();
                history.returned(call, &values);
                match (values.first(), values.last()) {
                    (Some(&lo), Some(&hi)) => Probed::Value(Answer {
                        sidecar,
                        client,
                        call: called,
                        ret: history.now(),
                        lo,
                        hi,
                    }),
                    _ => Probed::Refused(200),
                }
            }
            Some((status, _)) => Probed::Refused(status),
            None => Probed::Broken,
        }
    })
}

/// Waits for a probe's answer (blocking: call from `spawn_blocking`).
pub fn join(probe: std::thread::JoinHandle<Probed>) -> Probed {
    probe.join().unwrap_or(Probed::Broken)
}

/// Both checkers' verdicts on one history; the history file is kept in the cluster's
/// directory (`KUBEFLAKE_E2E_KEEP_DIR=1` keeps it after the run).
pub fn judge(
    cluster: &Cluster,
    name: &str,
    ops: &[Op],
) -> Result<(Result<(), Violation>, Verdict)> {
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

/// Fails unless both checkers found the history linearizable and every client saw each
/// value larger than its last one.
pub fn expect_linearizable(
    own: Result<(), Violation>,
    verdict: Verdict,
    alternating: Result<usize>,
) -> Result<()> {
    if let Err(e) = own {
        bail!("the own checker: {e}");
    }
    if let Verdict::Linearizable(_) = verdict {
    } else {
        bail!("porcupine: {verdict:?}");
    }
    alternating.map(|_| ())
}

pub fn served_per_sidecar(stats: &[ClientStats], sidecars: usize) -> Vec<u64> {
    (0..sidecars)
        .map(|s| stats.iter().map(|c| c.served[s]).sum())
        .collect()
}

/// A sequential client alternating between the sidecars always sees a larger value than
/// the last one it saw. Returns how many consecutive answers came from two different
/// sidecars; fails on the first answer not above its client's previous one.
pub fn alternating_clients_saw_increasing_values(stats: &[ClientStats]) -> Result<usize> {
    let mut switches = 0;
    for (c, client) in stats.iter().enumerate() {
        for w in client.answers.windows(2) {
            let (before, after) = (w[0], w[1]);
            ensure!(
                after.lo > before.hi,
                "client {c} got {}..={} from sidecar {} after {}..={} from sidecar {}: not larger \
                 than the last value it saw",
                after.lo,
                after.hi,
                after.sidecar,
                before.lo,
                before.hi,
                before.sidecar
            );
            switches += usize::from(after.sidecar != before.sidecar);
        }
    }
    Ok(switches)
}

/// Seconds on the history's clock, for reports.
pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The longest stretch in which no call returned a value: its length, start and end (ns
/// on the history's clock).
pub fn longest_gap(ops: &[Op]) -> (u64, u64, u64) {
    let mut returns: Vec<u64> = ops.iter().map(|o| o.ret).collect();
    returns.sort_unstable();
    returns
        .windows(2)
        .map(|w| (w[1] - w[0], w[0], w[1]))
        .max()
        .unwrap_or((0, 0, 0))
}

/// Prints what the load saw: operations, values, per sidecar served and refused, broken
/// calls, the longest gap and the alternating clients' check; returns the values served
/// per sidecar and that check. `marks` are the faults' moments on the history's clock.
pub fn report(
    name: &str,
    ops: &[Op],
    stats: &[ClientStats],
    sidecars: usize,
    marks: &[(&str, u64)],
) -> (Vec<u64>, Result<usize>) {
    let served = served_per_sidecar(stats, sidecars);
    let refused: Vec<u64> = (0..sidecars)
        .map(|s| stats.iter().map(|c| c.refused[s]).sum())
        .collect();
    let broken: u64 = stats.iter().map(|s| s.broken).sum();
    let values: u64 = ops.iter().map(|o| o.hi.saturating_sub(o.lo) + 1).sum();
    let (gap, from, to) = longest_gap(ops);
    let marks: Vec<String> = marks
        .iter()
        .map(|(what, at)| format!("{what} at {:.2} s", secs(*at)))
        .collect();
    eprintln!(
        "{name}: {} operations recorded, {values} values served; answers with values per \
         sidecar {served:?}; refused (non-200) per sidecar {refused:?}; {broken} calls broken, \
         refused a connection or unanswered within the read timeout (none recorded)\n\
         {name}: longest stretch with no value returned: {:.2} s (from {:.2} s to {:.2} s); \
         {}",
        ops.len(),
        secs(gap),
        secs(from),
        secs(to),
        marks.join(", ")
    );
    let alternating = alternating_clients_saw_increasing_values(stats);
    match &alternating {
        Ok(switches) => eprintln!(
            "{name}: every client saw each value larger than its last one, across {switches} \
             switches from one sidecar to another"
        ),
        Err(e) => eprintln!("{name}: alternating clients: {e}"),
    }
    (served, alternating)
}

/// The oracle Lease as read by the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oracle {
    /// The holder's pod UID.
    pub holder: Option<String>,
    /// Take-overs so far.
    pub term: i32,
    pub lease_seconds: Option<i32>,
    pub address: Option<String>,
}

impl Oracle {
    /// The index of the sidecar whose pod holds the Lease.
    pub fn sidecar(&self, sidecars: &[Sidecar]) -> Option<usize> {
        let holder = self.holder.as_deref()?;
        sidecars.iter().position(|s| s.uid == holder)
    }
}

/// The oracle Lease of `sequence`, if it exists.
pub async fn oracle(ns: &TestNamespace, sequence: &str) -> Result<Option<Oracle>> {
    let api: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let Some(lease) = api.get_opt(&oracle_name(sequence)).await? else {
        return Ok(None);
    };
    let spec = lease.spec.unwrap_or_default();
    Ok(Some(Oracle {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        term: spec.lease_transitions.unwrap_or(0),
        lease_seconds: spec.lease_duration_seconds,
        address: lease
            .metadata
            .annotations
            .and_then(|a| a.get(ADDRESS_ANNOTATION).cloned()),
    }))
}

/// Polls the oracle Lease every 50 ms until one of `sidecars` holds it and `accept`
/// says yes; returns the holder's index and the Lease. Bounded by `limit`.
pub async fn wait_oracle(
    ns: &TestNamespace,
    sequence: &str,
    sidecars: &[Sidecar],
    limit: Duration,
    accept: impl Fn(usize, &Oracle) -> bool,
) -> Result<(usize, Oracle)> {
    let deadline = Instant::now() + limit;
    loop {
        let last = oracle(ns, sequence).await;
        if let Ok(Some(o)) = &last
            && let Some(i) = o.sidecar(sidecars)
            && accept(i, o)
        {
            return Ok((i, o.clone()));
        }
        if Instant::now() > deadline {
            bail!(
                "the oracle Lease {} did not name the wanted sidecar within {limit:?}; last \
                 read: {last:?}",
                oracle_name(sequence)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Like [`Sidecar::start_all_ready`], with `extra` flags on every sidecar's command line
/// (and its restarts). `Sidecar::start` runs its process at once, so each sidecar is
/// first started for a sequence that does not exist (it can touch nothing of the test's
/// sequence), killed, and started again from the same command line with the real
/// sequence and `extra`.
pub async fn start_sidecars(
    cluster: &Cluster,
    ns: &str,
    pods: &[Pod],
    sequence: &str,
    extra: &[&str],
) -> Result<Vec<Sidecar>> {
    if extra.is_empty() {
        return Sidecar::start_all_ready(cluster, ns, pods, sequence).await;
    }
    const NONE_SUCH: &str = "kubeflake-e2e-no-such-sequence";
    let mut sidecars = Vec::new();
    for pod in pods {
        let mut sidecar = Sidecar::start(cluster, ns, pod, NONE_SUCH, false)?;
        sidecar.process.kill();
        let mut spec = sidecar.process.spec().clone();
        let at = spec
            .args
            .iter()
            .position(|a| a == "--sequence")
            .context("the sidecar's command line has no --sequence")?;
        spec.args[at + 1] = OsString::from(sequence);
        spec.args.extend(extra.iter().map(OsString::from));
        sidecar.process = Process::start(spec)?;
        sidecars.push(sidecar);
    }
    eventually(
        Duration::from_secs(60),
        &format!("every sidecar of {sequence} ready (with {extra:?})"),
        || async {
            for s in &sidecars {
                s.process.check_running()?;
            }
            Ok(sidecars.iter().all(Sidecar::ready).then_some(()))
        },
    )
    .await?;
    Ok(sidecars)
}

/// SIGSTOP of a sidecar; SIGCONT when [`Stopped::resume`] is called or when dropped (a
/// failed test leaves no stopped process behind).
pub struct Stopped<'a> {
    sidecar: &'a Sidecar,
    resumed: bool,
}

impl<'a> Stopped<'a> {
    pub fn stop(sidecar: &'a Sidecar) -> Stopped<'a> {
        sidecar.signal(libc::SIGSTOP);
        Stopped {
            sidecar,
            resumed: false,
        }
    }

    pub fn resume(mut self) {
        self.sidecar.signal(libc::SIGCONT);
        self.resumed = true;
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if !self.resumed {
            self.sidecar.signal(libc::SIGCONT);
        }
    }
}

/// Values served per sidecar in `answers`, as `{sidecar: count}`, for reports.
pub fn by_sidecar(answers: &[Answer]) -> BTreeMap<usize, usize> {
    let mut counts = BTreeMap::new();
    for a in answers {
        *counts.entry(a.sidecar).or_insert(0) += 1;
    }
    counts
}
