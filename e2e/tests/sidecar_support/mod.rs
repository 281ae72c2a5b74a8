//! Helpers for the fault-injection suite: `kubeflake-sidecar cluster` processes carrying
//! pod identities (optionally under libfaketime with a steppable clock), load generators
//! that collect every ID issued, and the checker.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kubeflake_crds::contract::{ORACLE_TOKEN_AUDIENCE, ORACLE_TOKEN_FILE_ENV};
use kubeflake_crds::{Id, Layout};
use kubeflake_e2e::Cluster;
use kubeflake_e2e::process::{Process, ProcessSpec};

use crate::operator_support::workspace_binary;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A sidecar process for one pod.
pub struct Sidecar {
    pub process: Process,
    pub port: u16,
    /// Where this sidecar takes forwarded strict requests when it is its sequence's
    /// oracle (`--pod-ip 127.0.0.1 --oracle-port`).
    pub oracle_port: u16,
    pub pod: String,
    pub uid: String,
    /// With a steppable clock: the libfaketime offset file ("+0", "-5", "+3600", ...).
    pub clock_file: Option<PathBuf>,
    /// The kubeconfig this process alone runs with (`None`: the admin's, inherited).
    pub kubeconfig: Option<PathBuf>,
    /// The Unix socket it serves beside TCP (`--listen-unix`), when started with one.
    pub socket: Option<PathBuf>,
}

impl Sidecar {
    /// A sidecar with the cluster's admin kubeconfig (`KUBECONFIG` of the test process).
    pub fn start(
        cluster: &Cluster,
        ns: &str,
        pod: &Pod,
        sequence: &str,
        fake_clock: bool,
    ) -> Result<Sidecar> {
        Sidecar::start_as(cluster, ns, pod, sequence, fake_clock, None)
    }

    /// Like [`Sidecar::start`]; with `kubeconfig`, this process alone authenticates with it
    /// (for instance a pod-bound token of `pod`: `policy_support::token_kubeconfig`), and
    /// so do its restarts.
    pub fn start_as(
        cluster: &Cluster,
        ns: &str,
        pod: &Pod,
        sequence: &str,
        fake_clock: bool,
        kubeconfig: Option<&Path>,
    ) -> Result<Sidecar> {
        Sidecar::start_with(cluster, ns, pod, sequence, fake_clock, kubeconfig, None)
    }

