//! Forwarding: how a sidecar that is not the oracle gets strict values from it (the oracle's
//! side is [`super::listen`]). One TCP connection per forwarding sidecar, in the wire
//! format of [`kubeflake_crds::strict_oracle::wire`]; one request in flight on it, carrying
//! every request queued meanwhile ([`ForwardRequest`]); the answer is one range
//! ([`ForwardReply`]) the sender hands out in queue order.
//!
//! A forwarder believes an answer only as far as it can check it (docs/safety.md rule 16):
//! it must come from the term of the oracle Lease the forwarder follows (the reply's term,
//! which every release's oracle sends) and be exactly the range asked for (`count` values,
//! none below `min`, all below 2^63). Anything else is not used: the group is refused
//! (503) and the connection dropped. Peers are not authenticated yet: whoever answers at
//! the Lease's address in its term is believed.
//!
//! The oracle's port is on the pod IP (other pods must reach it). Anyone who can reach it
//! can burn values up to the raise limit (2^62: gaps, never a duplicate, a value out of
//! order, or a counter moved towards its end) and take connection slots within the
//! listener's limits; restricting who reaches it is a NetworkPolicy's job (docs/strict.md).

use std::time::{Duration, Instant};

use kubeflake_crds::segment_counter::LIMIT;
use kubeflake_crds::strict_oracle::wire::{Hello, REFUSAL_HEAD_LEN, Reply, ReplyKind, VALUES_LEN};
use kubeflake_crds::strict_oracle::{ForwardReply, ForwardRequest};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one forwarded request may take (connect included).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
/// A forwarder makes a new connection rather than use one idle this long (the oracle
/// closes connections idle for [`SERVER_IDLE`](super::listen::SERVER_IDLE), so the
/// forwarder never writes into one the oracle is closing).
const CLIENT_IDLE: Duration = Duration::from_secs(60);

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
    #[error(
        "the strict oracle at {address} answered values [{}, {}) when asked for {} values \
         from {}: not what was asked, not used",
        reply.start, reply.end, asked.count, asked.min
    )]
    BadReply {
        address: String,
        reply: ForwardReply,
        asked: ForwardRequest,
    },
    #[error(
        "the strict oracle at {address} answered in term {term}, but the oracle Lease this \
         sidecar follows is in term {expected}: not used (the Lease changed hands and this \
         sidecar has not seen it yet, or what answers there is not the Lease's holder)"
    )]
    WrongTerm {
        address: String,
        term: i32,
        expected: i32,
    },
}

impl ForwardError {
    /// An answer came but was not used: the peer is not what the oracle Lease says.
    pub fn is_bad_reply(&self) -> bool {
        matches!(
            self,
            ForwardError::BadReply { .. } | ForwardError::WrongTerm { .. }
        )
    }
}

/// Whether `reply` is exactly what `request` asked for: `count` consecutive values, none
/// below `min`, all below 2^63.
fn answers(request: &ForwardRequest, reply: &ForwardReply) -> bool {
    reply.start >= request.min
        && reply.end <= LIMIT
        && reply.end.checked_sub(reply.start) == Some(request.count)
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

    /// Sends `request` to the oracle at `address`, serving in `term` (the oracle Lease's),
    /// and waits for its range; an answer from another term, or not the range asked for,
    /// is an error.
    pub async fn forward(
        &mut self,
        address: &str,
        term: i32,
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
            Reply::Values(reply) if reply.term != term => {
                self.conn = None;
                Err(ForwardError::WrongTerm {
                    address: address.to_string(),
                    term: reply.term,
                    expected: term,
                })
            }
            Reply::Values(reply) if !answers(&request, &reply) => {
                self.conn = None;
                Err(ForwardError::BadReply {
                    address: address.to_string(),
                    reply,
                    asked: request,
                })
            }
            Reply::Values(reply) => Ok(reply),
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
