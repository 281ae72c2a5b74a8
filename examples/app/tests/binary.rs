//! The built binary: exit codes, log lines, and SIGTERM with a request in flight.
//! Everything listens on 127.0.0.1 only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kubeflake-example-app");

fn app() -> Command {
    let mut command = Command::new(BIN);
    command
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[test]
fn missing_or_bad_kubeflake_url_exits_2_with_a_clear_message() {
    let cases: [(Option<&str>, &str); 3] = [
        (None, "KUBEFLAKE_URL is not set"),
        (Some("https://127.0.0.1:7070"), "https is not supported"),
        (Some("http://kubeflake-sidecar:7070"), "not an IP address"),
    ];
    for (url, expected) in cases {
        let mut command = app();
        if let Some(url) = url {
            command.env("KUBEFLAKE_URL", url);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url:?}: {stderr}");
        assert!(stderr.contains("KUBEFLAKE_URL"), "{url:?}: {stderr}");
        assert!(stderr.contains(expected), "{url:?}: {stderr}");
    }
    let out = app()
        .env("KUBEFLAKE_URL", "http://127.0.0.1:7070")
        .env("APP_LISTEN", "nowhere")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("APP_LISTEN"));
}

/// A sidecar answering `/id` after `pause`; reports each request on `seen`.
fn fake_sidecar(pause: Duration) -> (SocketAddr, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut next = 1000u64;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            thread::sleep(pause);
            let body = format!("{{\"id\":\"{next}\"}}");
            next += 1;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, rx)
}

fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nHost: app\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// Starts the app on 127.0.0.1:0 and reads the listening address from its start line.
fn start(sidecar: SocketAddr) -> (Child, SocketAddr, BufReader<ChildStderr>, String) {
    start_with_args(sidecar, &[])
}

fn start_with_args(
    sidecar: SocketAddr,
    args: &[&str],
) -> (Child, SocketAddr, BufReader<ChildStderr>, String) {
    let mut child = app()
        .args(args)
        .env("KUBEFLAKE_URL", format!("http://{sidecar}"))
        .env("APP_LISTEN", "127.0.0.1:0")
        .env("POD_NAME", "pod-a")
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in the start line {line:?}"));
    (child, addr, stderr, line)
}

#[test]
fn serves_ids_and_exits_0_on_sigterm_after_finishing_requests_in_flight() {
    let (sidecar, seen) = fake_sidecar(Duration::from_millis(600));
    let (mut child, addr, mut stderr, start_line) = start(sidecar);
    assert!(
        start_line.contains(&format!("KUBEFLAKE_URL=http://{sidecar}")),
        "{start_line}"
    );
    assert_eq!(get(addr, "/healthz"), (200, "ok".to_string()));
    assert_eq!(
        get(addr, "/"),
        (
            200,
            r#"{"id":"1000","pod":"pod-a","via":"tcp"}"#.to_string()
        )
    );
    assert!(seen.recv().unwrap().starts_with("GET /id HTTP/1.1\r\n"));

    // A request in flight (the sidecar takes 600 ms), then SIGTERM.
    let in_flight = thread::spawn(move || get(addr, "/"));
    seen.recv_timeout(Duration::from_secs(5)).unwrap();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    assert_eq!(
        in_flight.join().unwrap(),
        (
            200,
            r#"{"id":"1001","pod":"pod-a","via":"tcp"}"#.to_string()
        )
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert_eq!(
        rest,
        "kubeflake-example-app: SIGTERM: stopped accepting, requests in flight finished, exiting\n"
    );
    assert!(TcpStream::connect(addr).is_err());
}

/// Stops the app with SIGTERM and waits (at most 10 s) for its exit status.
fn stop(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A sidecar that answers every request with `status` and `body`; reports each request.
fn answering_sidecar(
    status: &'static str,
    body: &'static str,
) -> (SocketAddr, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, rx)
}

#[test]
fn first_id_mode_takes_one_id_before_listening_and_answers_it_on_first() {
    let (sidecar, seen) = fake_sidecar(Duration::ZERO);
    let (mut child, addr, mut stderr, start_line) = start_with_args(sidecar, &["--first-id"]);
    // Its first request, made before it listened (the start line follows it).
    assert!(seen.try_recv().unwrap().starts_with("GET /id HTTP/1.1\r\n"));
    assert!(start_line.ends_with(", first ID 1000\n"), "{start_line}");
    let first = (
        200,
        r#"{"id":"1000","pod":"pod-a","via":"tcp"}"#.to_string(),
    );
    assert_eq!(get(addr, "/first"), first);
    assert_eq!(get(addr, "/first"), first, "the same ID every time");
    assert_eq!(
        get(addr, "/"),
        (
            200,
            r#"{"id":"1001","pod":"pod-a","via":"tcp"}"#.to_string()
        )
    );
    assert_eq!(stop(&mut child).code(), Some(0));
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(!rest.contains("first ID"), "{rest}");
}

/// The point of `--first-id`: an app that needs an ID to start exits 1 when its one call
/// fails, with the reason on stderr, without retrying and without listening.
#[test]
fn first_id_mode_exits_1_when_its_one_call_fails_and_never_listens() {
    let dead = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (not_ready, not_ready_seen) = answering_sidecar(
        "503 Service Unavailable",
        r#"{"error":"not ready: waiting for slot assignment; retry later","reason":"no_slot"}"#,
    );
    let (nonsense, nonsense_seen) = answering_sidecar("200 OK", r#"{"id":"abc"}"#);
    let cases = [
        (dead, None, "sidecar unreachable: GET /id"),
        (
            not_ready,
            Some(not_ready_seen),
            "sidecar not ready: GET /id",
        ),
        (
            nonsense,
            Some(nonsense_seen),
            "sidecar answer not understood: GET /id",
        ),
    ];
    for (sidecar, seen, expected) in cases {
        let out = app()
            .arg("--first-id")
            .env("KUBEFLAKE_URL", format!("http://{sidecar}"))
            .env("APP_LISTEN", "127.0.0.1:0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{sidecar}: {stderr}");
        assert!(
            stderr.starts_with("kubeflake-example-app: cannot take the first ID (--first-id)"),
            "{stderr}"
        );
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains("listening on"), "{stderr}");
        if let Some(seen) = seen {
            assert!(seen.try_recv().unwrap().starts_with("GET /id HTTP/1.1\r\n"));
            assert!(seen.try_recv().is_err(), "one request, no retry");
        }
    }
    // The variable does the same as the flag.
    let out = app()
        .env("KUBEFLAKE_URL", format!("http://{dead}"))
        .env("APP_LISTEN", "127.0.0.1:0")
        .env("APP_FIRST_ID", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}
