//! Which routes each listener serves: the API on loopback (and the Unix socket), the
//! probes and metrics on the probe port, and the bounds of each ([`API_LIMITS`],
//! [`PROBE_LIMITS`]). The connection loop itself (connection cap, header and idle
//! timeouts, accept back-off, graceful drain) is the shared one of `kubeflake-runtime`.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use kubeflake_crds::contract::SOCKET_MODE;
use kubeflake_runtime::serve::{Limits, Listener, ServeOptions};
use kubeflake_runtime::shutdown::{ShutdownToken, drain};
use kubeflake_runtime::unix_socket::{self, SocketError};
use serde_json::json;
use tokio::net::{TcpListener, UnixListener};

use super::reply::{Reply, json_reply};
use super::route::{Route, probe_routes_text};
use super::routes::Api;

/// The bounds of each listener of the ID API (loopback TCP and the Unix socket, each with
/// a cap of its own, so that filling one leaves the other to the app): the runtime's
/// defaults ([`Limits::DEFAULT`]): 1,024 connections, a 16 KiB header sent within 5 s of
/// its first byte, 30 s idle. A full listener closes its longest-idle or slowest
/// connection for a newcomer, so a fresh `/id` is answered; 1,024 idle connections cost
/// about 20 MB, inside the chart's 64 Mi sidecar limit.
pub(crate) const API_LIMITS: Limits = Limits::DEFAULT;

/// The bounds of the probe port, which listens on the pod IP: the kubelet and Prometheus
/// need a few connections, so 64, with the API's header and idle bounds. Its own cap keeps
/// a flood from the pod network off the file descriptors the ID API needs.
pub(crate) const PROBE_LIMITS: Limits = Limits::DEFAULT.with_max_connections(64);

/// What a serve loop serves: one request in, one reply out (never an error: errors are
/// replies too).
pub(crate) trait Routes: Send + Sync + 'static {
    fn answer(&self, req: Request<Incoming>) -> impl Future<Output = Reply> + Send + '_;
}

impl Routes for Api {
    fn answer(&self, req: Request<Incoming>) -> impl Future<Output = Reply> + Send + '_ {
        self.handle(&req)
    }
}

/// The routes of the probe port: `/healthz`, `/readyz` and `/metrics` of the API
/// ([`Route::on_probe_port`]), nothing else.
///
/// Why a separate port: kubelet probes and Prometheus reach the pod IP, not 127.0.0.1,
/// and the operator's webhook binds the probe port to `0.0.0.0` (the pod IP is not known
/// when the pod spec is written). Anything on that port is reachable from other pods, so
/// it answers the probes and the metrics (which carry no IDs) only; IDs and `/decode`
/// stay on the loopback `--listen` address and the Unix socket.
///
/// `/metrics` is therefore *not* loopback-only: any client that can reach the pod IP may
/// read it (the chart's PodMonitor scrapes it there), and the sidecar has no way to tell
/// a scraper from anyone else. Restricting who reads it is a NetworkPolicy's job
/// (docs/install.md, "Network policies").
pub(crate) struct ProbeRoutes(pub Arc<Api>);

/// The reply to anything but a probe on the probe port (`None` for the probes themselves).
fn refuse_non_probe<B>(req: &Request<B>) -> Option<Reply> {
    let path = req.uri().path();
    match Route::parse(path) {
        Some(route) if route.on_probe_port() => None,
        _ => Some(json_reply(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no route {path:?}: this port serves only {}; IDs are on 127.0.0.1", probe_routes_text()) }),
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
pub(crate) async fn serve(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    serve_routes(listener, api, shutdown, drain, false, API_LIMITS).await
}

/// Why the API's listeners could not be bound, naming the flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("cannot listen on --listen {addr}: {source}")]
    Tcp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// `--listen-unix`: a bad path, or a socket another process serves.
    #[error(transparent)]
    Socket(#[from] SocketError),
}

/// Where the ID API is served, in every mode: the loopback TCP address (`--listen`) and,
/// when asked, the Unix socket (`--listen-unix`, mode [`SOCKET_MODE`] so the app's
/// non-root user can connect). Bound before anything else starts, so that a bad flag
/// fails the start with a message that names it.
pub(crate) struct ApiListeners {
    tcp: TcpListener,
    unix: Option<UnixListener>,
}

impl ApiListeners {
    pub(crate) async fn bind(
        listen: SocketAddr,
        unix: Option<&Path>,
    ) -> Result<ApiListeners, ListenError> {
        let tcp = TcpListener::bind(listen)
            .await
            .map_err(|source| ListenError::Tcp {
                addr: listen,
                source,
            })?;
        let unix = unix
            .map(|path| unix_socket::bind(path, SOCKET_MODE))
            .transpose()?;
        Ok(ApiListeners { tcp, unix })
    }

    /// The TCP address actually bound (the port, when `--listen` asked for port 0).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.tcp.local_addr().ok()
    }
}

/// Serves `api` on the loopback listener and, when given, on the Unix socket too (the
/// same routes), until `shutdown` is triggered; both then drain. The socket file is
/// removed at the end.
pub(crate) async fn serve_api(
    listeners: ApiListeners,
    api: Arc<Api>,
    shutdown: ShutdownToken,
    drain: Duration,
) {
    let ApiListeners { tcp, unix } = listeners;
    let Some(unix) = unix else {
        return serve(tcp, api, shutdown.triggered(), drain).await;
    };
    let socket_path = unix
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| p.to_path_buf()));
    tokio::join!(
        serve_loop(
            "sidecar API (TCP)",
            tcp,
            api.clone(),
            shutdown.triggered(),
            drain,
            API_LIMITS
        ),
        serve_loop(
            "sidecar API (socket)",
            unix,
            api,
            shutdown.triggered(),
            drain,
            API_LIMITS
        ),
    );
    if let Some(path) = socket_path
        && let Err(e) = std::fs::remove_file(&path)
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove the socket file");
    }
}

