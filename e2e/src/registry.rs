//! An OCI registry on the test node's bridge, so that the kubelet pulls kubeflake's images
//! the way it does in a user's cluster (docs/install.md, "Into a registry").
//!
//! The registry is `crane registry serve` (go-containerregistry, built from its Go module
//! by `e2e/registry/crane.sh`), blobs on disk under the node's [`ROOT`], bound to the
//! bridge address only, on a fixed port. (The module's `cmd/registry` has no address flag
//! and binds localhost; crane's `--address` binds the bridge, like the node's other
//! servers.) It is a child of the test binary (it
//! dies with it), and `e2e/node/node.sh` counts it among the node's processes, so
//! `node.sh leftovers` names it and a teardown (`e2e/cluster down` too) kills it and
//! removes its blobs with [`ROOT`].
//!
//! containerd reaches it over plain HTTP through its registry hosts directory
//! (`config_path` in the node's containerd.toml, written by [`crate::node`]): the only
//! registry it may pull from; any other name fails to resolve (the node has no route out).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub use crate::addresses::{REGISTRY_PORT, registry_host};
use crate::bin_dir::{repo_file, script_output_dir};
use crate::node::{CONTAINERD_SOCKET, ROOT};
use crate::process::{Process, ProcessSpec, args};

/// How long the registry may take to listen.
const LIMIT: Duration = Duration::from_secs(60);

/// The path of crane, built once (`e2e/registry/crane.sh`).
pub fn crane() -> Result<PathBuf> {
    script_output_dir(&repo_file("e2e/registry/crane.sh"))
}

/// A running registry; stopped when dropped.
#[derive(Debug)]
pub struct Registry {
    crane: PathBuf,
    process: Process,
}

impl Registry {
    /// Starts the registry (blobs in `<ROOT>/registry`, emptied first) and waits until
    /// it accepts connections; its log goes to `log_dir/registry.log`.
    pub fn start(log_dir: &Path) -> Result<Registry> {
        let crane = crane()?;
        let disk = Path::new(ROOT).join("registry");
        if disk.exists() {
            std::fs::remove_dir_all(&disk)
                .with_context(|| format!("cannot empty {}", disk.display()))?;
        }
        std::fs::create_dir_all(&disk)?;
        let address = registry_host();
        let process = Process::start(ProcessSpec {
            name: "registry".into(),
            program: crane.clone(),
            args: args(&[
                "registry",
                "serve",
                "--address",
                &address,
                "--disk",
                &disk.to_string_lossy(),
            ]),
            log: log_dir.join("registry.log"),
        })?;
        let socket: SocketAddr = address.parse()?;
        let deadline = Instant::now() + LIMIT;
        while TcpStream::connect_timeout(&socket, Duration::from_secs(1)).is_err() {
            process.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "the registry did not listen on {address} within {LIMIT:?}:\n{}",
                    process.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Registry { crane, process })
    }

    /// Pushes the OCI archive `archive` (one image, as scripts/release.sh writes it) as
    /// `<registry>/<repository>:<tag>` with `crane push`, which keeps the manifest's bytes:
    /// returns the digest the registry answered (`sha256:...`).
    pub fn push_archive(
        &self,
        archive: &Path,
        work: &Path,
        repository: &str,
        tag: &str,
    ) -> Result<String> {
        let layout = work.join(format!("layout-{}", repository.replace('/', "-")));
        std::fs::create_dir_all(&layout)?;
        run(Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(&layout))?;
        let reference = format!("{}/{repository}:{tag}", registry_host());
        let out = run(Command::new(&self.crane)
            .args(["push", "--insecure"])
            .arg(&layout)
            .arg(&reference))?;
        // crane prints `<repository>@sha256:...`.
        out.trim()
            .rsplit_once('@')
            .map(|(_, digest)| digest.to_owned())
            .with_context(|| format!("crane push {reference} printed no digest: {out}"))
    }

    /// The manifest the registry serves for `<registry>/<repository>@<digest>`, as
    /// `crane manifest` prints it (its bytes: their SHA-256 is the digest).
    pub fn manifest(&self, repository: &str, digest: &str) -> Result<Vec<u8>> {
        let reference = format!("{}/{repository}@{digest}", registry_host());
        let output = Command::new(&self.crane)
            .args(["manifest", "--insecure", &reference])
            .stdin(Stdio::null())
            .output()
            .context("cannot run crane manifest")?;
        if !output.status.success() {
            bail!(
                "crane manifest {reference} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(output.stdout)
    }

    /// Pushes a copy of `<registry>/<repository>@<digest>` with one more layer (a file
    /// `/tampered`) as `<registry>/<repository>:<tag>`, as someone with push rights could:
    /// returns its digest, which no release signature covers.
    pub fn push_tampered(
        &self,
        repository: &str,
        digest: &str,
        work: &Path,
        tag: &str,
    ) -> Result<String> {
        let dir = work.join("tampered-layer");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("tampered"), "not from the release\n")?;
        let layer = work.join("tampered-layer.tar");
        run(Command::new("tar")
            .arg("-cf")
            .arg(&layer)
            .arg("-C")
            .arg(&dir)
            .arg("tampered"))?;
        let host = registry_host();
        let base = format!("{host}/{repository}@{digest}");
        let target = format!("{host}/{repository}:{tag}");
        let out = run(Command::new(&self.crane)
            .args(["append", "--insecure", "-b", &base, "-t", &target, "-f"])
            .arg(&layer))?;
        // crane prints `<repository>@sha256:...`.
        out.trim()
            .rsplit_once('@')
            .map(|(_, digest)| digest.to_owned())
            .with_context(|| format!("crane append {target} printed no digest: {out}"))
    }

    /// The registry's process (for its log).
    pub fn process(&self) -> &Process {
        &self.process
    }
}

/// Removes every image of the node's containerd whose name starts with `prefix`, so that
/// the kubelet must pull them. Returns the names removed.
pub fn remove_node_images(prefix: &str) -> Result<Vec<String>> {
    let listed = run(ctr().args(["images", "ls", "-q"]))?;
    let names: Vec<String> = listed
        .lines()
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    if !names.is_empty() {
        run(ctr().args(["images", "rm"]).args(&names))?;
    }
    Ok(names)
}

fn ctr() -> Command {
    let mut command = Command::new("ctr");
    command.args(["--address", CONTAINERD_SOCKET, "--namespace", "k8s.io"]);
    command
}

/// Runs `command` to its end and returns its stdout, or fails with its stderr.
pub(crate) fn run(command: &mut Command) -> Result<String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
