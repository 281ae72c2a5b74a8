//! A tiny HTTP/1.1 server on `std::net`: one thread per connection, one request per
//! connection (`Connection: close`), at most [`MAX_CONNECTIONS`] at once.
//!
//! When all connection slots are busy, new connections wait in the kernel's accept
//! queue. On shutdown the listener is closed first (new connections are refused), then
//! requests in flight are finished, for at most [`Limits::drain`].

use std::io::{self, Read, Write};
use std::net::{Shutdown as SocketShutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::app::{App, Response};
use crate::shutdown::{Reason, Shutdown};

pub const MAX_CONNECTIONS: usize = 64;

/// Largest request head (request line and headers) accepted.
const MAX_REQUEST_HEAD: usize = 8 * 1024;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// Time allowed to receive a request head, and to send the response.
    pub io_timeout: Duration,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: MAX_CONNECTIONS,
            io_timeout: Duration::from_secs(5),
            drain: Duration::from_secs(10),
        }
    }
}

/// Counts open connections; wakes the drain when one ends.
#[derive(Default)]
struct Active {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Active {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self) -> usize {
        *self.lock()
    }

    /// Waits until none is open or `deadline`; returns how many are still open.
    fn wait_idle(&self, deadline: Instant) -> usize {
        let mut count = self.lock();
        while *count > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            count = self
                .changed
                .wait_timeout(count, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *count
    }
}

/// One open connection; counted down when dropped, even if its thread panics.
struct Slot(Arc<Active>);

impl Slot {
    fn take(active: &Arc<Active>) -> Slot {
        *active.lock() += 1;
        Slot(active.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.lock() -= 1;
        self.0.changed.notify_all();
    }
}

/// How serving ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub reason: Reason,
    /// Connections still open when the drain time ran out (0 after a clean drain).
    pub abandoned: usize,
}

/// Waits for `fds` to become readable, up to `timeout_ms` (-1: no limit). Returns the
/// `revents` of each; EINTR counts as "nothing yet".
fn poll_readable(fds: &[i32], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: the array holds `len` initialised pollfd structs for the whole call.
    let n = unsafe {
        libc::poll(
            pollfds.as_mut_ptr(),
            pollfds.len() as libc::nfds_t,
            timeout_ms,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pollfds.iter().map(|p| p.revents != 0).collect())
}

/// Serves `app` on `listener` until `shutdown` is triggered (or a signal arrives), then
/// stops accepting and lets open connections finish.
pub fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: &Shutdown,
    limits: Limits,
) -> io::Result<Stopped> {
    listener.set_nonblocking(true)?;
    let active = Arc::new(Active::default());
    let listen_fd = listener.as_raw_fd();
    let reason = loop {
        if let Some(reason) = shutdown.take() {
            break reason;
        }
        if active.get() >= limits.max_connections {
            // Full: leave new connections queued; look again soon (or at a signal).
            poll_readable(&[shutdown.fd()], 20)?;
            continue;
        }
        let ready = poll_readable(&[shutdown.fd(), listen_fd], -1)?;
        if ready[0] {
            continue; // read by take() at the top
        }
        if !ready[1] {
            continue;
        }
        match listener.accept() {
            Ok((stream, _peer)) => {
                let slot = Slot::take(&active);
                let app = app.clone();
                let spawned = thread::Builder::new().name("conn".into()).spawn(move || {
                    let _slot = slot;
                    handle_connection(stream, &app, limits.io_timeout);
                });
                if let Err(e) = spawned {
                    // The closure (with the stream and slot) was dropped: counted down.
                    eprintln!("kubeflake-example-app: cannot start a connection thread: {e}");
                    thread::sleep(Duration::from_millis(50));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                eprintln!("kubeflake-example-app: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    };
    drop(listener);
    let abandoned = active.wait_idle(Instant::now() + limits.drain);
    Ok(Stopped { reason, abandoned })
}

/// A request line, as far as this app cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: String,
}

/// Why no request could be read.
#[derive(Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The client closed before sending a full head (nothing to answer).
    Closed,
    TimedOut,
    TooLarge,
    Malformed(String),
    Io(String),
}

/// Parses the request line of a complete head.
pub fn parse_request_head(head: &[u8]) -> Result<Request, RequestError> {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let line = std::str::from_utf8(&head[..line_end])
        .map_err(|_| RequestError::Malformed("request line is not UTF-8".into()))?;
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(RequestError::Malformed(format!(
            "bad request line {line:?}: expected METHOD /path HTTP/1.1"
        )));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(RequestError::Malformed(format!(
            "unsupported protocol {version:?}: this server speaks HTTP/1.1"
        )));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(RequestError::Malformed(format!("bad method {method:?}")));
    }
    if !target.starts_with('/') {
        return Err(RequestError::Malformed(format!(
            "bad request target {target:?}: expected a path starting with /"
        )));
    }
    Ok(Request {
        method: method.to_string(),
        target: target.to_string(),
    })
}

/// Reads a request head, within `timeout` in total.
fn read_request(stream: &mut TcpStream, timeout: Duration) -> Result<Request, RequestError> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = crate::sidecar::response::head_end(&buf) {
            return parse_request_head(&buf[..end]);
        }
        if buf.len() > MAX_REQUEST_HEAD {
            return Err(RequestError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RequestError::TimedOut);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| RequestError::Io(e.to_string()))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(RequestError::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(RequestError::TimedOut);
            }
            Err(e) => return Err(RequestError::Io(e.to_string())),
        }
    }
}

fn handle_connection(mut stream: TcpStream, app: &App, io_timeout: Duration) {
    // Accepted sockets inherit O_NONBLOCK from the listener on some systems (BSDs).
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(io_timeout));
    let (response, unread_input) = match read_request(&mut stream, io_timeout) {
        Ok(request) => (app.handle(&request.method, &request.target), false),
        Err(RequestError::Closed) | Err(RequestError::Io(_)) => return,
        Err(RequestError::TimedOut) => (Response::error(408, "no complete request in time"), false),
        Err(RequestError::TooLarge) => (
            Response::error(
                431,
                format!("request head longer than {MAX_REQUEST_HEAD} bytes"),
            ),
            true,
        ),
        Err(RequestError::Malformed(why)) => (Response::error(400, why), true),
    };
    if stream.write_all(&response.to_bytes()).is_ok() {
        let _ = stream.flush();
    }
    let _ = stream.shutdown(SocketShutdown::Write);
    if unread_input {
        // Closing with unread input makes the kernel send a reset, which can destroy the
        // error response before the client reads it: read what is left, briefly.
        discard_input(&mut stream, Duration::from_millis(500));
    }
}

/// Reads and drops input until the client closes, for at most `limit` (and 64 KiB).
fn discard_input(stream: &mut TcpStream, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut sink = [0u8; 4096];
    let mut total = 0;
    while total < 64 * 1024 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => total += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_lines() {
        assert_eq!(
            parse_request_head(b"GET /ids?count=3 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Request {
                method: "GET".into(),
                target: "/ids?count=3".into()
            })
        );
        assert_eq!(
            parse_request_head(b"POST / HTTP/1.0\r\n\r\n").map(|r| r.method),
            Ok("POST".into())
        );
        for bad in [
            &b"GET /\r\n\r\n"[..],
            b"GET / HTTP/2\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"get / HTTP/1.1\r\n\r\n",
            b"GET http://x/ HTTP/1.1\r\n\r\n",
            b"\xff / HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request_head(bad), Err(RequestError::Malformed(_))),
                "{:?} was accepted",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
