//! `kubeflake-sidecar check URL`: one plain-HTTP GET that succeeds on a 2xx answer, for
//! probes and `helm test` pods in images without a shell, curl or wget (the kubeflake
//! images hold nothing but their binary).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Largest answer read; a check only needs the status line and a marker in the body.
const MAX_BODY: u64 = 16 * 1024 * 1024;

/// Why a check failed, in words a person reading `helm test` output can act on.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{0:?} is not a URL this check can ask: {1}")]
    BadUrl(String, &'static str),
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("cannot reach {url}: {source}")]
    Connect { url: String, source: std::io::Error },
    #[error("{url} sent no valid HTTP answer: {detail}")]
    Protocol { url: String, detail: String },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} answered 200 but its body does not contain {wanted:?}")]
    Missing { url: String, wanted: String },
}

/// The parts of an `http://host[:port][/path]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, CheckError> {
        let bad = |why| CheckError::BadUrl(url.to_owned(), why);
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (
                host,
                port.parse()
                    .map_err(|_| bad("the port is not a number from 1 to 65535"))?,
            ),
            None => (authority, 80),
        };
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if port == 0 {
            return Err(bad("the port is not a number from 1 to 65535"));
        }
        Ok(Target {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

/// GETs `url` within `timeout` and returns the body of a 2xx answer that contains
/// `contains` (when given).
pub fn check(url: &str, contains: Option<&str>, timeout: Duration) -> Result<String, CheckError> {
    let target = Target::parse(url)?;
    let deadline = Instant::now() + timeout;
    let addrs: Vec<_> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|source| CheckError::Resolve {
            host: target.host.clone(),
            source,
        })?
        .collect();
    let connect_error = |source| CheckError::Connect {
        url: url.to_owned(),
        source,
    };
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    let mut stream = None;
    for addr in addrs {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut stream = stream.ok_or_else(|| connect_error(last))?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left)).map_err(connect_error)?;
    stream
        .set_write_timeout(Some(left))
        .map_err(connect_error)?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: kubeflake-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        target.path, target.host, target.port
    );
    stream
        .write_all(request.as_bytes())
        .map_err(connect_error)?;
    let mut raw = Vec::new();
    stream
        .take(MAX_BODY)
        .read_to_end(&mut raw)
        .map_err(connect_error)?;
    let (status, body) = parse_answer(&raw).map_err(|detail| CheckError::Protocol {
        url: url.to_owned(),
        detail,
    })?;
    if !(200..300).contains(&status) {
        return Err(CheckError::Status {
            url: url.to_owned(),
            status,
            body: body.chars().take(500).collect(),
        });
    }
    if let Some(wanted) = contains
        && !body.contains(wanted)
    {
        return Err(CheckError::Missing {
            url: url.to_owned(),
            wanted: wanted.to_owned(),
        });
    }
    Ok(body)
}

/// Status code and body of a complete `Connection: close` answer (chunked bodies are
/// decoded).
fn parse_answer(raw: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("the answer ended inside its header")?;
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut rest: &str) -> Result<String, String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest
            .split_once("\r\n")
            .ok_or("a chunk size line is cut off")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = after.get(..size).ok_or("a chunk is cut off")?;
        out.push_str(chunk);
        rest = after.get(size..).unwrap_or("").trim_start_matches("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn serve_once(answer: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            conn.write_all(answer.as_bytes()).unwrap();
        });
        port
    }

    #[test]
    fn urls_other_than_plain_http_with_a_host_are_refused_with_the_reason() {
        assert!(
            matches!(Target::parse("https://x/"), Err(CheckError::BadUrl(_, r)) if r.contains("http://"))
        );
        assert!(
            matches!(Target::parse("http://:80/"), Err(CheckError::BadUrl(_, r)) if r.contains("host"))
        );
        assert!(
            matches!(Target::parse("http://a:99999/"), Err(CheckError::BadUrl(_, r)) if r.contains("port"))
        );
        assert_eq!(
            Target::parse("http://svc.ns:8080/readyz").unwrap(),
            Target {
                host: "svc.ns".into(),
                port: 8080,
                path: "/readyz".into()
            }
        );
        assert_eq!(Target::parse("http://svc").unwrap().path, "/");
    }

    #[test]
    fn a_2xx_answer_passes_and_its_body_is_searched() {
        let port = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        let url = format!("http://127.0.0.1:{port}/readyz");
        assert_eq!(
            check(&url, Some("ok"), Duration::from_secs(5)).unwrap(),
            "ok\n"
        );
        let port = serve_once("HTTP/1.1 200 OK\r\n\r\nnothing here");
        let url = format!("http://127.0.0.1:{port}/metrics");
        assert!(matches!(
            check(&url, Some("kubeflake_"), Duration::from_secs(5)),
            Err(CheckError::Missing { .. })
        ));
    }

    #[test]
    fn a_non_2xx_answer_fails_with_its_status_and_body() {
        let port = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\ncaches not synced");
        let url = format!("http://127.0.0.1:{port}/readyz");
        let err = check(&url, None, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(err, CheckError::Status { status: 503, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("caches not synced"), "{err}");
    }

    #[test]
    fn chunked_bodies_are_decoded() {
        let port = serve_once(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nkubef\r\n6\r\nlake_x\r\n0\r\n\r\n",
        );
        let url = format!("http://127.0.0.1:{port}/metrics");
        assert_eq!(
            check(&url, Some("kubeflake_"), Duration::from_secs(5)).unwrap(),
            "kubeflake_x"
        );
    }

    #[test]
    fn nothing_listening_is_a_connect_error_naming_the_url() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/");
        let err = check(&url, None, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(err, CheckError::Connect { .. }), "{err}");
        assert!(err.to_string().contains(&url));
    }
}
