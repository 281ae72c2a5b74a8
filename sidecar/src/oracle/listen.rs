//! The oracle's listener: it takes the forwarded groups of the sequence's other sidecars
//! on the pod IP, in the wire format of [`kubeflake_crds::strict_oracle::wire`], and
//! answers each from the term ([`answer`]).
//!
//! Peers prove who they are (docs/safety.md rule 16): the hello carries a token bound to
//! the forwarder's pod, which the oracle checks against the API server's keys
//! ([`crate::peer_token`]), and the oracle serves the connection only while that pod is
//! among the claimants of the oracle Lease it holds (the operator lists the counter's
//! claimants there, in the same pass: the pods labelled for the sequence). It answers with
//! its welcome, its own pod's token, before the first reply. Anything else is refused and
//! closed: no token, a token for another audience (the pod's own API token included),
//! another namespace, a forged or expired one (401), a pod not (yet) listed (503: the
//! forwarder asks again). Refusals are counted (`kubeflake_strict_peer_refusals_total`)
//! and logged at most once a minute per peer. What a stranger can still do is bounded
//! here and in the term:
//! - every value a claimant gets passes the term's raise check (term.rs): it can burn
//!   values up to [`RAISE_LIMIT`](crate::segment::buffer::RAISE_LIMIT) (gaps), never raise
//!   the counter towards its end;
//! - a connection holds one of [`Limits::connections`] slots only once it sent a valid
//!   hello and its token was accepted. Before that it is one of at most
//!   [`Limits::greeting`] connections waiting for their hello, each for at most
//!   [`HELLO_TIMEOUT`]; a new connection that finds them all taken closes the oldest. A
//!   forwarder sends its hello with its first request, so it leaves that queue at once:
//!   strangers that never say hello cannot keep it out.
//! - no write waits on a peer that does not read for more than [`WRITE_TIMEOUT`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubeflake_crds::strict_oracle::ForwardRequest;
use kubeflake_crds::strict_oracle::wire::{
    self, HELLO_HEAD_LEN, Hello, MAX_FORWARD_COUNT, REQUEST_LEN, Reply, TOKEN_LEN_LEN, Welcome,
};
use kubeflake_runtime::serve::AcceptBackoff;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};

use super::Oracle;
use super::admit;
use crate::peer_token::Side;
use crate::segment::SegmentRefusal;

/// The oracle closes a connection with no request for this long (a forwarder that
/// vanished without closing, e.g. its node gone).
pub(super) const SERVER_IDLE: Duration = Duration::from_secs(120);
/// How long a new connection may take to send its hello (a forwarder sends it with its
/// first request, in one write).
pub(super) const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one reply may take to be written (a peer that stopped reading).
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often at most a full greeting queue or full slots are logged.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How many connections the listener keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections that sent a valid hello (one per forwarding sidecar).
    pub(crate) connections: usize,
    /// Connections still waiting for their hello; a new one closes the oldest.
    pub(crate) greeting: usize,
}

/// The oracle's limits.
pub(crate) const LIMITS: Limits = Limits {
    connections: 4096,
    greeting: 64,
};

/// The oracle's listener: accepts forwarding connections until `stop` says so.
pub(crate) async fn listen(
    oracle: Arc<Oracle>,
    listener: TcpListener,
    stop: watch::Receiver<bool>,
) {
    listen_with(oracle, listener, stop, LIMITS).await;
}

/// [`listen`] with its own [`Limits`].
pub(crate) async fn listen_with(
    oracle: Arc<Oracle>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    limits: Limits,
) {
    let slots = Arc::new(Slots {
        free: Arc::new(Semaphore::new(limits.connections)),
        limit: limits.connections,
        warned: RateLimit::default(),
    });
    let greeting = Arc::new(Greeting::new(limits.greeting));
    let mut backoff = AcceptBackoff::default();
    let warned = RateLimit::default();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = backoff.accept(&listener, "strict oracle") => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (ticket, closed_oldest) = greeting.enter();
        if closed_oldest && warned.due() {
            tracing::warn!(
                ?peer,
                limit = limits.greeting,
                "strict oracle: {} connections are waiting for their hello; closed the oldest \
                 (something that is not a forwarding sidecar may be connecting to the oracle \
                 port)",
                limits.greeting
            );
        }
        let oracle = oracle.clone();
        let stop = stop.clone();
        let slots = slots.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(&oracle, stream, stop, ticket, slots, peer).await {
                tracing::debug!(?peer, error = %e, "strict oracle: forwarding connection ended");
            }
        });
    }
}

