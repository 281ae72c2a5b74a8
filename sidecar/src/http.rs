//! The HTTP API the app calls on localhost (hyper 1.x over tokio).
//!
//! | route              | answer                                                     |
//! |--------------------|------------------------------------------------------------|
//! | `GET /id`          | one ID, decimal text; `{"id":"..."}` for `Accept: application/json` |
//! | `GET /ids?count=N` | N IDs, one per line; `{"ids":["...",...]}` as JSON          |
//! | `GET /decode/<id>` | the fields of an ID as JSON                                 |
//! | `GET /healthz`     | 200 while the process runs                                  |
//! | `GET /readyz`      | 200 when an ID can be issued now, else 503 with the reason  |
//! | `GET /metrics`     | Prometheus text                                             |
//!
//! IDs are strings in JSON because JavaScript numbers lose precision above 2^53. Every
//! error is a JSON body `{"error": "..."}`; refusals (503) carry `Retry-After`.
//!
//! In segment mode the same routes serve counter values from a [`Segment`]: `/ids` may
//! span blocks (values increase, but are not always consecutive) and waits for a claim
//! only when the buffer runs dry; `/decode` says the value carries no fields.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use kubeflake_crds::Id;
use kubeflake_crds::timebase::rfc3339;
use prometheus::{Histogram, IntCounter};
use serde_json::json;
use tokio::net::TcpListener;

use crate::generator::{Generator, Refusal};
use crate::metrics::Metrics;
use crate::segment::{Segment, SegmentRefusal};

/// Default and largest allowed `count` of `GET /ids` unless configured otherwise.
pub const DEFAULT_MAX_BATCH: u64 = 10_000;

/// How long a client may take to send a request's headers before the connection is
/// closed: a client that sends half a request must not hold a connection forever.
/// hyper also counts a keep-alive connection's idle time before the next request against
/// it, so this is as long as hyper's own default (30 s), longer than the idle timeout of
/// common client pools.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handlers share.
pub struct Api {
    /// The generator of the slot held now; none while waiting for one (cluster mode).
    generator: ArcSwapOption<Generator>,
    /// The segment source, in segment mode (then there is never a generator).
    segment: ArcSwapOption<Segment>,
    pub metrics: Arc<Metrics>,
    /// Largest `count` accepted by `GET /ids`.
    pub max_batch: u64,
    /// Why no generator is installed (read only when there is none).
    waiting_for: Mutex<String>,
    /// The metric series of the busiest answer, resolved once.
    id_ok: RouteSeries,
}

/// The metric series of one route and status, looked up once instead of per request:
/// resolving labels hashes them and takes a lock each time.
struct RouteSeries {
    requests: IntCounter,
    duration: Histogram,
}

impl RouteSeries {
    fn new(metrics: &Metrics, route: &str, code: &str) -> RouteSeries {
        RouteSeries {
            requests: metrics.requests.with_label_values(&[route, code]),
            duration: metrics.request_duration.with_label_values(&[route]),
        }
    }
}

type Reply = Response<Full<Bytes>>;

/// A request that cannot be answered, and how to say so.
#[derive(Debug, thiserror::Error)]
enum HttpError {
    #[error("{0}")]
    BadRequest(String),
    #[error("no route {0}; try GET /id, /ids?count=N, /decode/<id>, /healthz, /readyz or /metrics")]
    NotFound(String),
    #[error("method {method} is not allowed on {path}; use GET")]
    MethodNotAllowed { method: Method, path: String },
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("not ready: {0}; retry later")]
    NotReady(String),
    #[error("{0}")]
    Segment(#[from] SegmentRefusal),
}

fn body(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut reply = Response::new(Full::new(body.into()));
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    reply
}

fn json_reply(status: StatusCode, value: serde_json::Value) -> Reply {
    body(status, "application/json", value.to_string())
}

