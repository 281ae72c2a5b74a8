//! The few bytes of RESP (the Redis protocol) the load generator speaks: commands as
//! arrays of bulk strings, and integer replies (`INCR` and `INCRBY` answer nothing else).
//! Hand-written for the same reason as [`crate::http1`]: a thin client for every peer.

use thiserror::Error;

/// A reply the load generator cannot use.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ReplyError {
    #[error("redis answered with an error: {0}")]
    Server(String),
    #[error("expected an integer reply from INCR/INCRBY, got {0:?}")]
    Unexpected(String),
}

/// One command, encoded.
pub fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// Reads the integer reply at the start of `buf`: `Ok(None)` while it is incomplete,
/// else the value and the bytes it took.
pub fn integer_reply(buf: &[u8]) -> Result<Option<(i64, usize)>, ReplyError> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = String::from_utf8_lossy(&buf[..end]);
    match line.as_bytes().first() {
        Some(b':') => line[1..]
            .parse::<i64>()
            .map(|v| Some((v, end + 2)))
            .map_err(|_| ReplyError::Unexpected(line.into_owned())),
        Some(b'-') => Err(ReplyError::Server(line[1..].to_string())),
        _ => Err(ReplyError::Unexpected(line.into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            command(&["INCRBY", "ids", "1000"]),
            b"*3\r\n$6\r\nINCRBY\r\n$3\r\nids\r\n$4\r\n1000\r\n".to_vec()
        );
    }

    #[test]
    fn an_integer_reply_is_read_only_once_its_line_is_complete() {
        let bytes = b":4096\r\n:1\r\n";
        assert_eq!(integer_reply(&bytes[..4]), Ok(None));
        assert_eq!(integer_reply(bytes), Ok(Some((4096, 7))));
        assert_eq!(integer_reply(&bytes[7..]), Ok(Some((1, 4))));
    }

    #[test]
    fn an_error_or_other_reply_is_reported_with_its_text() {
        assert_eq!(
            integer_reply(b"-ERR value is not an integer\r\n"),
            Err(ReplyError::Server("ERR value is not an integer".into()))
        );
        assert!(matches!(
            integer_reply(b"+OK\r\n"),
            Err(ReplyError::Unexpected(_))
        ));
    }
}
