//! Finding the control-plane binaries (etcd, kube-apiserver, ...).
//!
//! They are built from Go modules by `e2e/controlplane/build.sh`, which caches them per
//! version set and prints the directory as its last stdout line. Running the script is a
//! no-op when the cache is warm, so the harness simply runs it every time (once per test
//! binary). `KUBEFLAKE_BIN_DIR` skips the script, for example when CI built them earlier,
//! or to run a suite on the oldest Kubernetes the docs claim:
//! `KUBEFLAKE_BIN_DIR=$(e2e/controlplane/build.sh oldest | tail -n 1)`. That set has the
//! control plane only ([`CONTROL_PLANE`]); the node and helm come with the newest (set
//! `KUBEFLAKE_HELM` to the newest set's helm for a suite that renders the chart).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

/// Overrides the bin directory instead of running `build.sh`.
pub const BIN_DIR_ENV: &str = "KUBEFLAKE_BIN_DIR";

/// What every control plane needs: every pin set has these.
pub const CONTROL_PLANE: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
];

/// The real node's binaries ([`crate::node`]): the newest pin set only.
pub const NODE: [&str; 3] = ["kube-scheduler", "kubelet", "kube-proxy"];

/// helm: the newest pin set only.
pub const HELM: &str = "helm";

/// Names the helm to use instead of the bin directory's (as for `scripts/release.sh`): a
/// suite that renders the chart runs on the oldest pin set with the newest set's helm.
pub const HELM_ENV: &str = "KUBEFLAKE_HELM";

/// The directory holding the control-plane binaries, built or located once per process.
///
/// Errors say what to do: a missing Go toolchain, a failed build, a bad override.
pub fn bin_dir() -> Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| locate().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// A file of this checkout, by its path from the repository root.
pub fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .join(path)
}

/// `e2e/controlplane/build.sh` in this checkout.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("controlplane")
        .join("build.sh")
}

fn locate() -> Result<PathBuf> {
    let dir = match std::env::var_os(BIN_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => run_build_script()?,
    };
    require(&dir, &CONTROL_PLANE)?;
    Ok(dir)
}

/// Fails unless `dir` has each of `names`, saying which pin set builds them.
pub fn require(dir: &Path, names: &[&str]) -> Result<()> {
    for name in names {
        if !dir.join(name).is_file() {
            bail!(
                "{} has no {name} (from {BIN_DIR_ENV} or build.sh): the control plane is in \
                 every pin set, the node and helm only in the newest (e2e/controlplane/build.sh \
                 without an argument)",
                dir.display()
            );
        }
    }
    Ok(())
}

fn run_build_script() -> Result<PathBuf> {
    script_output_dir(&build_script())
}

/// Runs a build script of this repository whose last stdout line is the directory it
/// built into (`e2e/controlplane/build.sh`, `e2e/images/build.sh`, `e2e/dns/build.sh`).
pub fn script_output_dir(script: &Path) -> Result<PathBuf> {
    script_output_dir_with_args(script, &[])
}

/// [`script_output_dir`] with arguments for the script.
pub fn script_output_dir_with_args(script: &Path, args: &[&str]) -> Result<PathBuf> {
    script_output_dir_with_env(script, args, &[])
}

/// [`script_output_dir_with_args`] with variables added to the script's environment.
pub fn script_output_dir_with_env(
    script: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<PathBuf> {
    // stderr is inherited so a cold build (tens of minutes) shows its progress.
    let output = Command::new("bash")
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}); see its output above. It needs Go (see e2e/README.md)",
            script.display(),
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    if last.is_empty() {
        bail!("{} printed no bin directory", script.display());
    }
    Ok(PathBuf::from(last.trim()))
}

/// helm: `KUBEFLAKE_HELM` if set (the oldest pin set has no helm of its own), else `dir`'s
/// (panics, saying so, if it has none).
pub fn helm_in(dir: &Path) -> PathBuf {
    if let Some(helm) = std::env::var_os(HELM_ENV) {
        return PathBuf::from(helm);
    }
    if let Err(e) = require(dir, &[HELM]) {
        panic!("{e:#}; or set {HELM_ENV}=/path/to/helm");
    }
    dir.join(HELM)
}
