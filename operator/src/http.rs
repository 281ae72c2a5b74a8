//! Health, readiness and metrics endpoints of the operator, on a port of their own.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// What the probes report.
#[derive(Default)]
pub struct Health {
    /// The caches have synced and the controller runs.
    pub ready: AtomicBool,
    /// The controller loop ended (it should not while the process lives).
    pub failed: AtomicBool,
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    r
}

fn answer(req: &Request<Incoming>, health: &Health, metrics: &Metrics) -> Response<Full<Bytes>> {
    let json = "application/json";
    match req.uri().path() {
        "/healthz" if health.failed.load(Ordering::Acquire) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json,
            r#"{"status":"controller stopped"}"#.into(),
        ),
        "/healthz" => reply(StatusCode::OK, json, r#"{"status":"alive"}"#.into()),
        "/readyz" if health.ready.load(Ordering::Acquire) => {
            reply(StatusCode::OK, json, r#"{"status":"ready"}"#.into())
        }
        "/readyz" => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json,
            r#"{"status":"not ready","reason":"caches not synced yet"}"#.into(),
        ),
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        other => reply(
            StatusCode::NOT_FOUND,
            json,
            format!(r#"{{"error":"no route {other:?}; try /healthz, /readyz or /metrics"}}"#),
        ),
    }
}

/// Serves the probes and metrics until the task is dropped.
pub async fn serve(listener: TcpListener, health: Arc<Health>, metrics: Arc<Metrics>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (health, metrics) = (health.clone(), metrics.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let r = answer(&req, &health, &metrics);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
