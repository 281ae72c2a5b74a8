//! The one HTTP/1 serve loop of every kubeflake server (the sidecar's API and probes,
//! the operator's probes and metrics, the operator's webhook over TLS).
//!
//! What it guarantees, whatever it serves ([`Limits`] sets each bound):
//! - at most [`Limits::max_connections`] open connections on the listener; a newcomer
//!   beyond it closes the connection that has waited on its client for longest (idle,
//!   half a header, a slow body: [`conns`]), and while every connection is being answered
//!   the loop stops accepting until one ends, so a fresh request always gets through and
//!   flooding one listener cannot take the file descriptors of another;
//! - a request's header is at most [`Limits::max_header_bytes`] (hyper answers 431 past
//!   it) and must be complete [`Limits::header_read_timeout`] after its first byte; an
//!   idle connection is closed after [`Limits::idle_timeout`]; a body is read with
//!   [`read_body`], bounded in size and time;
//! - a failing `accept()` backs off ([`AcceptBackoff`]) instead of spinning at full CPU,
//!   and when it fails for want of file descriptors (EMFILE) the longest-waiting
//!   connection is closed to free one;
//! - on shutdown the listener closes at once and open connections get
//!   [`ServeOptions::drain`] to finish their requests.

mod body;
pub mod conns;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

pub use body::{BodyError, BodyLimits, read_body};
use conns::{ConnActivity, Conns, Phase, Tracked};

use crate::reply::Reply;

/// How a server treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Names the server in logs ("sidecar API", "webhook", ...).
    pub name: &'static str,
    /// What one listener lets its clients hold.
    pub limits: Limits,
    /// Longest time open connections get to finish after shutdown.
    pub drain: Duration,
}

/// What one listener lets its clients hold, so that neither many connections nor slow
/// ones can take the process's memory or file descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once on the listener.
    pub max_connections: usize,
    /// Largest request header, in bytes (hyper's read buffer; at least 8 KiB, hyper's
    /// floor, which [`Limits::max_header_bytes`] enforces).
    pub max_header_bytes: usize,
    /// Longest time from a request's first byte to its complete header.
    pub header_read_timeout: Duration,
    /// Longest time a connection may stay open with no request (after it is accepted, or
    /// after an answer).
    pub idle_timeout: Duration,
}

/// hyper refuses a smaller read buffer.
const HYPER_MIN_BUF: usize = 8 * 1024;

impl Limits {
    /// The bounds of a kubeflake server unless it says otherwise: 1,024 connections, a
    /// 16 KiB header (a kubeflake request is a few hundred bytes; hyper's default,
    /// ~400 KiB, let 200 half-sent headers take 80 MB), 5 s to send it, 30 s idle (as long
    /// as hyper's own default, longer than common client pools keep idle connections).
    pub const DEFAULT: Limits = Limits {
        max_connections: 1024,
        max_header_bytes: 16 * 1024,
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
    };

    /// The same with at most `max` connections.
    pub const fn with_max_connections(self, max: usize) -> Limits {
        Limits {
            max_connections: max,
            ..self
        }
    }

    /// The header bound hyper is given: never under its floor.
    fn hyper_buf(&self) -> usize {
        self.max_header_bytes.max(HYPER_MIN_BUF)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
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
    let conns = Conns::new(options.name, options.limits.max_connections);
    let mut backoff = AcceptBackoff::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = accept_with_room(&listener, &conns, &mut backoff, options.name) => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer, registered) = accepted;
        let (upgrade, handler, watcher) = (upgrade.clone(), handler.clone(), graceful.watcher());
        tokio::spawn(serve_connection(
            stream, peer, registered, options, upgrade, handler, watcher,
        ));
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!(server = options.name, "all connections drained"),
        () = tokio::time::sleep(options.drain) => tracing::warn!(server = options.name, drain = ?options.drain, "drain timeout: closing remaining connections"),
    }
}

/// Waits until the listener has room ([`Conns::room`]), then accepts the next connection
/// and registers it (when every connection came to be answered meanwhile, the newcomer
/// waits for room, not closed), backing off after each failure; a failure for want of
/// file descriptors also closes the connection that has waited on its client for longest.
async fn accept_with_room<L: Listener>(
    listener: &L,
    conns: &Arc<Conns>,
    backoff: &mut AcceptBackoff,
    name: &'static str,
) -> (L::Stream, L::Peer, conns::Registered) {
    loop {
        conns.room().await;
        match listener.accept().await {
            Ok((stream, peer)) => {
                backoff.succeeded();
                loop {
                    if let Some(registered) = conns.admit() {
                        return (stream, peer, registered);
                    }
                    conns.room().await;
                }
            }
            Err(e) => {
                let out_of_files = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                let freed = out_of_files && conns.close_one("out of file descriptors");
                let pause = backoff.failed();
                tracing::warn!(server = name, error = %e, freed_one = freed, pause_ms = pause.as_millis() as u64, "accept failed; backing off");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Serves one accepted connection: upgraded, then HTTP/1 until it ends, is closed to make
/// room, or stays too long in a phase that waits on its client.
async fn serve_connection<S, P, U, UF, IO, H, F>(
    stream: S,
    peer: P,
    registered: conns::Registered,
    options: ServeOptions,
    upgrade: U,
    handler: H,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: Send + 'static,
    P: std::fmt::Debug + Send + 'static,
    U: Fn(S, P) -> UF + Send + 'static,
    UF: Future<Output = Option<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Reply> + Send + 'static,
{
    let peer_text = format!("{peer:?}");
    let activity = registered.activity.clone();
    let limits = options.limits;
    let io = tokio::select! {
        io = upgrade(stream, peer) => io,
        () = registered.close.cancelled() => None,
    };
    let Some(io) = io else {
        return;
    };
    let in_service = activity.clone();
    let service = service_fn(move |mut req: Request<Incoming>| {
        in_service.set(Phase::Busy);
        req.extensions_mut()
            .insert(ConnActivity(in_service.clone()));
        let reply = handler(req);
        let done = in_service.clone();
        async move {
            let reply = reply.await;
            done.set(Phase::Idle);
            Ok::<_, Infallible>(reply)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // The header and idle bounds are the watchdog's below: hyper's own header timer
        // runs from the start of the idle wait, so it would count idle time against a
        // request's header.
        .header_read_timeout(None)
        .max_buf_size(limits.hyper_buf())
        .serve_connection(TokioIo::new(Tracked::new(io, activity.clone())), service);
    tokio::select! {
        served = watcher.watch(conn) => if let Err(e) = served {
            tracing::debug!(server = options.name, peer = %peer_text, error = %e, "connection ended with an error");
        },
        () = registered.close.cancelled() => {}
        what = activity.overdue(&limits) => {
            tracing::debug!(server = options.name, peer = %peer_text, waiting = what, "connection closed: its client took too long");
        }
    }
    drop(registered);
}

#[cfg(test)]
mod tests;
