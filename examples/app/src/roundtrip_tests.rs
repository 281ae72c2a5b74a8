//! HTTP round trips: a real app server and a fake sidecar, both on 127.0.0.1:0.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::app::App;
use crate::server::{Limits, Stopped, serve};
use crate::shutdown::{Reason, Shutdown};
use crate::sidecar::response::{head_end, parse_response_head};
use crate::sidecar::{Sidecar, SidecarError, SidecarUrl};

const FIRST_ID: u64 = 250096622069874688;

/// How the fake sidecar answers.
#[derive(Debug, Clone)]
enum Mode {
    /// Like the real one: JSON IDs, `/readyz` 200.
    Normal,
    /// 503 with `Retry-After: 2` everywhere, as while waiting for a slot.
    NotReady,
    /// This status and body everywhere.
    Status(u16, &'static str),
    /// 200 with this body everywhere.
    Body(&'static str),
    /// Normal answers, chunked instead of Content-Length.
    Chunked,
    /// Normal answers, after a pause.
    Delay(Duration),
    /// `/ids` answers one ID fewer than asked.
    ShortIds,
}

struct FakeSidecar {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// Every request head received, in order.
    seen: Arc<Mutex<Vec<String>>>,
}

impl FakeSidecar {
    fn start(mode: Mode) -> FakeSidecar {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(mode));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let next = Arc::new(AtomicU64::new(FIRST_ID));
        let (m, s) = (mode.clone(), seen.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (m, s, next) = (m.clone(), s.clone(), next.clone());
                thread::spawn(move || fake_answer(stream, &m, &s, &next));
            }
        });
        FakeSidecar { addr, mode, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

fn fake_answer(
    mut stream: TcpStream,
    mode: &Mutex<Mode>,
    seen: &Mutex<Vec<String>>,
    next: &AtomicU64,
) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while head_end(&buf).is_none() {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    seen.lock().unwrap().push(head.clone());
    let target = head.split(' ').nth(1).unwrap_or("").to_string();
    let path = target.split('?').next().unwrap_or("");
    let path = path.rsplit('/').next().unwrap_or(""); // tolerate a base path
    let mode = mode.lock().unwrap().clone();
    let normal = |short: bool| -> (u16, String) {
        match path {
            "id" => (
                200,
                format!("{{\"id\":\"{}\"}}", next.fetch_add(1, Ordering::SeqCst)),
            ),
            "ids" => {
                let count: u64 = target
                    .split("count=")
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let n = if short { count - 1 } else { count };
                let first = next.fetch_add(n, Ordering::SeqCst);
                let ids: Vec<String> = (first..first + n).map(|i| format!("\"{i}\"")).collect();
                (200, format!("{{\"ids\":[{}]}}", ids.join(",")))
            }
            "readyz" => (200, "{\"status\":\"ready\"}".to_string()),
            _ => (404, "{\"error\":\"no route\"}".to_string()),
        }
    };
    let mut extra = String::new();
    let mut chunked = false;
    let (status, body) = match mode {
        Mode::Normal => normal(false),
        Mode::ShortIds => normal(true),
        Mode::Chunked => {
            chunked = true;
            normal(false)
        }
        Mode::Delay(pause) => {
            thread::sleep(pause);
            normal(false)
        }
        Mode::NotReady => {
            extra.push_str("Retry-After: 2\r\n");
            (
                503,
                "{\"error\":\"not ready: waiting for slot assignment; retry later\",\"reason\":\"no_slot\"}"
                    .to_string(),
            )
        }
        Mode::Status(status, body) => (status, body.to_string()),
        Mode::Body(body) => (200, body.to_string()),
    };
    let wire = if chunked {
        let (a, b) = body.split_at(body.len() / 2);
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n{extra}\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        )
    } else {
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
            body.len()
        )
    };
    let _ = stream.write_all(wire.as_bytes());
}

