//! A fake Kubernetes API server for unit tests (cargo feature `fake-api`; the operator and
//! the sidecar take it as a dev-dependency): a `tower::Service` behind a real
//! [`kube::Client`], in the manner of kube-rs controller-rs `fixtures.rs`. Every request
//! is recorded ([`FakeApi::seen`]); what answers it is one of two modes:
//!
//! - **scripted** ([`FakeApi::new`], then [`expect`](FakeApi::expect) and
//!   [`always`](FakeApi::always)): each expected request gets its scripted reply, any
//!   other is refused (500), and [`FakeApi::verify`] fails the test on an unexpected
//!   request or an expected one that never came. Events (`events.k8s.io`) are answered
//!   without a script: they are best-effort and batched by kube's recorder; tests that care
//!   inspect [`FakeApi::seen`]. The operator's tests use this mode.
//! - **a handler** ([`FakeApi::answering`]): a closure answers every request (Events
//!   included) from its method, path with query and body, so a test can keep state
//!   between requests, such as a Lease's `resourceVersion` for compare-and-swap writes.
//!   The sidecar's tests use this mode.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// One request as the fake API received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

impl Seen {
    /// The path with its query (`/path?query`, or the path alone without a query), as a
    /// handler receives it.
    pub fn target(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// What answers every request in handler mode: (method, path with query, body) to
/// (status, JSON body).
pub type Handler = dyn Fn(&Method, &str, &[u8]) -> (u16, Value) + Send + Sync;

struct Expected {
    method: Method,
    path: String,
    status: u16,
    reply: Value,
    served: bool,
    /// Answered every time, never missing (a watch that retries).
    always: bool,
}

#[derive(Default)]
struct Script {
    expected: Vec<Expected>,
    /// Set in handler mode: it answers every request, and `expected` is not read.
    handler: Option<Arc<Handler>>,
    seen: Vec<Seen>,
    unexpected: Vec<Seen>,
}

/// The fake API server. Clones share one script and one record of requests.
#[derive(Clone, Default)]
pub struct FakeApi(Arc<Mutex<Script>>);

impl FakeApi {
    /// A scripted fake expecting nothing yet.
    pub fn new() -> FakeApi {
        FakeApi::default()
    }

    /// A fake whose every request `handler` answers, from the method, the path with its
    /// query, and the body.
    pub fn answering(
        handler: impl Fn(&Method, &str, &[u8]) -> (u16, Value) + Send + Sync + 'static,
    ) -> FakeApi {
        let fake = FakeApi::default();
        fake.lock().handler = Some(Arc::new(handler));
        fake
    }

    /// Expects one `method` request on `path` (query ignored), answered with `status`
    /// and `reply`. Expectations may be met in any order (a pass writes concurrently).
    pub fn expect(self, method: Method, path: &str, status: u16, reply: Value) -> FakeApi {
        self.lock().expected.push(Expected {
            method,
            path: path.to_string(),
            status,
            reply,
            served: false,
            always: false,
        });
        self
    }

    /// Answers every `method` request on `path` with `status` and `reply`, any number of
    /// times (none included).
    pub fn always(self, method: Method, path: &str, status: u16, reply: Value) -> FakeApi {
        self.lock().expected.push(Expected {
            method,
            path: path.to_string(),
            status,
            reply,
            served: false,
            always: true,
        });
        self
    }

    /// A client whose every request goes to this fake.
    pub fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(req).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Every request received, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// Forgets the requests received so far: [`seen`](Self::seen) starts again.
    pub fn clear_seen(&self) {
        self.lock().seen.clear();
    }

    /// The requests received with `method` on `path`.
    pub fn requests(&self, method: &Method, path: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == *method && s.path == path)
            .collect()
    }

    /// Fails on an unexpected request or an expected one that never came.
    pub fn verify(&self) {
        let script = self.lock();
        let unexpected: Vec<String> = script
            .unexpected
            .iter()
            .map(|s| format!("{} {}?{} {}", s.method, s.path, s.query, s.body))
            .collect();
        assert!(
            unexpected.is_empty(),
            "unexpected requests: {unexpected:#?}"
        );
        let missing: Vec<String> = script
            .expected
            .iter()
            .filter(|e| !e.served && !e.always)
            .map(|e| format!("{} {}", e.method, e.path))
            .collect();
        assert!(
            missing.is_empty(),
            "expected requests never sent: {missing:#?}"
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn answer(&self, req: Request<kube::client::Body>) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let seen = Seen {
            method: parts.method.clone(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        let handler = {
            let mut script = self.lock();
            script.seen.push(seen.clone());
            script.handler.clone()
        };
        if let Some(handler) = handler {
            // Called without the lock: a handler may take its time, or block.
            let (status, body) = handler(&seen.method, &seen.target(), &bytes);
            return reply(status, &body);
        }
        let mut script = self.lock();
        if seen.path.starts_with("/apis/events.k8s.io/") {
            return reply(201, &seen.body);
        }
        let found = script
            .expected
            .iter_mut()
            .find(|e| (e.always || !e.served) && e.method == seen.method && e.path == seen.path);
        match found {
            Some(e) => {
                e.served = true;
                reply(e.status, &e.reply)
            }
            None => {
                script.unexpected.push(seen);
                reply(
                    500,
                    &failure(500, "InternalError", "not in the fake's script"),
                )
            }
        }
    }
}

fn reply(status: u16, body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// A `Status` failure as the API server sends it.
pub fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// A handler's reply of a `Status` failure with `code`, its reason as its message.
pub fn status(code: u16, reason: &str) -> (u16, Value) {
    (code, failure(code, reason, reason))
}