    /// Like [`Sidecar::start_as`]; with `socket`, it also serves on that Unix socket.
    fn start_with(
        cluster: &Cluster,
        ns: &str,
        pod: &Pod,
        sequence: &str,
        fake_clock: bool,
        kubeconfig: Option<&Path>,
        socket: Option<PathBuf>,
    ) -> Result<Sidecar> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let oracle_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let name = pod.name_any();
        let uid = pod.uid().expect("a created pod has a UID");
        let fence_dir = cluster.dir().join(format!("fence-{ns}-{name}"));
        let bin = workspace_binary("kubeflake-sidecar");
        // Environment of this process only, set through /usr/bin/env.
        let mut env: Vec<OsString> = Vec::new();
        // The pod's token for a strict sequence's oracle port, as the kubelet would project
        // it (TokenRequest bound to the pod, the oracle's audience); a variable rather than
        // a flag, so that sidecars of releases without the oracle ignore it.
        let token_file = cluster.dir().join(format!("oracle-token-{ns}-{name}"));
        match oracle_token(cluster, ns, pod) {
            Ok(token) => {
                std::fs::write(&token_file, token)?;
                let mut assignment = OsString::from(format!("{ORACLE_TOKEN_FILE_ENV}="));
                assignment.push(&token_file);
                env.push(assignment);
            }
            // A pod already gone (a restart after a forced delete): its sidecar keeps the
            // file written at its first start, if any.
            Err(e) if token_file.exists() => {
                eprintln!("sidecar {name}: no new oracle token ({e:#}); keeping the old file");
                let mut assignment = OsString::from(format!("{ORACLE_TOKEN_FILE_ENV}="));
                assignment.push(&token_file);
                env.push(assignment);
            }
            Err(e) => eprintln!(
                "sidecar {name}: no oracle token ({e:#}); it cannot take part in a strict sequence"
            ),
        }
        if let Some(path) = kubeconfig {
            let mut assignment = OsString::from("KUBECONFIG=");
            assignment.push(path);
            env.push(assignment);
        }
        let clock_file = fake_clock.then(|| cluster.dir().join(format!("clock-{ns}-{name}")));
        if let Some(file) = &clock_file {
            std::fs::write(file, "+0")?;
            env.extend(
                [
                    format!("LD_PRELOAD={LIBFAKETIME}"),
                    format!("FAKETIME_TIMESTAMP_FILE={}", file.display()),
                    "FAKETIME_CACHE_DURATION=1".into(),
                    "FAKETIME_DONT_FAKE_MONOTONIC=1".into(),
                ]
                .map(OsString::from),
            );
        }
        let mut args: Vec<OsString> = Vec::new();
        let program = if env.is_empty() {
            bin
        } else {
            args.extend(env);
            args.push(bin.into_os_string());
            PathBuf::from("/usr/bin/env")
        };
        args.extend(
            [
                "cluster",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--sequence",
                sequence,
                "--pod-name",
                &name,
                "--pod-namespace",
                ns,
                "--pod-uid",
                &uid,
                "--fence-dir",
                &fence_dir.to_string_lossy(),
                "--log-format",
                "json",
                "--drain-timeout-secs",
                "2",
                "--pod-ip",
                "127.0.0.1",
                "--oracle-port",
                &oracle_port.to_string(),
            ]
            .map(OsString::from),
        );
        if let Some(socket) = &socket {
            args.extend([
                OsString::from("--listen-unix"),
                socket.clone().into_os_string(),
            ]);
        }
        if kubeconfig.is_none() {
            // SAFETY: tests only ever set KUBECONFIG to this cluster's kubeconfig.
            unsafe { std::env::set_var("KUBECONFIG", cluster.kubeconfig()) };
        }
        let spec = ProcessSpec {
            name: format!("sidecar-{name}"),
            program,
            args,
            log: cluster.dir().join(format!("sidecar-{ns}-{name}.log")),
        };
        Ok(Sidecar {
            process: Process::start(spec)?,
            port,
            oracle_port,
            pod: name,
            uid,
            clock_file,
            kubeconfig: kubeconfig.map(Path::to_path_buf),
            socket,
        })
    }

    /// Sets the libfaketime offset (takes effect within a second).
    pub fn set_clock(&self, offset: &str) {
        let file = self.clock_file.as_ref().expect("started with a fake clock");
        std::fs::write(file, offset).expect("write the clock file");
    }

    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.process.pid() {
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(pid as i32, signal) };
        }
    }

    /// One sidecar per pod of `sequence` (real clocks), and waits up to a minute until
    /// every one is ready; a sidecar process that exits fails the wait at once.
    pub async fn start_all_ready(
        cluster: &Cluster,
        ns: &str,
        pods: &[Pod],
        sequence: &str,
    ) -> Result<Vec<Sidecar>> {
        Sidecar::all_ready(cluster, ns, pods, sequence, false).await
    }

    /// Like [`Sidecar::start_all_ready`], each sidecar also serving on a Unix socket of its
    /// own in the cluster's directory ([`Sidecar::socket`]).
    pub async fn start_all_ready_with_sockets(
        cluster: &Cluster,
        ns: &str,
        pods: &[Pod],
        sequence: &str,
    ) -> Result<Vec<Sidecar>> {
        Sidecar::all_ready(cluster, ns, pods, sequence, true).await
    }

    async fn all_ready(
        cluster: &Cluster,
        ns: &str,
        pods: &[Pod],
        sequence: &str,
        sockets: bool,
    ) -> Result<Vec<Sidecar>> {
        let sidecars = pods
            .iter()
            .map(|pod| {
                let socket =
                    sockets.then(|| cluster.dir().join(format!("{ns}-{}.sock", pod.name_any())));
                Sidecar::start_with(cluster, ns, pod, sequence, false, None, socket)
            })
            .collect::<Result<Vec<_>>>()?;
        crate::operator_support::eventually(
            Duration::from_secs(60),
            &format!("every sidecar of {sequence} ready"),
            || async {
                for s in &sidecars {
                    s.process.check_running()?;
                }
                Ok(sidecars.iter().all(Sidecar::ready).then_some(()))
            },
        )
        .await?;
        Ok(sidecars)
    }

    pub fn ready(&self) -> bool {
        get(self.port, "/readyz")
            .map(|(status, _)| status == 200)
            .unwrap_or(false)
    }
}

