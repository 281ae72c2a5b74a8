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
//! | hello, once per connection | forwarder | `"KFSO"`, version `u8`, name length `u8`, the sequence's name |
//! | request | forwarder | count `u64`, min `u64` |
//! | reply: values | oracle | tag `0`, start `u64`, end `u64`, term `i32` |
//! | reply: refused | oracle | tag `1`, status `u16` (HTTP's numbers), message length `u16`, message (UTF-8) |
//!
//! One request in flight per connection: a forwarder writes its next request only after
//! it read the reply to the previous one, so replies need no identifier. The oracle answers
//! a bad hello (magic, version, another sequence's name) with one refusal and closes the
//! connection. Sidecars of two releases may talk to each other during an upgrade, so a
//! change here is a new [`VERSION`], and an oracle keeps answering the versions older
//! sidecars speak.

/// The first bytes of every connection.
pub const MAGIC: [u8; 4] = *b"KFSO";
/// The wire format's version.
pub const VERSION: u8 = 1;
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
/// The most values one forwarded request may ask for.
pub const MAX_FORWARD_COUNT: u64 = 1 << 20;

const TAG_VALUES: u8 = 0;
const TAG_REFUSED: u8 = 1;

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
    #[error("reply tag {0} is neither values (0) nor refused (1)")]
    UnknownReplyTag(u8),
    #[error("a refusal message of {len} bytes is longer than {MAX_MESSAGE_LEN}")]
    MessageTooLong { len: usize },
}

/// The first frame of a connection: who is asking, for which sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub sequence: String,
}

impl Hello {
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let name = self.sequence.as_bytes();
        let len =
            u8::try_from(name.len()).map_err(|_| WireError::NameTooLong { len: name.len() })?;
        let mut out = Vec::with_capacity(HELLO_HEAD_LEN + name.len());
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(len);
        out.extend_from_slice(name);
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

    pub fn from_name(name: &[u8]) -> Result<Hello, WireError> {
        let sequence = std::str::from_utf8(name).map_err(|_| WireError::NameNotUtf8)?;
        Ok(Hello {
            sequence: sequence.to_string(),
        })
    }
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
mod tests {
    use super::*;

    fn split<const N: usize>(bytes: &[u8]) -> ([u8; N], &[u8]) {
        (take(bytes, 0), &bytes[N..])
    }

    #[test]
    fn a_hello_names_the_sequence_after_magic_and_version() {
        let bytes = Hello {
            sequence: "orders".into(),
        }
        .encode()
        .unwrap();
        assert_eq!(&bytes[..4], b"KFSO");
        let (head, name) = split::<HELLO_HEAD_LEN>(&bytes);
        assert_eq!(Hello::name_len(&head), Ok(6));
        assert_eq!(Hello::from_name(name).unwrap().sequence, "orders");
    }

    #[test]
    fn a_hello_of_another_protocol_or_version_is_refused_naming_what_is_wrong() {
        assert_eq!(Hello::name_len(b"GET / "), Err(WireError::BadMagic));
        let mut newer = *b"KFSO\x02\x01";
        assert_eq!(
            Hello::name_len(&newer),
            Err(WireError::UnsupportedVersion { found: 2 })
        );
        newer[4] = VERSION;
        assert_eq!(Hello::name_len(&newer), Ok(1));
        let long = Hello {
            sequence: "x".repeat(256),
        };
        assert_eq!(long.encode(), Err(WireError::NameTooLong { len: 256 }));
        assert_eq!(Hello::from_name(&[0xff]), Err(WireError::NameNotUtf8));
    }

    #[test]
    fn requests_and_values_round_trip_at_their_extremes() {
        for request in [
            ForwardRequest { count: 1, min: 0 },
            ForwardRequest {
                count: MAX_FORWARD_COUNT,
                min: u64::MAX,
            },
        ] {
            assert_eq!(ForwardRequest::decode(&request.encode()), request);
        }
        let values = ForwardReply {
            start: 1 << 62,
            end: u64::MAX,
            term: i32::MAX,
        };
        let bytes = Reply::Values(values).encode();
        assert_eq!(bytes.len(), 1 + VALUES_LEN);
        assert_eq!(Reply::kind(bytes[0]), Ok(ReplyKind::Values));
        assert_eq!(ForwardReply::decode(&take(&bytes, 1)), values);
    }

    #[test]
    fn a_refusal_carries_its_status_and_a_message_cut_at_a_character_boundary() {
        let bytes = Reply::Refused {
            status: 503,
            message: "é".repeat(600),
        }
        .encode();
        assert_eq!(Reply::kind(bytes[0]), Ok(ReplyKind::Refused));
        let (status, len) = Reply::refusal_head(&take(&bytes, 1)).unwrap();
        assert_eq!(status, 503);
        assert_eq!(len, MAX_MESSAGE_LEN);
        let text = &bytes[1 + REFUSAL_HEAD_LEN..];
        assert_eq!(text.len(), len);
        assert!(std::str::from_utf8(text).is_ok());
        assert_eq!(Reply::kind(7), Err(WireError::UnknownReplyTag(7)));
        assert_eq!(
            Reply::refusal_head(&[1, 244, 0xff, 0xff]),
            Err(WireError::MessageTooLong { len: 65535 })
        );
    }
}