fn app_of(sidecar_url: &str) -> App {
    App {
        sidecar: Sidecar::new(SidecarUrl::parse(sidecar_url).unwrap()),
        pod: "web-0".into(),
        first_id: None,
    }
}

/// The app, serving on 127.0.0.1:0 in a thread.
struct AppServer {
    addr: SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<Stopped>>,
}

impl AppServer {
    fn start(sidecar_url: &str) -> AppServer {
        AppServer::start_with(sidecar_url, Limits::default(), Duration::from_secs(2))
    }

    fn start_with(sidecar_url: &str, limits: Limits, sidecar_timeout: Duration) -> AppServer {
        let mut app = app_of(sidecar_url);
        app.sidecar.timeout = sidecar_timeout;
        AppServer::serve(app, limits)
    }

    /// As `main` does with `--first-id`: one ID first, then serve; the error if none.
    fn start_first_id(sidecar_url: &str) -> Result<AppServer, SidecarError> {
        let mut app = app_of(sidecar_url);
        app.take_first_id()?;
        Ok(AppServer::serve(app, Limits::default()))
    }

    fn serve(app: App, limits: Limits) -> AppServer {
        let app = Arc::new(app);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Arc::new(Shutdown::new().unwrap());
        let s = shutdown.clone();
        let thread = thread::spawn(move || serve(listener, app, &s, limits).unwrap());
        AppServer {
            addr,
            shutdown,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) -> Stopped {
        self.shutdown.trigger();
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field: {}", self.body))
            .to_string()
    }
}

/// Sends raw bytes, reads until the server closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    read_reply(&mut stream)
}

fn read_reply(stream: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let end =
        head_end(&raw).unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&raw)));
    let (status, headers) = parse_response_head(&raw[..end]).unwrap();
    let body = String::from_utf8(raw[end..].to_vec()).unwrap();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .expect("Content-Length");
    assert_eq!(length, body.len(), "Content-Length matches the body");
    Reply {
        status,
        headers,
        body,
    }
}

fn get(addr: SocketAddr, target: &str) -> Reply {
    exchange(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: app\r\nUser-Agent: test\r\n\r\n").as_bytes(),
    )
}

/// A loopback address nothing listens on (bound, then closed).
fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[test]
fn root_returns_an_id_from_the_sidecar() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&fake.url());
    let reply = get(app.addr, "/");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("connection"), Some("close"));
    assert_eq!(
        reply.body,
        format!("{{\"id\":\"{FIRST_ID}\",\"pod\":\"web-0\",\"via\":\"tcp\"}}")
    );
    let second = get(app.addr, "/").json();
    assert_eq!(second["id"], (FIRST_ID + 1).to_string());

    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].starts_with("GET /id HTTP/1.1\r\n"), "{}", seen[0]);
    assert!(
        seen[0].contains("\r\nAccept: application/json\r\n"),
        "{}",
        seen[0]
    );
    assert!(
        seen[0].contains(&format!("\r\nHost: {}\r\n", fake.addr)),
        "{}",
        seen[0]
    );
}

#[test]
fn ids_returns_count_ids_from_the_sidecar() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&fake.url());
    let reply = get(app.addr, "/ids?count=5");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let expected: Vec<String> = (FIRST_ID..FIRST_ID + 5).map(|i| i.to_string()).collect();
    assert_eq!(
        reply.json(),
        serde_json::json!({ "ids": expected, "pod": "web-0", "via": "tcp" })
    );
    assert_eq!(
        get(app.addr, "/ids?count=1000").json()["ids"]
            .as_array()
            .unwrap()
            .len(),
        1000
    );
    let seen = fake.seen();
    assert!(
        seen[0].starts_with("GET /ids?count=5 HTTP/1.1\r\n"),
        "{}",
        seen[0]
    );
    assert!(
        seen[1].starts_with("GET /ids?count=1000 HTTP/1.1\r\n"),
        "{}",
        seen[1]
    );
}

