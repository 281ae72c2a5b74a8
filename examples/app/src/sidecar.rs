//! The app's side of the sidecar API: `KUBEFLAKE_URL` parsing and a minimal HTTP/1.1
//! client over `std::net` (one connection per call, `Connection: close`), or over the
//! sidecar's Unix socket when `KUBEFLAKE_SOCKET` is set (the webhook sets both; the socket
//! skips the TCP stack, and only processes that can open the file can connect).
//!
//! The sidecar listens on plain HTTP on the pod's loopback, and the injected
//! `KUBEFLAKE_URL` is an IP URL (`http://127.0.0.1:7070`), so there is no TLS and no name
//! resolution: the image has neither CA roots nor `/etc/hosts`.
//!
//! An app team copies this file and `sidecar/response.rs` (reading one HTTP/1.1 response:
//! head, `Content-Length` or chunked body) to call the sidecar from its own Rust code. The
//! tests are in `sidecar/tests.rs` and `sidecar/socket_tests.rs`.
//!
//! One piece (over 400 lines): the URL, the client and the parsing of its answers are what
//! an app copies, so they stay together; only the response reading is apart.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use self::response::read_answer;

/// The environment variable the operator's webhook sets in every app container.
pub const URL_ENV: &str = "KUBEFLAKE_URL";

/// The sidecar's Unix socket (set by the webhook beside `KUBEFLAKE_URL`); preferred when set.
pub const SOCKET_ENV: &str = "KUBEFLAKE_SOCKET";

/// Default timeout of each sidecar call, for connecting and (separately) for the answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of a sidecar's error body is quoted in our own error messages.
const QUOTED_BODY: usize = 512;

/// A parsed `KUBEFLAKE_URL`: `http://HOST[:PORT][/base/path]`, HOST an IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarUrl {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The `Host` header: the URL's authority as written.
    pub host_header: String,
    /// A path prefix put before `/id`, `/ids`, `/readyz`: empty, or `/x` without a
    /// trailing slash.
    pub base_path: String,
    /// The URL as given (trimmed), for messages.
    raw: String,
}

/// Why `KUBEFLAKE_URL` could not be used; the message names the variable and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(pub String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UrlError {}

const URL_EXAMPLE: &str = "http://127.0.0.1:7070";

impl SidecarUrl {
    /// Parses `http://HOST[:PORT][/path]`. HOST is an IPv4 address, a bracketed IPv6
    /// address or `localhost` (taken as 127.0.0.1, without a lookup); PORT defaults to 80.
    pub fn parse(raw: &str) -> Result<SidecarUrl, UrlError> {
        let raw = raw.trim();
        let bad = |why: String| {
            UrlError(format!(
                "{URL_ENV}={raw:?} is not usable: {why} (expected http://IP:PORT, e.g. {URL_EXAMPLE})"
            ))
        };
        if raw.is_empty() {
            return Err(UrlError(format!(
                "{URL_ENV} is empty: set it to the sidecar's address, e.g. {URL_EXAMPLE} \
                 (the kubeflake webhook sets it in pods labelled kubeflake.io/sequence)"
            )));
        }
        let Some((scheme, rest)) = raw.split_once("://") else {
            return Err(bad("no scheme".into()));
        };
        if scheme.eq_ignore_ascii_case("https") {
            return Err(bad(
                "https is not supported: the sidecar serves plain HTTP on the pod's loopback"
                    .into(),
            ));
        }
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(bad(format!("unsupported scheme {scheme:?}")));
        }
        if rest.contains(['?', '#']) {
            return Err(bad("a query or fragment is not allowed".into()));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad("user information is not allowed".into()));
        }
        if authority.is_empty() {
            return Err(bad("no host".into()));
        }
        let (ip, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let Some((host, after)) = bracketed.split_once(']') else {
                return Err(bad("unclosed '[' in the host".into()));
            };
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => return Err(bad(format!("unexpected {p:?} after the host"))),
                },
            };
            let ip = host
                .parse::<std::net::Ipv6Addr>()
                .map_err(|_| bad(format!("{host:?} is not an IPv6 address")))?;
            (IpAddr::V6(ip), port)
        } else {
            let (host, port) = match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            if port.is_some_and(|p| p.contains(':')) {
                return Err(bad(
                    "an IPv6 host must be in brackets, e.g. http://[::1]:7070".into(),
                ));
            }
            let ip = if host.eq_ignore_ascii_case("localhost") {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                host.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| {
                    bad(format!(
                        "host {host:?} is not an IP address, and this app does not resolve names"
                    ))
                })?
            };
            (ip, port)
        };
        let port = match port {
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(bad(format!("port {p:?} is not a number from 1 to 65535"))),
            },
        };
        if path.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(bad("the path contains whitespace".into()));
        }
        Ok(SidecarUrl {
            addr: SocketAddr::new(ip, port),
            host_header: authority.to_string(),
            base_path: path.trim_end_matches('/').to_string(),
            raw: raw.to_string(),
        })
    }
}

