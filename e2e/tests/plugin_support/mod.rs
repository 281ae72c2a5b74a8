//! Running the built `kubectl-kubeflake` against a test control plane, for the plugin's
//! e2e tests (`plugin_hub`, `plugin_hub_segment`): its exit code and output, or its JSON.
#![allow(dead_code)]

use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kubeflake_e2e::Cluster;
use serde_json::Value;

use crate::operator_support::workspace_binary;

/// How long one run of the plugin may take.
const RUN_LIMIT: Duration = Duration::from_secs(60);

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `kubectl-kubeflake <args>` with the cluster's admin kubeconfig.
pub async fn plugin(cluster: &Cluster, args: &[&str]) -> Result<Run> {
    let mut command = tokio::process::Command::new(workspace_binary("kubectl-kubeflake"));
    command
        .args(args)
        .env("KUBECONFIG", cluster.kubeconfig())
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let Output {
        status,
        stdout,
        stderr,
    } = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .context("the plugin did not finish in time")??;
    Ok(Run {
        code: status.code().context("killed by a signal")?,
        stdout: String::from_utf8(stdout)?,
        stderr: String::from_utf8(stderr)?,
    })
}

/// `kubectl-kubeflake <args> -o json`, which must exit 0: its output parsed.
pub async fn plugin_json(cluster: &Cluster, args: &[&str]) -> Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let r = plugin(cluster, &all).await?;
    ensure!(r.code == 0, "{args:?}: exit {}: {}", r.code, r.stderr);
    serde_json::from_str(&r.stdout).with_context(|| format!("{args:?}: {}", r.stdout))
}
