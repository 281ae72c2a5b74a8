//! The serve loop: timeouts, the connection cap, drain, Unix sockets, upgrades.

use super::*;
use crate::reply;
use hyper::StatusCode;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bounds every wait of these tests: it only keeps a broken build from hanging the run.
const PATIENCE: Duration = Duration::from_secs(30);

fn options(limits: Limits) -> ServeOptions {
    ServeOptions {
        name: "test",
        limits,
        drain: Duration::from_secs(5),
    }
}

fn short_header(header_read_timeout: Duration) -> Limits {
    Limits {
        header_read_timeout,
        ..Limits::DEFAULT
    }
}

async fn ok(_req: Request<Incoming>) -> Reply {
    reply::body(StatusCode::OK, reply::TEXT, "ok")
}

async fn started(
    limits: Limits,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, options(limits), ok, async {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

/// Whether the server has closed `client` (EOF or reset), waiting at most [`PATIENCE`].
async fn closed_by_server(client: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    matches!(
        tokio::time::timeout(PATIENCE, client.read_to_end(&mut rest)).await,
        Ok(Ok(_)) | Ok(Err(_))
    )
}

/// Whether the server has closed `client` already (no waiting beyond a moment).
async fn closed_now(client: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(100), client.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

async fn get_on(client: &mut TcpStream) -> String {
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(PATIENCE, client.read_to_string(&mut answer)).await;
    answer
}

#[test]
fn accept_errors_back_off_doubling_up_to_a_second_and_reset_on_success() {
    let mut b = AcceptBackoff::default();
    let pauses: Vec<_> = (0..9).map(|_| b.failed()).collect();
    assert_eq!(pauses[0], Duration::from_millis(10));
    assert_eq!(pauses[1], Duration::from_millis(20));
    assert!(pauses.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(pauses[8], Duration::from_secs(1));
    b.succeeded();
    assert_eq!(b.failed(), Duration::from_millis(10));
}

#[tokio::test]
async fn a_half_sent_request_header_is_disconnected_after_the_header_read_timeout() {
    let (addr, stop, server) = started(short_header(Duration::from_millis(200))).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localh")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut client).await,
        "the connection is still open after a partial request header"
    );
    let _ = stop.send(());
    server.await.unwrap();
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(200),
        ..Limits::DEFAULT
    };
    let (addr, stop, server) = started(limits).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_server(&mut client).await,
        "an idle connection stays open"
    );
    let _ = stop.send(());
    server.await.unwrap();
}

/// hyper's default buffer (~400 KiB a connection) let 200 half-sent headers take 80 MB.
#[tokio::test]
async fn a_header_larger_than_the_limit_is_refused_not_buffered() {
    let (addr, stop, server) = started(Limits::DEFAULT).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    let mut request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 64 * 1024));
    // The server may close before it has read everything: a failed write is fine.
    let _ = client.write_all(&request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, client.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    let _ = stop.send(());
    server.await.unwrap();
}

/// The listener is full of idle connections: a newcomer closes the one that waited
/// longest and is answered; the count never passes the cap.
#[tokio::test]
async fn at_the_cap_a_new_connection_closes_the_longest_idle_one_and_is_answered() {
    let (addr, stop, server) = started(Limits::DEFAULT.with_max_connections(4)).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(addr).await.unwrap());
        // Distinct accept times, so "longest waiting" is the connection order.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    let answer = get_on(&mut fresh).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        closed_by_server(&mut idle[0]).await,
        "the oldest idle one is closed"
    );
    for (i, c) in idle.iter_mut().enumerate().skip(1) {
        assert!(!closed_now(c).await, "connection {i} is closed too");
    }
    let _ = stop.send(());
    server.await.unwrap();
}

/// A connection whose request is being answered is never closed to make room: with the
/// listener full of them, a newcomer waits (in the listen backlog) and is answered once
/// one ends, instead of being reset.
#[tokio::test]
async fn a_connection_being_answered_is_never_closed_to_make_room() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let held = release.clone();
    let handler = move |_req: Request<Incoming>| {
        let held = held.clone();
        async move {
            let _permit = held.acquire().await;
            reply::body(StatusCode::OK, reply::TEXT, "ok")
        }
    };
    let server = tokio::spawn(serve(
        listener,
        options(Limits::DEFAULT.with_max_connections(1)),
        handler,
        std::future::pending(),
    ));
    let mut busy = TcpStream::connect(addr).await.unwrap();
    busy.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let newcomer = tokio::spawn(async move {
        let mut fresh = TcpStream::connect(addr).await.unwrap();
        get_on(&mut fresh).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!newcomer.is_finished(), "the newcomer waits for room");
    release.add_permits(2);
    let mut first = String::new();
    let _ = tokio::time::timeout(PATIENCE, busy.read_to_string(&mut first)).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let second = newcomer.await.unwrap();
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    server.abort();
}

#[tokio::test]
async fn after_shutdown_the_listener_is_closed_and_the_loop_returns() {
    let (addr, stop, server) = started(Limits::DEFAULT).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    let answer = get_on(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let _ = stop.send(());
    server.await.unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

#[tokio::test]
async fn the_same_loop_serves_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let listener = crate::unix_socket::bind(&path, 0o600).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, options(Limits::DEFAULT), ok, async {
        let _ = stopped.await;
    }));
    let mut client = UnixStream::connect(&path).await.unwrap();
    client
        .write_all(b"GET /id HTTP/1.1\r\nHost: kubeflake\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    let _ = stop.send(());
    server.await.unwrap();
}

#[tokio::test]
async fn an_upgrade_that_gives_up_drops_the_stream_without_serving_it() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_upgraded(
        listener,
        options(Limits::DEFAULT),
        |_stream: TcpStream, _peer| async { None::<TcpStream> },
        ok,
        std::future::pending(),
    ));
    let mut client = TcpStream::connect(addr).await.unwrap();
    let _ = client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, client.read_to_end(&mut answer)).await;
    server.abort();
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "{read:?} {answer:?}"
    );
}