/// The slots of connections that sent a valid hello.
struct Slots {
    free: Arc<Semaphore>,
    limit: usize,
    warned: RateLimit,
}

/// Whether a warning is due: at most one per [`WARN_EVERY`] (a stranger must not flood
/// the log).
#[derive(Default)]
struct RateLimit(Mutex<Option<Instant>>);

impl RateLimit {
    fn due(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|w| w.elapsed() >= WARN_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

/// The connections waiting for their hello, oldest first.
struct Greeting {
    limit: usize,
    queue: Mutex<GreetingQueue>,
}

#[derive(Default)]
struct GreetingQueue {
    next_id: u64,
    /// Each waiting connection's id and the sender whose drop closes it.
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// A connection's place among those waiting for their hello; leaving it (drop) frees it.
struct Ticket {
    id: u64,
    /// Resolves when a newer connection took this one's place.
    closed: oneshot::Receiver<()>,
    greeting: Arc<Greeting>,
}

impl Greeting {
    fn new(limit: usize) -> Greeting {
        Greeting {
            limit: limit.max(1),
            queue: Mutex::default(),
        }
    }

    /// A place for a new connection, and whether the oldest one was closed for it.
    fn enter(self: &Arc<Self>) -> (Ticket, bool) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut closed_oldest = false;
        while q.waiting.len() >= self.limit {
            // Dropping its sender ends the oldest connection's wait.
            q.waiting.pop_front();
            closed_oldest = true;
        }
        let id = q.next_id;
        q.next_id += 1;
        let (tx, closed) = oneshot::channel();
        q.waiting.push_back((id, tx));
        let ticket = Ticket {
            id,
            closed,
            greeting: self.clone(),
        };
        (ticket, closed_oldest)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut q = self
            .greeting
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(at) = q.waiting.iter().position(|(id, _)| *id == self.id) {
            q.waiting.remove(at);
        }
    }
}

/// Why the oracle ended a forwarding connection (logged at debug: forwarders reconnect).
#[derive(Debug, thiserror::Error)]
enum ConnectionEnd {
    #[error("reading or writing: {0}")]
    Io(#[from] std::io::Error),
    #[error("no hello within {HELLO_TIMEOUT:?}")]
    NoHello,
    #[error("closed before its hello: newer connections took its place among those waiting")]
    Displaced,
    #[error("refused the peer: {0}")]
    Refused(String),
    #[error("every connection slot is in use")]
    NoSlot,
    #[error("idle for {SERVER_IDLE:?}")]
    Idle,
    #[error("the peer read no reply for {WRITE_TIMEOUT:?}")]
    NotReading,
}

/// One forwarding sidecar's connection: its hello and token, the welcome, then request
/// after request.
async fn connection(
    oracle: &Arc<Oracle>,
    mut stream: TcpStream,
    mut stop: watch::Receiver<bool>,
    mut ticket: Ticket,
    slots: Arc<Slots>,
    address: std::net::SocketAddr,
) -> Result<(), ConnectionEnd> {
    stream.set_nodelay(true)?;
    let hello = tokio::select! {
        read = tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut stream)) => {
            read.map_err(|_| ConnectionEnd::NoHello)?
        }
        _ = &mut ticket.closed => return Err(ConnectionEnd::Displaced),
    };
    let hello = match hello? {
        Ok(hello) if hello.sequence == oracle.config.sequence => hello,
        Ok(hello) => {
            let message = format!(
                "this sidecar serves strict sequence {}, not {}",
                oracle.config.sequence, hello.sequence
            );
            return refuse(&mut stream, 400, message).await;
        }
        Err(e) => return refuse(&mut stream, 400, e.to_string()).await,
    };
    // Still among the connections waiting: a token being checked keeps no slot.
    let ip = Some(address.ip());
    let admitted = tokio::select! {
        admitted = admit::admit(oracle, &hello.token, ip) => admitted,
        _ = &mut ticket.closed => return Err(ConnectionEnd::Displaced),
    };
    drop(ticket);
    let peer = match admitted {
        Ok(peer) => peer,
        Err((status, message)) => return refuse(&mut stream, status, message).await,
    };
    let Ok(_slot): Result<OwnedSemaphorePermit, _> = slots.free.clone().try_acquire_owned() else {
        if slots.warned.due() {
            tracing::warn!(
                limit = slots.limit,
                "strict oracle: every forwarding connection slot is in use; refusing new ones"
            );
        }
        let message = "this oracle's forwarding connections are all in use; retry shortly";
        send(
            &mut stream,
            &Reply::Refused {
                status: 503,
                message: message.into(),
            },
        )
        .await?;
        return Err(ConnectionEnd::NoSlot);
    };
    let welcome = match oracle.peers.own.read().await {
        Ok(token) => Welcome { token }.encode(),
        Err(e) => {
            oracle
                .peers
                .log
                .refused(Side::Forwarder, ip, e.reason(), &e.to_string());
            return refuse(
                &mut stream,
                503,
                format!("the oracle cannot prove who it is: {e}"),
            )
            .await;
        }
    };
    match welcome {
        Ok(bytes) => write(&mut stream, &bytes).await?,
        Err(e) => return refuse(&mut stream, 503, format!("the oracle's own token: {e}")).await,
    }
    let mut frame = [0u8; REQUEST_LEN];
    loop {
        tokio::select! {
            read = tokio::time::timeout(SERVER_IDLE, stream.read_exact(&mut frame)) => {
                read.map_err(|_| ConnectionEnd::Idle)??;
            }
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        // Checked again for every request: a pod no longer listed, or a token expired
        // on a long-lived connection, is served no further.
        if let Err((status, message)) = admit::still_admitted(oracle, &peer, ip) {
            return refuse(&mut stream, status, message).await;
        }
        let reply = answer(oracle, ForwardRequest::decode(&frame)).await;
        send(&mut stream, &reply).await?;
    }
}

/// Sends one refusal and ends the connection.
async fn refuse(stream: &mut TcpStream, status: u16, message: String) -> Result<(), ConnectionEnd> {
    send(
        stream,
        &Reply::Refused {
            status,
            message: message.clone(),
        },
    )
    .await?;
    Err(ConnectionEnd::Refused(message))
}

/// Writes bytes, waiting at most [`WRITE_TIMEOUT`] for the peer to take them.
async fn write(stream: &mut TcpStream, bytes: &[u8]) -> Result<(), ConnectionEnd> {
    tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(bytes))
        .await
        .map_err(|_| ConnectionEnd::NotReading)??;
    Ok(())
}

/// Writes one reply, waiting at most [`WRITE_TIMEOUT`] for the peer to take it.
async fn send(stream: &mut TcpStream, reply: &Reply) -> Result<(), ConnectionEnd> {
    tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&reply.encode()))
        .await
        .map_err(|_| ConnectionEnd::NotReading)??;
    Ok(())
}

