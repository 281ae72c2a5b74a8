//! An etcd snapshot of a running [`Cluster`], and its restore: what an operator of a real
//! cluster does to bring its etcd back to an older state (issue 55, "A member's etcd
//! restored from an older snapshot while its pods run").
//!
//! The snapshot is `etcdctl snapshot save` against the running etcd (nothing stops). The
//! restore follows the Kubernetes documentation for restoring etcd under a running API
//! server: stop the API server and etcd, `etcdutl snapshot restore` into a fresh data
//! directory with `--bump-revision` and `--mark-compacted` (so every watch that resumes from
//! a resourceVersion of before is answered `410 Gone` and lists again from scratch, rather
//! than waiting for revisions the restored store has not reached), put it in place of the
//! old one, start etcd and the API server again with the same flags, and wait until the API
//! server serves. The controller manager keeps running and reconnects.
//!
//! Both tools are built into the bin set from etcd's own modules at etcd's version
//! (`e2e/controlplane/versions.env`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail};

use super::Cluster;
use crate::bin_dir::require;
use crate::control_plane::wait_apiserver_ready;
use crate::process::{Process, STOP_GRACE};

/// How far the restored store's revision is moved past the snapshot's: more than the
/// writes any test makes between a snapshot and its restore, so no resourceVersion handed
/// out before the restore is handed out again after it.
const BUMP_REVISION: u64 = 1_000_000_000;

/// A snapshot of a cluster's etcd: a file in the cluster's state directory.
#[derive(Debug, Clone)]
pub struct EtcdSnapshot {
    path: PathBuf,
}

impl EtcdSnapshot {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Cluster {
    /// Takes a snapshot of this cluster's etcd while everything runs (`etcdctl snapshot
    /// save`), into `<state dir>/snapshots/<name>.db`.
    pub async fn etcd_snapshot(&self, name: &str) -> Result<EtcdSnapshot> {
        require(&self.bin_dir, &["etcdctl", "etcdutl"])?;
        let dir = self.dir.join("snapshots");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{name}.db"));
        if path.exists() {
            bail!(
                "snapshot {} exists already: use another name",
                path.display()
            );
        }
        let args: Vec<OsString> = vec![
            format!("--endpoints={}", self.etcd_url).into(),
            "snapshot".into(),
            "save".into(),
            path.clone().into(),
        ];
        run_tool(&self.bin_dir.join("etcdctl"), &args).await?;
        Ok(EtcdSnapshot { path })
    }

    /// Restores this cluster's etcd from `snapshot`: stops the API server and etcd,
    /// restores the data directory, starts both again and waits until the API server
    /// serves. Everything written after the snapshot is gone; the revision moves on past
    /// every one handed out before, and watches list again from scratch.
    pub async fn restore_etcd(&self, snapshot: &EtcdSnapshot) -> Result<()> {
        require(&self.bin_dir, &["etcdutl"])?;
        let peer_url = self.etcd_flag("--initial-advertise-peer-urls=")?;
        let name = self.etcd_flag("--name=")?;
        let data = self.dir.join("etcd-data");
        let restored = self.dir.join("etcd-data.restored");
        if restored.exists() {
            std::fs::remove_dir_all(&restored)
                .with_context(|| format!("removing {}", restored.display()))?;
        }
        let args: Vec<OsString> = vec![
            "snapshot".into(),
            "restore".into(),
            snapshot.path.clone().into(),
            format!("--data-dir={}", restored.display()).into(),
            format!("--name={name}").into(),
            format!("--initial-cluster={name}={peer_url}").into(),
            format!("--initial-advertise-peer-urls={peer_url}").into(),
            format!("--bump-revision={BUMP_REVISION}").into(),
            "--mark-compacted".into(),
        ];
        self.apiserver.stop(STOP_GRACE);
        self.etcd.stop(STOP_GRACE);
        run_tool(&self.bin_dir.join("etcdutl"), &args).await?;
        std::fs::remove_dir_all(&data).with_context(|| format!("removing {}", data.display()))?;
        std::fs::rename(&restored, &data)
            .with_context(|| format!("moving {} to {}", restored.display(), data.display()))?;
        self.etcd.restart()?;
        let port = self
            .etcd_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .with_context(|| format!("no port in etcd's URL {}", self.etcd_url))?;
        wait_for_etcd(&self.etcd, port).await?;
        self.apiserver.restart()?;
        wait_apiserver_ready(&self.apiserver, &self.config).await
    }

    /// The value of etcd's command-line flag `prefix` (such as `--name=`).
    fn etcd_flag(&self, prefix: &str) -> Result<String> {
        self.etcd
            .spec()
            .args
            .iter()
            .filter_map(|a| a.to_str())
            .find_map(|a| a.strip_prefix(prefix))
            .map(str::to_owned)
            .with_context(|| format!("etcd was started without {prefix}"))
    }
}

/// Waits until the restarted etcd listens on `port` (bounded; its log in the error).
async fn wait_for_etcd(etcd: &Process, port: u16) -> Result<()> {
    const TRIES: u32 = 1200;
    for _ in 0..TRIES {
        etcd.check_running()?;
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    bail!(
        "the restored etcd did not listen on 127.0.0.1:{port} within {} s:\n{}",
        TRIES / 10,
        etcd.log_tail(40)
    )
}

/// Runs `program` with `args`; its output is in the error when it fails.
async fn run_tool(program: &Path, args: &[OsString]) -> Result<()> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    if !output.status.success() {
        bail!(
            "{} {:?} failed ({}): {}{}",
            program.display(),
            args,
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
