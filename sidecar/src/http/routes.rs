//! Route handling: one `Request` in, one `Response` out, answered from the serving state
//! ([`crate::state`]), which this module only reads. To add a route, add it to
//! [`super::route::Route`] and answer it in `Api::route` (the `match` there is exhaustive).
//!
//! One piece (over 400 lines): every route reads the same serving state and shares the
//! query parsing (`count`, `after`, `format`) and the reply building; splitting them would
//! spread one route over several files. Apart: `/decode` ([`decode`]), `/range`
//! ([`range`]) and the held answers ([`held`]).

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use hyper::header::ACCEPT;
use hyper::{Method, Request, StatusCode};
use kubeflake_crds::TextForm;
use prometheus::{Histogram, IntCounter};
use serde_json::json;
use tokio::sync::Semaphore;

use held::{HeldIds, READYZ_WAITERS, readyz_wait};

use super::openapi;
use super::reply::{
    HttpError, Reply, body, json_reply, many_values_reply, one_value_reply, unavailable,
};
use super::route::Route;
use crate::generator::Generator;
use crate::metrics::Metrics;
use crate::segment::buffer::Segment;
use crate::source::Source;
use crate::state::{Serving, ServingReader};

/// What the handlers share.
pub(crate) struct Api {
    /// What is served now; written by the lifecycle code only.
    state: ServingReader,
    pub(crate) metrics: Arc<Metrics>,
    /// Largest `count` accepted by `GET /ids`.
    pub(crate) max_batch: u64,
    /// Largest `count` accepted by `GET /range` (`--max-range`).
    pub(crate) max_range: u64,
    /// The metric series of the busiest answer, resolved once.
    id_ok: RouteSeries,
    /// Permits for `/readyz?wait=` requests held open at once ([`READYZ_WAITERS`]).
    readyz_waiters: Semaphore,
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

/// The largest ID this sidecar may issue or decode: its layout's (2^63-1 or 2^53-1) in
/// Snowflake mode, 2^63-1 otherwise (segment values; a sidecar not serving yet answers
/// `/decode` with a 503 whatever the document allows).
fn largest_id(state: &Serving) -> u64 {
    match state {
        Serving::Snowflake(g) => u64::MAX >> (64 - g.config().layout.total_bits()),
        _ => (1 << 63) - 1,
    }
}

/// What `/id` and `/ids` were asked for: how many values, the raw `after` value, and the
/// text form of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wanted {
    count: u64,
    after: Option<u64>,
    form: TextForm,
}

/// Parses the query of `/id` (`many` false: `after`, `format`) or `/ids` (also `count`).
fn parse_wanted(query: Option<&str>, many: bool, max: u64) -> Result<Wanted, HttpError> {
    let allowed: &[&str] = if many {
        &["count", "after", "format"]
    } else {
        &["after", "format"]
    };
    let params = query_params(query, allowed)?;
    let raw = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let count = if many {
        parse_count(raw("count"), max, "/ids?count=N")?
    } else {
        1
    };
    let after = raw("after").map(parse_after).transpose()?;
    let form = parse_format(raw("format"))?;
    Ok(Wanted { count, after, form })
}

/// `count` of `/ids` and `/range` (`usage` names the route): 1 to `max`.
fn parse_count(raw: Option<&str>, max: u64, usage: &str) -> Result<u64, HttpError> {
    let Some(raw) = raw else {
        return Err(HttpError::BadRequest(format!(
            "missing query parameter count: use {usage} with 1 <= N <= {max}"
        )));
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(HttpError::BadRequest(format!(
            "count must be a whole number from 1 to {max}, got {raw:?}"
        ))),
    }
}

/// `format`: how IDs are written in the answer (`/id`, `/ids`) or read from the path
/// (`/decode`); decimal when absent. Every ID and segment value is below 2^63, which every
/// form holds, so no value is ever refused for its form.
fn parse_format(raw: Option<&str>) -> Result<TextForm, HttpError> {
    raw.map_or(Ok(TextForm::Decimal), |raw| {
        raw.parse()
            .map_err(|e| HttpError::BadRequest(format!("query parameter format: {e}")))
    })
}