impl fmt::Display for SidecarUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// A failed sidecar call. [`SidecarError::NotReady`] is the sidecar saying "not now"
/// (503); everything else means it is down or misbehaving.
#[derive(Debug)]
pub enum SidecarError {
    /// No connection, or no complete answer in time.
    Unreachable { request: String, detail: String },
    /// The sidecar answered 503 (no slot yet, clock behind, fence not renewed...).
    NotReady {
        request: String,
        body: String,
        retry_after: Option<String>,
    },
    /// The sidecar answered 409: it cannot honour `after` now (it lies further ahead of its
    /// clock than the drift limit; `Retry-After` says when it could).
    AfterConflict {
        request: String,
        body: String,
        retry_after: Option<String>,
    },
    /// Another non-2xx status.
    Status {
        request: String,
        status: u16,
        body: String,
    },
    /// A 2xx answer we could not understand.
    BadAnswer { request: String, detail: String },
}

impl fmt::Display for SidecarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SidecarError::Unreachable { request, detail } => {
                write!(f, "sidecar unreachable: {request}: {detail}")
            }
            SidecarError::NotReady { request, body, .. } => {
                write!(f, "sidecar not ready: {request} answered 503: {body}")
            }
            SidecarError::AfterConflict { request, body, .. } => {
                write!(
                    f,
                    "sidecar cannot honour after yet: {request} answered 409: {body}"
                )
            }
            SidecarError::Status {
                request,
                status,
                body,
            } => write!(f, "sidecar error: {request} answered {status}: {body}"),
            SidecarError::BadAnswer { request, detail } => {
                write!(f, "sidecar answer not understood: {request}: {detail}")
            }
        }
    }
}

impl std::error::Error for SidecarError {}

/// One HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The sidecar of this pod.
#[derive(Debug, Clone)]
pub struct Sidecar {
    pub url: SidecarUrl,
    /// `KUBEFLAKE_SOCKET`: when set, calls go over this Unix socket (the URL still gives
    /// the `Host` header and the base path).
    pub socket: Option<PathBuf>,
    /// Connect timeout, and separately the time allowed for the whole answer.
    pub timeout: Duration,
}

/// A connection to the sidecar: TCP or Unix socket, the same HTTP over both.
trait Connection: Read + Write {
    fn set_read_limit(&self, limit: Duration) -> io::Result<()>;
    fn set_write_limit(&self, limit: Duration) -> io::Result<()>;
}

/// Both stream types have the same inherent timeout setters.
macro_rules! connection {
    ($stream:ty) => {
        impl Connection for $stream {
            fn set_read_limit(&self, limit: Duration) -> io::Result<()> {
                self.set_read_timeout(Some(limit))
            }
            fn set_write_limit(&self, limit: Duration) -> io::Result<()> {
                self.set_write_timeout(Some(limit))
            }
        }
    };
}
connection!(TcpStream);
connection!(UnixStream);

