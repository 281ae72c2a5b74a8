//! The app's side of the sidecar API: `KUBEFLAKE_URL` parsing and a minimal HTTP/1.1
//! client over `std::net` (one connection per call, `Connection: close`), or over the
//! sidecar's Unix socket when `KUBEFLAKE_SOCKET` is set (the webhook sets both; the socket
//! skips the TCP stack, and only processes that can open the file can connect).
//!
//! The sidecar listens on plain HTTP on the pod's loopback, and the injected
//! `KUBEFLAKE_URL` is an IP URL (`http://127.0.0.1:7070`), so there is no TLS and no name
//! resolution: the image has neither CA roots nor `/etc/hosts`.
//!
//! One piece (over 400 lines) on purpose: an app team copies this one file to call the
//! sidecar from its own Rust code, so URL parsing, the request and the reply parsing stay
//! together.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The environment variable the operator's webhook sets in every app container.
pub const URL_ENV: &str = "KUBEFLAKE_URL";

/// The sidecar's Unix socket (set by the webhook beside `KUBEFLAKE_URL`); preferred when set.
pub const SOCKET_ENV: &str = "KUBEFLAKE_SOCKET";

/// Default timeout of each sidecar call, for connecting and (separately) for the answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest response head and body accepted from the sidecar (1000 IDs are about 23 KB).
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;

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

/// Reads from `stream` until `deadline`, appending to `buf`; `Ok(0)` at end of stream.
fn read_some(
    stream: &mut dyn Connection,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<usize, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("timed out waiting for the answer".into());
    }
    stream.set_read_limit(left).map_err(|e| e.to_string())?;
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err("timed out waiting for the answer".into());
            }
            Err(e) => return Err(format!("receive: {e}")),
        }
    }
}

