//! Helpers shared by the sidecar's integration tests: a minimal HTTP/1.1 client and a
//! handle on a `kubeflake-sidecar` child process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends one request on a fresh connection (`Connection: close`) and reads the answer.
pub fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

pub fn get(addr: SocketAddr, target: &str) -> Answer {
    request(addr, "GET", target, &[]).unwrap_or_else(|e| panic!("GET {target}: {e}"))
}

/// Polls `f` every 20 ms until it returns `Some`, for at most `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Where Debian's libfaketime is (package `faketime`, installed by scripts/install-deps.sh).
fn libfaketime() -> &'static str {
    const CANDIDATES: [&str; 2] = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ];
    CANDIDATES
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("libfaketime is installed (Debian package faketime; scripts/install-deps.sh)")
}

/// A `kubeflake-sidecar` child process. Killed when dropped.
pub struct SidecarProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

impl SidecarProcess {
    /// Starts the binary with `args` (plus `--listen 127.0.0.1:0 --log-format json`),
    /// optionally under `faketime OFFSET`, and waits until it logs its address.
    pub fn start(args: &[&str], faketime: Option<&str>) -> SidecarProcess {
        let bin = env!("CARGO_BIN_EXE_kubeflake-sidecar");
        // libfaketime is preloaded into the sidecar itself (not through the `faketime`
        // command, which forks and would leave the sidecar running when it is killed).
        let mut cmd = Command::new(bin);
        if let Some(offset) = faketime {
            cmd.env("LD_PRELOAD", libfaketime()).env("FAKETIME", offset);
        }
        cmd.args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (faketime {faketime:?}): {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                        && let Some(listen) = v["fields"]["listen"].as_str()
                    {
                        let _ =
                            tx.send(Ok(listen.parse::<SocketAddr>().expect("a socket address")));
                        sent = true;
                        continue;
                    }
                    if line.contains("error") {
                        let _ = tx.send(Err(line.clone()));
                    }
                }
                eprintln!("[sidecar] {line}");
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(addr)) => addr,
            Ok(Err(line)) => panic!("sidecar failed to start: {line}"),
            Err(_) => panic!("sidecar did not report its address within 20 s"),
        };
        SidecarProcess { child, addr }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(ok.success(), "kill -{signal} failed");
    }

    /// Waits for exit; returns the exit code (None if killed by a signal).
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "sidecar did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to completion with `args` and returns (exit code, stderr).
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeflake-sidecar"))
        .args(args)
        .output()
        .expect("the sidecar binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn write_file(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write test file");
    path.to_string_lossy().into_owned()
}

/// A sidecar served in-process on its own thread and runtime; stopped when dropped. Keeps
/// whatever must live as long as it (`keep`: a state directory, say).
pub struct InProcess<K = ()> {
    pub addr: SocketAddr,
    stop: Option<kubeflake_runtime::shutdown::Shutdown>,
    thread: Option<std::thread::JoinHandle<()>>,
    keep: K,
}

impl<K> InProcess<K> {
    /// What the server keeps alive (its state directory, say).
    pub fn kept(&self) -> &K {
        &self.keep
    }
}

impl<K> Drop for InProcess<K> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.trigger("test over");
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `start` (which sends its bound address, then serves until the token fires) on a new
/// thread and runtime, and waits for the address.
pub fn serve_in_process<K, F, Fut>(keep: K, start: F) -> InProcess<K>
where
    F: FnOnce(
            kubeflake_runtime::shutdown::ShutdownToken,
            std::sync::mpsc::Sender<SocketAddr>,
        ) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let stop = kubeflake_runtime::shutdown::Shutdown::new();
    let stopped = stop.token();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(start(stopped, addr_tx));
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server starts");
    InProcess {
        addr,
        stop: Some(stop),
        thread: Some(thread),
        keep,
    }
}

/// A standalone Snowflake sidecar in process, on `clock`.
pub fn snowflake_in_process<K>(
    keep: K,
    config: kubeflake_sidecar::standalone::StandaloneConfig,
    clock: std::sync::Arc<kubeflake_sidecar::clock::ManualClock>,
) -> InProcess<K> {
    serve_in_process(keep, move |stopped, addr_tx| async move {
        let sidecar = kubeflake_sidecar::standalone::Standalone::start(config, clock)
            .await
            .unwrap();
        addr_tx.send(sidecar.local_addr().unwrap()).unwrap();
        sidecar.run(stopped).await.unwrap();
    })
}

/// A standalone segment sidecar in process.
pub fn segment_in_process<K>(
    keep: K,
    config: kubeflake_sidecar::standalone::SegmentStandaloneConfig,
) -> InProcess<K> {
    serve_in_process(keep, move |stopped, addr_tx| async move {
        let sidecar = kubeflake_sidecar::standalone::SegmentStandalone::start(config)
            .await
            .unwrap();
        addr_tx.send(sidecar.local_addr().unwrap()).unwrap();
        sidecar.run(stopped).await.unwrap();
    })
}
