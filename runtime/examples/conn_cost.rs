//! What one HTTP request costs the shared serve loop ([`kubeflake_runtime::serve`]) in CPU,
//! on a new connection each (as the kubelet probes) and on one kept connection (as an app
//! asks for IDs). Measured, never asserted:
//!
//!   cargo run --release -p kubeflake-runtime --example conn_cost [REQUESTS]
//!
//! The server runs as a sidecar in a pod runs it: a multi-thread runtime with one worker
//! thread, the loop spawned on it, a handler that answers at once. A client thread in the
//! same process makes REQUESTS requests (default 2000) each way over loopback TCP; the
//! figure is the CPU of the runtime's threads (`/proc/self/task/*/schedstat` of the threads
//! named `tokio-rt-worker`, user and kernel time), divided by the requests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use hyper::StatusCode;
use kubeflake_runtime::reply;
use kubeflake_runtime::serve::{ServeOptions, serve};

/// CPU time of the runtime's worker threads so far, nanoseconds.
fn runtime_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.trim() == "tokio-rt-worker")
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Reads one whole answer from `stream`: up to the handler's body, `ok`, or the end.
fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.ends_with(b"ok") {
            return Ok(());
        }
    }
}

fn per_request_us(before: u64, requests: u32) -> f64 {
    (runtime_cpu_ns() - before) as f64 / 1000.0 / f64::from(requests)
}

fn main() -> std::io::Result<()> {
    let requests: u32 = match std::env::args().nth(1) {
        None => 2000,
        Some(arg) => arg.parse().ok().filter(|n| *n > 0).unwrap_or_else(|| {
            eprintln!("conn_cost: REQUESTS must be a whole number above 0, not {arg:?}");
            std::process::exit(2)
        }),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr: SocketAddr = listener.local_addr()?;
    let options = ServeOptions {
        name: "conn_cost",
        limits: kubeflake_runtime::serve::Limits::DEFAULT,
        drain: Duration::from_secs(1),
    };
    runtime.spawn(serve(
        listener,
        options,
        |_req| async { reply::body(StatusCode::OK, reply::TEXT, "ok") },
        std::future::pending(),
    ));
    let client = std::thread::Builder::new().name("client".into()).spawn(
        move || -> std::io::Result<(f64, f64)> {
            let mut buf = Vec::new();
            let before = runtime_cpu_ns();
            for _ in 0..requests {
                let mut stream = TcpStream::connect(addr)?;
                stream
                    .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
                read_answer(&mut stream, &mut buf)?;
            }
            let new_connection = per_request_us(before, requests);
            let mut stream = TcpStream::connect(addr)?;
            let before = runtime_cpu_ns();
            for _ in 0..requests {
                stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")?;
                read_answer(&mut stream, &mut buf)?;
            }
            Ok((new_connection, per_request_us(before, requests)))
        },
    )?;
    let (new_connection, kept) = client
        .join()
        .map_err(|_| std::io::Error::other("the client thread panicked"))??;
    println!("serve loop CPU per request, {requests} requests each way:");
    println!("  a new connection each: {new_connection:.1} µs");
    println!("  one kept connection:   {kept:.1} µs");
    Ok(())
}
