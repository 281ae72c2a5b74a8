//! Forwarding: how a sidecar that is not the oracle gets strict values from it, and how the
//! oracle takes those requests. One HTTP/1 connection per forwarding sidecar, one request
//! in flight on it, carrying every request queued meanwhile ([`ForwardRequest`]); the
//! answer is one range ([`ForwardReply`]) the sender hands out in queue order.
//!
//! The listener is on the pod IP (other pods must reach it) and serves only
//! [`FORWARD_PATH`]. Anyone who can reach it can burn values (gaps, never a duplicate or
//! a value out of order); restricting who reaches it is a NetworkPolicy's job
//! (docs/strict.md).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use kubeflake_crds::strict_oracle::{
    FORWARD_PATH, ForwardReply, ForwardRequest, MAX_FORWARD_COUNT,
};
use kubeflake_runtime::reply::{self, Reply};
use serde_json::json;
use tokio::net::TcpStream;

use super::Oracle;
use crate::segment::SegmentRefusal;

/// How long one forwarded request may take (connect included).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest body either side reads.
const BODY_LIMIT: usize = 4096;

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

/// The forwarding sidecar's connection to the oracle (re-made when the address changes
/// or the connection breaks).
#[derive(Default)]
pub struct Forwarder {
    conn: Option<(String, SendRequest<Full<Bytes>>)>,
}

impl Forwarder {
    /// Sends `request` to the oracle at `address` and waits for its range.
    pub async fn forward(
        &mut self,
        address: &str,
        request: &ForwardRequest,
    ) -> Result<ForwardReply, ForwardError> {
        let unreachable = |message: String| ForwardError::Unreachable {
            address: address.to_string(),
            message,
        };
        let result = tokio::time::timeout(FORWARD_TIMEOUT, self.exchange(address, request)).await;
        let (status, body) = match result {
            Ok(Ok(answer)) => answer,
            Ok(Err(message)) => {
                self.conn = None;
                return Err(unreachable(message));
            }
            Err(_) => {
                self.conn = None;
                return Err(unreachable(format!("no answer within {FORWARD_TIMEOUT:?}")));
            }
        };
        if status != StatusCode::OK {
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            return Err(ForwardError::Refused {
                address: address.to_string(),
                status: status.as_u16(),
                message,
            });
        }
        let reply: ForwardReply = serde_json::from_slice(&body)
            .map_err(|e| unreachable(format!("an answer that is not a range: {e}")))?;
        let count = reply.end.saturating_sub(reply.start);
        if count != request.count || reply.start < request.min {
            return Err(ForwardError::BadReply {
                address: address.to_string(),
                count,
                asked: request.count,
            });
        }
        Ok(reply)
    }

    async fn exchange(
        &mut self,
        address: &str,
        request: &ForwardRequest,
    ) -> Result<(StatusCode, Bytes), String> {
        if self
            .conn
            .as_ref()
            .is_none_or(|(a, s)| a != address || s.is_closed())
        {
            let stream = TcpStream::connect(address)
                .await
                .map_err(|e| e.to_string())?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                // The connection ends when the oracle closes it or the sender is dropped.
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "forwarding connection closed");
                }
            });
            self.conn = Some((address.to_string(), send));
        }
        let Some((_, send)) = self.conn.as_mut() else {
            return Err("no connection".into());
        };
        let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(FORWARD_PATH)
            .header(hyper::header::HOST, address)
            .header(hyper::header::CONTENT_TYPE, reply::JSON)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        send.ready().await.map_err(|e| e.to_string())?;
        let answer = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = answer.status();
        let body = read_body(answer.into_body()).await?;
        Ok((status, body))
    }
}

async fn read_body(body: Incoming) -> Result<Bytes, String> {
    Limited::new(body, BODY_LIMIT)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| e.to_string())
}

/// The oracle listener's one route: `POST` [`FORWARD_PATH`].
pub async fn answer(oracle: Arc<Oracle>, req: Request<Incoming>) -> Reply {
    if req.uri().path() != FORWARD_PATH {
        return reply::error(
            StatusCode::NOT_FOUND,
            &format!(
                "this port serves only POST {FORWARD_PATH} (strict values forwarded by the sequence's sidecars)"
            ),
            json!({}),
        );
    }
    if req.method() != Method::POST {
        return reply::error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{FORWARD_PATH} takes POST"),
            json!({}),
        );
    }
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                &format!("reading the body: {e}"),
                json!({}),
            );
        }
    };
    let request: ForwardRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the body is not a forward request ({{\"sequence\", \"count\", \"min\"}}): {e}"
                ),
                json!({}),
            );
        }
    };
    if request.count == 0 || request.count > MAX_FORWARD_COUNT {
        return reply::error(
            StatusCode::BAD_REQUEST,
            &format!(
                "count must be 1 to {MAX_FORWARD_COUNT}, not {}",
                request.count
            ),
            json!({}),
        );
    }
    match oracle.serve_forwarded(&request).await {
        Ok(reply) => reply::json(
            StatusCode::OK,
            &serde_json::to_value(reply).unwrap_or_default(),
        ),
        Err(refusal) => reply::error(
            match refusal {
                SegmentRefusal::AfterAboveCounter { .. } => StatusCode::CONFLICT,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            },
            &refusal.to_string(),
            json!({ "reason": refusal.reason() }),
        ),
    }
}
