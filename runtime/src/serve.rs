//! The one HTTP/1 serve loop of every kubeflake server (the sidecar's API and probes,
//! the operator's probes and metrics, the operator's webhook over TLS).
//!
//! What it guarantees, whatever it serves:
//! - a client that sends half a request header is disconnected after
//!   [`ServeOptions::header_read_timeout`] (a slow client cannot hold a connection);
//! - a failing `accept()` (typically EMFILE, out of file descriptors) backs off
//!   ([`AcceptBackoff`]) instead of spinning at full CPU;
//! - on shutdown the listener closes at once and open connections get
//!   [`ServeOptions::drain`] to finish their requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::reply::Reply;

/// How a server treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Names the server in logs ("sidecar API", "webhook", ...).
    pub name: &'static str,
    /// Longest time a client may take to send a request's header.
    pub header_read_timeout: Duration,
    /// Longest time open connections get to finish after shutdown.
    pub drain: Duration,
}

/// Backs off after a failed `accept()`: 10 ms, doubling, at most 1 s; back to nothing
/// after a success.
#[derive(Debug, Default)]
pub struct AcceptBackoff(Duration);

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    /// The pause after one more consecutive failure.
    pub fn failed(&mut self) -> Duration {
        self.0 = (self.0 * 2).clamp(Self::FIRST, Self::MAX);
        self.0
    }

    pub fn succeeded(&mut self) {
        self.0 = Duration::ZERO;
    }

    /// Accepts the next connection, pausing after each failure (logged with `name`).
    pub async fn accept<L: Listener>(&mut self, listener: &L, name: &str) -> (L::Stream, L::Peer) {
        loop {
            match listener.accept().await {
                Ok(accepted) => {
                    self.succeeded();
                    return accepted;
                }
                Err(e) => {
                    let pause = self.failed();
                    tracing::warn!(server = name, error = %e, pause_ms = pause.as_millis() as u64, "accept failed; backing off");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

/// What the serve loop accepts connections from: TCP or a Unix domain socket.
pub trait Listener: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Who connected, for logs.
    type Peer: std::fmt::Debug + Send + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<(Self::Stream, Self::Peer)>> + Send;
    /// Prepares an accepted stream (e.g. TCP_NODELAY).
    fn prepare(stream: &Self::Stream);
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    type Peer = SocketAddr;
    fn accept(&self) -> impl Future<Output = std::io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }
    fn prepare(stream: &TcpStream) {
        // Small replies: send them now rather than waiting for more to batch.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    }
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    type Peer = ();
    async fn accept(&self) -> std::io::Result<(UnixStream, ())> {
        UnixListener::accept(self)
            .await
            .map(|(stream, _)| (stream, ()))
    }
    fn prepare(_stream: &UnixStream) {}
}

/// Serves `handler` on `listener` (TCP or Unix socket) until `shutdown` completes,
/// then drains.
pub async fn serve<L, H, F>(
    listener: L,
    options: ServeOptions,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Reply> + Send + 'static,
{
    serve_upgraded(
        listener,
        options,
        |stream: L::Stream, _peer| async move {
            L::prepare(&stream);
            Some(stream)
        },
        handler,
        shutdown,
    )
    .await
}

/// Like [`serve`], with each accepted stream first turned into the connection to serve by
/// `upgrade` (for example a TLS handshake under a timeout); `None` drops the stream.
pub async fn serve_upgraded<L, U, UF, IO, H, F>(
    listener: L,
    options: ServeOptions,
    upgrade: U,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener,
    U: Fn(L::Stream, L::Peer) -> UF + Clone + Send + 'static,
    UF: Future<Output = Option<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Reply> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let mut backoff = AcceptBackoff::default();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = backoff.accept(&listener, options.name) => accepted,
            () = &mut shutdown => break,
        };
        let (upgrade, handler, watcher) = (upgrade.clone(), handler.clone(), graceful.watcher());
        tokio::spawn(async move {
            let peer_text = format!("{peer:?}");
            let Some(io) = upgrade(stream, peer).await else {
                return;
            };
            let service = service_fn(move |req| {
                let reply = handler(req);
                async move { Ok::<_, Infallible>(reply.await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(options.header_read_timeout)
                .serve_connection(TokioIo::new(io), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(server = options.name, peer = %peer_text, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!(server = options.name, "all connections drained"),
        () = tokio::time::sleep(options.drain) => tracing::warn!(server = options.name, drain = ?options.drain, "drain timeout: closing remaining connections"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply;
    use hyper::StatusCode;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn options(header_read_timeout: Duration) -> ServeOptions {
        ServeOptions {
            name: "test",
            header_read_timeout,
            drain: Duration::from_secs(5),
        }
    }

    async fn ok(_req: Request<Incoming>) -> Reply {
        reply::body(StatusCode::OK, reply::TEXT, "ok")
    }

    async fn started(
        header_read_timeout: Duration,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, options(header_read_timeout), ok, async {
            let _ = stopped.await;
        }));
        (addr, stop, server)
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
        let (addr, stop, server) = started(Duration::from_millis(200)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localh")
            .await
            .unwrap();
        let mut rest = Vec::new();
        // Without the timeout the read would wait forever; the bound only keeps a broken
        // build from hanging the test run.
        let read =
            tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "the connection is still open after a partial request header"
        );
        let _ = stop.send(());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn after_shutdown_the_listener_is_closed_and_the_loop_returns() {
        let (addr, stop, server) = started(Duration::from_secs(10)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
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
        let server = tokio::spawn(serve(
            listener,
            options(Duration::from_secs(10)),
            ok,
            async {
                let _ = stopped.await;
            },
        ));
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
            options(Duration::from_secs(10)),
            |_stream: TcpStream, _peer| async { None::<TcpStream> },
            ok,
            std::future::pending(),
        ));
        let mut client = TcpStream::connect(addr).await.unwrap();
        let _ = client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let mut answer = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut answer)).await;
        server.abort();
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "{read:?} {answer:?}"
        );
    }
}