pub(super) async fn read_hello<R: AsyncRead + Unpin>(
    stream: &mut R,
) -> std::io::Result<Result<Hello, wire::WireError>> {
    let mut head = [0u8; HELLO_HEAD_LEN];
    stream.read_exact(&mut head).await?;
    let len = match Hello::name_len(&head) {
        Ok(len) => len,
        Err(e) => return Ok(Err(e)),
    };
    let mut name = vec![0u8; len];
    stream.read_exact(&mut name).await?;
    let mut token_len = [0u8; TOKEN_LEN_LEN];
    stream.read_exact(&mut token_len).await?;
    let len = match Hello::token_len(&token_len) {
        Ok(len) => len,
        Err(e) => return Ok(Err(e)),
    };
    let mut token = vec![0u8; len];
    stream.read_exact(&mut token).await?;
    Ok(Hello::from_parts(&name, &token))
}

/// The oracle's answer to one forwarded group. Its `min` is held to the raise limit by
/// the term, as every request's is (409, nothing changes).
pub(crate) async fn answer(oracle: &Arc<Oracle>, request: ForwardRequest) -> Reply {
    if request.count == 0 || request.count > MAX_FORWARD_COUNT {
        return Reply::Refused {
            status: 400,
            message: format!(
                "count must be 1 to {MAX_FORWARD_COUNT}, not {}",
                request.count
            ),
        };
    }
    match oracle.serve_forwarded(request).await {
        Ok(reply) => Reply::Values(reply),
        Err(refusal) => Reply::Refused {
            status: match refusal {
                SegmentRefusal::AfterAboveCounter { .. } => 409,
                _ => 503,
            },
            message: refusal.to_string(),
        },
    }
}
