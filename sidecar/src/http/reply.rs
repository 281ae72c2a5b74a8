//! Replies: JSON and text bodies, and the error type every refusal goes through.

use hyper::header::{ALLOW, HeaderValue, RETRY_AFTER};
use hyper::{Method, StatusCode};
use kubeflake_crds::TextForm;
use serde_json::json;

use crate::generator::Refusal;
use crate::metrics::Metrics;
use crate::segment::SegmentRefusal;

pub(crate) use kubeflake_runtime::reply::{Reply, body};

/// A request that cannot be answered, and how to say so.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("{0}")]
    BadRequest(String),
    /// Lists every route ([`super::route::Route::ALL`]).
    #[error("no route {0}; try GET {routes}", routes = super::route::all_routes_text())]
    NotFound(String),
    #[error("method {method} is not allowed on {path}; use GET")]
    MethodNotAllowed { method: Method, path: String },
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Nothing is served yet (waiting for a slot or counter) or any more (stopping).
    #[error("not ready: {message}; retry later")]
    NotReady {
        reason: &'static str,
        message: String,
    },
    #[error("{0}")]
    Segment(#[from] SegmentRefusal),
    /// `/range` asked of a sidecar that hands out no plain segment blocks (Snowflake IDs
    /// are not consecutive; a strict sequence's values come one counter write at a time).
    #[error(
        "/range serves only a segment sequence that is not strict, and this sidecar serves {0}; ask /ids?count=N instead"
    )]
    NotSegment(&'static str),
}

pub(crate) fn json_reply(status: StatusCode, value: serde_json::Value) -> Reply {
    kubeflake_runtime::reply::json(status, &value)
}

/// A 503 with `Retry-After`.
pub(crate) fn unavailable(value: serde_json::Value, retry_after_secs: u64) -> Reply {
    let mut reply = json_reply(StatusCode::SERVICE_UNAVAILABLE, value);
    reply
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    reply
}

impl HttpError {
    pub(crate) fn into_reply(self, metrics: &Metrics) -> Reply {
        let message = self.to_string();
        match self {
            HttpError::BadRequest(_) => {
                json_reply(StatusCode::BAD_REQUEST, json!({ "error": message }))
            }
            HttpError::NotFound(_) => {
                json_reply(StatusCode::NOT_FOUND, json!({ "error": message }))
            }
            HttpError::MethodNotAllowed { .. } => {
                let mut reply =
                    json_reply(StatusCode::METHOD_NOT_ALLOWED, json!({ "error": message }));
                reply
                    .headers_mut()
                    .insert(ALLOW, HeaderValue::from_static("GET"));
                reply
            }
            HttpError::NotReady { reason, .. } => {
                metrics.refusals.with_label_values(&[reason]).inc();
                unavailable(json!({ "error": message, "reason": reason }), 1)
            }
            // `after` conflicts with this sidecar's state, not a failure of the sidecar: 409
            // (a 503 would read as "this sidecar is unwell" to retry policies and alerts).
            HttpError::Segment(refusal @ SegmentRefusal::AfterAboveCounter { .. }) => json_reply(
                StatusCode::CONFLICT,
                json!({ "error": message, "reason": refusal.reason() }),
            ),
            HttpError::NotSegment(_) => json_reply(
                StatusCode::CONFLICT,
                json!({ "error": message, "reason": "not_segment" }),
            ),
            HttpError::Refused(refusal @ Refusal::AfterAheadOfClock { .. }) => {
                let mut reply = json_reply(
                    StatusCode::CONFLICT,
                    json!({ "error": message, "reason": refusal.reason() }),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after_secs()));
                reply
            }
            HttpError::Segment(refusal) => {
                metrics
                    .refusals
                    .with_label_values(&[refusal.reason()])
                    .inc();
                unavailable(
                    json!({ "error": message, "reason": refusal.reason() }),
                    refusal.retry_after_secs(),
                )
            }
            HttpError::Refused(refusal) => {
                metrics
                    .refusals
                    .with_label_values(&[refusal.reason()])
                    .inc();
                unavailable(
                    json!({ "error": message, "reason": refusal.reason() }),
                    refusal.retry_after_secs(),
                )
            }
        }
    }
}

/// Appends `value` in `form`: decimal through `itoa` (the common case, kept as fast as
/// before), the compact forms through [`TextForm::encode_to`].
fn push_value(out: &mut Vec<u8>, buf: &mut itoa::Buffer, value: u64, form: TextForm) {
    match form {
        TextForm::Decimal => out.extend_from_slice(buf.format(value).as_bytes()),
        other => other.encode_to(value, out),
    }
}

/// The reply to `/id`: one value in `form` as text, or `{"id":"<text>"}`. Assembled by
/// hand: `format!` cost about as much as the rest of the handler (callgrind,
/// docs/benchmarks.md).
pub(crate) fn one_value_reply(value: u64, form: TextForm, json: bool) -> Reply {
    let mut buf = itoa::Buffer::new();
    let mut out = Vec::with_capacity(32);
    if json {
        out.extend_from_slice(b"{\"id\":\"");
        push_value(&mut out, &mut buf, value, form);
        out.extend_from_slice(b"\"}");
        body(StatusCode::OK, "application/json", out)
    } else {
        push_value(&mut out, &mut buf, value, form);
        out.push(b'\n');
        body(StatusCode::OK, "text/plain", out)
    }
}

/// The reply to `/range`: `{"first":"<decimal>","count":n}`, the values `first` to
/// `first + count - 1` (docs/openapi.yaml, `Range`). `first` is a string like every value
/// in JSON; `count` is at most `--max-batch`, a plain number.
pub(crate) fn range_reply(first: u64, count: u64) -> Reply {
    let mut buf = itoa::Buffer::new();
    let mut out = Vec::with_capacity(48);
    out.extend_from_slice(b"{\"first\":\"");
    out.extend_from_slice(buf.format(first).as_bytes());
    out.extend_from_slice(b"\",\"count\":");
    out.extend_from_slice(buf.format(count).as_bytes());
    out.push(b'}');
    body(StatusCode::OK, "application/json", out)
}

/// The reply to `/ids`: `count` values in `form`, one per line, or `{"ids":["...",...]}`.
pub(crate) fn many_values_reply(
    values: impl Iterator<Item = u64>,
    count: u64,
    form: TextForm,
    json: bool,
) -> Reply {
    let mut out = Vec::with_capacity(count as usize * 22 + 16);
    let mut buf = itoa::Buffer::new();
    if json {
        out.extend_from_slice(b"{\"ids\":[");
        for (i, v) in values.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'"');
            push_value(&mut out, &mut buf, v, form);
            out.push(b'"');
        }
        out.extend_from_slice(b"]}");
        body(StatusCode::OK, "application/json", out)
    } else {
        for v in values {
            push_value(&mut out, &mut buf, v, form);
            out.push(b'\n');
        }
        body(StatusCode::OK, "text/plain", out)
    }
}
