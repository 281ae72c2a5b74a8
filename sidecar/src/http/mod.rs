//! The HTTP API the app calls on localhost (hyper 1.x over tokio).
//!
//! All routes are served on the loopback `--listen` address (and the Unix socket). In
//! cluster mode `/healthz`, `/readyz` and `/metrics`, and nothing else, are also served on
//! the probe port (`--probe-listen`, the pod IP): see [`serve::ProbeRoutes`].
//!
//! | route              | answer                                                     |
//! |--------------------|------------------------------------------------------------|
//! | `GET /id`          | one ID, decimal text; `{"id":"..."}` for `Accept: application/json` |
//! | `GET /ids?count=N` | N IDs, one per line; `{"ids":["...",...]}` as JSON          |
//! | `GET /range?count=N` | segment mode: up to N consecutive values of one block, `{"first":"F","count":n}`; 409 `not_segment` otherwise |
//! | `GET /decode/<id>` | the fields of an ID (decimal) as JSON; `/decode/base32/<id>`, `/decode/base62/<id>` read the compact forms |
//! | `GET /healthz`     | 200 while the process runs                                  |
//! | `GET /readyz`      | 200 when an ID can be issued now, else 503 with the reason and the serving phase |
//! | `GET /readyz?wait=<ms>` | the same, held until ready or `<ms>` (at most 10 s) have passed: the startup probe's long poll (and 0.1.0's postStart hook's) |
//! | `GET /metrics`     | Prometheus text (also on the probe port, for Prometheus)    |
//! | `GET /openapi.yaml` | this API's OpenAPI description, of this sidecar's ID range ([`openapi`]) |
//!
//! `/id` and `/ids` take `after=<x>`: only values greater than `x` (docs/safety.md rule
//! 12); an `after` this sidecar cannot honour now is a 409 (`after_ahead_of_clock` with
//! `Retry-After`, or `after_above_counter`), one that is not a value of the sequence a 400.
//!
//! IDs are strings in JSON because JavaScript numbers lose precision above 2^53. Every
//! error is a JSON body `{"error": "..."}`; refusals (503) carry `Retry-After`. A refusal
//! that clears by itself (a late fence renewal, a clock a little behind) holds the request
//! for up to a second first ([`routes`], `held`).
//!
//! In segment mode the same routes serve counter values from a [`crate::source::Source`]:
//! `/ids` may span blocks (values increase, but are not always consecutive) and waits for a
//! claim only when the buffer runs dry; `/decode` says the value carries no fields.
//!
//! - [`route`]: the routes as a type ([`route::Route`], parsed once from the path); every
//!   list of routes (404 text, probe port, OpenAPI check) comes from it. Add a route there.
//! - [`routes`]: route handling, a `Request` in, a `Response` out. It only reads the
//!   serving state ([`crate::state`]); answers each [`route::Route`].
//! - [`openapi`]: the API's description, as served.
//! - [`reply`]: replies and errors as JSON or text.
//! - [`serve`](mod@serve): the connection loop (accept, header-read timeout, graceful drain),
//!   independent of the routes it serves.

pub(crate) mod openapi;
pub(crate) mod reply;
pub(crate) mod route;
pub(crate) mod routes;
pub(crate) mod serve;

pub(crate) use routes::Api;
pub use serve::ListenError;
pub(crate) use serve::{ApiListeners, ProbeServer, serve_api};

/// Default and largest allowed `count` of `GET /ids` unless configured otherwise.
pub const DEFAULT_MAX_BATCH: u64 = 10_000;

/// Default largest `count` of `GET /range` unless configured otherwise (`--max-range`). A
/// range is answered in constant time whatever its length (two numbers, not a line per
/// value), so its bound is far above `/ids`'s; what it hands out is still capped by the
/// block the sidecar holds.
pub const DEFAULT_MAX_RANGE: u64 = 1_000_000;

/// The largest `--max-range` accepted: a range's `first + count` stays below 2^63 anyway
/// (the block does), so the bound only keeps the flag's value a sensible number.
pub const MAX_MAX_RANGE: u64 = 1 << 40;
