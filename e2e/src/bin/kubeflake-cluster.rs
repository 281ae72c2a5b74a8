//! Runs a control plane in the foreground until SIGTERM or SIGINT; `e2e/cluster up`
//! starts it in the background.
//!
//! Usage: `kubeflake-cluster <state-dir> [--node]`. `--node` adds a real node (see
//! `kubeflake_e2e::node`; needs root). When the cluster is ready it writes
//! `<state-dir>/ready` (the kubeconfig path); all processes stop when this one exits,
//! however it exits (see `kubeflake_e2e::process`).

use anyhow::{Context, Result};
use kubeflake_e2e::{Cluster, ClusterOptions};
use tokio::signal::unix::{SignalKind, signal};

fn main() -> Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .context("usage: kubeflake-cluster <state-dir> [--node]")?;
    let node = match std::env::args().nth(2).as_deref() {
        None => false,
        Some("--node") => true,
        Some(other) => anyhow::bail!(
            "unknown argument {other:?}; usage: kubeflake-cluster <state-dir> [--node]"
        ),
    };
    let cluster = Cluster::start(ClusterOptions {
        dir: Some(dir.into()),
        node,
    })?;
    for (name, pid) in cluster.pids() {
        eprintln!("kubeflake-cluster: {name} is pid {pid}");
    }
    std::fs::write(
        cluster.dir().join("ready"),
        cluster.kubeconfig().to_string_lossy().as_bytes(),
    )?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        anyhow::Ok(())
    })?;
    eprintln!("kubeflake-cluster: stopping");
    let _ = std::fs::remove_file(cluster.dir().join("ready"));
    drop(cluster);
    Ok(())
}
