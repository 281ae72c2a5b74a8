//! The oracle's rules, with the Lease and the counter in memory and forwarding over real
//! loopback TCP. Lease duration 1 s: take-over after 1.05 s, serving for 0.9 s after a
//! renewal is sent.

use std::path::Path;
use std::sync::atomic::Ordering;

use super::store::fake::FakeOracleStore;
use super::*;
use crate::metrics::Metrics;
use crate::peer_token::PeerAuth;
use crate::peer_token::test_tokens::{self, Signer};
use crate::segment::claim::fake::FakeStore;
use kubeflake_crds::strict_oracle::MAX_FORWARD_COUNT;
use kubeflake_crds::strict_oracle::wire::{self, Hello, Reply, Welcome};

pub(super) struct Group {
    pub(super) counter: Arc<FakeStore>,
    pub(super) leases: Arc<FakeOracleStore>,
    /// The API server's token key: every sidecar's token is signed with it.
    pub(super) api_server: Arc<Signer>,
}

/// The pods the operator lists as claimants in every test of this module.
pub(super) const CLAIMANTS: [&str; 3] = ["uid-a", "uid-b", "uid-c"];

impl Group {
    pub(super) fn new() -> Group {
        let counter = FakeStore::starting_at(1);
        counter
            .format
            .store(COUNTER_FORMAT_ORACLE, Ordering::SeqCst);
        let leases = FakeOracleStore::new(1);
        leases.set_claimants(&CLAIMANTS);
        Group {
            counter: Arc::new(counter),
            leases: Arc::new(leases),
            api_server: Arc::new(Signer::es256("api-server-key")),
        }
    }

    /// What the sidecar of pod `uid` shows and checks.
    pub(super) fn peers(&self, uid: &str) -> Arc<PeerAuth> {
        test_tokens::peer_auth(&self.api_server, uid)
    }

    /// A forwarder of pod `uid`, with its token.
    pub(super) fn forwarder(&self, uid: &str) -> Forwarder {
        Forwarder::new("s", self.peers(uid))
    }

    /// A hello of pod `uid` for sequence `s`.
    pub(super) fn hello(&self, uid: &str) -> Hello {
        Hello {
            sequence: "s".into(),
            token: test_tokens::oracle_token(&self.api_server, uid),
        }
    }

    pub(super) async fn sidecar(&self, uid: &str, broken: bool) -> Arc<Oracle> {
        self.start(uid, broken, None).await
    }

    /// A sidecar of the pod whose state dir is `pod` (an earlier process may have used it).
    async fn sidecar_in(&self, uid: &str, pod: &Path) -> Arc<Oracle> {
        self.start(uid, false, Some(pod.to_path_buf())).await
    }

    async fn start(&self, uid: &str, broken: bool, state_dir: Option<PathBuf>) -> Arc<Oracle> {
        Oracle::start(
            self.counter.clone(),
            self.leases.clone(),
            OracleConfig {
                sequence: "s".into(),
                uid: uid.into(),
                listen: Some("127.0.0.1:0".parse().unwrap()),
                wait_limit: Duration::from_secs(3),
                take_over_without_waiting: broken,
                state_dir,
            },
            Metrics::new().segment.clone(),
            self.peers(uid),
        )
        .await
    }
}