impl HttpError {
    fn into_reply(self, metrics: &Metrics) -> Reply {
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
            HttpError::NotReady(_) => {
                metrics.refusals.with_label_values(&["no_slot"]).inc();
                let mut reply = json_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": message, "reason": "no_slot" }),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(1));
                reply
            }
            HttpError::Segment(refusal) => {
                metrics
                    .refusals
                    .with_label_values(&[refusal.reason()])
                    .inc();
                let mut reply = json_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": message, "reason": refusal.reason() }),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after_secs()));
                reply
            }
            HttpError::Refused(refusal) => {
                metrics
                    .refusals
                    .with_label_values(&[refusal.reason()])
                    .inc();
                let mut reply = json_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": message, "reason": refusal.reason() }),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after_secs()));
                reply
            }
        }
    }
}

/// Reads the query string, accepting only the `allowed` keys, each at most once.
fn query_params<'a>(
    query: Option<&'a str>,
    allowed: &[&str],
) -> Result<Vec<(&'a str, &'a str)>, HttpError> {
    let mut params: Vec<(&str, &str)> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !allowed.contains(&key) {
            return Err(HttpError::BadRequest(format!(
                "unknown query parameter {key:?}; allowed: {allowed:?}"
            )));
        }
        if params.iter().any(|(k, _)| *k == key) {
            return Err(HttpError::BadRequest(format!(
                "query parameter {key:?} is given twice"
            )));
        }
        params.push((key, value));
    }
    Ok(params)
}

fn parse_count(query: Option<&str>, max: u64) -> Result<u64, HttpError> {
    let params = query_params(query, &["count"])?;
    let Some((_, raw)) = params.first() else {
        return Err(HttpError::BadRequest(format!(
            "missing query parameter count: use /ids?count=N with 1 <= N <= {max}"
        )));
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(HttpError::BadRequest(format!(
            "count must be a whole number from 1 to {max}, got {raw:?}"
        ))),
    }
}

fn wants_json(req: &Request<Incoming>) -> bool {
    req.headers().get_all(ACCEPT).iter().any(|v| {
        v.to_str()
            .map(|s| s.contains("application/json"))
            .unwrap_or(false)
    })
}

impl Api {
    pub fn new(generator: Option<Arc<Generator>>, metrics: Arc<Metrics>, max_batch: u64) -> Api {
        Api {
            generator: ArcSwapOption::new(generator),
            segment: ArcSwapOption::new(None),
            id_ok: RouteSeries::new(&metrics, "id", "200"),
            metrics,
            max_batch,
            waiting_for: Mutex::new("starting".into()),
        }
    }

    /// Starts serving from `generator` (a slot was acquired).
    pub fn install(&self, generator: Arc<Generator>) {
        self.generator.store(Some(generator));
    }

    /// Starts serving segment values.
    pub fn install_segment(&self, segment: Arc<Segment>) {
        self.segment.store(Some(segment));
    }

    /// The segment source in use, if any.
    pub fn segment(&self) -> Option<Arc<Segment>> {
        self.segment.load_full()
    }

    /// Stops serving: no generator until the next [`install`](Self::install).
    pub fn uninstall(&self, reason: impl Into<String>) {
        self.set_waiting_for(reason);
        self.generator.store(None);
    }

    /// Records why there is no generator yet.
    pub fn set_waiting_for(&self, reason: impl Into<String>) {
        *self.waiting_for.lock().unwrap_or_else(|p| p.into_inner()) = reason.into();
    }

    /// The generator in use, if any.
    pub fn generator(&self) -> Option<Arc<Generator>> {
        self.generator.load_full()
    }

    fn current(&self) -> Result<Arc<Generator>, HttpError> {
        self.generator.load_full().ok_or_else(|| {
            HttpError::NotReady(
                self.waiting_for
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            )
        })
    }

