//! The oracle's port against strangers, and a follower against an answer it must not use
//! (docs/safety.md rule 16), over real loopback TCP in the wire format of
//! `kubeflake_crds::strict_oracle::wire`: what a pod on the pod network can send, byte for
//! byte. No test here asserts on timings.

use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::forward::ForwardError;
use super::listen::{self, Limits};
use super::tests::{Group, by_hand, by_hand_welcomed, take, until};
use super::*;
use crate::peer_token::Side;
use crate::peer_token::test_tokens::{self, Signer, oracle_token, pod_claims};
use crate::segment::buffer::RAISE_LIMIT;
use kubeflake_crds::contract::ORACLE_TOKEN_AUDIENCE;
use kubeflake_crds::strict_oracle::wire::{self, Hello, Reply, Welcome};

/// One forwarded request with `min` = 2^63-1 once moved the counter to 2^63 and the
/// sequence was used up for good. Now the term refuses any `min` above the raise limit
/// and above what it reserved, before anything is skipped: 409, the counter where it was,
/// and the next requests (on the same connection, forwarded by a sidecar, and local)
/// served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_forwarded_request_cannot_raise_the_counter_past_its_limit() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let first = take(&a).await;
    let next = g.counter.next();
    let writes = g.counter.writes.load(Ordering::SeqCst);

    let huge = [(1 << 63) - 1, u64::MAX, RAISE_LIMIT + 1];
    let requests: Vec<(u64, u64)> = huge.iter().map(|&min| (1, min)).collect();
    let replies = by_hand(&a, &g.hello("uid-b"), &requests).await;
    assert_eq!(replies.len(), huge.len(), "{replies:?}");
    for (reply, min) in replies.iter().zip(huge) {
        let Reply::Refused { status, message } = reply else {
            panic!("min {min}: {reply:?}")
        };
        assert_eq!(*status, 409, "min {min}: {message}");
        assert!(
            message.contains(&format!("after={}", min - 1)) && message.contains("2^62"),
            "the refusal names the after and the limit: {message}"
        );
    }
    assert_eq!(g.counter.next(), next, "the counter did not move");
    assert_eq!(
        g.counter.writes.load(Ordering::SeqCst),
        writes,
        "nothing was written to the counter"
    );

    // The same connection is served on, from the same window: nothing was skipped.
    let replies = by_hand(&a, &g.hello("uid-b"), &[(1, (1 << 63) - 1), (5, 0)]).await;
    let Reply::Values(values) = replies[1] else {
        panic!("{replies:?}")
    };
    assert_eq!((values.start, values.end), (first + 1, first + 6));
    // A forwarding sidecar and the oracle's own app are served too.
    let b = g.sidecar("uid-b", false).await;
    until("b follows", || b.serving_now()).await;
    let forwarded = take(&b).await;
    assert!(forwarded >= values.end, "{forwarded} after {}", values.end);
    assert!(take(&a).await > forwarded);
    assert!(g.counter.next() < RAISE_LIMIT);
}

/// A fake oracle on a real socket: reads the hello, sends `welcome` (if any), then answers
/// each request on each connection with the next of `replies` (built from the request);
/// counts connections.
async fn fake_oracle(
    welcome: Option<String>,
    replies: Vec<fn(ForwardRequest) -> ForwardReply>,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        let mut replies = replies.into_iter();
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            listen::read_hello(&mut s).await.unwrap().unwrap();
            if let Some(token) = &welcome {
                let bytes = Welcome {
                    token: token.clone(),
                }
                .encode()
                .unwrap();
                if s.write_all(&bytes).await.is_err() {
                    continue;
                }
            }
            let mut frame = [0u8; wire::REQUEST_LEN];
            while s.read_exact(&mut frame).await.is_ok() {
                let Some(reply) = replies.next() else { return };
                let values = reply(ForwardRequest::decode(&frame));
                if s.write_all(&Reply::Values(values).encode()).await.is_err() {
                    break;
                }
            }
        }
    });
    (address, connections)
}

