//! The serve loops: which routes each listener answers, and when each one closes.

use super::*;
use crate::metrics::Metrics;
use crate::state::{Serving, ServingCell, WaitReason};
use kubeflake_runtime::shutdown::Shutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An API still waiting for a slot, and the cell through which a test changes its state.
fn api_and_state() -> (Arc<Api>, ServingCell) {
    let metrics = Arc::new(Metrics::new());
    let cell = ServingCell::new(Serving::Waiting(WaitReason::Starting), &metrics);
    let api = Arc::new(Api::new(
        cell.reader(),
        metrics,
        crate::http::DEFAULT_MAX_BATCH,
    ));
    (api, cell)
}

fn api() -> Arc<Api> {
    api_and_state().0
}

#[tokio::test]
async fn a_half_sent_request_is_closed_after_the_header_read_timeout() {
    for probes_only in [false, true] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_routes(
            listener,
            api(),
            async {
                let _ = stopped.await;
            },
            Duration::from_millis(100),
            probes_only,
            Limits {
                header_read_timeout: Duration::from_millis(200),
                ..API_LIMITS
            },
        ));
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localh")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "probes_only={probes_only}: the connection is still open 5 s after a partial request"
        );
        let _ = stop.send(());
        server.await.unwrap();
    }
}

#[tokio::test]
async fn the_unix_socket_serves_the_same_routes_as_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeflake.sock");
    let listeners = ApiListeners::bind("127.0.0.1:0".parse().unwrap(), Some(&path))
        .await
        .unwrap();
    let addr = listeners.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = tokio::spawn(serve_api(
        listeners,
        api(),
        shutdown.token(),
        Duration::from_millis(100),
    ));
    for p in [
        "/healthz",
        "/readyz",
        "/id",
        "/metrics",
        "/openapi.yaml",
        "/nope",
    ] {
        let mut client = tokio::net::UnixStream::connect(&path).await.unwrap();
        let request = format!("GET {p} HTTP/1.1\r\nHost: kubeflake\r\nConnection: close\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        let over_socket = answer.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok());
        assert_eq!(over_socket, Some(status_of(addr, "GET", p).await), "{p}");
    }
    shutdown.trigger("test");
    server.await.unwrap();
    assert!(!path.exists(), "the socket file is removed at shutdown");
}

/// One request on a fresh connection: the whole answer, status line to body.
async fn answer_of(addr: std::net::SocketAddr, method: &str, path: &str) -> String {
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    answer
}

/// One request on a fresh connection: the status code.
async fn status_of(addr: std::net::SocketAddr, method: &str, path: &str) -> u16 {
    answer_of(addr, method, path)
        .await
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// The probe port may listen on every address (the kubelet and Prometheus reach the pod
/// IP), so it must serve the probes and the metrics and nothing else: no IDs, no
/// decoding.
#[tokio::test]
async fn the_probe_port_answers_only_healthz_readyz_and_metrics() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let probes = ProbeServer::spawn(listener, api());
    assert_eq!(status_of(addr, "GET", "/healthz").await, 200);
    assert_eq!(status_of(addr, "GET", "/readyz").await, 503, "waiting");
    assert_eq!(status_of(addr, "GET", "/metrics").await, 200);
    for path in [
        "/id",
        "/ids?count=5",
        "/decode/1",
        "/",
        "/healthz/../id",
        "//id",
    ] {
        assert_eq!(status_of(addr, "GET", path).await, 404, "{path}");
    }
    assert_eq!(status_of(addr, "POST", "/id").await, 404);
    assert_eq!(status_of(addr, "POST", "/healthz").await, 405);
    probes.close().await;
}

/// The kubelet probes a container until it has ended. So the probe port outlives the
/// shutdown: after the ID API has stopped and while the sidecar is stopping (handing its
/// slot back), `/healthz` still answers alive and `/readyz` says "stopping"; only
/// `close` (at the very end of `cluster::run`) closes the port. A deleted pod then
/// records no liveness probe refused while its sidecar hands back its slot.
#[tokio::test]
async fn the_probe_port_answers_after_the_shutdown_until_it_is_closed() {
    let (api, cell) = api_and_state();
    let probe_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let probe_addr = probe_listener.local_addr().unwrap();
    let probes = ProbeServer::spawn(probe_listener, api.clone());
    let listeners = ApiListeners::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let api_addr = listeners.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let api_server = tokio::spawn(serve_api(
        listeners,
        api,
        shutdown.token(),
        Duration::from_millis(100),
    ));

    shutdown.trigger("test");
    api_server.await.unwrap();
    assert!(
        tokio::net::TcpStream::connect(api_addr).await.is_err(),
        "the ID API stops at the shutdown"
    );
    cell.publish(Serving::Stopping);
    assert_eq!(status_of(probe_addr, "GET", "/healthz").await, 200);
    let answer = answer_of(probe_addr, "GET", "/readyz").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("stopping"), "{answer}");

    probes.close().await;
    assert!(
        tokio::net::TcpStream::connect(probe_addr).await.is_err(),
        "closed, the probe port refuses connections"
    );
}