    fn one_id(&self, json: bool) -> Result<Reply, HttpError> {
        let id = self.current()?.next_id()?;
        self.metrics.ids_issued.inc();
        Ok(one_value_reply(id.get(), json))
    }

    fn many_ids(&self, count: u64, json: bool) -> Result<Reply, HttpError> {
        let generator = self.current()?;
        let reservation = generator.reserve(count)?;
        self.metrics.ids_issued.inc_by(count);
        let mut out = Vec::with_capacity(count as usize * 22 + 16);
        let mut buf = itoa::Buffer::new();
        let positions = reservation.first..reservation.first + reservation.count;
        if json {
            out.extend_from_slice(b"{\"ids\":[");
            for (i, position) in positions.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(b'"');
                out.extend_from_slice(buf.format(generator.id_at(position).get()).as_bytes());
                out.push(b'"');
            }
            out.extend_from_slice(b"]}");
            Ok(body(StatusCode::OK, "application/json", out))
        } else {
            for position in positions {
                out.extend_from_slice(buf.format(generator.id_at(position).get()).as_bytes());
                out.push(b'\n');
            }
            Ok(body(StatusCode::OK, "text/plain", out))
        }
    }

    /// `/id` and `/ids` in segment mode: values from the block buffer.
    async fn segment_ids(
        &self,
        segment: &Arc<Segment>,
        count: u64,
        many: bool,
        json: bool,
    ) -> Result<Reply, HttpError> {
        if !many {
            let value = segment.take_one().await?;
            self.metrics.ids_issued.inc();
            return Ok(one_value_reply(value, json));
        }
        let runs = segment.take(count).await?;
        self.metrics.ids_issued.inc_by(count);
        let mut buf = itoa::Buffer::new();
        let mut out = Vec::with_capacity(count as usize * 21 + 16);
        let values = runs.iter().flat_map(|b| b.start..b.end);
        if json {
            out.extend_from_slice(b"{\"ids\":[");
            for (i, v) in values.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(b'"');
                out.extend_from_slice(buf.format(v).as_bytes());
                out.push(b'"');
            }
            out.extend_from_slice(b"]}");
            Ok(body(StatusCode::OK, "application/json", out))
        } else {
            for v in values {
                out.extend_from_slice(buf.format(v).as_bytes());
                out.push(b'\n');
            }
            Ok(body(StatusCode::OK, "text/plain", out))
        }
    }

    fn segment_decode(raw: &str) -> Result<Reply, HttpError> {
        let value = raw
            .parse::<u64>()
            .ok()
            .filter(|v| *v < kubeflake_crds::segment_counter::LIMIT)
            .ok_or_else(|| {
                HttpError::BadRequest(format!(
                    "{raw:?} is not a segment value: expected a decimal number from 0 to 2^63-1"
                ))
            })?;
        Ok(json_reply(
            StatusCode::OK,
            json!({
                "id": value.to_string(),
                "mode": "Segment",
                "fields": null,
                "note": "segment values are plain counter values: they carry no time, datacenter, worker or sequence fields",
            }),
        ))
    }

    fn decode(&self, raw: &str) -> Result<Reply, HttpError> {
        if self.segment.load().is_some() {
            return Api::segment_decode(raw);
        }
        let generator = self.current()?;
        let config = generator.config();
        let parsed = raw.parse::<u64>().map_err(|_| {
            HttpError::BadRequest(format!("{raw:?} is not an ID: expected a decimal number"))
        })?;
        let parts = Id::new(parsed)
            .and_then(|id| config.layout.decode(id))
            .map_err(|e| HttpError::BadRequest(e.to_string()))?;
        Ok(json_reply(
            StatusCode::OK,
            json!({
                "id": parsed.to_string(),
                "time": rfc3339(config.timebase.start_of(parts.tick)),
                "tick": parts.tick.0,
                "datacenter": parts.datacenter.0,
                "worker": parts.slot.0,
                "sequence": parts.sequence,
            }),
        ))
    }

    fn readyz(&self) -> Reply {
        if let Some(segment) = self.segment.load_full() {
            return match segment.check_ready() {
                Ok(()) => json_reply(
                    StatusCode::OK,
                    json!({ "status": "ready", "mode": "Segment" }),
                ),
                Err(refusal) => {
                    let mut reply = json_reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({ "status": "not ready", "reason": refusal.reason(), "error": refusal.to_string() }),
                    );
                    reply
                        .headers_mut()
                        .insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after_secs()));
                    reply
                }
            };
        }
        let generator = match self.current() {
            Ok(g) => g,
            Err(e) => {
                let mut reply = json_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "status": "not ready", "reason": "no_slot", "error": e.to_string() }),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(1));
                return reply;
            }
        };
        match generator.check_ready() {
            Ok(()) => json_reply(StatusCode::OK, json!({ "status": "ready" })),
            Err(refusal) => {
                let mut reply = json_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "status": "not ready", "reason": refusal.reason(), "error": refusal.to_string() }),
                );
                reply
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after_secs()));
                reply
            }
        }
    }

    /// Routes one request. Returns the route label for metrics with the reply, or with
    /// what to await (segment values may have to wait for a claim).
    fn route(&self, req: &Request<Incoming>) -> (&'static str, Result<Planned, HttpError>) {
        let path = req.uri().path();
        let query = req.uri().query();
        let route = match path {
            "/id" => "id",
            "/ids" => "ids",
            "/healthz" => "healthz",
            "/readyz" => "readyz",
            "/metrics" => "metrics",
            p if p.starts_with("/decode/") => "decode",
            _ => return ("other", Err(HttpError::NotFound(path.to_string()))),
        };
        if req.method() != Method::GET {
            let err = HttpError::MethodNotAllowed {
                method: req.method().clone(),
                path: path.to_string(),
            };
            return (route, Err(err));
        }
        let result = match (route, self.segment.load_full()) {
            ("id", Some(segment)) => query_params(query, &[]).map(|_| Planned::Segment {
                segment,
                count: 1,
                many: false,
                json: wants_json(req),
            }),
            ("ids", Some(segment)) => {
                parse_count(query, self.max_batch).map(|count| Planned::Segment {
                    segment,
                    count,
                    many: true,
                    json: wants_json(req),
                })
            }
            ("metrics", Some(segment)) => Ok(Planned::Reply(body(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                self.metrics
                    .render_segment(segment.check_ready().is_ok(), segment.buffered()),
            ))),
            (route, _) => self.route_sync(route, path, query, req).map(Planned::Reply),
        };
        (route, result)
    }

    fn route_sync(
        &self,
        route: &'static str,
        path: &str,
        query: Option<&str>,
        req: &Request<Incoming>,
    ) -> Result<Reply, HttpError> {
        match route {
            "id" => query_params(query, &[]).and_then(|_| self.one_id(wants_json(req))),
            "ids" => {
                parse_count(query, self.max_batch).and_then(|n| self.many_ids(n, wants_json(req)))
            }
            "decode" => {
                query_params(query, &[]).and_then(|_| self.decode(&path["/decode/".len()..]))
            }
            "healthz" => Ok(json_reply(StatusCode::OK, json!({ "status": "alive" }))),
            "readyz" => Ok(self.readyz()),
            _ => Ok(body(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                self.metrics.render(self.generator().as_deref()),
            )),
        }
    }

    /// Answers one request; never fails (errors become 4xx/5xx replies). The returned
    /// future does not borrow the request.
    pub fn handle<'a>(
        &'a self,
        req: &Request<Incoming>,
    ) -> impl Future<Output = Reply> + Send + use<'a> {
        let started = Instant::now();
        let (route, planned) = self.route(req);
        async move {
            let result = match planned {
                Ok(Planned::Reply(reply)) => Ok(reply),
                Ok(Planned::Segment {
                    segment,
                    count,
                    many,
                    json,
                }) => self.segment_ids(&segment, count, many, json).await,
                Err(e) => Err(e),
            };
            let reply = result.unwrap_or_else(|e| e.into_reply(&self.metrics));
            let seconds = started.elapsed().as_secs_f64();
            if route == "id" && reply.status() == StatusCode::OK {
                self.id_ok.requests.inc();
                self.id_ok.duration.observe(seconds);
            } else {
                let mut code = itoa::Buffer::new();
                self.metrics
                    .requests
                    .with_label_values(&[route, code.format(reply.status().as_u16())])
                    .inc();
                self.metrics
                    .request_duration
                    .with_label_values(&[route])
                    .observe(seconds);
            }
            reply
        }
    }
}

