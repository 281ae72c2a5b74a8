//! The app's routes: what a request gets, given the sidecar.
//!
//! | route              | answer                                                          |
//! |--------------------|-----------------------------------------------------------------|
//! | `GET /`            | `{"id":"<id>","pod":"<POD_NAME>"}` from the sidecar's `/id`      |
//! | `GET /ids?count=N` | `{"ids":["<id>",...],"pod":"..."}`, 1 <= N <= 1000               |
//! | `GET /first`       | `{"id":"<id>","pod":"..."}`: the ID taken at start (`--first-id`) |
//! | `GET /healthz`     | 200 `ok` while the process runs                                 |
//! | `GET /readyz`      | 200 `ok` when the sidecar's `/readyz` answers 2xx, else 503      |
//!
//! `/` and `/ids` take `after=<id>`: the ID of what caused this request, carried along by
//! the caller (here a query field; a header works the same). It is passed to the sidecar,
//! which then answers only IDs greater than it, so causally later events get larger IDs
//! across pods. `/first` never asks the sidecar; it is 404 when the app was started
//! without `--first-id`.
//!
//! Errors are JSON `{"error":"..."}`: 400 bad query (or an `after` the sidecar refuses as
//! not an ID of its sequence), 404 unknown path, 405 not GET, 409 (with `Retry-After`)
//! when the sidecar cannot honour `after` yet, 502 when the sidecar is unreachable or
//! answers an error or nonsense, 503 (with `Retry-After`) when the sidecar answers 503
//! (not ready to issue).

use serde_json::json;

use crate::sidecar::{Sidecar, SidecarError};

/// Largest `count` of `GET /ids` (the sidecar's own limit is larger, 10000 by default).
pub const MAX_COUNT: u32 = 1000;

/// An HTTP response, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl Response {
    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: value.to_string(),
        }
    }

    pub fn error(status: u16, message: impl Into<String>) -> Response {
        Response::json(status, &json!({ "error": message.into() }))
    }

    fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The bytes on the wire: HTTP/1.1, one response per connection.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason_phrase(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out.push_str(name);
            out.push_str(": ");
            out.push_str(value);
            out.push_str("\r\n");
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(self.body.as_bytes());
        bytes
    }
}

pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// The app: its sidecar and what it says about itself.
pub struct App {
    pub sidecar: Sidecar,
    /// `POD_NAME` (downward API), or empty.
    pub pod: String,
    /// The ID taken before listening (`--first-id`), answered on `GET /first`.
    pub first_id: Option<u64>,
}

/// Splits `a=1&b=2`, accepting only `allowed` keys, each at most once. No percent
/// decoding: every value this app takes is a plain number.
pub fn query_params<'a>(
    query: &'a str,
    allowed: &[&str],
) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut params: Vec<(&str, &str)> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !allowed.contains(&key) {
            return Err(if allowed.is_empty() {
                format!("unknown query parameter {key:?}: this route takes none")
            } else {
                format!(
                    "unknown query parameter {key:?}; allowed: {}",
                    allowed.join(", ")
                )
            });
        }
        if params.iter().any(|(k, _)| *k == key) {
            return Err(format!("query parameter {key:?} is given twice"));
        }
        params.push((key, value));
    }
    Ok(params)
}

/// The optional `after=<id>` of `/` and `/ids` (`allowed`: the route's other keys too).
pub fn parse_after(query: &str, allowed: &[&str]) -> Result<Option<u64>, String> {
    let params = query_params(query, allowed)?;
    let Some((_, raw)) = params.iter().find(|(k, _)| *k == "after") else {
        return Ok(None);
    };
    raw.parse::<u64>()
        .ok()
        .filter(|_| raw.bytes().all(|b| b.is_ascii_digit()))
        .map(Some)
        .ok_or_else(|| format!("after must be an ID in decimal digits, got {raw:?}"))
}

/// The `count` of `/ids?count=N`: a decimal number from 1 to [`MAX_COUNT`].
pub fn parse_count(query: &str) -> Result<u32, String> {
    let params = query_params(query, &["count", "after"])?;
    let Some((_, raw)) = params.iter().find(|(k, _)| *k == "count") else {
        return Err(format!(
            "missing query parameter count: use /ids?count=N with 1 <= N <= {MAX_COUNT}"
        ));
    };
    match raw.parse::<u32>() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) && raw.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!(
            "count must be a whole number from 1 to {MAX_COUNT}, got {raw:?}"
        )),
    }
}