/// How long the probe port lets a probe in flight finish once it is closed (probes are
/// answered at once; a held `/readyz?wait=` returns as soon as the sidecar is stopping).
const PROBE_CLOSE_DRAIN: Duration = Duration::from_secs(1);
/// How long after its drain the probe server may take to return before it is aborted.
const PROBE_STOP_SLACK: Duration = Duration::from_secs(1);

/// The probe port of a sidecar in a pod: `/healthz`, `/readyz` and `/metrics` only
/// ([`ProbeRoutes`]), for the kubelet and Prometheus, who reach the pod IP while IDs stay
/// on localhost.
///
/// It is served until [`ProbeServer::close`], not until the shutdown begins as the ID API
/// is: the kubelet probes a container until it has ended, and a port closed while the
/// sidecar still drains and hands its slot back reads as failed liveness and readiness
/// probes ("connection refused", a Warning Event on every deleted pod). Meanwhile
/// `/healthz` answers alive, and `/readyz` 503 "stopping" once the drain is over.
pub(crate) struct ProbeServer {
    close: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl ProbeServer {
    /// Serves the probe routes of `api` on `listener` until [`ProbeServer::close`].
    pub(crate) fn spawn(listener: TcpListener, api: Arc<Api>) -> ProbeServer {
        let (close, closed) = tokio::sync::oneshot::channel::<()>();
        let closed = async move {
            // A dropped sender (the process is ending anyway) closes the port too.
            let _ = closed.await;
        };
        let task = tokio::spawn(serve_routes(
            listener,
            api,
            closed,
            PROBE_CLOSE_DRAIN,
            true,
            PROBE_LIMITS,
        ));
        ProbeServer { close, task }
    }

    /// Stops accepting, lets the probes in flight finish (for a bounded time) and returns.
    pub(crate) async fn close(self) {
        let _ = self.close.send(());
        let deadline = tokio::time::Instant::now() + PROBE_CLOSE_DRAIN + PROBE_STOP_SLACK;
        drain(vec![("probe server", self.task)], deadline).await;
    }
}

async fn serve_routes(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    probes_only: bool,
    limits: Limits,
) {
    if probes_only {
        let routes = Arc::new(ProbeRoutes(api));
        serve_loop("sidecar probes", listener, routes, shutdown, drain, limits).await
    } else {
        serve_loop("sidecar API (TCP)", listener, api, shutdown, drain, limits).await
    }
}

/// The loop itself ([`kubeflake_runtime::serve`]): accepts connections on `listener`
/// (TCP or a Unix socket) and answers their requests with `routes` until `shutdown`
/// completes, then drains for up to `drain`.
pub(crate) async fn serve_loop<L: Listener, R: Routes>(
    name: &'static str,
    listener: L,
    routes: Arc<R>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    limits: Limits,
) {
    let options = ServeOptions {
        name,
        limits,
        drain,
    };
    let handler = move |req: Request<Incoming>| {
        let routes = routes.clone();
        async move { routes.answer(req).await }
    };
    kubeflake_runtime::serve::serve(listener, options, handler, shutdown).await
}

#[cfg(test)]
mod tests;