#[test]
fn bad_counts_are_400_without_calling_the_sidecar() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&fake.url());
    for target in [
        "/ids?count=0",
        "/ids?count=1001",
        "/ids?count=x",
        "/ids",
        "/ids?count=2&after=x",
        "/ids?count=2&after=-1",
    ] {
        let reply = get(app.addr, target);
        assert_eq!(reply.status, 400, "{target}: {}", reply.body);
        assert!(!reply.error().is_empty());
    }
    assert!(
        get(app.addr, "/ids?count=1001")
            .error()
            .contains("from 1 to 1000")
    );
    assert_eq!(fake.seen(), Vec::<String>::new());
}

#[test]
fn sidecar_down_is_502_and_not_ready() {
    let url = dead_url();
    let app = AppServer::start(&url);
    for target in ["/", "/ids?count=3"] {
        let reply = get(app.addr, target);
        assert_eq!(reply.status, 502, "{target}: {}", reply.body);
        let error = reply.error();
        assert!(error.contains("sidecar unreachable"), "{error}");
        assert!(error.contains(&format!("KUBEFLAKE_URL={url}")), "{error}");
    }
    let ready = get(app.addr, "/readyz");
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(
        ready.error().contains("sidecar unreachable"),
        "{}",
        ready.body
    );
    // Liveness does not depend on the sidecar.
    let health = get(app.addr, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ok"));
}

#[test]
fn sidecar_503_is_passed_on_with_its_reason_and_retry_after() {
    let fake = FakeSidecar::start(Mode::NotReady);
    let app = AppServer::start(&fake.url());
    let reply = get(app.addr, "/");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), Some("2"));
    let error = reply.error();
    assert!(error.contains("answered 503"), "{error}");
    assert!(error.contains("waiting for slot assignment"), "{error}");
    assert_eq!(get(app.addr, "/ids?count=2").status, 503);

    let ready = get(app.addr, "/readyz");
    assert_eq!(ready.status, 503);
    assert!(
        ready.error().contains("waiting for slot assignment"),
        "{}",
        ready.body
    );

    fake.set_mode(Mode::Normal);
    let ready = get(app.addr, "/readyz");
    assert_eq!((ready.status, ready.body.as_str()), (200, "ok"));
    assert!(
        fake.seen()
            .last()
            .unwrap()
            .starts_with("GET /readyz HTTP/1.1\r\n")
    );
}

#[test]
fn sidecar_errors_and_nonsense_are_502() {
    let fake = FakeSidecar::start(Mode::Status(500, "boom"));
    let app = AppServer::start(&fake.url());
    let reply = get(app.addr, "/");
    assert_eq!(reply.status, 502);
    assert!(
        reply.error().contains("answered 500: boom"),
        "{}",
        reply.body
    );
    assert_eq!(get(app.addr, "/readyz").status, 503);

    fake.set_mode(Mode::Body("{\"id\":\"12x\"}"));
    let reply = get(app.addr, "/");
    assert_eq!(reply.status, 502);
    assert!(reply.error().contains("not understood"), "{}", reply.body);

    fake.set_mode(Mode::Body("{\"ids\":[\"1\",\"18446744073709551616\"]}"));
    let reply = get(app.addr, "/ids?count=2");
    assert_eq!(reply.status, 502);
    assert!(
        reply.error().contains("does not fit in 64 bits"),
        "{}",
        reply.body
    );

    fake.set_mode(Mode::ShortIds);
    let reply = get(app.addr, "/ids?count=4");
    assert_eq!(reply.status, 502);
    assert!(
        reply.error().contains("asked for 4 IDs, got 3"),
        "{}",
        reply.body
    );
}

