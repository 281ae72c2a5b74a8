//! `kubeflake-ceiling`: the fastest any HTTP ID sidecar could be on this stack. It serves
//! through the sidecar's own serve loop (`kubeflake_runtime::serve`: the same multi-thread
//! tokio runtime, accept back-off, `TCP_NODELAY`, HTTP/1 connection builder, header-read
//! timeout and graceful drain), on loopback TCP and, when asked, on a Unix socket bound
//! like the sidecar's `--listen-unix`, and answers every request with a constant ID-sized
//! body. The gap between it and kubeflake's `GET /id` is what ID generation, routing and
//! metrics cost.
//!
//! Run: `kubeflake-ceiling --listen 127.0.0.1:7171 [--listen-unix /tmp/dir/ceiling.sock]`
//! (stops on SIGTERM or SIGINT).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use hyper::StatusCode;
use hyper::body::Incoming;
use kubeflake_runtime::reply::{self, Reply};
use kubeflake_runtime::serve::{Listener, ServeOptions};
use tokio::net::TcpListener;

/// The same bytes as a kubeflake text answer to `GET /id`: 19 digits and a newline.
const CONSTANT_ID: &[u8] = b"7263811919712256001\n";

/// The serve loop's default limits and a short drain: the ceiling has nothing to finish.
const OPTIONS: ServeOptions = ServeOptions {
    name: "ceiling",
    limits: kubeflake_runtime::serve::Limits::DEFAULT,
    drain: Duration::from_secs(1),
};

/// A constant-answer hyper server: the ceiling for HTTP ID sidecars.
#[derive(Parser, Debug)]
#[command(about)]
struct Cli {
    /// Address to serve on; loopback only.
    #[arg(long, default_value = "127.0.0.1:7171")]
    listen: SocketAddr,
    /// Also serve on a Unix domain socket at this path (mode 0666, a stale socket file
    /// replaced), as the sidecar's `--listen-unix` does.
    #[arg(long)]
    listen_unix: Option<PathBuf>,
}

async fn answer(_req: hyper::Request<Incoming>) -> Reply {
    reply::body(StatusCode::OK, "text/plain", CONSTANT_ID)
}

/// Serves on `listener` until `stopped` says so.
async fn serve_on<L: Listener>(listener: L, mut stopped: tokio::sync::watch::Receiver<bool>) {
    let shutdown = async move {
        // An error means the sender is gone, which happens only after it sent.
        let _ = stopped.wait_for(|s| *s).await;
    };
    kubeflake_runtime::serve::serve(listener, OPTIONS, answer, shutdown).await
}

fn exit(msg: &str) -> ! {
    eprintln!("kubeflake-ceiling: error: {msg}");
    std::process::exit(2);
}

fn main() {
    let cli = Cli::parse();
    if !cli.listen.ip().is_loopback() {
        exit(&format!(
            "--listen {} is not a loopback address; use 127.0.0.1:PORT",
            cli.listen
        ));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => exit(&format!("cannot start the tokio runtime: {e}")),
    };
    runtime.block_on(async {
        let tcp = match TcpListener::bind(cli.listen).await {
            Ok(l) => l,
            Err(e) => exit(&format!("cannot listen on {}: {e}", cli.listen)),
        };
        let unix = match cli.listen_unix.as_deref().map(|path| {
            kubeflake_runtime::unix_socket::bind(path, kubeflake_crds::contract::SOCKET_MODE)
        }) {
            None => None,
            Some(Ok(l)) => Some(l),
            Some(Err(e)) => exit(&e.to_string()),
        };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let signal = async move {
            use tokio::signal::unix::{SignalKind, signal};
            if let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            } else {
                eprintln!("kubeflake-ceiling: cannot watch signals; serving until killed");
                std::future::pending::<()>().await;
            }
            // Fails only when every serve loop already ended.
            let _ = stop.send(true);
        };
        let unix_loop = async {
            if let Some(unix) = unix {
                serve_on(unix, stopped.clone()).await;
            }
        };
        tokio::join!(signal, serve_on(tcp, stopped.clone()), unix_loop);
        if let Some(path) = &cli.listen_unix {
            let _ = std::fs::remove_file(path);
        }
    });
}