/// The reply to `/id`: one value as text or `{"id":"<decimal>"}`. Assembled by hand:
/// `format!` cost about as much as the rest of the handler (callgrind, docs/benchmarks.md).
fn one_value_reply(value: u64, json: bool) -> Reply {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(value).as_bytes();
    let mut out = Vec::with_capacity(digits.len() + 10);
    if json {
        out.extend_from_slice(b"{\"id\":\"");
        out.extend_from_slice(digits);
        out.extend_from_slice(b"\"}");
        body(StatusCode::OK, "application/json", out)
    } else {
        out.extend_from_slice(digits);
        out.push(b'\n');
        body(StatusCode::OK, "text/plain", out)
    }
}

/// On the probe port only `/healthz` and `/readyz` are answered; this is the reply to
/// anything else (`None` for the probes themselves).
fn refuse_non_probe(req: &Request<Incoming>) -> Option<Reply> {
    match req.uri().path() {
        "/healthz" | "/readyz" => None,
        other => Some(json_reply(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no route {other:?}: this port serves only /healthz and /readyz; IDs are on 127.0.0.1") }),
        )),
    }
}

/// What answering a request takes: a reply ready now, or segment values to wait for.
enum Planned {
    Reply(Reply),
    Segment {
        segment: Arc<Segment>,
        count: u64,
        many: bool,
        json: bool,
    },
}