#[test]
fn chunked_sidecar_answers_are_read() {
    let fake = FakeSidecar::start(Mode::Chunked);
    let app = AppServer::start(&fake.url());
    assert_eq!(get(app.addr, "/").json()["id"], FIRST_ID.to_string());
    assert_eq!(
        get(app.addr, "/ids?count=3").json()["ids"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn base_path_of_the_url_prefixes_sidecar_requests() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&format!("{}/kubeflake/", fake.url()));
    assert_eq!(get(app.addr, "/").status, 200);
    assert!(
        fake.seen()[0].starts_with("GET /kubeflake/id HTTP/1.1\r\n"),
        "{}",
        fake.seen()[0]
    );
}

#[test]
fn slow_sidecar_times_out_as_502() {
    let fake = FakeSidecar::start(Mode::Delay(Duration::from_secs(3)));
    let app = AppServer::start_with(&fake.url(), Limits::default(), Duration::from_millis(300));
    // The fake would answer after 3 s: a 502 saying "timed out" is the app's own limit.
    let reply = get(app.addr, "/");
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert!(reply.error().contains("timed out"), "{}", reply.body);
}

#[test]
fn unknown_routes_methods_and_garbage() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&fake.url());
    let reply = get(app.addr, "/id");
    assert_eq!(reply.status, 404);
    assert!(reply.error().contains("no route \"/id\""), "{}", reply.body);
    let reply = exchange(app.addr, b"DELETE / HTTP/1.1\r\n\r\n");
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("allow"), Some("GET"));
    let reply = exchange(app.addr, b"hello\r\n\r\n");
    assert_eq!(reply.status, 400);
    let mut huge = b"GET / HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 9000));
    let reply = exchange(app.addr, &huge);
    assert_eq!(reply.status, 431);
    assert_eq!(fake.seen(), Vec::<String>::new());
}

#[test]
fn incomplete_requests_time_out_with_408() {
    let fake = FakeSidecar::start(Mode::Normal);
    let limits = Limits {
        io_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let app = AppServer::start_with(&fake.url(), limits, Duration::from_secs(2));
    let reply = exchange(app.addr, b"GET / HTTP/1.1\r\n");
    assert_eq!(reply.status, 408);
}

#[test]
fn shutdown_finishes_requests_in_flight_then_refuses() {
    let fake = FakeSidecar::start(Mode::Delay(Duration::from_millis(700)));
    let mut app = AppServer::start(&fake.url());
    let addr = app.addr;
    let in_flight = thread::spawn(move || get(addr, "/"));
    // Wait until the request reached the sidecar, then stop the app.
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.seen().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the request never reached the sidecar"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let stopped = app.stop();
    assert_eq!(
        stopped,
        Stopped {
            reason: Reason::Requested,
            abandoned: 0
        }
    );
    let reply = in_flight.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["id"], FIRST_ID.to_string());
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after shutdown"
    );
}

#[test]
fn connections_beyond_the_limit_wait_for_a_free_slot() {
    let fake = FakeSidecar::start(Mode::Normal);
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let app = AppServer::start_with(&fake.url(), limits, Duration::from_secs(2));
    // Two idle connections take both slots.
    let idle1 = TcpStream::connect(app.addr).unwrap();
    let _idle2 = TcpStream::connect(app.addr).unwrap();
    thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(app.addr).unwrap();
    third.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = third.read(&mut byte);
    assert!(
        matches!(&early, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "answered while both slots were taken: {early:?}"
    );
    // Freeing one slot lets it through.
    drop(idle1);
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let reply = read_reply(&mut third);
    assert_eq!((reply.status, reply.body.as_str()), (200, "ok"));
}

#[test]
fn after_is_carried_to_the_sidecar_and_its_409_passed_on_with_retry_after() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&fake.url());
    assert_eq!(get(app.addr, "/?after=250096622069874000").status, 200);
    assert_eq!(get(app.addr, "/ids?count=2&after=7").status, 200);
    let seen = fake.seen();
    assert!(
        seen[0].starts_with("GET /id?after=250096622069874000 HTTP/1.1\r\n"),
        "{}",
        seen[0]
    );
    assert!(
        seen[1].starts_with("GET /ids?after=7&count=2 HTTP/1.1\r\n"),
        "{}",
        seen[1]
    );
    *fake.mode.lock().unwrap() = Mode::Status(
        409,
        "{\"error\":\"ahead\",\"reason\":\"after_ahead_of_clock\"}",
    );
    let reply = get(app.addr, "/?after=5");
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(
        reply.error().contains("after_ahead_of_clock"),
        "{}",
        reply.body
    );
    *fake.mode.lock().unwrap() = Mode::Status(400, "{\"error\":\"after=1 is not an ID\"}");
    assert_eq!(get(app.addr, "/?after=1").status, 400);
    assert_eq!(
        get(app.addr, "/").status,
        502,
        "a 400 without after is the app's bug"
    );
}

