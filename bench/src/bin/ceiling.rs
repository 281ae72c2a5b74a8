//! `kubeflake-ceiling`: the fastest any HTTP ID sidecar could be on this stack. A hyper 1
//! server set up exactly like the sidecar's (`kubeflake_sidecar::http::serve`: the same
//! multi-thread tokio runtime, accept loop, `TCP_NODELAY`, HTTP/1 connection builder and
//! graceful-shutdown watcher), answering every request with a constant ID-sized body. The
//! gap between it and kubeflake's `GET /id` is what ID generation, routing and metrics cost.
//!
//! Run: `kubeflake-ceiling --listen 127.0.0.1:7171` (stops on SIGTERM or SIGINT).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

/// The same bytes as a kubeflake text answer to `GET /id`: 19 digits and a newline.
const CONSTANT_ID: &[u8] = b"7263811919712256001\n";

/// A constant-answer hyper server: the ceiling for HTTP ID sidecars.
#[derive(Parser, Debug)]
#[command(about)]
struct Cli {
    /// Address to serve on; loopback only.
    #[arg(long, default_value = "127.0.0.1:7171")]
    listen: SocketAddr,
}

fn answer() -> Response<Full<Bytes>> {
    let mut reply = Response::new(Full::new(Bytes::from_static(CONSTANT_ID)));
    *reply.status_mut() = StatusCode::OK;
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    reply
}

async fn serve(listener: TcpListener) {
    let graceful = GracefulShutdown::new();
    let shutdown = async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = service_fn(|_req| async { Ok::<_, Infallible>(answer()) });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
}

fn main() {
    let cli = Cli::parse();
    if !cli.listen.ip().is_loopback() {
        eprintln!(
            "kubeflake-ceiling: error: --listen {} is not a loopback address; use 127.0.0.1:PORT",
            cli.listen
        );
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("can start the tokio runtime");
    runtime.block_on(async {
        let listener = match TcpListener::bind(cli.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "kubeflake-ceiling: error: cannot listen on {}: {e}",
                    cli.listen
                );
                std::process::exit(2);
            }
        };
        serve(listener).await;
    });
}