/// Finds the end of an HTTP head (`\r\n\r\n`): the index just past it.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Reads one HTTP/1.1 response: body by `Content-Length`, chunked, or until the server
/// closes (we asked for `Connection: close`).
fn read_answer(stream: &mut dyn Connection, deadline: Instant) -> Result<Answer, String> {
    let mut buf = Vec::with_capacity(4096);
    let head_len = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("response head longer than {MAX_HEAD} bytes"));
        }
        if read_some(stream, &mut buf, deadline)? == 0 {
            return Err(if buf.is_empty() {
                "connection closed without an answer".into()
            } else {
                "connection closed in the middle of the response head".into()
            });
        }
    };
    let (status, headers) = parse_response_head(&buf[..head_len])?;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let chunked =
        header("transfer-encoding").is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        loop {
            if let Some(body) = decode_chunked(&buf[head_len..])? {
                break body;
            }
            if buf.len() - head_len > MAX_BODY {
                return Err(format!("response body longer than {MAX_BODY} bytes"));
            }
            if read_some(stream, &mut buf, deadline)? == 0 {
                return Err("connection closed in the middle of a chunked body".into());
            }
        }
    } else if let Some(length) = header("content-length") {
        let length: usize = length
            .trim()
            .parse()
            .map_err(|_| format!("bad Content-Length {length:?}"))?;
        if length > MAX_BODY {
            return Err(format!("response body of {length} bytes is too long"));
        }
        while buf.len() - head_len < length {
            if read_some(stream, &mut buf, deadline)? == 0 {
                return Err(format!(
                    "connection closed after {} of {length} body bytes",
                    buf.len() - head_len
                ));
            }
        }
        buf[head_len..head_len + length].to_vec()
    } else {
        while read_some(stream, &mut buf, deadline)? > 0 {
            if buf.len() - head_len > MAX_BODY {
                return Err(format!("response body longer than {MAX_BODY} bytes"));
            }
        }
        buf[head_len..].to_vec()
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// Parses `HTTP/1.x SSS reason` and the header lines (names lower-cased).
pub fn parse_response_head(head: &[u8]) -> Result<(u16, Vec<(String, String)>), String> {
    let head = std::str::from_utf8(head).map_err(|_| "response head is not UTF-8".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(format!("not an HTTP/1.x status line: {status_line:?}"));
    }
    let status = code
        .parse::<u16>()
        .ok()
        .filter(|s| (100..=599).contains(s))
        .ok_or_else(|| format!("bad status code in {status_line:?}"))?;
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok((status, headers))
}

/// Decodes a chunked body: `Ok(None)` while incomplete. Trailers are skipped.
pub fn decode_chunked(mut data: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_line = std::str::from_utf8(&data[..line_end])
            .map_err(|_| "bad chunk size line".to_string())?;
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            // Trailer section: header lines, then an empty line.
            return Ok(head_end_or_empty(data).map(|_| body));
        }
        if size > MAX_BODY || body.len() + size > MAX_BODY {
            return Err(format!("response body longer than {MAX_BODY} bytes"));
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        if &data[size..size + 2] != b"\r\n" {
            return Err("chunk not followed by CRLF".into());
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// After the last chunk: complete when the trailers end (`\r\n` alone, or a head end).
fn head_end_or_empty(data: &[u8]) -> Option<usize> {
    if data.starts_with(b"\r\n") {
        Some(2)
    } else {
        head_end(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(raw: &str) -> SidecarUrl {
        SidecarUrl::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    fn url_err(raw: &str) -> String {
        match SidecarUrl::parse(raw) {
            Ok(u) => panic!("{raw:?} was accepted as {u:?}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn parses_the_injected_url() {
        let u = url("http://127.0.0.1:7070");
        assert_eq!(u.addr, "127.0.0.1:7070".parse().unwrap());
        assert_eq!(u.host_header, "127.0.0.1:7070");
        assert_eq!(u.base_path, "");
        assert_eq!(u.to_string(), "http://127.0.0.1:7070");
    }

    #[test]
    fn parses_paths_ports_ipv6_and_localhost() {
        let u = url("  http://10.1.2.3:8000/kubeflake/  ");
        assert_eq!(u.addr, "10.1.2.3:8000".parse().unwrap());
        assert_eq!(u.base_path, "/kubeflake");
        assert_eq!(u.to_string(), "http://10.1.2.3:8000/kubeflake/");

        let u = url("HTTP://[::1]:7070/");
        assert_eq!(u.addr, "[::1]:7070".parse().unwrap());
        assert_eq!(u.host_header, "[::1]:7070");
        assert_eq!(u.base_path, "");

        assert_eq!(url("http://127.0.0.1").addr.port(), 80);
        assert_eq!(url("http://[::1]").addr, "[::1]:80".parse().unwrap());
        assert_eq!(
            url("http://localhost:7070").addr,
            "127.0.0.1:7070".parse().unwrap()
        );
    }

    #[test]
    fn rejects_bad_urls_naming_the_variable() {
        let cases = [
            ("", "is empty"),
            ("   ", "is empty"),
            ("127.0.0.1:7070", "no scheme"),
            ("https://127.0.0.1:7070", "https is not supported"),
            ("ftp://127.0.0.1:7070", "unsupported scheme"),
            ("http://", "no host"),
            ("http:///id", "no host"),
            ("http://kubeflake:7070", "not an IP address"),
            ("http://127.0.0.1:", "port \"\""),
            ("http://127.0.0.1:0", "port \"0\""),
            ("http://127.0.0.1:70700", "port \"70700\""),
            ("http://127.0.0.1:+80", "port \"+80\""),
            ("http://127.0.0.1:7070?x=1", "query or fragment"),
            ("http://127.0.0.1:7070/#x", "query or fragment"),
            ("http://user@127.0.0.1:7070", "user information"),
            ("http://::1:7070", "brackets"),
            ("http://[::1:7070", "unclosed"),
            ("http://[::1]x", "unexpected"),
            ("http://[127.0.0.1]:7070", "not an IPv6 address"),
            ("http://127.0.0.1:7070/a b", "whitespace"),
        ];
        for (raw, expected) in cases {
            let message = url_err(raw);
            assert!(
                message.contains(expected),
                "{raw:?}: {message:?} should contain {expected:?}"
            );
            assert!(
                message.contains("KUBEFLAKE_URL"),
                "{raw:?}: {message:?} should name KUBEFLAKE_URL"
            );
        }
    }

    #[test]
    fn parses_id_answers() {
        assert_eq!(
            parse_id_answer(br#"{"id":"250096622069874688"}"#),
            Ok(250096622069874688)
        );
        assert_eq!(
            parse_id_answer(br#"{"id":18446744073709551615}"#),
            Ok(u64::MAX)
        );
        for bad in [
            &br#"{"id":"18446744073709551616"}"#[..],
            br#"{"id":"-1"}"#,
            br#"{"id":"12a"}"#,
            br#"{"id":""}"#,
            br#"{"id":null}"#,
            br#"{"ids":["1"]}"#,
            b"250096622069874688\n",
        ] {
            assert!(
                parse_id_answer(bad).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn parses_ids_answers_and_checks_the_count() {
        assert_eq!(
            parse_ids_answer(br#"{"ids":["1","2","3"]}"#, 3),
            Ok(vec![1, 2, 3])
        );
        let short = parse_ids_answer(br#"{"ids":["1","2"]}"#, 3).unwrap_err();
        assert!(short.contains("asked for 3 IDs, got 2"), "{short}");
        assert!(parse_ids_answer(br#"{"ids":["1","x"]}"#, 2).is_err());
        assert!(parse_ids_answer(br#"{"id":"1"}"#, 1).is_err());
    }

    #[test]
    fn parses_response_heads() {
        let (status, headers) = parse_response_head(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n\r\n",
        )
        .unwrap();
        assert_eq!(status, 503);
        assert_eq!(
            headers,
            vec![
                ("content-type".to_string(), "application/json".to_string()),
                ("retry-after".to_string(), "1".to_string()),
            ]
        );
        assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_response_head(b"HTTP/1.1 20 OK\r\n\r\n").is_err());
        assert!(parse_response_head(b"HTTP/1.1 200 OK\r\nno-colon\r\n\r\n").is_err());
    }

    #[test]
    fn decodes_chunked_bodies() {
        assert_eq!(
            decode_chunked(b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\n\r\n"),
            Ok(Some(b"Wikipedia".to_vec()))
        );
        assert_eq!(
            decode_chunked(b"2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n"),
            Ok(Some(b"ok".to_vec()))
        );
        assert_eq!(decode_chunked(b"4\r\nWiki\r\n"), Ok(None));
        assert_eq!(decode_chunked(b"4\r\nWi"), Ok(None));
        assert_eq!(decode_chunked(b"0\r\n"), Ok(None));
        assert!(decode_chunked(b"zz\r\n").is_err());
        assert!(decode_chunked(b"2\r\nokXX").is_err());
    }

    #[test]
    fn quotes_long_bodies_shortly() {
        assert_eq!(quote_body(b"  \n"), "(empty body)");
        assert_eq!(quote_body(b" {\"error\":\"x\"}\n"), "{\"error\":\"x\"}");
        let long = "é".repeat(600);
        let quoted = quote_body(long.as_bytes());
        assert_eq!(quoted.chars().count(), QUOTED_BODY + 3);
        assert!(quoted.ends_with("..."));
    }
}

#[cfg(test)]
mod socket_tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn socket_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kubeflake-app-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("kubeflake.sock")
    }

    fn url() -> SidecarUrl {
        SidecarUrl::parse("http://127.0.0.1:7070").unwrap()
    }

    /// With `KUBEFLAKE_SOCKET` the call goes over the socket, with the same HTTP.
    #[test]
    fn calls_go_over_the_unix_socket_when_one_is_given() {
        let path = socket_path("serve");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while head_end(&head).is_none() {
                stream.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            let body = r#"{"id":"42"}"#;
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            String::from_utf8(head).unwrap()
        });
        let sidecar = Sidecar::new(url()).with_socket(Some(path));
        assert_eq!(sidecar.transport(), "unix");
        assert_eq!(sidecar.id_after(Some(7)).unwrap(), 42);
        let head = server.join().unwrap();
        assert!(head.starts_with("GET /id?after=7 HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("Host: 127.0.0.1:7070\r\n"), "{head}");
    }

    #[test]
    fn a_missing_socket_is_unreachable_and_the_error_names_the_variable() {
        let path = socket_path("missing");
        let sidecar = Sidecar::new(url()).with_socket(Some(path.clone()));
        let err = sidecar.id_after(None).unwrap_err().to_string();
        assert!(err.contains("sidecar unreachable"), "{err}");
        assert!(err.contains(SOCKET_ENV), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert_eq!(Sidecar::new(url()).transport(), "tcp");
    }
}
