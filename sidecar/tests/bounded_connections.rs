//! A standalone sidecar under a flood of slow and idle connections (issue 54, finding 5):
//! it stays inside the chart's 64 Mi memory limit and still answers the app's `/id`.
//!
//! The sidecar is started with a soft open-file limit of 1,024, as many container
//! runtimes set it: before the serve loop had a connection cap, a 16 KiB header bound and
//! the start-up raise of that limit, 200 half-sent 380 KB headers took its RSS to ~86 MB
//! and, behind 2,000 idle connections, a fresh `/id` waited ~35 s in the listen backlog.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The chart's memory limit of the sidecar container.
const MEMORY_LIMIT_BYTES: u64 = 64 << 20;
const IDLE: usize = 2000;
const SLOW: usize = 200;
/// Each slow connection's half-sent header.
const SLOW_HEADER_BYTES: usize = 380 * 1024;
/// Bounds the wait for the app's answer; not a timing assertion (the issue's acceptance
/// is 1 s; before the fix the answer took ~35 s).
const ANSWER_DEADLINE: Duration = Duration::from_secs(20);

/// A standalone sidecar started under `sh -c 'ulimit -Sn 1024'`, killed when dropped.
struct Sidecar {
    child: Child,
    addr: SocketAddr,
    _state: tempfile::TempDir,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sidecar {
    fn start(socket: &Path) -> Sidecar {
        let state = tempfile::tempdir().unwrap();
        let bin = env!("CARGO_BIN_EXE_kubeflake-sidecar");
        let mut child = Command::new("sh")
            .args(["-c", r#"ulimit -Sn 1024 && exec "$0" "$@""#, bin])
            .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(["--state-dir", state.path().to_str().unwrap()])
            .args(["--listen-unix", socket.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh starts the sidecar");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(listen) = v["fields"]["listen"].as_str()
                {
                    let _ = tx.send(listen.parse::<SocketAddr>().expect("an address"));
                }
                if !line.contains("connection closed to make room") {
                    eprintln!("[sidecar] {line}");
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the sidecar reports its address");
        Sidecar {
            child,
            addr,
            _state: state,
        }
    }

    fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the sidecar is running");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("a VmRSS line")
            * 1024
    }
}

/// One `GET /id` on a fresh connection made by `connect`, retried until `deadline`: the
/// status, or what failed last.
fn fresh_id<S: Read + Write>(
    deadline: Instant,
    mut connect: impl FnMut(Duration) -> std::io::Result<S>,
) -> Result<u16, String> {
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = (|| -> std::io::Result<u16> {
            let mut s = connect(left)?;
            s.write_all(b"GET /id HTTP/1.1\r\nHost: kubeflake\r\nConnection: close\r\n\r\n")?;
            let mut answer = String::new();
            s.read_to_string(&mut answer)?;
            Ok(answer
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0))
        })();
        match attempt {
            Ok(status) => return Ok(status),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(last)
}

/// Opens `count` connections to `addr`, each sending `prefix` (a header never finished),
/// from a few threads; keeps the ones that connected.
fn open(addr: SocketAddr, count: usize, prefix: &'static [u8]) -> Vec<TcpStream> {
    let threads = 20;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                for _ in (t..count).step_by(threads) {
                    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    else {
                        continue;
                    };
                    if !prefix.is_empty() {
                        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
                        // The sidecar may refuse the header (431) and close: fine.
                        let _ = s.write_all(prefix);
                    }
                    kept.push(s);
                }
                kept
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("an opener thread"))
        .collect()
}

fn slow_header() -> &'static [u8] {
    let mut header = b"GET /id HTTP/1.1\r\nHost: kubeflake\r\nX-Pad: ".to_vec();
    header.extend(std::iter::repeat_n(b'a', SLOW_HEADER_BYTES));
    header.leak()
}

#[test]
fn under_2000_idle_and_200_slow_connections_the_sidecar_stays_under_64_mib_and_answers_the_app() {
    // This process holds every connection too.
    let files = kubeflake_runtime::limits::raise_open_files().expect("the open-file limit");
    assert!(
        files.soft >= (IDLE + SLOW + 200) as u64,
        "this test needs {} open files, the hard limit is {}",
        IDLE + SLOW + 200,
        files.hard
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubeflake.sock");
    let sidecar = Sidecar::start(&socket);
    let before = sidecar.rss_bytes();

    let mut peak = before;
    let slow = open(sidecar.addr, SLOW, slow_header());
    peak = peak.max(sidecar.rss_bytes());
    let idle = open(sidecar.addr, IDLE, b"");
    peak = peak.max(sidecar.rss_bytes());
    eprintln!(
        "connected: {} slow, {} idle; RSS {} -> {} kB",
        slow.len(),
        idle.len(),
        before / 1024,
        peak / 1024
    );

    let deadline = Instant::now() + ANSWER_DEADLINE;
    let over_tcp = fresh_id(deadline, |left| {
        let s = TcpStream::connect_timeout(&sidecar.addr, left)?;
        s.set_read_timeout(Some(left))?;
        Ok(s)
    });
    let deadline = Instant::now() + ANSWER_DEADLINE;
    let over_socket = fresh_id(deadline, |left| {
        let s = std::os::unix::net::UnixStream::connect(&socket)?;
        s.set_read_timeout(Some(left))?;
        Ok(s)
    });
    for _ in 0..10 {
        peak = peak.max(sidecar.rss_bytes());
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("peak RSS {} kB", peak / 1024);

    assert_eq!(over_tcp, Ok(200), "a fresh /id on 127.0.0.1");
    assert_eq!(over_socket, Ok(200), "a fresh /id on the Unix socket");
    assert!(
        peak < MEMORY_LIMIT_BYTES,
        "the sidecar's RSS reached {} MiB, over the 64 Mi limit",
        peak >> 20
    );
    drop((slow, idle));
}