/// A follower checks every answer: from the term of the oracle Lease it follows, and
/// exactly the range it asked for. Anything else is not used, and the connection is
/// dropped (the next request goes on a new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_follower_uses_no_answer_from_another_term_or_another_range() {
    fn values(start: u64, end: u64, term: i32) -> ForwardReply {
        ForwardReply { start, end, term }
    }
    // Another term: an older oracle at the same address, or someone else.
    fn older_term(r: ForwardRequest) -> ForwardReply {
        values(r.min, r.min + r.count, 2)
    }
    fn newer_term(r: ForwardRequest) -> ForwardReply {
        values(r.min, r.min + r.count, 4)
    }
    fn below_min(r: ForwardRequest) -> ForwardReply {
        values(r.min - 1, r.min - 1 + r.count, 3)
    }
    fn more_than_asked(r: ForwardRequest) -> ForwardReply {
        values(r.min, r.min + r.count + 1, 3)
    }
    fn backwards(r: ForwardRequest) -> ForwardReply {
        values(r.min + r.count, r.min, 3)
    }
    fn past_the_value_range(r: ForwardRequest) -> ForwardReply {
        values(1 << 63, (1 << 63) + r.count, 3)
    }
    fn right(r: ForwardRequest) -> ForwardReply {
        values(r.min + 10, r.min + 10 + r.count, 3)
    }
    let g = Group::new();
    let holder = oracle_token(&g.api_server, "uid-a");
    let (address, connections) = fake_oracle(
        Some(holder),
        vec![
            older_term,
            newer_term,
            below_min,
            more_than_asked,
            backwards,
            past_the_value_range,
            right,
            right,
        ],
    )
    .await;
    let mut forwarder = g.forwarder("uid-b");
    let request = ForwardRequest { count: 3, min: 100 };
    for expected in [2, 4] {
        let err = forwarder
            .forward(&address, 3, "uid-a", request)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ForwardError::WrongTerm { term, expected: 3, .. } if *term == expected),
            "{err}"
        );
        assert!(err.is_bad_reply());
        assert!(
            err.to_string()
                .contains(&format!("term {expected}, but the oracle Lease")),
            "{err}"
        );
    }
    for _ in 0..4 {
        let err = forwarder
            .forward(&address, 3, "uid-a", request)
            .await
            .unwrap_err();
        assert!(matches!(err, ForwardError::BadReply { .. }), "{err}");
        assert!(err.to_string().contains("not what was asked"), "{err}");
    }
    let ok = forwarder
        .forward(&address, 3, "uid-a", request)
        .await
        .unwrap();
    assert_eq!((ok.start, ok.end, ok.term), (110, 113, 3));
    assert_eq!(
        connections.load(Ordering::SeqCst),
        7,
        "each answer not used dropped its connection; the good ones share one"
    );
    assert_eq!(
        forwarder
            .forward(&address, 3, "uid-a", request)
            .await
            .unwrap()
            .start,
        110
    );
    assert_eq!(connections.load(Ordering::SeqCst), 7);
}

/// The term a follower checks answers against is the oracle Lease's, learnt through its
/// watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_follower_expects_the_term_of_the_oracle_lease_it_follows() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let b = g.sidecar("uid-b", false).await;
    until("b follows", || b.serving_now()).await;
    let term = g.leases.term();
    assert!(term > 0);
    let followed = match &b.lock().role {
        Role::Follower { term, .. } => *term,
        other => panic!("{other:?}"),
    };
    assert_eq!(followed, term);
    take(&b).await;
}

/// A listener of `a` on a port of its own, with small limits.
async fn small_listener(a: &Arc<Oracle>, limits: Limits) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(listen::listen_with(
        a.clone(),
        listener,
        a.stop_tx.subscribe(),
        limits,
    ));
    address
}