/// A token bound to `pod` for the strict oracle's audience, from the API server's
/// TokenRequest (`kubectl create token`), as the projected volume the webhook injects
/// would hold it.
pub fn oracle_token(cluster: &Cluster, ns: &str, pod: &Pod) -> Result<String> {
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let name = pod.name_any();
    let uid = pod.uid().context("a created pod has a UID")?;
    let out = std::process::Command::new(cluster.kubectl_path())
        .arg(format!("--kubeconfig={}", cluster.kubeconfig().display()))
        .args(["create", "token", &account, "-n", ns, "--duration=1h"])
        .args(["--audience", ORACLE_TOKEN_AUDIENCE])
        .args(["--bound-object-kind", "Pod", "--bound-object-name", &name])
        .args(["--bound-object-uid", &uid])
        .stdin(std::process::Stdio::null())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl create token for pod {name}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

pub fn get(port: u16, target: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((
        status,
        out.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    ))
}

/// One keep-alive connection; `None` when the connection failed.
pub fn request(conn: &mut BufReader<TcpStream>, target: &str) -> Option<(u16, String)> {
    conn.get_mut()
        .write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut line = String::new();
    conn.read_line(&mut line).ok()?;
    let status: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut length = 0usize;
    loop {
        line.clear();
        conn.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).ok()?;
    Some((status, String::from_utf8(body).ok()?))
}

/// Everything one load generator saw from one sidecar.
#[derive(Default, Debug)]
pub struct Collected {
    /// IDs in the order received, split where the connection broke (process restarts).
    pub segments: Vec<Vec<u64>>,
    pub refusals: u64,
    /// Total time between a refusal and the next success.
    pub refused_for: Duration,
    pub requests: u64,
}

/// Calls one sidecar in a loop (9 single IDs, then one batch of 100) until stopped.
pub struct Collector {
    pub stop: Arc<AtomicBool>,
    pub data: Arc<Mutex<Collected>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    pub fn start(port: u16) -> Collector {
        let stop = Arc::new(AtomicBool::new(false));
        let data = Arc::new(Mutex::new(Collected::default()));
        let (s, d) = (stop.clone(), data.clone());
        let thread = std::thread::spawn(move || {
            let mut i: u64 = 0;
            let mut refused_since: Option<Instant> = None;
            let mut batch: Vec<u64> = Vec::with_capacity(4096);
            while !s.load(Ordering::Relaxed) {
                let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = stream.set_nodelay(true);
                let mut conn = BufReader::new(stream);
                d.lock().unwrap().segments.push(Vec::new());
                while !s.load(Ordering::Relaxed) {
                    i += 1;
                    let target = if i.is_multiple_of(10) {
                        "/ids?count=100"
                    } else {
                        "/id"
                    };
                    let Some((status, body)) = request(&mut conn, target) else {
                        break;
                    };
                    // Bounded load: the suite checks correctness under faults, not how a
                    // CPU-starved machine behaves; ~2,000 requests/s per sidecar at most.
                    std::thread::sleep(Duration::from_micros(500));
                    batch.clear();
                    if status == 200 {
                        batch.extend(body.lines().filter_map(|l| l.parse::<u64>().ok()));
                        if let Some(since) = refused_since.take() {
                            d.lock().unwrap().refused_for += since.elapsed();
                        }
                    } else if status == 503 {
                        refused_since.get_or_insert_with(Instant::now);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let mut data = d.lock().unwrap();
                    data.requests += 1;
                    if status == 503 {
                        data.refusals += 1;
                    }
                    data.segments
                        .last_mut()
                        .expect("a segment")
                        .extend_from_slice(&batch);
                }
            }
            if let Some(since) = refused_since {
                d.lock().unwrap().refused_for += since.elapsed();
            }
        });
        Collector {
            stop,
            data,
            thread: Some(thread),
        }
    }

    pub fn count(&self) -> usize {
        self.data
            .lock()
            .unwrap()
            .segments
            .iter()
            .map(Vec::len)
            .sum()
    }

    pub fn finish(mut self) -> Collected {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.data.lock().unwrap())
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub ids: usize,
    pub duplicates: usize,
    pub order_violations: usize,
    pub wrong_worker: usize,
    pub lines: Vec<String>,
}

/// Checks every ID collected: unique across all sidecars; strictly increasing per worker
/// (in the sequence's order: tick, then issue order) within each connection; worker field
/// one of the slots the pod held.
pub fn check(
    layout: &Layout,
    collected: &[(String, String, Collected)],
    slots_held: &HashMap<String, HashSet<u32>>,
) -> Report {
    let mut report = Report::default();
    let mut seen: HashSet<u64> = HashSet::new();
    for (pod, uid, data) in collected {
        let mut count = 0;
        for segment in &data.segments {
            // The sequence's order: tick, then issue order (the raw numbers for
            // time-ordered layouts; not for key forms, docs/layouts.md).
            let mut last_per_worker: HashMap<u32, (u64, u32)> = HashMap::new();
            for &id in segment {
                count += 1;
                if !seen.insert(id) {
                    report.duplicates += 1;
                }
                let parts = layout
                    .decode(Id::new(id).expect("63-bit ID"))
                    .expect("fits the layout");
                let worker = parts.slot.0;
                if !slots_held.get(uid).is_some_and(|s| s.contains(&worker)) {
                    report.wrong_worker += 1;
                }
                let order = (parts.tick.0, parts.sequence);
                if let Some(prev) = last_per_worker.insert(worker, order)
                    && order <= prev
                {
                    report.order_violations += 1;
                }
            }
        }
        report.ids += count;
        report.lines.push(format!(
            "{pod}: {count} IDs in {} requests, {} refused (503), refusing for {:.1} s in all",
            data.requests,
            data.refusals,
            data.refused_for.as_secs_f64()
        ));
    }
    report
}