/// `after` must be decimal digits of a u64 (no sign, no spaces, not empty).
fn parse_after(raw: &str) -> Result<u64, HttpError> {
    decimal_digits(raw).ok_or_else(|| {
        HttpError::BadRequest(format!(
            "after must be an ID or value in decimal digits (below 2^63), got {raw:?}"
        ))
    })
}

/// A decimal ID or value (`after`, `/decode`): digits only (no sign, no spaces, not
/// empty), at most `u64::MAX`; whether it is below 2^63 is for the caller to say, in its
/// own words.
fn decimal_digits(raw: &str) -> Option<u64> {
    raw.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| raw.parse::<u64>().ok())
        .flatten()
}

/// The smallest segment value an `after` allows (docs/safety.md rule 12): values are below
/// 2^63, so nothing is above 2^63-1.
fn segment_min_after(after: Option<u64>) -> Result<u64, HttpError> {
    match after {
        None => Ok(0),
        Some(x) if x < kubeflake_crds::segment_counter::LIMIT - 1 => Ok(x + 1),
        Some(x) => Err(HttpError::BadRequest(format!(
            "after={x} leaves no segment value above it: values are below 2^63, so after must \
             be at most 9223372036854775806"
        ))),
    }
}

fn wants_json<B>(req: &Request<B>) -> bool {
    req.headers().get_all(ACCEPT).iter().any(|v| {
        v.to_str()
            .map(|s| s.contains("application/json"))
            .unwrap_or(false)
    })
}

/// Why nothing is issued in `state` (which serves neither IDs nor values).
fn not_ready(state: &Serving) -> HttpError {
    match state {
        Serving::Stopping => HttpError::NotReady {
            reason: "stopping",
            message: "the sidecar is stopping".into(),
        },
        Serving::Waiting(why) => HttpError::NotReady {
            reason: "no_slot",
            message: why.to_string(),
        },
        // Not reached: these states serve.
        Serving::Snowflake(_) | Serving::Segment(_) => HttpError::NotReady {
            reason: "no_slot",
            message: "starting".into(),
        },
    }
}

/// What answering a request takes: a reply ready now, or segment values to wait for.
enum Planned {
    Reply(Reply),
    Segment {
        segment: Source,
        count: u64,
        /// The smallest value allowed (`after + 1`; 0 without `after`).
        min: u64,
        many: bool,
        form: TextForm,
        json: bool,
    },
    /// `/readyz?wait=`: not ready now; answer once ready, or (503) at `until`.
    ReadyzWait {
        until: tokio::time::Instant,
    },
    /// `/id` or `/ids` refused for a reason that clears by itself ([`held::ID_HOLD`]).
    SnowflakeHeld(HeldIds),
    /// `/range`: consecutive values from one block ([`range`]).
    Range(Arc<Segment>, u64),
}

impl Api {
    pub(crate) fn new(state: ServingReader, metrics: Arc<Metrics>, max_batch: u64) -> Api {
        Api {
            state,
            id_ok: RouteSeries::new(&metrics, "id", "200"),
            metrics,
            max_batch,
            max_range: super::DEFAULT_MAX_RANGE,
            readyz_waiters: Semaphore::new(READYZ_WAITERS),
        }
    }

    /// The same API with `/range` accepting `count` up to `max_range` (`--max-range`)
    /// instead of [`super::DEFAULT_MAX_RANGE`].
    pub(crate) fn with_max_range(mut self, max_range: u64) -> Api {
        self.max_range = max_range;
        self
    }

    /// The serving state this API answers from.
    pub(crate) fn state(&self) -> &ServingReader {
        &self.state
    }

    fn one_id(
        &self,
        generator: &Generator,
        form: TextForm,
        json: bool,
    ) -> Result<Reply, HttpError> {
        let id = generator.next_id()?;
        self.metrics.ids_issued.inc();
        Ok(one_value_reply(id.get(), form, json))
    }

