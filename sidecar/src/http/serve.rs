//! The connection loop: accept with back-off, HTTP/1 with a header-read timeout, graceful
//! drain. It knows nothing about routes: it serves anything that implements [`Routes`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::json;
use tokio::net::TcpListener;

use super::reply::{Reply, json_reply};
use super::routes::Api;

/// How long a client may take to send a request's headers before the connection is
/// closed: a client that sends half a request must not hold a connection forever.
/// hyper also counts a keep-alive connection's idle time before the next request against
/// it, so this is as long as hyper's own default (30 s), longer than the idle timeout of
/// common client pools.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What a serve loop serves: one request in, one reply out (never an error: errors are
/// replies too).
pub trait Routes: Send + Sync + 'static {
    fn answer(&self, req: Request<Incoming>) -> impl Future<Output = Reply> + Send + '_;
}

impl Routes for Api {
    fn answer(&self, req: Request<Incoming>) -> impl Future<Output = Reply> + Send + '_ {
        self.handle(&req)
    }
}

/// The routes of the probe port: `/healthz` and `/readyz` of the API, nothing else.
///
/// Why a separate port: kubelet probes reach the pod IP, not 127.0.0.1, and the operator's
/// webhook binds the probe port to `0.0.0.0` (the pod IP is not known when the pod spec is
/// written). Anything on that port is reachable from other pods, so it answers the probes
/// only; IDs, `/decode` and `/metrics` stay on the loopback `--listen` address.
pub struct ProbeRoutes(pub Arc<Api>);

/// The reply to anything but a probe on the probe port (`None` for the probes themselves).
fn refuse_non_probe<B>(req: &Request<B>) -> Option<Reply> {
    match req.uri().path() {
        "/healthz" | "/readyz" => None,
        other => Some(json_reply(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no route {other:?}: this port serves only /healthz and /readyz; IDs are on 127.0.0.1") }),
        )),
    }
}

impl Routes for ProbeRoutes {
    async fn answer(&self, req: Request<Incoming>) -> Reply {
        if let Some(refused) = refuse_non_probe(&req) {
            return refused;
        }
        self.0.handle(&req).await
    }
}

/// Serves `api` on `listener` until `shutdown` completes, then stops accepting, lets
/// in-flight requests finish (up to `drain`), and returns.
pub async fn serve(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    serve_routes(listener, api, shutdown, drain, false, HEADER_READ_TIMEOUT).await
}

/// Like [`serve`], answering only `/healthz` and `/readyz` ([`ProbeRoutes`]): for a
/// listener on the pod's address that kubelet probes reach, while IDs stay on localhost.
pub async fn serve_probes(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    serve_routes(listener, api, shutdown, drain, true, HEADER_READ_TIMEOUT).await
}

async fn serve_routes(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    probes_only: bool,
    header_read_timeout: Duration,
) {
    if probes_only {
        let routes = Arc::new(ProbeRoutes(api));
        serve_loop(listener, routes, shutdown, drain, header_read_timeout).await
    } else {
        serve_loop(listener, api, shutdown, drain, header_read_timeout).await
    }
}

/// The loop itself: accepts connections on `listener` and answers their requests with
/// `routes` until `shutdown` completes, then drains for up to `drain`.
pub async fn serve_loop<R: Routes>(
    listener: TcpListener,
    routes: Arc<R>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    header_read_timeout: Duration,
) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "could not set TCP_NODELAY");
                }
                let routes = routes.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let routes = routes.clone();
                    async move { Ok::<_, Infallible>(routes.answer(req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_read_timeout)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!(?drain, "drain timeout: closing remaining connections"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::state::{Serving, ServingCell, WaitReason};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn api() -> Arc<Api> {
        let metrics = Arc::new(Metrics::new());
        let cell = ServingCell::new(Serving::Waiting(WaitReason::Starting), &metrics);
        Arc::new(Api::new(
            cell.reader(),
            metrics,
            crate::http::DEFAULT_MAX_BATCH,
        ))
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
                Duration::from_millis(200),
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

    /// One request on a fresh connection: the status code.
    async fn status_of(addr: std::net::SocketAddr, method: &str, path: &str) -> u16 {
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        answer
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0)
    }

    /// The probe port may listen on every address (the kubelet reaches the pod IP), so it
    /// must serve the probes and nothing else: no IDs, no decoding, no metrics.
    #[tokio::test]
    async fn the_probe_port_answers_only_healthz_and_readyz() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_probes(
            listener,
            api(),
            async {
                let _ = stopped.await;
            },
            Duration::from_millis(100),
        ));
        assert_eq!(status_of(addr, "GET", "/healthz").await, 200);
        assert_eq!(status_of(addr, "GET", "/readyz").await, 503, "waiting");
        for path in [
            "/id",
            "/ids?count=5",
            "/decode/1",
            "/metrics",
            "/",
            "/healthz/../id",
            "//id",
        ] {
            assert_eq!(status_of(addr, "GET", path).await, 404, "{path}");
        }
        assert_eq!(status_of(addr, "POST", "/id").await, 404);
        assert_eq!(status_of(addr, "POST", "/healthz").await, 405);
        let _ = stop.send(());
        server.await.unwrap();
    }
}
