//! The few bytes of HTTP/1.1 the load generator speaks: one keep-alive GET, and finding
//! where its answer ends. Hand-written (like wrk's) so the client costs little next to the
//! server being measured, and so no HTTP client library's own overhead is in the figures.

use thiserror::Error;

/// An answer the load generator cannot use.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ResponseError {
    #[error("the status line {0:?} is not HTTP/1.x; is the target an HTTP server?")]
    StatusLine(String),
    #[error("the answer has no Content-Length; the benchmark needs length-delimited bodies")]
    NoContentLength,
    #[error("the answer headers are not ASCII text")]
    NotText,
}

/// The bytes of `GET path` on a kept-alive connection.
pub fn get_request(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

/// A whole answer at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Where the body begins (its bytes are `body_start..len`).
    pub body_start: usize,
    /// Bytes taken by headers and body together.
    pub len: usize,
}

/// Finds the first whole answer in `buf`: `Ok(None)` while more bytes are needed.
pub fn parse_answer(buf: &[u8]) -> Result<Option<Answer>, ResponseError> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| ResponseError::NotText)?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| ResponseError::StatusLine(status_line.to_string()))?;
    let length = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .ok_or(ResponseError::NoContentLength)?;
    let body_start = head_end + 4;
    let len = body_start + length;
    Ok((buf.len() >= len).then_some(Answer {
        status,
        body_start,
        len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_request_is_a_keep_alive_http11_request_for_the_path() {
        let req = String::from_utf8(get_request("/ids?count=10")).unwrap();
        assert!(req.starts_with("GET /ids?count=10 HTTP/1.1\r\n"));
        assert!(req.ends_with("\r\n\r\n"));
        assert!(!req.to_ascii_lowercase().contains("connection: close"));
    }

    #[test]
    fn an_answer_is_complete_only_when_its_whole_body_has_arrived() {
        let whole =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n1234\n";
        for cut in 0..whole.len() {
            assert_eq!(parse_answer(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            parse_answer(whole),
            Ok(Some(Answer {
                status: 200,
                body_start: whole.len() - 5,
                len: whole.len()
            }))
        );
    }

    #[test]
    fn bytes_after_an_answer_are_not_part_of_it() {
        let two =
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n";
        let answer = parse_answer(two).unwrap().unwrap();
        assert_eq!(answer.status, 503);
        assert_eq!(&two[answer.len..answer.len + 8], b"HTTP/1.1");
    }

    #[test]
    fn a_non_http_peer_or_an_unframed_body_is_an_error_not_a_hang() {
        assert!(matches!(
            parse_answer(b"+PONG\r\n\r\n"),
            Err(ResponseError::StatusLine(_))
        ));
        assert_eq!(
            parse_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
            Err(ResponseError::NoContentLength)
        );
    }
}