    /// `/id` and `/ids` in Snowflake mode.
    fn snowflake_ids(
        &self,
        generator: &Generator,
        wanted: Wanted,
        many: bool,
        json: bool,
    ) -> Result<Reply, HttpError> {
        let form = wanted.form;
        match (wanted.after, many) {
            (None, false) => self.one_id(generator, form, json),
            (None, true) => self.many_ids(generator, wanted.count, 0, form, json),
            (Some(after), _) => {
                let floor = generator
                    .position_after(after)
                    .map_err(|e| HttpError::BadRequest(e.to_string()))?;
                if many {
                    self.many_ids(generator, wanted.count, floor, form, json)
                } else {
                    let r = generator.reserve_from(1, floor)?;
                    self.metrics.ids_issued.inc();
                    Ok(one_value_reply(generator.id_at(r.first).get(), form, json))
                }
            }
        }
    }

    fn many_ids(
        &self,
        generator: &Generator,
        count: u64,
        floor: u64,
        form: TextForm,
        json: bool,
    ) -> Result<Reply, HttpError> {
        let reservation = generator.reserve_from(count, floor)?;
        self.metrics.ids_issued.inc_by(count);
        let positions = reservation.first..reservation.first + reservation.count;
        Ok(many_values_reply(
            positions.map(|p| generator.id_at(p).get()),
            count,
            form,
            json,
        ))
    }

    /// `/id` and `/ids` in segment mode: values from the block buffer.
    async fn segment_ids(
        &self,
        segment: &Source,
        count: u64,
        min: u64,
        many: bool,
        form: TextForm,
        json: bool,
    ) -> Result<Reply, HttpError> {
        // Segment values are below 2^63 (segment_counter::LIMIT), like IDs: every form
        // holds them.
        if !many {
            let value = segment.take_one_from(min).await?;
            self.metrics.ids_issued.inc();
            return Ok(one_value_reply(value, form, json));
        }
        let runs = segment.take_from(count, min).await?;
        self.metrics.ids_issued.inc_by(count);
        Ok(many_values_reply(
            runs.iter().flat_map(|b| b.start..b.end),
            count,
            form,
            json,
        ))
    }

    /// 200 when a value can be issued now; else 503 with the reason. Both name the phase,
    /// and while waiting, what for.
    fn readyz(state: &Serving) -> Reply {
        let phase = state.phase().label();
        let (refusal_reason, refusal, retry_after) = match state {
            Serving::Segment(segment) => match segment.check_ready() {
                Ok(()) => {
                    return json_reply(
                        StatusCode::OK,
                        json!({ "status": "ready", "mode": "Segment", "strict": segment.is_strict(), "phase": phase }),
                    );
                }
                Err(r) => (r.reason(), r.to_string(), r.retry_after_secs()),
            },
            Serving::Snowflake(generator) => match generator.check_ready() {
                Ok(()) => {
                    return json_reply(
                        StatusCode::OK,
                        json!({ "status": "ready", "phase": phase }),
                    );
                }
                Err(r) => (r.reason(), r.to_string(), r.retry_after_secs()),
            },
            Serving::Waiting(why) => {
                return unavailable(
                    json!({
                        "status": "not ready",
                        "reason": "no_slot",
                        "error": not_ready(state).to_string(),
                        "phase": phase,
                        "waiting_for": why.label(),
                    }),
                    1,
                );
            }
            Serving::Stopping => ("stopping", not_ready(state).to_string(), 1),
        };
        unavailable(
            json!({ "status": "not ready", "reason": refusal_reason, "error": refusal, "phase": phase }),
            retry_after,
        )
    }

    fn metrics_text(&self, state: &Serving) -> Reply {
        let text = match state {
            Serving::Segment(segment) => self
                .metrics
                .render_segment(segment.check_ready().is_ok(), segment.buffered()),
            Serving::Snowflake(generator) => self.metrics.render(Some(generator)),
            Serving::Waiting(_) | Serving::Stopping => self.metrics.render(None),
        };
        body(StatusCode::OK, "text/plain; version=0.0.4", text)
    }

