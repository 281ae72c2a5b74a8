//! Linearizability of strict sequences (issue 17, issue 24: the oracle): one sidecar of a
//! strict sequence is the oracle (the holder of the Lease `<sequence>-strict-oracle`),
//! serves from a window reserved on the counter, and the others forward their strict
//! requests to it. Values must increase across all sidecars in real-time order: if a call
//! returned before another was invoked, anywhere, the later one got the larger value; and
//! no value is returned twice (docs/safety.md rule 13).
//!
//! Load ([`Load`], linearizability_support): client threads each call the 4 sidecars in
//! turn (sidecar `c`, then `c + 1`, ...), `GET /id` and every fourth time
//! `GET /ids?count=3`, in rounds of a few calls per client that end at a barrier. Every
//! reply read completely is recorded with its call and return time ([`History`]); two
//! checkers judge the history: the harness's own exact check ([`check`]) and porcupine
//! (`e2e/linearizability/`, [`porcupine`]). Every client is sequential and alternates
//! between the sidecars, so each test also checks that a client always saw a larger value
//! than its last one.
//!
//! One test per fault, each on its own namespace, operator, sequence and 4 sidecars:
//! - `rule13_kill9_of_the_oracle_*`: the oracle's process killed mid-load and restarted;
//! - `rule13_sigstop_of_the_oracle_past_its_lease_*`: the oracle stopped until another
//!   sidecar took the Lease over and served; requests are then sent to the stopped one
//!   (a zombie once resumed), which must serve nothing out of order;
//! - `rule13_kill9_of_a_forwarding_sidecar_*`;
//! - `rule13_an_api_server_down_past_the_lease_*`: kube-apiserver killed for 7 s (longer
//!   than the oracle may serve without a renewal) and started again;
//! - `rule13_a_short_sigstop_*` / `rule13_the_checkers_catch_a_take_over_without_the_wait`:
//!   the same schedule, the oracle stopped for less than it may serve after a renewal:
//!   correct sidecars wait `D(1+rho)` before a take-over, so nobody else serves meanwhile;
//!   sidecars started with `--unsafe-take-over-without-waiting` take the Lease over
//!   whenever they see it held by another, while the one taken from still serves until its
//!   next renewal fails: both checkers (and the alternating clients) must catch it.
//! - `the_checkers_catch_values_served_from_prefetched_blocks`: a plain Segment sequence
//!   (blocks per sidecar) must fail both checkers too.
//!
//! Its own test binary, one test at a time: one restarts the API server.
//! `cargo test -p kubeflake-e2e --test linearizability -- --nocapture`

mod linearizability_support;
mod operator_support;
mod sidecar_support;

use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kubeflake_crds::IdSequence;
use kubeflake_e2e::linearizability::{Op, Verdict, Violation, check, porcupine};
use kubeflake_e2e::{Cluster, TestNamespace};
use linearizability_support::*;
use operator_support::*;
use serde_json::json;
use sidecar_support::Sidecar;

/// One test at a time: one restarts the API server, others stop sidecars for seconds.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sidecars of each strict test's sequence.
const SIDECARS: usize = 4;
/// Client threads of each strict test's load.
const CLIENTS: usize = 12;
/// A call not answered within this is dropped (not recorded): a stopped sidecar slows the
/// load's rounds down by this much, it does not stop them.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Every client's pause after each round: about 1,500 operations a second in all, which
/// keeps porcupine's memory well within its bound.
const PAUSE: Duration = Duration::from_millis(20);
/// Probes sent to a stopped oracle (each on its own connection).
const ZOMBIE_PROBES: u32 = 4;
/// How long the API server test keeps kube-apiserver down.
const API_SERVER_DOWN: Duration = Duration::from_secs(7);
/// The hidden sidecar flag of the broken variant.
const UNSAFE_TAKE_OVER: &str = "--unsafe-take-over-without-waiting";

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

