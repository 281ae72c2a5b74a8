//! The forwarding wire format: how a sidecar sends its strict requests to the oracle, over
//! one TCP connection per forwarding sidecar. kubeflake's own framing rather than HTTP and
//! JSON: a forwarded group costs one small write and one small read on each side, which is
//! what lets a sequence with many sidecars serve as many values as one (docs/strict.md,
//! "Costs").
//!
//! Big-endian throughout:
//!
//! | frame | sent by | bytes |
//! |---|---|---|
//! | hello, once per connection | forwarder | `"KFSO"`, version `u8` (2), name length `u8`, the sequence's name, token length `u16`, the forwarder's token |
//! | welcome, once, answering a valid hello | oracle | tag `2`, token length `u16`, the oracle's token |
//! | request | forwarder | count `u64`, min `u64` |
//! | reply: values | oracle | tag `0`, start `u64`, end `u64`, term `i32` |
//! | reply: refused | oracle | tag `1`, status `u16` (HTTP's numbers), message length `u16`, message (UTF-8) |
//!
//! One request in flight per connection: a forwarder writes its next request only after
//! it read the reply to the previous one, so replies need no identifier. The oracle answers
//! a bad hello (magic, version, another sequence's name, a token it does not accept) with
//! one refusal and closes the connection; it answers a good one with its welcome, before
//! the reply to the first request. A forwarder uses no reply before it has checked the
//! welcome's token.
//!
//! **Tokens** (version 2, the first released with the oracle: version 1 never left main):
//! each side shows a bound service-account token of its pod for the audience
//! [`ORACLE_TOKEN_AUDIENCE`](crate::contract::ORACLE_TOKEN_AUDIENCE), at most
//! [`MAX_TOKEN_LEN`] bytes; there is no mode without one. Sidecars of two releases may talk
//! to each other during an upgrade, so a change here is a new [`VERSION`], and an oracle
//! keeps answering the versions older sidecars speak.

/// The first bytes of every connection.
pub const MAGIC: [u8; 4] = *b"KFSO";
/// The wire format's version.
pub const VERSION: u8 = 2;
/// The hello's fixed part: magic, version, name length.
pub const HELLO_HEAD_LEN: usize = 6;
/// A request's length.
pub const REQUEST_LEN: usize = 16;
/// A values reply's length after its tag.
pub const VALUES_LEN: usize = 20;
/// A refusal's fixed part after its tag: status, message length.
pub const REFUSAL_HEAD_LEN: usize = 4;
/// The longest refusal message sent (longer ones are cut).
pub const MAX_MESSAGE_LEN: usize = 1024;
/// The longest token a hello or a welcome may carry (a service-account JWT is 1-2 KiB).
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
/// A token's length field.
pub const TOKEN_LEN_LEN: usize = 2;
/// The most values one forwarded request may ask for.
pub const MAX_FORWARD_COUNT: u64 = 1 << 20;

const TAG_VALUES: u8 = 0;
const TAG_REFUSED: u8 = 1;
const TAG_WELCOME: u8 = 2;

/// Why bytes read are not a frame of this format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(
        "the connection did not start with \"KFSO\": not a kubeflake sidecar forwarding strict requests (this port takes only those)"
    )]
    BadMagic,
    #[error(
        "forwarding wire version {found}: this sidecar speaks version {VERSION}; upgrade the older sidecar's pod"
    )]
    UnsupportedVersion { found: u8 },
    #[error("a sequence name of {len} bytes does not fit the hello (255 at most)")]
    NameTooLong { len: usize },
    #[error("the sequence name in the hello is not UTF-8")]
    NameNotUtf8,
    #[error("reply tag {0} is neither values (0), refused (1) nor welcome (2)")]
    UnknownReplyTag(u8),
    #[error("a token of {len} bytes is longer than {MAX_TOKEN_LEN}: not a service-account token")]
    TokenTooLong { len: usize },
    #[error("the token is not UTF-8: not a service-account token")]
    TokenNotUtf8,
    #[error("a refusal message of {len} bytes is longer than {MAX_MESSAGE_LEN}")]
    MessageTooLong { len: usize },
}

/// The first frame of a connection: who is asking (its pod's token), for which sequence.
#[derive(Clone, PartialEq, Eq)]
pub struct Hello {
    pub sequence: String,
    /// The forwarder's bound service-account token (never logged: see `Debug`).
    pub token: String,
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("sequence", &self.sequence)
            .field("token", &format_args!("<{} bytes>", self.token.len()))
            .finish()
    }
}

impl Hello {
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let name = self.sequence.as_bytes();
        let len =
            u8::try_from(name.len()).map_err(|_| WireError::NameTooLong { len: name.len() })?;
        let token = token_len(&self.token)?;
        let mut out =
            Vec::with_capacity(HELLO_HEAD_LEN + name.len() + TOKEN_LEN_LEN + self.token.len());
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(len);
        out.extend_from_slice(name);
        out.extend_from_slice(&token);
        out.extend_from_slice(self.token.as_bytes());
        Ok(out)
    }

    /// Checks the fixed part and says how many name bytes follow.
    pub fn name_len(head: &[u8; HELLO_HEAD_LEN]) -> Result<usize, WireError> {
        if head[..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if head[4] != VERSION {
            return Err(WireError::UnsupportedVersion { found: head[4] });
        }
        Ok(usize::from(head[5]))
    }

    /// How many token bytes follow the name (the two bytes after it).
    pub fn token_len(bytes: &[u8; TOKEN_LEN_LEN]) -> Result<usize, WireError> {
        read_token_len(bytes)
    }

    pub fn from_parts(name: &[u8], token: &[u8]) -> Result<Hello, WireError> {
        let sequence = std::str::from_utf8(name).map_err(|_| WireError::NameNotUtf8)?;
        Ok(Hello {
            sequence: sequence.to_string(),
            token: token_text(token)?,
        })
    }
}