/// Serves `api` on `listener` until `shutdown` completes, then stops accepting, lets
/// in-flight requests finish (up to `drain`), and returns.
pub async fn serve(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    serve_routes(listener, api, shutdown, drain, false, HEADER_READ_TIMEOUT).await
}

/// Like [`serve`], answering only `/healthz` and `/readyz`: for a listener on the pod's
/// address that kubelet probes reach, while IDs stay on localhost.
pub async fn serve_probes(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    serve_routes(listener, api, shutdown, drain, true, HEADER_READ_TIMEOUT).await
}

async fn serve_routes(
    listener: TcpListener,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    probes_only: bool,
    header_read_timeout: Duration,
) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let api = api.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let api = api.clone();
                    async move {
                        if probes_only && let Some(reply) = refuse_non_probe(&req) {
                            return Ok::<_, Infallible>(reply);
                        }
                        let reply = api.handle(&req);
                        Ok::<_, Infallible>(reply.await)
                    }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_read_timeout)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!(?drain, "drain timeout: closing remaining connections"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_half_sent_request_is_closed_after_the_header_read_timeout() {
        for probes_only in [false, true] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let api = Arc::new(Api::new(None, Arc::new(Metrics::new()), DEFAULT_MAX_BATCH));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(serve_routes(
                listener,
                api,
                async {
                    let _ = stopped.await;
                },
                Duration::from_millis(100),
                probes_only,
                Duration::from_millis(200),
            ));
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            client
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: localh")
                .await
                .unwrap();
            let mut rest = Vec::new();
            let read =
                tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
            assert!(
                read.is_ok(),
                "probes_only={probes_only}: the connection is still open 5 s after a partial request"
            );
            let _ = stop.send(());
            server.await.unwrap();
        }
    }
}