/// A namespace with an operator, one sequence, `n` pods and their sidecars (started with
/// `extra` flags), all ready.
async fn setup(
    cluster: &'static Cluster,
    prefix: &str,
    sequence: &str,
    segment: serde_json::Value,
    n: usize,
    extra: &[&str],
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
    let sidecars = start_sidecars(cluster, &ns.name, &pods, sequence, extra).await?;
    eprintln!(
        "{sequence}: sidecars {:?}; logs in {}",
        sidecars
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{i}: {} (uid {}, port {})", s.pod, s.uid, s.port))
            .collect::<Vec<_>>(),
        cluster.dir().display()
    );
    Ok((ns, operator, sidecars))
}

/// A strict test's world: the sequence, its 4 sidecars, and the oracle serving.
struct Strict {
    cluster: &'static Cluster,
    ns: TestNamespace,
    _operator: Operator,
    sidecars: Vec<Sidecar>,
    name: &'static str,
}

impl Strict {
    async fn start(name: &'static str, extra: &[&str]) -> Result<Strict> {
        let cluster = Cluster::shared();
        let (ns, operator, sidecars) = setup(
            cluster,
            &format!("lin-{name}"),
            name,
            json!({"strict": true}),
            SIDECARS,
            extra,
        )
        .await?;
        let strict = Strict {
            cluster,
            ns,
            _operator: operator,
            sidecars,
            name,
        };
        let (o, lease) = strict.oracle(Duration::from_secs(30), |_, _| true).await?;
        eprintln!(
            "{name}: the oracle is sidecar {o} ({}), term {}, D = {:?} s, address {:?}",
            strict.sidecars[o].pod, lease.term, lease.lease_seconds, lease.address
        );
        Ok(strict)
    }

    fn ports(&self) -> Vec<u16> {
        self.sidecars.iter().map(|s| s.port).collect()
    }

    /// The sidecar holding the oracle Lease once `accept` says yes (polled, bounded).
    async fn oracle(
        &self,
        limit: Duration,
        accept: impl Fn(usize, &Oracle) -> bool,
    ) -> Result<(usize, Oracle)> {
        wait_oracle(&self.ns, self.name, &self.sidecars, limit, accept).await
    }

    /// `kill -9` of sidecar `s`, a restart with the same pod, and the wait until it is ready.
    async fn kill_and_restart(&self, s: usize) -> Result<()> {
        let victim = &self.sidecars[s];
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
        .await
    }

    /// Stops the load; reports; judges. Fails on too little load, on a sidecar that served
    /// (almost) nothing, on fewer than 20 operations called after each of `after`, and on
    /// a client that saw a value not above its last.
    async fn finish(
        &self,
        load: Load,
        marks: &[(&str, u64)],
        after: &[(&str, u64)],
    ) -> Result<Finished> {
        let (ops, stats) = tokio::task::spawn_blocking(move || load.finish()).await?;
        let mut all_marks = marks.to_vec();
        all_marks.extend_from_slice(after);
        let (served, alternating) = report(self.name, &ops, &stats, SIDECARS, &all_marks);
        let (own, verdict) = judge(self.cluster, self.name, &ops)?;
        ensure!(
            ops.len() >= 300,
            "too few operations to say anything: {} (want 300)",
            ops.len()
        );
        ensure!(
            served.iter().all(|n| *n >= 20),
            "every sidecar served: {served:?}"
        );
        for (what, at) in after {
            let n = ops.iter().filter(|o| o.call > *at).count();
            ensure!(
                n >= 20,
                "the load went on after {what}: {n} operations called after it"
            );
        }
        let answers = stats
            .iter()
            .flat_map(|c| c.answers.iter().copied())
            .collect();
        Ok(Finished {
            answers,
            own,
            verdict,
            alternating,
        })
    }
}

