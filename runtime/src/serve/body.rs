//! Reading a request's body, bounded in size and in time: a client that announces or
//! sends more than the limit gets 413 at once, one that sends too slowly is cut off after
//! the timeout (408), so neither can hold memory or a connection for long.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Body;
use hyper::header::CONTENT_LENGTH;
use hyper::http::request::Parts;
use hyper::{Request, StatusCode};

use super::conns::{ConnActivity, Phase};
use crate::reply::{self, Reply};

/// How much of a body a handler reads, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest body accepted, in bytes.
    pub max_bytes: usize,
    /// Longest time the whole body may take to arrive, from the end of the header.
    pub timeout: Duration,
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body is larger than {limit} bytes; send at most {limit}")]
    TooLarge { limit: usize },
    #[error("the body did not arrive within {timeout:?}; send it in one go")]
    TimedOut { timeout: Duration },
    #[error("cannot read the body: {0}")]
    Failed(String),
}

impl BodyError {
    /// The HTTP status that answers it.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::TimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
            BodyError::Failed(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The JSON error reply that answers it.
    pub fn reply(&self) -> Reply {
        reply::error(self.status(), &self.to_string(), serde_json::Value::Null)
    }
}

/// Reads `req`'s whole body within `limits`. While it reads, the connection counts as
/// waiting on its client (a full listener may close it to make room); a `Content-Length`
/// above the limit is refused without reading anything.
pub async fn read_body<B>(req: Request<B>, limits: BodyLimits) -> Result<(Parts, Bytes), BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = req.into_parts();
    let announced = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(BodyError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    let activity = parts.extensions.get::<ConnActivity>().cloned();
    if let Some(ConnActivity(a)) = &activity {
        a.set(Phase::Body);
    }
    let read = tokio::time::timeout(
        limits.timeout,
        Limited::new(body, limits.max_bytes).collect(),
    )
    .await;
    if let Some(ConnActivity(a)) = &activity {
        a.set(Phase::Busy);
    }
    match read {
        Ok(Ok(collected)) => Ok((parts, collected.to_bytes())),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge {
            limit: limits.max_bytes,
        }),
        Ok(Err(e)) => Err(BodyError::Failed(e.to_string())),
        Err(_) => Err(BodyError::TimedOut {
            timeout: limits.timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::body::Frame;

    const LIMITS: BodyLimits = BodyLimits {
        max_bytes: 1024,
        timeout: Duration::from_secs(5),
    };

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let req = Request::new(Full::new(Bytes::from_static(b"{\"a\":1}")));
        let (_, body) = read_body(req, LIMITS).await.expect("read");
        assert_eq!(&body[..], b"{\"a\":1}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_with_a_json_error() {
        let req = Request::new(Full::new(Bytes::from(vec![b'x'; 1025])));
        let err = read_body(req, LIMITS).await.expect_err("too large");
        assert!(matches!(err, BodyError::TooLarge { limit: 1024 }), "{err}");
        let reply = err.reply();
        assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let bytes = reply.into_body().collect().await.expect("full").to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        assert!(json["error"].as_str().expect("a message").contains("1024"));
    }

    #[tokio::test]
    async fn an_announced_length_over_the_limit_is_refused_before_any_byte_is_read() {
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        let mut req = Request::new(Channel(rx));
        req.headers_mut()
            .insert(CONTENT_LENGTH, "4194304".parse().expect("a header"));
        let err = read_body(req, LIMITS).await.expect_err("too large");
        assert!(matches!(err, BodyError::TooLarge { .. }), "{err}");
    }

    /// Time is paused: the timeout fires as soon as nothing else can run, not 5 s later;
    /// the trickle never ends, so only the timeout ends the read.
    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_is_cut_off_after_the_timeout_with_408() {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let trickle = tokio::spawn(async move {
            loop {
                if tx.send(Bytes::from_static(b"x")).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let req = Request::new(Channel(rx));
        let err = read_body(req, LIMITS).await.expect_err("timed out");
        assert!(matches!(err, BodyError::TimedOut { .. }), "{err}");
        assert_eq!(err.status(), StatusCode::REQUEST_TIMEOUT);
        trickle.abort();
    }

    /// A body whose frames arrive through a channel.
    struct Channel(tokio::sync::mpsc::Receiver<Bytes>);

    impl Body for Channel {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }
}