impl Sidecar {
    pub fn new(url: SidecarUrl) -> Sidecar {
        Sidecar {
            url,
            socket: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Calls go over the Unix socket at `path` instead of TCP.
    pub fn with_socket(mut self, path: Option<PathBuf>) -> Sidecar {
        self.socket = path;
        self
    }

    /// `"unix"` or `"tcp"`: how calls reach the sidecar (reported in the app's answers).
    pub fn transport(&self) -> &'static str {
        if self.socket.is_some() { "unix" } else { "tcp" }
    }

    fn describe(&self, path: &str) -> String {
        match &self.socket {
            Some(socket) => format!(
                "GET {}{path} ({SOCKET_ENV}={})",
                self.url.base_path,
                socket.display()
            ),
            None => format!("GET {}{path} ({URL_ENV}={})", self.url.base_path, self.url),
        }
    }

    fn connect(&self) -> Result<Box<dyn Connection>, String> {
        match &self.socket {
            Some(path) => UnixStream::connect(path)
                .map(|s| Box::new(s) as Box<dyn Connection>)
                .map_err(|e| format!("connect to {}: {e}", path.display())),
            None => {
                let stream = TcpStream::connect_timeout(&self.url.addr, self.timeout)
                    .map_err(|e| format!("connect to {}: {e}", self.url.addr))?;
                // Only latency: a failure leaves Nagle on, still correct.
                let _ = stream.set_nodelay(true);
                Ok(Box::new(stream))
            }
        }
    }

    /// `GET <base><path_and_query>` with `Accept: application/json`; any status.
    pub fn get(&self, path_and_query: &str) -> Result<Answer, SidecarError> {
        let unreachable = |detail: String| SidecarError::Unreachable {
            request: self.describe(path_and_query),
            detail,
        };
        let mut stream = self.connect().map_err(unreachable)?;
        stream
            .set_write_limit(self.timeout)
            .map_err(|e| unreachable(e.to_string()))?;
        let request = format!(
            "GET {}{} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n\
             User-Agent: kubeflake-example-app/{}\r\nConnection: close\r\n\r\n",
            self.url.base_path,
            path_and_query,
            self.url.host_header,
            env!("CARGO_PKG_VERSION"),
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| unreachable(format!("send: {e}")))?;
        read_answer(stream.as_mut(), Instant::now() + self.timeout).map_err(unreachable)
    }

    /// Like [`get`](Self::get), turning every non-2xx answer into an error.
    fn get_ok(&self, path_and_query: &str) -> Result<Answer, SidecarError> {
        let answer = self.get(path_and_query)?;
        if (200..300).contains(&answer.status) {
            return Ok(answer);
        }
        let request = self.describe(path_and_query);
        let body = quote_body(&answer.body);
        if answer.status == 503 {
            Err(SidecarError::NotReady {
                request,
                retry_after: answer.header("retry-after").map(str::to_string),
                body,
            })
        } else if answer.status == 409 {
            Err(SidecarError::AfterConflict {
                request,
                retry_after: answer.header("retry-after").map(str::to_string),
                body,
            })
        } else {
            Err(SidecarError::Status {
                request,
                status: answer.status,
                body,
            })
        }
    }

    /// One ID: `GET /id`, answer `{"id":"<decimal>"}`; with `after`, `GET /id?after=<x>`:
    /// an ID greater than `x`.
    pub fn id_after(&self, after: Option<u64>) -> Result<u64, SidecarError> {
        let path = match after {
            Some(x) => format!("/id?after={x}"),
            None => "/id".to_string(),
        };
        let answer = self.get_ok(&path)?;
        parse_id_answer(&answer.body).map_err(|detail| SidecarError::BadAnswer {
            request: self.describe(&path),
            detail,
        })
    }

    /// `count` IDs: `GET /ids?count=N`, answer `{"ids":["<decimal>",...]}`; with `after`,
    /// each greater than it.
    pub fn ids_after(&self, count: u32, after: Option<u64>) -> Result<Vec<u64>, SidecarError> {
        let path = match after {
            Some(x) => format!("/ids?after={x}&count={count}"),
            None => format!("/ids?count={count}"),
        };
        let answer = self.get_ok(&path)?;
        parse_ids_answer(&answer.body, count as usize).map_err(|detail| SidecarError::BadAnswer {
            request: self.describe(&path),
            detail,
        })
    }

    /// The sidecar's own readiness: `GET /readyz` (served on the ID port too).
    pub fn ready(&self) -> Result<(), SidecarError> {
        self.get_ok("/readyz").map(|_| ())
    }
}

/// The sidecar's body, as text short enough to quote in an error message.
fn quote_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    match text.char_indices().nth(QUOTED_BODY) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// A decimal ID as the sidecar writes it in JSON: a string (or, leniently, a number).
fn id_of(value: &serde_json::Value) -> Result<u64, String> {
    match value {
        serde_json::Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
            .parse::<u64>()
            .map_err(|_| format!("ID {s:?} does not fit in 64 bits")),
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("ID {n} is not a 64-bit unsigned integer")),
        other => Err(format!("ID {other} is not a decimal number")),
    }
}

pub fn parse_id_answer(body: &[u8]) -> Result<u64, String> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("not JSON ({e}): {}", quote_body(body)))?;
    let id = value
        .get("id")
        .ok_or_else(|| format!("no \"id\" field in {}", quote_body(body)))?;
    id_of(id)
}

pub fn parse_ids_answer(body: &[u8], expected: usize) -> Result<Vec<u64>, String> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("not JSON ({e}): {}", quote_body(body)))?;
    let ids = value
        .get("ids")
        .and_then(|v| v.as_array())
        .ok_or_else(|| format!("no \"ids\" array in {}", quote_body(body)))?;
    if ids.len() != expected {
        return Err(format!("asked for {expected} IDs, got {}", ids.len()));
    }
    ids.iter().map(id_of).collect()
}

pub mod response;

#[cfg(test)]
mod socket_tests;
#[cfg(test)]
mod tests;