/// Waits (bounded) until `pred` holds.
pub(super) async fn until(what: &str, mut pred: impl FnMut() -> bool) {
    for _ in 0..300 {
        if pred() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not reached within 6 s: {what}");
}

pub(super) async fn take(o: &Arc<Oracle>) -> u64 {
    for _ in 0..200 {
        if let Ok(v) = o.take_one_from(0).await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no value within about 4 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_one_oracle_serves_and_a_client_alternating_sidecars_always_sees_larger_values() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    let b = g.sidecar("uid-b", false).await;
    until("an oracle is elected and the other follows", || {
        a.serving_now() && b.serving_now()
    })
    .await;
    assert!(a.is_oracle() != b.is_oracle(), "exactly one oracle");
    let mut last = 0;
    for i in 0..400 {
        let v = take(if i % 2 == 0 { &a } else { &b }).await;
        assert!(v > last, "value {v} after {last} (request {i})");
        last = v;
    }
    assert!(
        g.counter.next() > last,
        "every value served is below the counter's next: reserved before served"
    );
    assert!(
        g.counter.writes.load(Ordering::SeqCst) < 5,
        "values come from a window, not one write each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_graceful_stop_hands_over_at_once_and_the_next_oracle_starts_above_the_window() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let b = g.sidecar("uid-b", false).await;
    until("b follows", || b.serving_now()).await;
    let before = take(&b).await;
    a.stop().await;
    assert_eq!(g.leases.holder(), None, "released on stop");
    until("b took over", || b.is_oracle()).await;
    let after = take(&b).await;
    assert!(after > before, "{after} after {before}");
    assert!(
        after >= WINDOW,
        "the new term starts above a's whole window"
    );
}

/// docs/strict.md "Watching it": `kubeflake_strict_oracle` is 1 on the oracle only, and
/// `kubeflake_strict_oracle_terms_total` counts the terms each sidecar began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oracle_gauge_is_1_on_the_oracle_only_and_each_take_over_counts_a_term() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let b = g.sidecar("uid-b", false).await;
    until("b follows", || b.serving_now()).await;
    fn gauge_and_terms(o: &Oracle) -> (i64, u64) {
        (o.metrics.strict_oracle.get(), o.metrics.strict_terms.get())
    }
    assert_eq!(gauge_and_terms(&a), (1, 1), "a, the oracle");
    assert_eq!(gauge_and_terms(&b), (0, 0), "b, a follower");
    a.stop().await;
    until("b took over", || b.is_oracle()).await;
    assert_eq!(gauge_and_terms(&a), (0, 1), "a, stopped");
    assert_eq!(gauge_and_terms(&b), (1, 1), "b, the oracle now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_an_oracle_whose_renewals_fail_stops_serving_before_anyone_may_take_over() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    take(&a).await;
    g.leases.set_down(true);
    until("a stops serving", || !a.serving_now()).await;
    let err = a.take_one_from(0).await.unwrap_err();
    assert!(err.to_string().contains("not renewed"), "{err}");
    assert!(a.is_oracle(), "still the holder: it only stopped serving");
    assert!(
        a.check_ready().is_ok(),
        "still ready: a hand-over or an outage does not take the pod out of its Services"
    );
    g.leases.set_down(false);
    until("a renews and serves again", || a.serving_now()).await;
    take(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_silent_oracle_is_taken_over_only_after_its_lease_lapsed() {
    silent_oracle_taken_over(Watch::Live).await;
}

/// Whether the watch of the oracle Lease works in [`silent_oracle_taken_over`].
#[derive(PartialEq)]
enum Watch {
    Live,
    Broken,
}

/// The oracle `a` goes silent (its tasks stop without releasing: a kill -9 as the others
/// see it), then `b` starts: `b` takes over, not before `a`'s Lease could have lapsed, and
/// serves above `a`'s values. Returns how many reads of the Lease `b` made.
async fn silent_oracle_taken_over(watch: Watch) -> u64 {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let last_a = take(&a).await;
    if watch == Watch::Broken {
        g.leases.break_watch();
    }
    silence(&a);
    let silent = Instant::now();
    let reads = g.leases.reads.load(Ordering::SeqCst);
    let b = g.sidecar("uid-b", false).await;
    until("b took over", || b.is_oracle()).await;
    assert!(
        silent.elapsed() >= Duration::from_millis(1050),
        "b took over {:?} after a went silent, before a's lease could have lapsed",
        silent.elapsed()
    );
    assert!(take(&b).await > last_a);
    g.leases.reads.load(Ordering::SeqCst) - reads
}

/// A follower learns of the oracle, its renewals and its hand-overs from the watch: no
/// read of the Lease per `D/12` (with `D` = 1 s, a poller reads 12 times a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_follows_the_oracle_lease_through_its_watch_without_reading_it() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let b = g.sidecar("uid-b", false).await;
    until("b follows", || b.serving_now()).await;
    let reads = g.leases.reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        g.leases.reads.load(Ordering::SeqCst),
        reads,
        "reads while following a live watch for 1.5 s (the oracle renewed meanwhile)"
    );
    assert!(b.serving_now() && a.is_oracle());
    take(&b).await;
}

/// Bad input on the watch: an oracle Lease edited into something this release cannot read
/// (`leaseDurationSeconds: 0`) is not taken as the Lease. The follower says its watch does
/// not know the Lease, reads it instead (the read names what is wrong), and nobody takes
/// it over, however long it stays so; once it is put right, the watch knows it again and
/// the sequence serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_oracle_lease_on_the_watch_is_read_instead_and_never_taken_over() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let b = g.sidecar("uid-b", false).await;
    until("b follows through its watch", || {
        b.serving_now() && b.metrics.strict_lease_watched.get() == 1
    })
    .await;
    let (term, reads) = (g.leases.term(), b.metrics.strict_lease_reads.get());

    g.leases.set_lease_secs(0);
    until(
        "b's watch no longer knows the lease, and b reads it",
        || b.metrics.strict_lease_watched.get() == 0 && b.metrics.strict_lease_reads.get() > reads,
    )
    .await;
    // Longer than a take-over wait (1.05 s) of a readable Lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(g.leases.term(), term, "nobody took a malformed lease over");
    assert!(!b.is_oracle());

    g.leases.set_lease_secs(1);
    until("b's watch knows the lease again", || {
        b.metrics.strict_lease_watched.get() == 1
    })
    .await;
    take(&b).await;
}

/// Rule 13 does not rest on the watch: a follower whose watch delivers nothing reads the
/// Lease, still waits `D·(1+ρ)` for a silent oracle, and takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_follower_whose_watch_broke_reads_the_lease_and_takes_over_only_after_it_lapsed() {
    let reads = silent_oracle_taken_over(Watch::Broken).await;
    assert!(reads > 0, "b read the Lease, since its watch said nothing");
}

/// The process of `o` ends as a `kill -9` would end it: its tasks stop without releasing
/// anything, and once nothing holds it any more its pod lock is dropped with its file.
async fn kill(o: Arc<Oracle>) {
    silence(&o);
    until("the killed sidecar's tasks ended", || {
        Arc::strong_count(&o) == 1
    })
    .await;
    drop(o);
}

/// Stops the tasks of `o` without releasing anything; its process (and pod lock) lives on,
/// as a stopped (SIGSTOP) process's does.
fn silence(o: &Oracle) {
    o.stop_tx.send(true).unwrap();
    o.lock().requests.stop();
    o.wake.notify_one();
}

/// Whether `o`'s elector decided to wait for its own pod's Lease to lapse.
fn waits_for_its_own_lease(o: &Oracle) -> bool {
    matches!(&o.lock().role, Role::Unknown { why } if why.contains("earlier start of this sidecar"))
}

/// `a` becomes the oracle in the state dir `pod`, serves, and the Lease's duration is then
/// raised to an hour: from there on, a take-over that waits for the Lease to lapse cannot
/// happen within a test. Returns the last value `a` served.
async fn oracle_then_an_hour_lease(g: &Group, a: &Arc<Oracle>) -> u64 {
    until("a is the oracle", || a.is_oracle()).await;
    let last = take(a).await;
    g.leases.set_lease_secs(3600);
    until("a renewed the hour-long Lease", || {
        matches!(&a.lock().role, Role::Oracle { lease, .. } if lease.timing.lease.as_secs() == 3600)
    })
    .await;
    take(a).await.max(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_sidecar_restarted_in_its_pod_takes_its_own_lease_back_at_once_when_its_earlier_process_has_ended()
 {
    let g = Group::new();
    let pod = tempfile::tempdir().unwrap();
    let a = g.sidecar_in("uid-a", pod.path()).await;
    let last = oracle_then_an_hour_lease(&g, &a).await;
    let term = g.leases.term();
    kill(a).await;
    let restarted = g.sidecar_in("uid-a", pod.path()).await;
    until("the restarted sidecar took its own Lease back", || {
        restarted.is_oracle()
    })
    .await;
    assert_eq!(g.leases.term(), term + 1, "a new term of the same pod");
    assert_eq!(g.leases.holder().as_deref(), Some("uid-a"));
    let first = take(&restarted).await;
    assert!(
        first > last && first >= WINDOW,
        "{first} after {last}: the new term starts above the earlier process's whole window"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_sidecar_restarted_in_its_pod_waits_for_its_lease_while_the_earlier_process_lives()
{
    let g = Group::new();
    let pod = tempfile::tempdir().unwrap();
    let a = g.sidecar_in("uid-a", pod.path()).await;
    oracle_then_an_hour_lease(&g, &a).await;
    // Stopped, not dead: it holds its pod lock, and resumed it could serve from its term.
    silence(&a);
    let restarted = g.sidecar_in("uid-a", pod.path()).await;
    until("the restarted sidecar decided", || {
        waits_for_its_own_lease(&restarted)
    })
    .await;
    assert!(!restarted.is_oracle());
    assert!(restarted.take_one_from(0).await.is_err(), "nothing served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_sidecar_restarted_in_its_pod_waits_for_its_lease_when_the_term_is_not_recorded_as_its_pods()
 {
    let g = Group::new();
    let pod = tempfile::tempdir().unwrap();
    let a = g.sidecar_in("uid-a", pod.path()).await;
    oracle_then_an_hour_lease(&g, &a).await;
    kill(a).await;
    // The term was taken by a process that left no record of it (a sidecar of a release
    // without the pod lock, after an in-place image change): its end cannot be known.
    let lock_file = pod.path().join("s.oracle-lock");
    assert!(
        std::fs::read_to_string(&lock_file)
            .unwrap()
            .starts_with("1 "),
        "the killed oracle recorded term 1"
    );
    std::fs::write(&lock_file, "").unwrap();
    let restarted = g.sidecar_in("uid-a", pod.path()).await;
    until("the restarted sidecar decided", || {
        waits_for_its_own_lease(&restarted)
    })
    .await;
    assert!(!restarted.is_oracle());
}

/// A Lease nobody ever held (a new sequence, or one deleted and re-created by hand while
/// an oracle may still serve from the old one) is taken only after D(1+rho) unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule13_a_lease_never_held_is_taken_only_after_it_was_seen_unchanged_for_the_take_over_wait()
 {
    let g = Group::new();
    let started = Instant::now();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1050),
        "took a never-held Lease after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule15_an_oracle_never_serves_from_a_counter_not_marked_for_it() {
    let g = Group::new();
    g.counter.format.store(1, Ordering::SeqCst);
    let a = g.sidecar("uid-a", false).await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let err = a.take_one_from(0).await.unwrap_err();
    assert!(err.to_string().contains("format 2"), "{err}");
    assert_eq!(g.counter.next(), 1, "nothing reserved");
    assert!(!a.is_oracle());
}

/// Speaks the wire format to `a`'s listener by hand: `hello`, then one request per
/// `(count, min)`; the replies, in order (the welcome, when one came, is skipped).
pub(super) async fn by_hand(a: &Oracle, hello: &Hello, requests: &[(u64, u64)]) -> Vec<Reply> {
    by_hand_welcomed(a, hello, requests).await.1
}

/// [`by_hand`], and the welcome's token if the oracle sent one.
pub(super) async fn by_hand_welcomed(
    a: &Oracle,
    hello: &Hello,
    requests: &[(u64, u64)],
) -> (Option<String>, Vec<Reply>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = a.address.clone().expect("a listens");
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream.write_all(&hello.encode().unwrap()).await.unwrap();
    let mut replies = Vec::new();
    let mut welcome = None;
    for &(count, min) in requests {
        let request = ForwardRequest { count, min };
        if stream.write_all(&request.encode()).await.is_err() {
            break;
        }
        let Ok(mut tag) = stream.read_u8().await else {
            break;
        };
        if tag == 2 {
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await.unwrap();
            let mut token = vec![0u8; Welcome::token_len(&len).unwrap()];
            stream.read_exact(&mut token).await.unwrap();
            welcome = Some(Welcome::from_token(&token).unwrap().token);
            tag = stream.read_u8().await.unwrap();
        }
        let reply = forward::read_reply(&mut stream, tag).await.unwrap();
        replies.push(reply);
    }
    (welcome, replies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oracle_port_refuses_another_sequence_and_bad_counts_and_keeps_serving_after_one() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    // Another sequence's sidecar: one refusal naming both, then the connection is closed.
    let mut other_sequence = g.hello("uid-b");
    other_sequence.sequence = "other".into();
    let other = by_hand(&a, &other_sequence, &[(1, 0), (1, 0)]).await;
    assert_eq!(other.len(), 1, "closed after the refusal: {other:?}");
    let Reply::Refused { status, message } = &other[0] else {
        panic!("{other:?}")
    };
    assert_eq!(*status, 400);
    assert!(message.contains("not other"), "{message}");
    // A bad count is refused, and the same connection serves the next request.
    let replies = by_hand(
        &a,
        &g.hello("uid-b"),
        &[(0, 0), (MAX_FORWARD_COUNT + 1, 0), (5, 0)],
    )
    .await;
    assert_eq!(replies.len(), 3, "{replies:?}");
    for bad in &replies[..2] {
        assert!(
            matches!(bad, Reply::Refused { status: 400, message } if message.contains("count must be 1")),
            "{bad:?}"
        );
    }
    let Reply::Values(ok) = replies[2] else {
        panic!("{replies:?}")
    };
    assert_eq!(ok.end - ok.start, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarder_whose_kept_connection_was_closed_asks_again_on_a_new_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An oracle by hand: each connection answers one request, then is closed (as when the
    // oracle restarts, or drops a connection idle).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let g = Group::new();
    let welcome = Welcome {
        token: test_tokens::oracle_token(&g.api_server, "uid-a"),
    }
    .encode()
    .unwrap();
    let oracle = tokio::spawn(async move {
        for start in [10u64, 20] {
            let (mut s, _) = listener.accept().await.unwrap();
            listen::read_hello(&mut s).await.unwrap().unwrap();
            s.write_all(&welcome).await.unwrap();
            let mut frame = [0u8; wire::REQUEST_LEN];
            s.read_exact(&mut frame).await.unwrap();
            let count = ForwardRequest::decode(&frame).count;
            let values = ForwardReply {
                start,
                end: start + count,
                term: 1,
            };
            s.write_all(&Reply::Values(values).encode()).await.unwrap();
        }
    });
    let mut forwarder = g.forwarder("uid-b");
    let request = ForwardRequest { count: 3, min: 0 };
    assert_eq!(
        forwarder
            .forward(&address, 1, "uid-a", request)
            .await
            .unwrap()
            .start,
        10
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let again = forwarder.forward(&address, 1, "uid-a", request).await;
    assert_eq!(again.unwrap().start, 20, "asked again on a new connection");
    oracle.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn something_else_on_the_oracle_port_is_refused_naming_what_the_port_takes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let first = take(&a).await;
    let address = a.address.clone().expect("a listens");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    // An HTTP client (or a scanner) on the strict port.
    stream
        .write_all(b"GET /id HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let tag = stream.read_u8().await.unwrap();
    let reply = forward::read_reply(&mut stream, tag).await.unwrap();
    let Reply::Refused { status, message } = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(*status, 400);
    assert!(message.contains("\"KFSO\""), "{message}");
    // Closed after the refusal: an end of stream, or a reset (the rest of the HTTP
    // request was never read).
    let mut rest = Vec::new();
    let end = stream.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "nothing after the refusal: {rest:?}");
    assert!(
        end.is_ok()
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "{end:?}"
    );
    // The oracle serves on, the next value after the last: the stranger took nothing.
    assert_eq!(take(&a).await, first + 1);
}
