//! Forwarding: how a sidecar that is not the oracle gets strict values from it (the oracle's
//! side is [`super::listen`]). One TCP connection per forwarding sidecar, in the wire
//! format of [`kubeflake_crds::strict_oracle::wire`]; one request in flight on it, carrying
//! every request queued meanwhile ([`ForwardRequest`]); the answer is one range
//! ([`ForwardReply`]) the sender hands out in queue order.
//!
//! A forwarder believes an answer only as far as it can check it (docs/safety.md rule 16):
//! it must come from the term of the oracle Lease the forwarder follows (the reply's term,
//! which every release's oracle sends) and be exactly the range asked for (`count` values,
//! none below `min`, all below 2^63), on a connection whose welcome showed a token of the
//! pod the Lease names as its holder, signed by the API server ([`crate::peer_token`]).
//! Anything else is not used: the group is refused (503) and the connection dropped; a
//! welcome not believed is counted (`kubeflake_strict_peer_refusals_total{side="oracle"}`)
//! and logged at most once a minute per address. The forwarder's own hello carries its
//! pod's token, read from its file for each new connection (the kubelet rotates it).
//!
//! The oracle's port is on the pod IP (other pods must reach it). A stranger without a
//! claimant's token is refused at its hello; what a claimant can do is bounded by the
//! term (burn values up to the raise limit, 2^62: gaps, never a duplicate, a value out of
//! order, or a counter moved towards its end).

use std::time::{Duration, Instant};

use kubeflake_crds::segment_counter::LIMIT;
use std::sync::Arc;

use kubeflake_crds::strict_oracle::wire::{
    Hello, REFUSAL_HEAD_LEN, Reply, ReplyKind, TOKEN_LEN_LEN, VALUES_LEN, Welcome,
};
use kubeflake_crds::strict_oracle::{ForwardReply, ForwardRequest};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::peer_token::{PeerAuth, Side};

/// How long one forwarded request may take (connect included).
pub(crate) const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
/// A forwarder makes a new connection rather than use one idle this long (the oracle
/// closes connections idle for [`SERVER_IDLE`](super::listen::SERVER_IDLE), so the
/// forwarder never writes into one the oracle is closing).
const CLIENT_IDLE: Duration = Duration::from_secs(60);

