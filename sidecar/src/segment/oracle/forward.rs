//! Forwarding: how a sidecar that is not the oracle gets strict values from it, and how the
//! oracle takes those requests. One TCP connection per forwarding sidecar, in the wire
//! format of [`kubeflake_crds::strict_oracle::wire`]; one request in flight on it, carrying
//! every request queued meanwhile ([`ForwardRequest`]); the answer is one range
//! ([`ForwardReply`]) the sender hands out in queue order.
//!
//! The listener is on the pod IP (other pods must reach it) and speaks only that format.
//! Anyone who can reach it can burn values (gaps, never a duplicate or a value out of
//! order); restricting who reaches it is a NetworkPolicy's job (docs/strict.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeflake_crds::strict_oracle::wire::{
    self, HELLO_HEAD_LEN, Hello, MAX_FORWARD_COUNT, REFUSAL_HEAD_LEN, REQUEST_LEN, Reply,
    ReplyKind, VALUES_LEN,
};
use kubeflake_crds::strict_oracle::{ForwardReply, ForwardRequest};
use kubeflake_runtime::serve::AcceptBackoff;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::Oracle;
use crate::segment::SegmentRefusal;

/// How long one forwarded request may take (connect included).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
/// A forwarder makes a new connection rather than use one idle this long (the oracle
/// closes connections idle for [`SERVER_IDLE`], so the forwarder never writes into one
/// the oracle is closing).
const CLIENT_IDLE: Duration = Duration::from_secs(60);
/// The oracle closes a connection with no request for this long (a forwarder that
/// vanished without closing, e.g. its node gone).
const SERVER_IDLE: Duration = Duration::from_secs(120);
/// How long a new connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Forwarding connections the oracle keeps open at once (one per sidecar of the sequence).
const MAX_CONNECTIONS: usize = 4096;

/// Why a forwarded request got no values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("the strict oracle at {address} could not be reached: {message}")]
    Unreachable { address: String, message: String },
    #[error("the strict oracle at {address} refused ({status}): {message}")]
    Refused {
        address: String,
        status: u16,
        message: String,
    },
    #[error("the strict oracle at {address} answered {count} values for {asked}: not used")]
    BadReply {
        address: String,
        count: u64,
        asked: u64,
    },
}

/// What one exchange on a connection ended with, before it is judged.
enum Exchange {
    Answered(Reply),
    /// The connection failed; `before_reply` when nothing of the answer was read.
    Failed {
        message: String,
        before_reply: bool,
    },
}

struct Connection {
    address: String,
    stream: TcpStream,
    last_used: Instant,
}

/// The forwarding sidecar's connection to the oracle (re-made when the address changes,
/// the connection breaks, or it sat idle).
pub struct Forwarder {
    sequence: String,
    conn: Option<Connection>,
}

impl Forwarder {
    pub fn new(sequence: &str) -> Forwarder {
        Forwarder {
            sequence: sequence.to_string(),
            conn: None,
        }
    }

    /// Sends `request` to the oracle at `address` and waits for its range.
    pub async fn forward(
        &mut self,
        address: &str,
        request: ForwardRequest,
    ) -> Result<ForwardReply, ForwardError> {
        let unreachable = |message: String| ForwardError::Unreachable {
            address: address.to_string(),
            message,
        };
        let deadline = tokio::time::Instant::now() + FORWARD_TIMEOUT;
        let mut reused = self.reusable(address);
        let reply = loop {
            let exchange = tokio::time::timeout_at(deadline, self.exchange(address, request));
            match exchange.await {
                Ok(Exchange::Answered(reply)) => break reply,
                Ok(Exchange::Failed {
                    message,
                    before_reply,
                }) => {
                    self.conn = None;
                    // A kept connection the oracle closed meanwhile (it restarted, or
                    // dropped it idle): once more on a new one. Values it may have taken
                    // for the lost request are a gap; the new ones are taken later, still
                    // inside every waiting request's call.
                    if reused && before_reply {
                        reused = false;
                        continue;
                    }
                    return Err(unreachable(message));
                }
                Err(_) => {
                    self.conn = None;
                    return Err(unreachable(format!("no answer within {FORWARD_TIMEOUT:?}")));
                }
            }
        };
        match reply {
            Reply::Refused { status, message } => {
                // The oracle may close after a refusal (a bad hello): start afresh.
                self.conn = None;
                Err(ForwardError::Refused {
                    address: address.to_string(),
                    status,
                    message,
                })
            }
            Reply::Values(reply) => {
                let count = reply.end.saturating_sub(reply.start);
                if count != request.count || reply.start < request.min {
                    self.conn = None;
                    return Err(ForwardError::BadReply {
                        address: address.to_string(),
                        count,
                        asked: request.count,
                    });
                }
                Ok(reply)
            }
        }
    }

    /// Whether the kept connection goes to `address` and may be used again.
    fn reusable(&mut self, address: &str) -> bool {
        let keep = self
            .conn
            .as_ref()
            .is_some_and(|c| c.address == address && c.last_used.elapsed() < CLIENT_IDLE);
        if !keep {
            self.conn = None;
        }
        keep
    }

