//! A scripted fake API server for unit tests, in the manner of kube-rs controller-rs
//! `fixtures.rs`: a `tower::Service` behind a real [`kube::Client`] that answers each
//! expected request with a scripted reply, records every request, and refuses (500) any
//! request that was not expected. [`FakeApi::verify`] then fails the test on an
//! unexpected request or an expected one that never came.
//!
//! Events (`events.k8s.io`) are answered without a script: they are best-effort and
//! batched by kube's recorder; tests that care inspect [`FakeApi::seen`].

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
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

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
    seen: Vec<Seen>,
    unexpected: Vec<Seen>,
}

/// The fake API server. Clones share one script.
#[derive(Clone, Default)]
pub struct FakeApi(Arc<Mutex<Script>>);

impl FakeApi {
    pub fn new() -> FakeApi {
        FakeApi::default()
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
        let mut script = self.lock();
        script.seen.push(seen.clone());
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