/// A strict test's load, judged.
struct Finished {
    /// The load's answers with values (probes not included).
    answers: Vec<Answer>,
    own: Result<(), Violation>,
    verdict: Verdict,
    /// Every client saw each value larger than its last one: how many times it switched
    /// sidecars ([`alternating_clients_saw_increasing_values`]).
    alternating: Result<usize>,
}

impl Finished {
    fn expect_linearizable(self) -> Result<()> {
        expect_linearizable(self.own, self.verdict, self.alternating)
    }
}

/// The lowest value that a sidecar other than `zombie` returned for a call made after
/// `from` and answered before `to`: while `zombie` was stopped, such values come from an
/// oracle that took over.
fn lowest_served_meanwhile(answers: &[Answer], zombie: usize, from: u64, to: u64) -> Option<u64> {
    answers
        .iter()
        .filter(|a| a.sidecar != zombie && a.call > from && a.ret < to)
        .map(|a| a.lo)
        .min()
}

/// Reports what the resumed oracle answered: the probes sent to it while it was stopped,
/// and the load's calls it answered in the second after it was resumed. A value below
/// `floor` (the lowest another oracle served during the stop) came from its old window.
/// Returns how many of the probes it answered with a value from its old window.
fn report_zombie(
    name: &str,
    probes: &[Probed],
    load: &[Answer],
    zombie: usize,
    resumed: u64,
    floor: Option<u64>,
) -> usize {
    let old = |a: &Answer| floor.is_some_and(|f| a.lo < f);
    let values: Vec<Answer> = probes
        .iter()
        .filter_map(|p| match p {
            Probed::Value(a) => Some(*a),
            _ => None,
        })
        .collect();
    let others: Vec<&Probed> = probes
        .iter()
        .filter(|p| !matches!(p, Probed::Value(_)))
        .collect();
    let stale_probes = values.iter().filter(|a| old(a)).count();
    let soon: Vec<&Answer> = load
        .iter()
        .filter(|a| a.sidecar == zombie && a.ret > resumed && a.call < resumed + 1_000_000_000)
        .collect();
    let stale_load = soon.iter().filter(|a| old(a)).count();
    eprintln!(
        "{name}: the resumed oracle (sidecar {zombie}) answered {} of the {} requests sent to \
         it while it was stopped with a value ({:?}), {stale_probes} of them from its old \
         window (below {floor:?}, the lowest value another oracle served during the stop); \
         the others: {others:?}. In the second after SIGCONT it answered {} load calls with \
         a value, {stale_load} of them from its old window",
        values.len(),
        probes.len(),
        values.iter().map(|a| a.lo).collect::<Vec<_>>(),
        soon.len()
    );
    stale_probes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_kill9_of_the_oracle_mid_load_then_restart_is_linearizable() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let run = Strict::start("oracle-kill", &[]).await?;
    let load = Load::start(
        &run.ports(),
        CLIENTS,
        Duration::from_secs(60),
        READ_TIMEOUT,
        PAUSE,
    );
    let history = load.history.clone();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let (o, before) = run.oracle(Duration::from_secs(10), |_, _| true).await?;
    eprintln!(
        "{}: kill -9 of the oracle, sidecar {o} ({}), term {}, and a restart",
        run.name, run.sidecars[o].pod, before.term
    );
    let killed = history.now();
    run.kill_and_restart(o).await?;
    let restarted = history.now();
    let (n, after) = run
        .oracle(Duration::from_secs(30), |_, l| l.term > before.term)
        .await?;
    let taken = history.now();
    eprintln!(
        "{}: sidecar {n} ({}) holds the oracle Lease in term {}, {:.1} s after the kill",
        run.name,
        run.sidecars[n].pod,
        after.term,
        secs(taken - killed)
    );
    // Restarted with its pod's state dir, whose lock the killed process no longer holds and
    // where it recorded its term, the oracle took its own Lease back at once; another
    // sidecar could take it only once it lapsed, D(1+rho) = 5.25 s after the kill.
    ensure!(
        n == o,
        "the oracle's sidecar, restarted in its pod, did not take its own Lease back at once \
         (docs/safety.md rule 13, a restart in the same pod): sidecar {n} took it after {:.1} s",
        secs(taken - killed)
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    let done = run
        .finish(
            load,
            &[("killed", killed), ("restarted", restarted)],
            &[("the new term", taken)],
        )
        .await?;
    done.expect_linearizable()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_sigstop_of_the_oracle_past_its_lease_the_resumed_zombie_serves_nothing_out_of_order()
-> Result<()> {
    let _serial = SERIAL.lock().await;
    let run = Strict::start("oracle-stop", &[]).await?;
    let ports = run.ports();
    let load = Load::start(
        &ports,
        CLIENTS,
        Duration::from_secs(80),
        READ_TIMEOUT,
        PAUSE,
    );
    let history = load.history.clone();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let (o, before) = run.oracle(Duration::from_secs(10), |_, _| true).await?;
    eprintln!(
        "{}: SIGSTOP of the oracle, sidecar {o} ({}), term {}, until another takes over",
        run.name, run.sidecars[o].pod, before.term
    );
    let stopped_at = history.now();
    let stopped = Stopped::stop(&run.sidecars[o]);
    // D(1+rho) = 5.25 s with D = 5 s; the bound is far above.
    let (n, after) = run.oracle(Duration::from_secs(30), |i, _| i != o).await?;
    let taken = history.now();
    eprintln!(
        "{}: sidecar {n} ({}) took the oracle over in term {}, {:.1} s after the stop",
        run.name,
        run.sidecars[n].pod,
        after.term,
        secs(taken - stopped_at)
    );
    // A value from the new oracle, returned to a client...
    let mut first = None;
    for attempt in 0..50u32 {
        let p = probe(&history, PROBE_CLIENTS + attempt, n, ports[n]);
        match tokio::task::spawn_blocking(move || join(p)).await? {
            Probed::Value(a) => {
                first = Some(a);
                break;
            }
            other => {
                eprintln!("{}: the new oracle answered {other:?}", run.name);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let Some(first) = first else {
        bail!("the new oracle (sidecar {n}) served no value in 50 attempts");
    };
    // ... then requests to the stopped oracle, which it reads only once resumed: called
    // after that value returned, so any value from its old window breaks real-time order.
    let zombie_probes: Vec<_> = (0..ZOMBIE_PROBES)
        .map(|i| probe(&history, PROBE_CLIENTS + 100 + i, o, ports[o]))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = history.now();
    stopped.resume();
    eprintln!(
        "{}: SIGCONT of sidecar {o} after {:.1} s; the new oracle had served {} to a request \
         before {ZOMBIE_PROBES} requests were sent to the stopped one",
        run.name,
        secs(resumed - stopped_at),
        first.lo
    );
    let probed = tokio::task::spawn_blocking(move || {
        zombie_probes.into_iter().map(join).collect::<Vec<_>>()
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let done = run
        .finish(
            load,
            &[
                ("stopped", stopped_at),
                ("taken over", taken),
                ("resumed", resumed),
            ],
            &[("the resume", resumed)],
        )
        .await?;
    let mut meanwhile = done.answers.clone();
    meanwhile.push(first);
    let floor = lowest_served_meanwhile(&meanwhile, o, stopped_at, resumed);
    report_zombie(run.name, &probed, &done.answers, o, resumed, floor);
    // The checkers are the judges: a value from the old window, answered to a request sent
    // after the new oracle's value returned, is a real-time order violation.
    done.expect_linearizable()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_kill9_of_a_forwarding_sidecar_mid_load_then_restart_is_linearizable() -> Result<()>
{
    let _serial = SERIAL.lock().await;
    let run = Strict::start("forwarder-kill", &[]).await?;
    let load = Load::start(
        &run.ports(),
        CLIENTS,
        Duration::from_secs(60),
        READ_TIMEOUT,
        PAUSE,
    );
    let history = load.history.clone();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let (o, before) = run.oracle(Duration::from_secs(10), |_, _| true).await?;
    let f = (o + 1) % SIDECARS;
    eprintln!(
        "{}: kill -9 of sidecar {f} ({}), which forwards to the oracle, sidecar {o} (term {}), \
         and a restart",
        run.name, run.sidecars[f].pod, before.term
    );
    let killed = history.now();
    run.kill_and_restart(f).await?;
    let restarted = history.now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = oracle(&run.ns, run.name).await?;
    eprintln!(
        "{}: the oracle Lease after the forwarder's restart: {after:?}",
        run.name
    );

    let done = run
        .finish(
            load,
            &[("killed", killed)],
            &[("the restarted sidecar ready", restarted)],
        )
        .await?;
    done.expect_linearizable()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_an_api_server_down_past_the_lease_mid_load_is_linearizable() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let run = Strict::start("apiserver", &[]).await?;
    let load = Load::start(
        &run.ports(),
        CLIENTS,
        Duration::from_secs(60),
        READ_TIMEOUT,
        PAUSE,
    );
    let history = load.history.clone();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let before = oracle(&run.ns, run.name).await?;
    eprintln!(
        "{}: kill -9 of kube-apiserver for {API_SERVER_DOWN:?}; the oracle Lease: {before:?}",
        run.name
    );
    // Down for longer than the oracle may serve after its last renewal (D(1-2rho) = 4.5 s)
    // and than the others wait before a take-over (D(1+rho) = 5.25 s): the oracle stops
    // serving, and when the API server is back its renewal and the others' take-over race.
    let down = history.now();
    run.cluster.kill_apiserver();
    tokio::time::sleep(API_SERVER_DOWN).await;
    run.cluster.start_apiserver().await?;
    let back = history.now();
    eprintln!(
        "{}: kube-apiserver back after {:.1} s",
        run.name,
        secs(back - down)
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = oracle(&run.ns, run.name).await?;
    eprintln!("{}: the oracle Lease 10 s later: {after:?}", run.name);

    let done = run
        .finish(
            load,
            &[("API server killed", down)],
            &[("the API server back", back)],
        )
        .await?;
    done.expect_linearizable()
}

/// What [`short_stop`] saw.
struct ShortStop {
    done: Finished,
    /// A sidecar other than the stopped one held the oracle Lease during the stop.
    taken_over: bool,
    /// Probes sent to the stopped oracle answered from its old window.
    stale: usize,
}

/// SIGSTOP of the oracle for less than it may serve after its last renewal (`D(1-2rho)` =
/// 4.5 s; here at most about 2.3 s), so that it resumes believing it still holds the
/// Lease. While it is stopped: if another sidecar takes the Lease over (looked for during
/// 1.2 s: correct sidecars wait `D(1+rho)` = 5.25 s, so none does), a request to that
/// one, else to the next sidecar (a forwarder, which waits for the stopped oracle); once it
/// returned (or 0.8 s passed), [`ZOMBIE_PROBES`] requests to the stopped oracle; 0.3 s
/// later, SIGCONT. Correct sidecars: nobody else served during the stop, and the resumed
/// oracle rightly serves on. With `--unsafe-take-over-without-waiting`, a sidecar takes
/// the Lease over whenever it sees it held by another (every poll, `D/12`), so oracles
/// overlap all the time, during the stop too, and the one taken from serves on until its
/// next renewal fails.
async fn short_stop(run: &Strict) -> Result<ShortStop> {
    let ports = run.ports();
    let load = Load::start(
        &ports,
        CLIENTS,
        Duration::from_secs(60),
        READ_TIMEOUT,
        PAUSE,
    );
    let history = load.history.clone();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let (o, before) = run.oracle(Duration::from_secs(10), |_, _| true).await?;
    eprintln!(
        "{}: a short SIGSTOP of the oracle, sidecar {o} ({}), term {}",
        run.name, run.sidecars[o].pod, before.term
    );
    let stopped_at = history.now();
    let stopped = Stopped::stop(&run.sidecars[o]);
    let took = run
        .oracle(Duration::from_millis(1200), |i, _| i != o)
        .await
        .ok();
    let taken_over = took.is_some();
    let x = took.as_ref().map_or((o + 1) % SIDECARS, |(i, _)| *i);
    eprintln!(
        "{}: {:.2} s after the stop: {}; a request to sidecar {x}",
        run.name,
        secs(history.now() - stopped_at),
        match &took {
            Some((i, l)) => format!("sidecar {i} took the oracle Lease over, term {}", l.term),
            None => "nobody took the oracle Lease over".to_string(),
        }
    );
    let first = probe(&history, PROBE_CLIENTS, x, ports[x]);
    let bound = Instant::now() + Duration::from_millis(800);
    while !first.is_finished() && Instant::now() < bound {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first_done = first.is_finished();
    let zombie_probes: Vec<_> = (0..ZOMBIE_PROBES)
        .map(|i| probe(&history, PROBE_CLIENTS + 100 + i, o, ports[o]))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = history.now();
    stopped.resume();
    let (first, probed) = tokio::task::spawn_blocking(move || {
        (
            join(first),
            zombie_probes.into_iter().map(join).collect::<Vec<_>>(),
        )
    })
    .await?;
    eprintln!(
        "{}: SIGCONT of sidecar {o} after {:.2} s; the request to sidecar {x} had {} before \
         the requests to the stopped one were sent: {first:?}",
        run.name,
        secs(resumed - stopped_at),
        if first_done {
            "returned"
        } else {
            "not returned"
        },
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    let done = run
        .finish(
            load,
            &[("stopped", stopped_at), ("resumed", resumed)],
            &[("the resume", resumed)],
        )
        .await?;
    let mut meanwhile = done.answers.clone();
    if let Probed::Value(a) = first {
        meanwhile.push(a);
    }
    let floor = lowest_served_meanwhile(&meanwhile, o, stopped_at, resumed);
    let stale = report_zombie(run.name, &probed, &done.answers, o, resumed, floor);
    Ok(ShortStop {
        done,
        taken_over,
        stale,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_short_sigstop_of_the_oracle_within_its_lease_is_linearizable() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let run = Strict::start("short-stop", &[]).await?;
    let seen = short_stop(&run).await?;
    ensure!(
        !seen.taken_over,
        "another sidecar took the oracle Lease over within 1.2 s of the stop: correct sidecars \
         wait D(1+rho) (5.25 s with D = 5 s)"
    );
    seen.done.expect_linearizable()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_the_checkers_catch_a_take_over_without_the_wait() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let run = Strict::start("no-wait", &[UNSAFE_TAKE_OVER]).await?;
    let seen = short_stop(&run).await?;
    let lease = oracle(&run.ns, run.name).await?;
    eprintln!(
        "{}: another sidecar took the Lease over during the stop: {}; requests to the stopped \
         oracle answered from its old window: {}; the oracle Lease at the end: {lease:?} (the \
         term counts take-overs)",
        run.name, seen.taken_over, seen.stale
    );
    ensure!(
        matches!(
            seen.done.own,
            Err(Violation::RealTimeOrder { .. } | Violation::Overlap { .. })
        ),
        "the own checker did not catch the take-over without the wait: {:?}",
        seen.done.own
    );
    match seen.done.verdict {
        Verdict::NotLinearizable(_) => Ok(()),
        other => bail!("porcupine did not catch the take-over without the wait: {other:?}"),
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
        &[],
    )
    .await?;
    let ports: Vec<u16> = sidecars.iter().map(|s| s.port).collect();
    let load = Load::start(
        &ports,
        CLIENTS,
        Duration::from_secs(20),
        READ_TIMEOUT,
        Duration::ZERO,
    );
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