/// `--first-id`: the first thing the app does is one `GET /id`; it keeps that ID for
/// `/first`, and the IDs it serves afterwards come after it.
#[test]
fn first_id_mode_takes_one_id_before_serving_and_answers_it_on_first() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start_first_id(&fake.url()).expect("a first ID");
    let seen = fake.seen();
    assert_eq!(
        seen.len(),
        1,
        "exactly one request before serving: {seen:?}"
    );
    assert!(seen[0].starts_with("GET /id HTTP/1.1\r\n"), "{}", seen[0]);

    let first = get(app.addr, "/first");
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(
        first.json(),
        serde_json::json!({"id": FIRST_ID.to_string(), "pod": "web-0", "via": "tcp"})
    );
    // Asked again, the same ID, and the sidecar is not called for it.
    assert_eq!(get(app.addr, "/first").json()["id"], FIRST_ID.to_string());
    assert_eq!(fake.seen().len(), 1);
    // The app serves as usual: the next ID is the sidecar's next one.
    assert_eq!(get(app.addr, "/").json()["id"], (FIRST_ID + 1).to_string());
}

/// Without `--first-id`, `/first` is 404 and says why; nothing was asked at start.
#[test]
fn without_first_id_mode_first_is_404_and_the_sidecar_is_not_asked_at_start() {
    let fake = FakeSidecar::start(Mode::Normal);
    let app = AppServer::start(&fake.url());
    let reply = get(app.addr, "/first");
    assert_eq!(reply.status, 404);
    assert!(
        reply.error().contains("without --first-id"),
        "{}",
        reply.body
    );
    assert!(fake.seen().is_empty(), "{:?}", fake.seen());
}

/// Every way the one call can fail is an error (the binary exits 1 on it), after exactly
/// one request: no retry.
#[test]
fn first_id_mode_fails_on_refused_not_ready_error_or_nonsense_after_one_request() {
    let err = AppServer::start_first_id(&dead_url())
        .err()
        .expect("refused");
    assert!(
        matches!(err, SidecarError::Unreachable { .. }),
        "refused: {err}"
    );
    assert!(err.to_string().contains("GET /id"), "{err}");

    // (how the sidecar answers, the error's kind, a piece of its message)
    let cases = [
        (Mode::NotReady, "NotReady", "waiting for slot assignment"),
        (Mode::Status(500, "{\"error\":\"boom\"}"), "Status", "boom"),
        (Mode::Body("{\"id\":\"x\"}"), "BadAnswer", "not understood"),
        (
            Mode::Body("250096622069874688\n"),
            "BadAnswer",
            "not understood",
        ),
    ];
    for (mode, kind, text) in cases {
        let fake = FakeSidecar::start(mode.clone());
        let err = AppServer::start_first_id(&fake.url())
            .err()
            .unwrap_or_else(|| panic!("{mode:?}: the app started"));
        assert!(format!("{err:?}").starts_with(kind), "{mode:?}: {err:?}");
        assert!(err.to_string().contains(text), "{mode:?}: {err}");
        assert_eq!(fake.seen().len(), 1, "{mode:?}: one request, no retry");
    }
}