/// `{"id":"<id>","pod":"<pod>"}`: IDs are strings, as the sidecar writes them, because
/// JavaScript numbers lose precision above 2^53.
pub fn id_body(id: u64, pod: &str) -> serde_json::Value {
    json!({ "id": id.to_string(), "pod": pod })
}

/// `{"ids":["<id>",...],"pod":"<pod>"}`.
pub fn ids_body(ids: &[u64], pod: &str) -> serde_json::Value {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    json!({ "ids": ids, "pod": pod })
}

/// The reply to a failed sidecar call: 503 passing on `Retry-After` when the sidecar
/// said "not now", 409 likewise when it cannot honour `after` yet, else 502.
pub fn sidecar_failure(error: &SidecarError) -> Response {
    match error {
        SidecarError::AfterConflict { retry_after, .. } => {
            let response = Response::error(409, error.to_string());
            match retry_after
                .as_deref()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            {
                Some(seconds) => response.with_header("Retry-After", seconds),
                None => response,
            }
        }
        SidecarError::NotReady { retry_after, .. } => Response::error(503, error.to_string())
            .with_header(
                "Retry-After",
                retry_after
                    .as_deref()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .unwrap_or("1"),
            ),
        _ => Response::error(502, error.to_string()),
    }
}

/// [`sidecar_failure`], except that a 400 to a request carrying `after` is the caller's
/// (an `after` that is not an ID of the sequence), passed on as 400.
fn after_failure(error: &SidecarError, after: Option<u64>) -> Response {
    match error {
        SidecarError::Status { status: 400, .. } if after.is_some() => {
            Response::error(400, error.to_string())
        }
        _ => sidecar_failure(error),
    }
}

impl App {
    /// `--first-id`: exactly one `GET /id` (over the socket when one is set), kept for
    /// `GET /first`. No retry: a caller that cannot start without an ID stops on error.
    pub fn take_first_id(&mut self) -> Result<u64, SidecarError> {
        let id = self.sidecar.id_after(None)?;
        self.first_id = Some(id);
        Ok(id)
    }

    /// Adds `"via": "unix" | "tcp"`: how this app reached its sidecar.
    fn via(&self, mut body: serde_json::Value) -> serde_json::Value {
        body["via"] = self.sidecar.transport().into();
        body
    }

    /// Answers one request. `target` is the request target (`/path?query`).
    pub fn handle(&self, method: &str, target: &str) -> Response {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let known = matches!(path, "/" | "/ids" | "/first" | "/healthz" | "/readyz");
        if !known {
            return Response::error(
                404,
                format!("no route {path:?}; try GET /, /ids?count=N, /first, /healthz or /readyz"),
            );
        }
        if method != "GET" {
            return Response::error(
                405,
                format!("method {method} is not allowed on {path}; use GET"),
            )
            .with_header("Allow", "GET");
        }
        match path {
            "/" => match parse_after(query, &["after"]) {
                Err(e) => Response::error(400, e),
                Ok(after) => match self.sidecar.id_after(after) {
                    Ok(id) => Response::json(200, &self.via(id_body(id, &self.pod))),
                    Err(e) => after_failure(&e, after),
                },
            },
            "/ids" => match parse_count(query).and_then(|count| {
                parse_after(query, &["count", "after"]).map(|after| (count, after))
            }) {
                Err(e) => Response::error(400, e),
                Ok((count, after)) => match self.sidecar.ids_after(count, after) {
                    Ok(ids) => Response::json(200, &self.via(ids_body(&ids, &self.pod))),
                    Err(e) => after_failure(&e, after),
                },
            },
            "/first" => match (query_params(query, &[]), self.first_id) {
                (Err(e), _) => Response::error(400, e),
                (Ok(_), Some(id)) => Response::json(200, &self.via(id_body(id, &self.pod))),
                (Ok(_), None) => Response::error(
                    404,
                    "no first ID: the app was started without --first-id (or APP_FIRST_ID)",
                ),
            },
            "/healthz" => Response::text(200, "ok"),
            _ => match self.sidecar.ready() {
                Ok(()) => Response::text(200, "ok"),
                Err(e) => Response::error(503, e.to_string()).with_header("Retry-After", "1"),
            },
        }
    }
}

#[cfg(test)]
mod tests;
