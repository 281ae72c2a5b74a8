//! A scripted fake API server for unit tests: a `kube::Client` whose requests are answered
//! by a closure (method, path with query, body) and recorded, so code that writes to the
//! API server is tested without a control plane.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::Client;

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
}

type Handler = dyn Fn(&http::Method, &str, &[u8]) -> (u16, serde_json::Value) + Send + Sync;

/// A client answered by `handler`, and the log of what it was asked.
pub fn client(
    handler: impl Fn(&http::Method, &str, &[u8]) -> (u16, serde_json::Value) + Send + Sync + 'static,
) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let handler: Arc<Handler> = Arc::new(handler);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (handler, log) = (handler.clone(), log.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let path = parts
                .uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default();
            log.lock().unwrap().push(Seen {
                method: parts.method.to_string(),
                path: path.clone(),
            });
            let (status, json) = handler(&parts.method, &path, &body);
            let reply = http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(json.to_string())))?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(reply)
        }
    });
    (Client::new(service, "default"), seen)
}

/// A `Status` reply body with `code`.
pub fn status(code: u16, reason: &str) -> (u16, serde_json::Value) {
    (
        code,
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": reason, "reason": reason, "code": code,
        }),
    )
}