/// Whether the oracle closed `s` (an end of stream, or a reset), waiting at most 10 s.
async fn closed(s: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    matches!(
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// Connections that never send a hello wait among a few (here 4) apart from the
/// connection slots (here 8), and each new one closes the oldest: twelve of them keep
/// neither a forwarder out nor a slot, and a forwarder already connected is served on
/// while more arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_strangers_that_never_say_hello_cannot_keep_a_forwarder_out() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let term = g.leases.term();
    let address = small_listener(
        &a,
        Limits {
            connections: 8,
            greeting: 4,
        },
    )
    .await;
    let mut strangers = Vec::new();
    for _ in 0..12 {
        strangers.push(TcpStream::connect(&address).await.unwrap());
    }
    let mut forwarder = g.forwarder("uid-b");
    let request = ForwardRequest { count: 2, min: 0 };
    let first = forwarder
        .forward(&address, term, "uid-a", request)
        .await
        .unwrap();
    assert!(
        closed(&mut strangers[0]).await,
        "the oldest stranger was closed"
    );
    for _ in 0..12 {
        strangers.push(TcpStream::connect(&address).await.unwrap());
    }
    let second = forwarder
        .forward(&address, term, "uid-a", request)
        .await
        .unwrap();
    assert!(second.start >= first.end);
    // A second forwarder gets in too: the strangers hold no slot.
    let mut other = g.forwarder("uid-c");
    other
        .forward(&address, term, "uid-a", request)
        .await
        .unwrap();
}

/// A connection that says nothing is closed after the hello timeout: it does not keep its
/// place for long, even when nobody else arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_connection_that_sends_no_hello_is_closed() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let address = a.address.clone().expect("a listens");
    let mut silent = TcpStream::connect(&address).await.unwrap();
    // Half a hello is no hello either.
    let mut half = TcpStream::connect(&address).await.unwrap();
    let hello = g.hello("uid-b").encode().unwrap();
    half.write_all(&hello[..3]).await.unwrap();
    assert!(closed(&mut silent).await);
    assert!(closed(&mut half).await);
    take(&a).await;
}

/// Past its connection slots, the oracle refuses a forwarder with 503 (it asks again
/// later) rather than leave it waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarder_beyond_the_oracles_connection_slots_is_refused_with_503() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let term = g.leases.term();
    let address = small_listener(
        &a,
        Limits {
            connections: 2,
            greeting: 4,
        },
    )
    .await;
    let request = ForwardRequest { count: 1, min: 0 };
    let mut held = Vec::new();
    for uid in ["uid-b", "uid-c"] {
        let mut f = g.forwarder(uid);
        f.forward(&address, term, "uid-a", request).await.unwrap();
        held.push(f);
    }
    let err = g
        .forwarder("uid-b")
        .forward(&address, term, "uid-a", request)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForwardError::Refused { status: 503, message, .. } if message.contains("all in use")),
        "{err}"
    );
    // Those connected are served on.
    for f in &mut held {
        f.forward(&address, term, "uid-a", request).await.unwrap();
    }
}

/// Only a pod of the sequence is served (docs/safety.md rule 16): a hello whose token is
/// missing, for another audience (the pod's own API token), of another namespace, signed
/// by a key the API server does not publish, or of a pod that is not a claimant, gets one
/// refusal and no welcome, and nothing is taken from the counter or the window. A
/// claimant is welcomed with the oracle's own token and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_stranger_without_a_claimants_token_is_refused_and_the_counter_untouched() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let first = take(&a).await;
    let (next, writes) = (g.counter.next(), g.counter.writes.load(Ordering::SeqCst));
    let with = |token: String| Hello {
        sequence: "s".into(),
        token,
    };
    let api = &g.api_server;
    let strangers = [
        ("no token", with(String::new()), 401, "no_token"),
        (
            "the API server's audience",
            with(api.token(&pod_claims(
                "uid-b",
                test_tokens::NAMESPACE,
                "https://kubernetes.default.svc.cluster.local",
            ))),
            401,
            "audience",
        ),
        (
            "another namespace",
            with(api.token(&pod_claims("uid-b", "other", ORACLE_TOKEN_AUDIENCE))),
            401,
            "namespace",
        ),
        (
            "a key the API server does not publish",
            with(oracle_token(&Signer::es256("api-server-key"), "uid-b")),
            401,
            "signature",
        ),
        (
            "a pod that is no claimant",
            g.hello("uid-x"),
            503,
            "not_claimant",
        ),
    ];
    for (what, hello, status, reason) in &strangers {
        let (welcome, replies) = by_hand_welcomed(&a, hello, &[(1, 0), (1, 0)]).await;
        assert!(welcome.is_none(), "{what}: welcomed");
        assert_eq!(
            replies.len(),
            1,
            "{what}: closed after one refusal: {replies:?}"
        );
        let Reply::Refused {
            status: got,
            message,
        } = &replies[0]
        else {
            panic!("{what}: {replies:?}")
        };
        assert_eq!(got, status, "{what}: {message}");
        assert_eq!(
            a.peers.log.count(Side::Forwarder, reason),
            1,
            "{what}: counted as {reason}"
        );
    }
    assert_eq!(g.counter.next(), next, "the counter did not move");
    assert_eq!(g.counter.writes.load(Ordering::SeqCst), writes);
    // A claimant is welcomed with the oracle's token and served, right after the last
    // value the oracle served itself: the strangers took none.
    let (welcome, replies) = by_hand_welcomed(&a, &g.hello("uid-b"), &[(1, 0)]).await;
    let oracle = a.peers.verifier.verify(&welcome.expect("welcomed")).await;
    assert_eq!(oracle.unwrap().pod_uid, "uid-a");
    let Reply::Values(values) = replies[0] else {
        panic!("{replies:?}")
    };
    assert_eq!(values.start, first + 1);
}