    async fn exchange(&mut self, address: &str, request: ForwardRequest) -> Exchange {
        let failed = |message: String| Exchange::Failed {
            message,
            before_reply: true,
        };
        // A new connection starts with the hello, sent in one write with the first request.
        let mut opening = None;
        if self.conn.is_none() {
            let mut hello = match (Hello {
                sequence: self.sequence.clone(),
            })
            .encode()
            {
                Ok(h) => h,
                Err(e) => return failed(e.to_string()),
            };
            let stream = match TcpStream::connect(address).await {
                Ok(s) => s,
                Err(e) => return failed(e.to_string()),
            };
            if let Err(e) = stream.set_nodelay(true) {
                return failed(e.to_string());
            }
            hello.extend_from_slice(&request.encode());
            opening = Some(hello);
            self.conn = Some(Connection {
                address: address.to_string(),
                stream,
                last_used: Instant::now(),
            });
        }
        let Some(conn) = self.conn.as_mut() else {
            return failed("no connection".into());
        };
        let request = request.encode();
        let frame: &[u8] = opening.as_deref().unwrap_or(&request);
        if let Err(e) = conn.stream.write_all(frame).await {
            return failed(e.to_string());
        }
        conn.last_used = Instant::now();
        let tag = match conn.stream.read_u8().await {
            Ok(t) => t,
            Err(e) => return failed(e.to_string()),
        };
        let mid_reply = |message: String| Exchange::Failed {
            message,
            before_reply: false,
        };
        match read_reply(&mut conn.stream, tag).await {
            Ok(reply) => Exchange::Answered(reply),
            Err(message) => mid_reply(message),
        }
    }
}

/// The rest of a reply after its tag.
pub(super) async fn read_reply<R: AsyncRead + Unpin>(
    stream: &mut R,
    tag: u8,
) -> Result<Reply, String> {
    match Reply::kind(tag).map_err(|e| e.to_string())? {
        ReplyKind::Values => {
            let mut body = [0u8; VALUES_LEN];
            stream
                .read_exact(&mut body)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Reply::Values(ForwardReply::decode(&body)))
        }
        ReplyKind::Refused => {
            let mut head = [0u8; REFUSAL_HEAD_LEN];
            stream
                .read_exact(&mut head)
                .await
                .map_err(|e| e.to_string())?;
            let (status, len) = Reply::refusal_head(&head).map_err(|e| e.to_string())?;
            let mut text = vec![0u8; len];
            stream
                .read_exact(&mut text)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Reply::Refused {
                status,
                message: String::from_utf8_lossy(&text).into_owned(),
            })
        }
    }
}

/// The oracle's listener: accepts forwarding connections until `stop` says so.
pub async fn listen(oracle: Arc<Oracle>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = backoff.accept(&listener, "strict oracle") => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                ?peer,
                limit = MAX_CONNECTIONS,
                "strict oracle: too many forwarding connections; closing the new one"
            );
            continue;
        };
        let oracle = oracle.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(&oracle, stream, stop).await {
                tracing::debug!(?peer, error = %e, "strict oracle: forwarding connection ended");
            }
            drop(slot);
        });
    }
}

/// Why the oracle ended a forwarding connection (logged at debug: forwarders reconnect).
#[derive(Debug, thiserror::Error)]
enum ConnectionEnd {
    #[error("reading or writing: {0}")]
    Io(#[from] std::io::Error),
    #[error("no hello within {HELLO_TIMEOUT:?}")]
    NoHello,
    #[error("a bad hello: {0}")]
    BadHello(String),
    #[error("idle for {SERVER_IDLE:?}")]
    Idle,
}

/// One forwarding sidecar's connection: its hello, then request after request.
async fn connection(
    oracle: &Arc<Oracle>,
    mut stream: TcpStream,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnectionEnd> {
    stream.set_nodelay(true)?;
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut stream))
        .await
        .map_err(|_| ConnectionEnd::NoHello)?;
    let refused = match hello {
        Ok(Ok(hello)) if hello.sequence == oracle.config.sequence => None,
        Ok(Ok(hello)) => Some(format!(
            "this sidecar serves strict sequence {}, not {}",
            oracle.config.sequence, hello.sequence
        )),
        Ok(Err(e)) => Some(e.to_string()),
        Err(e) => return Err(e.into()),
    };
    if let Some(message) = refused {
        let reply = Reply::Refused {
            status: 400,
            message: message.clone(),
        };
        stream.write_all(&reply.encode()).await?;
        return Err(ConnectionEnd::BadHello(message));
    }
    let mut frame = [0u8; REQUEST_LEN];
    loop {
        tokio::select! {
            read = tokio::time::timeout(SERVER_IDLE, stream.read_exact(&mut frame)) => {
                read.map_err(|_| ConnectionEnd::Idle)??;
            }
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        let reply = answer(oracle, ForwardRequest::decode(&frame)).await;
        stream.write_all(&reply.encode()).await?;
    }
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
    Ok(Hello::from_name(&name))
}

/// The oracle's answer to one forwarded group.
pub async fn answer(oracle: &Arc<Oracle>, request: ForwardRequest) -> Reply {
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