/// Why a forwarded request got no values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ForwardError {
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
        "what answers at the strict oracle's address {address} did not prove it is the \
         oracle Lease's holder (pod {holder}): {why}; not used"
    )]
    NotTheHolder {
        address: String,
        holder: String,
        why: String,
    },
    #[error("this sidecar cannot prove who it is to the strict oracle: {0}")]
    OwnToken(String),
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
    pub(crate) fn is_bad_reply(&self) -> bool {
        matches!(
            self,
            ForwardError::BadReply { .. }
                | ForwardError::WrongTerm { .. }
                | ForwardError::NotTheHolder { .. }
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
    /// What answered did not prove it is the oracle (or this sidecar could not prove who
    /// it is): nothing is used, nothing is asked again.
    NotBelieved(ForwardError),
}

struct Connection {
    address: String,
    /// The pod the welcome proved the oracle is (the Lease's holder when it was made).
    holder: String,
    stream: TcpStream,
    last_used: Instant,
}

/// The forwarding sidecar's connection to the oracle (re-made when the address or the
/// holder changes, the connection breaks, or it sat idle).
pub(crate) struct Forwarder {
    sequence: String,
    peers: Arc<PeerAuth>,
    conn: Option<Connection>,
}

impl Forwarder {
    pub(crate) fn new(sequence: &str, peers: Arc<PeerAuth>) -> Forwarder {
        Forwarder {
            sequence: sequence.to_string(),
            peers,
            conn: None,
        }
    }

    /// Sends `request` to the oracle at `address`, serving in `term` (the oracle Lease's)
    /// as pod `holder` (the Lease's holder), and waits for its range; an answer from
    /// another term, from a connection whose welcome did not prove it is `holder`, or not
    /// the range asked for, is an error.
    pub(crate) async fn forward(
        &mut self,
        address: &str,
        term: i32,
        holder: &str,
        request: ForwardRequest,
    ) -> Result<ForwardReply, ForwardError> {
        let unreachable = |message: String| ForwardError::Unreachable {
            address: address.to_string(),
            message,
        };
        let deadline = tokio::time::Instant::now() + FORWARD_TIMEOUT;
        let mut reused = self.reusable(address, holder);
        let reply = loop {
            let exchange =
                tokio::time::timeout_at(deadline, self.exchange(address, holder, request));
            match exchange.await {
                Ok(Exchange::Answered(reply)) => break reply,
                Ok(Exchange::NotBelieved(e)) => {
                    self.conn = None;
                    return Err(e);
                }
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

    /// How many oracles this forwarder did not believe, for `reason` (tests).
    #[cfg(test)]
    pub(crate) fn peers_refused(&self, reason: &str) -> u64 {
        self.peers.log.count(Side::Oracle, reason)
    }

    /// Whether the kept connection goes to `address`, proved `holder`, and may be used again.
    fn reusable(&mut self, address: &str, holder: &str) -> bool {
        let keep = self.conn.as_ref().is_some_and(|c| {
            c.address == address && c.holder == holder && c.last_used.elapsed() < CLIENT_IDLE
        });
        if !keep {
            self.conn = None;
        }
        keep
    }

    async fn exchange(&mut self, address: &str, holder: &str, request: ForwardRequest) -> Exchange {
        let failed = |message: String| Exchange::Failed {
            message,
            before_reply: true,
        };
        // A new connection starts with the hello and this pod's token, sent in one write
        // with the first request; the oracle's welcome comes before its reply.
        let mut opening = None;
        if self.conn.is_none() {
            let token = match self.peers.own.read().await {
                Ok(token) => token,
                Err(e) => {
                    self.peers
                        .log
                        .refused(Side::Oracle, None, e.reason(), &e.to_string());
                    return Exchange::NotBelieved(ForwardError::OwnToken(e.to_string()));
                }
            };
            let mut hello = match (Hello {
                sequence: self.sequence.clone(),
                token,
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
                holder: holder.to_string(),
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
        let mut tag = match conn.stream.read_u8().await {
            Ok(t) => t,
            Err(e) => return failed(e.to_string()),
        };
        let mid_reply = |message: String| Exchange::Failed {
            message,
            before_reply: false,
        };
        if opening.is_some() {
            // The first frame: the welcome, or a refusal of the hello.
            let not_believed = |reason: &'static str, why: String| {
                let ip = address.parse::<std::net::SocketAddr>().ok().map(|a| a.ip());
                self.peers.log.refused(Side::Oracle, ip, reason, &why);
                Exchange::NotBelieved(ForwardError::NotTheHolder {
                    address: address.to_string(),
                    holder: holder.to_string(),
                    why,
                })
            };
            match Reply::kind(tag) {
                Ok(ReplyKind::Welcome) => {}
                Ok(ReplyKind::Refused) => {}
                Ok(ReplyKind::Values) => {
                    return not_believed("no_welcome", "values without a welcome".into());
                }
                Err(e) => return mid_reply(e.to_string()),
            }
            if matches!(Reply::kind(tag), Ok(ReplyKind::Welcome)) {
                let token = match read_welcome(&mut conn.stream).await {
                    Ok(token) => token,
                    Err(message) => return mid_reply(message),
                };
                match self.peers.verifier.verify(&token).await {
                    Ok(peer) if peer.pod_uid == holder => {}
                    Ok(peer) => {
                        return not_believed(
                            "not_holder",
                            format!(
                                "its token is pod {} ({}), not the holder",
                                peer.pod_name, peer.pod_uid
                            ),
                        );
                    }
                    Err(e) => return not_believed(e.reason(), format!("its token: {e}")),
                }
                tag = match conn.stream.read_u8().await {
                    Ok(t) => t,
                    Err(e) => return mid_reply(e.to_string()),
                };
            }
        }
        match read_reply(&mut conn.stream, tag).await {
            Ok(reply) => Exchange::Answered(reply),
            Err(message) => mid_reply(message),
        }
    }
}

/// A welcome's token, after its tag.
async fn read_welcome<R: AsyncRead + Unpin>(stream: &mut R) -> Result<String, String> {
    let mut len = [0u8; TOKEN_LEN_LEN];
    stream
        .read_exact(&mut len)
        .await
        .map_err(|e| e.to_string())?;
    let len = Welcome::token_len(&len).map_err(|e| e.to_string())?;
    let mut token = vec![0u8; len];
    stream
        .read_exact(&mut token)
        .await
        .map_err(|e| e.to_string())?;
    Welcome::from_token(&token)
        .map(|w| w.token)
        .map_err(|e| e.to_string())
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
        ReplyKind::Welcome => Err("a second welcome where a reply was due".into()),
    }
}