/// A pod started after the oracle's last look is refused with 503 (its forwarder asks
/// again), and served once the operator lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_pod_is_served_once_the_operator_lists_it_as_a_claimant() {
    let g = Group::new();
    let a = g.sidecar("uid-a", false).await;
    until("a is the oracle", || a.is_oracle()).await;
    let term = g.leases.term();
    let address = a.address.clone().expect("a listens");
    let request = ForwardRequest { count: 1, min: 0 };
    let mut late = g.forwarder("uid-d");
    let err = late
        .forward(&address, term, "uid-a", request)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForwardError::Refused { status: 503, message, .. } if message.contains("not a claimant")),
        "{err}"
    );
    g.leases
        .set_claimants(&["uid-a", "uid-b", "uid-c", "uid-d"]);
    until("the oracle sees uid-d listed", || {
        a.is_claimant("uid-d") == Some(true)
    })
    .await;
    late.forward(&address, term, "uid-a", request)
        .await
        .unwrap();
}

/// A forwarder believes what answers at the oracle Lease's address only if its welcome
/// proves, with a token the API server signed, that it is the pod the Lease names: a
/// listener posing as the oracle with a valid token of another pod of the sequence, with
/// a forged token, or with no welcome at all, gets nothing of its answer used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_listener_posing_as_the_oracle_is_not_believed_by_the_forwarder() {
    fn values(r: ForwardRequest) -> ForwardReply {
        ForwardReply {
            start: r.min,
            end: r.min + r.count,
            term: 3,
        }
    }
    let g = Group::new();
    let request = ForwardRequest { count: 3, min: 100 };
    let posers = [
        (
            "a claimant that is not the holder",
            Some(oracle_token(&g.api_server, "uid-c")),
            "not_holder",
        ),
        (
            "a forged token of the holder",
            Some(oracle_token(&Signer::es256("api-server-key"), "uid-a")),
            "signature",
        ),
        ("no welcome", None, "no_welcome"),
    ];
    for (what, welcome, reason) in posers {
        let (address, _) = fake_oracle(welcome, vec![values, values]).await;
        let mut forwarder = g.forwarder("uid-b");
        let err = forwarder
            .forward(&address, 3, "uid-a", request)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ForwardError::NotTheHolder { .. }) && err.is_bad_reply(),
            "{what}: {err}"
        );
        assert_eq!(
            forwarder.peers_refused(reason),
            1,
            "{what}: counted as {reason}"
        );
    }
    // The holder's own welcome is believed.
    let (address, _) = fake_oracle(Some(oracle_token(&g.api_server, "uid-a")), vec![values]).await;
    let ok = g
        .forwarder("uid-b")
        .forward(&address, 3, "uid-a", request)
        .await
        .unwrap();
    assert_eq!((ok.start, ok.end), (100, 103));
}