/// The oracle's answer to a valid hello, before any reply: its own pod's token, which the
/// forwarder checks before it uses a reply.
#[derive(Clone, PartialEq, Eq)]
pub struct Welcome {
    pub token: String,
}

impl std::fmt::Debug for Welcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Welcome {{ token: <{} bytes> }}", self.token.len())
    }
}

impl Welcome {
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let len = token_len(&self.token)?;
        let mut out = Vec::with_capacity(1 + TOKEN_LEN_LEN + self.token.len());
        out.push(TAG_WELCOME);
        out.extend_from_slice(&len);
        out.extend_from_slice(self.token.as_bytes());
        Ok(out)
    }

    /// How many token bytes follow the welcome's tag (the two bytes after it).
    pub fn token_len(bytes: &[u8; TOKEN_LEN_LEN]) -> Result<usize, WireError> {
        read_token_len(bytes)
    }

    pub fn from_token(token: &[u8]) -> Result<Welcome, WireError> {
        Ok(Welcome {
            token: token_text(token)?,
        })
    }
}

/// A token's length field, or why it cannot be sent.
fn token_len(token: &str) -> Result<[u8; TOKEN_LEN_LEN], WireError> {
    let len = token.len();
    if len > MAX_TOKEN_LEN {
        return Err(WireError::TokenTooLong { len });
    }
    // At most MAX_TOKEN_LEN, which fits a u16.
    Ok((len as u16).to_be_bytes())
}

fn read_token_len(bytes: &[u8; TOKEN_LEN_LEN]) -> Result<usize, WireError> {
    let len = usize::from(u16::from_be_bytes(*bytes));
    if len > MAX_TOKEN_LEN {
        return Err(WireError::TokenTooLong { len });
    }
    Ok(len)
}

fn token_text(token: &[u8]) -> Result<String, WireError> {
    std::str::from_utf8(token)
        .map(str::to_string)
        .map_err(|_| WireError::TokenNotUtf8)
}

/// A forwarded group of strict requests: `count` consecutive values, each at least `min`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardRequest {
    pub count: u64,
    /// The smallest value allowed (`after + 1` of the largest `after` in the group).
    pub min: u64,
}

impl ForwardRequest {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[..8].copy_from_slice(&self.count.to_be_bytes());
        out[8..].copy_from_slice(&self.min.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8; REQUEST_LEN]) -> ForwardRequest {
        ForwardRequest {
            count: u64::from_be_bytes(take(bytes, 0)),
            min: u64::from_be_bytes(take(bytes, 8)),
        }
    }
}

/// The oracle's answer: `[start, end)`, taken while it certainly held the Lease, in `term`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardReply {
    pub start: u64,
    pub end: u64,
    pub term: i32,
}

impl ForwardReply {
    pub fn decode(bytes: &[u8; VALUES_LEN]) -> ForwardReply {
        ForwardReply {
            start: u64::from_be_bytes(take(bytes, 0)),
            end: u64::from_be_bytes(take(bytes, 8)),
            term: i32::from_be_bytes(take(bytes, 16)),
        }
    }
}

/// One reply frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Values(ForwardReply),
    /// `status` is HTTP's number for the same refusal (400 bad request, 409 conflict, 503
    /// not serving now).
    Refused {
        status: u16,
        message: String,
    },
}

/// What follows a reply's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// [`VALUES_LEN`] bytes: [`ForwardReply::decode`].
    Values,
    /// [`REFUSAL_HEAD_LEN`] bytes ([`Reply::refusal_head`]), then the message.
    Refused,
    /// [`TOKEN_LEN_LEN`] bytes ([`Welcome::token_len`]), then the token: the oracle's
    /// first frame on a connection, never a reply to a request.
    Welcome,
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Values(r) => {
                let mut out = Vec::with_capacity(1 + VALUES_LEN);
                out.push(TAG_VALUES);
                out.extend_from_slice(&r.start.to_be_bytes());
                out.extend_from_slice(&r.end.to_be_bytes());
                out.extend_from_slice(&r.term.to_be_bytes());
                out
            }
            Reply::Refused { status, message } => {
                let mut cut = message.len().min(MAX_MESSAGE_LEN);
                while !message.is_char_boundary(cut) {
                    cut -= 1;
                }
                let text = &message.as_bytes()[..cut];
                let mut out = Vec::with_capacity(1 + REFUSAL_HEAD_LEN + text.len());
                out.push(TAG_REFUSED);
                out.extend_from_slice(&status.to_be_bytes());
                // `cut` is at most MAX_MESSAGE_LEN, which fits a u16.
                out.extend_from_slice(&(text.len() as u16).to_be_bytes());
                out.extend_from_slice(text);
                out
            }
        }
    }

    pub fn kind(tag: u8) -> Result<ReplyKind, WireError> {
        match tag {
            TAG_VALUES => Ok(ReplyKind::Values),
            TAG_REFUSED => Ok(ReplyKind::Refused),
            TAG_WELCOME => Ok(ReplyKind::Welcome),
            other => Err(WireError::UnknownReplyTag(other)),
        }
    }

    /// A refusal's status and message length.
    pub fn refusal_head(bytes: &[u8; REFUSAL_HEAD_LEN]) -> Result<(u16, usize), WireError> {
        let status = u16::from_be_bytes([bytes[0], bytes[1]]);
        let len = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
        if len > MAX_MESSAGE_LEN {
            return Err(WireError::MessageTooLong { len });
        }
        Ok((status, len))
    }
}

fn take<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

#[cfg(test)]
mod tests;