    /// Routes one request. Returns the route label for metrics with the reply, or with
    /// what to await (segment values may have to wait for a claim).
    fn route<B>(&self, req: &Request<B>) -> (&'static str, Result<Planned, HttpError>) {
        let path = req.uri().path();
        let query = req.uri().query();
        let Some(route) = Route::parse(path) else {
            return ("other", Err(HttpError::NotFound(path.to_string())));
        };
        let label = route.label();
        if req.method() != Method::GET {
            let err = HttpError::MethodNotAllowed {
                method: req.method().clone(),
                path: path.to_string(),
            };
            return (label, Err(err));
        }
        let json = wants_json(req);
        let state = self.state.load();
        let state: &Serving = &state;
        let result = match route {
            Route::Id | Route::Ids => {
                let many = route == Route::Ids;
                parse_wanted(query, many, self.max_batch).and_then(|wanted| match state {
                    Serving::Segment(segment) => {
                        segment_min_after(wanted.after).map(|min| Planned::Segment {
                            segment: segment.clone(),
                            count: wanted.count,
                            min,
                            many,
                            form: wanted.form,
                            json,
                        })
                    }
                    Serving::Snowflake(g) => self.snowflake_planned(g, wanted, many, json),
                    other => Err(not_ready(other)),
                })
            }
            Route::Range => range::planned(query, self.max_range, state),
            Route::Decode(form, raw) => decode::decode_query(query, form).and_then(|()| {
                match state {
                    Serving::Segment(_) => decode::segment_decode(raw, form),
                    Serving::Snowflake(g) => decode::decode(g, raw, form),
                    other => Err(not_ready(other)),
                }
                .map(Planned::Reply)
            }),
            Route::Healthz => Ok(Planned::Reply(json_reply(
                StatusCode::OK,
                json!({ "status": "alive" }),
            ))),
            Route::Readyz => readyz_wait(query).map(|wait| {
                let reply = Api::readyz(state);
                match wait {
                    Some(wait)
                        if reply.status() != StatusCode::OK
                            && !matches!(state, Serving::Stopping) =>
                    {
                        Planned::ReadyzWait {
                            until: tokio::time::Instant::now() + wait,
                        }
                    }
                    _ => Planned::Reply(reply),
                }
            }),
            Route::OpenApi => Ok(Planned::Reply(
                match openapi::document_for(largest_id(state)) {
                    Cow::Borrowed(text) => body(StatusCode::OK, "application/yaml", text),
                    Cow::Owned(text) => body(StatusCode::OK, "application/yaml", text),
                },
            )),
            Route::Metrics => Ok(Planned::Reply(self.metrics_text(state))),
        };
        (label, result)
    }

    /// Answers one request; never fails (errors become 4xx/5xx replies). The returned
    /// future does not borrow the request.
    pub(crate) fn handle<'a, B>(
        &'a self,
        req: &Request<B>,
    ) -> impl Future<Output = Reply> + Send + use<'a, B> {
        let started = Instant::now();
        let (route, planned) = self.route(req);
        async move {
            let result = match planned {
                Ok(Planned::Reply(reply)) => Ok(reply),
                Ok(Planned::Segment {
                    segment,
                    count,
                    min,
                    many,
                    form,
                    json,
                }) => {
                    self.segment_ids(&segment, count, min, many, form, json)
                        .await
                }
                Ok(Planned::ReadyzWait { until }) => Ok(self.readyz_when_ready(until).await),
                Ok(Planned::SnowflakeHeld(held)) => self.snowflake_ids_held(held).await,
                Ok(Planned::Range(segment, count)) => self.range(&segment, count).await,
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

mod decode;
mod held;
mod range;
#[cfg(test)]
mod range_tests;
#[cfg(test)]
mod tests;
