//! Reading one HTTP/1.1 response from the sidecar: the head, then the body by
//! `Content-Length`, chunked, or until the sidecar closes. Bounded in size and time.

use std::io;
use std::time::Instant;

use super::{Answer, Connection};

/// Largest response head and body accepted from the sidecar (1000 IDs are about 23 KB).
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;

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
pub(super) fn read_answer(
    stream: &mut dyn Connection,
    deadline: Instant,
) -> Result<Answer, String> {
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
