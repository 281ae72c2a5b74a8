//! cosign, as a user runs it on kubeflake's release (docs/install.md, "Verifying a
//! release"): a key pair for the release, the image signatures the release ships attached
//! to the images in the node's registry ([`crate::registry`]), and `cosign verify` against
//! that registry, which must pass for the release's images and refuse any other.
//!
//! cosign is built once from its Go module (`e2e/registry/cosign.sh`). Signatures are made
//! with a key pair, offline: nothing is uploaded to a transparency log, so every command
//! here passes `--tlog-upload=false` or `--insecure-ignore-tlog=true`, and the registry is
//! plain HTTP (`--allow-http-registry`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::bin_dir::{repo_file, script_output_dir};

/// The password of every throw-away key these tests make (cosign reads `COSIGN_PASSWORD`).
pub const PASSWORD: &str = "throwaway";

/// A cosign key pair in a directory: `cosign.key` (encrypted with [`PASSWORD`]) and
/// `cosign.pub`.
#[derive(Debug, Clone)]
pub struct KeyPair {
    pub private: PathBuf,
    pub public: PathBuf,
}

/// What `cosign verify` said of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0: a signature by the key covers the image's digest.
    Verified,
    /// A non-zero exit, with cosign's message (stderr).
    Refused(String),
}

/// Where cosign's verify commands would fetch Sigstore's trust root from: a port on
/// loopback where nothing listens (scripts/lib/release-tools.sh, `cosign_offline`). A
/// key-pair signature needs no trust root; this keeps cosign from reaching out for one.
const TUF_MIRROR: &str = "http://127.0.0.1:9";

/// The cosign binary.
#[derive(Debug, Clone)]
pub struct Cosign {
    path: PathBuf,
    /// An empty TUF cache (with [`TUF_MIRROR`]: no trust root, fetched from nowhere).
    tuf_root: PathBuf,
}

impl Cosign {
    /// Builds cosign once (or finds it in the cache).
    pub fn build() -> Result<Cosign> {
        let tuf_root = std::env::temp_dir().join("kubeflake-cosign-tuf-empty");
        std::fs::create_dir_all(&tuf_root)?;
        Ok(Cosign {
            path: script_output_dir(&repo_file("e2e/registry/cosign.sh"))?,
            tuf_root,
        })
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes a key pair in `dir` (created if missing; an earlier pair there is replaced).
    pub fn key_pair(&self, dir: &Path) -> Result<KeyPair> {
        std::fs::create_dir_all(dir)?;
        for name in ["cosign.key", "cosign.pub"] {
            let path = dir.join(name);
            if path.exists() {
                std::fs::remove_file(&path)?;
            }
        }
        crate::registry::run(self.command().arg("generate-key-pair").current_dir(dir))?;
        Ok(KeyPair {
            private: dir.join("cosign.key"),
            public: dir.join("cosign.pub"),
        })
    }

    /// Attaches a signature the release made offline (`payload`, and `signature`: the
    /// base64 of `cosign sign-blob` over it) to `reference` in its registry.
    pub fn attach(&self, payload: &Path, signature: &Path, reference: &str) -> Result<()> {
        crate::registry::run(
            self.command()
                .args([
                    "attach",
                    "signature",
                    "--allow-http-registry=true",
                    "--payload",
                ])
                .arg(payload)
                .arg("--signature")
                .arg(signature)
                .arg(reference),
        )
        .map(drop)
    }

    /// Signs `reference` in its registry with `key` (as someone holding another key would).
    pub fn sign(&self, key: &KeyPair, reference: &str) -> Result<()> {
        crate::registry::run(
            self.command()
                .args([
                    "sign",
                    "--yes",
                    "--tlog-upload=false",
                    "--allow-http-registry=true",
                    "--key",
                ])
                .arg(&key.private)
                .arg(reference),
        )
        .map(drop)
    }

    /// `cosign verify` of `reference` with the public key `public`, as docs/install.md
    /// tells a user to run it before `helm install`.
    pub fn verify(&self, public: &Path, reference: &str) -> Result<Verdict> {
        let output = self
            .command()
            .args([
                "verify",
                "--insecure-ignore-tlog=true",
                "--allow-http-registry=true",
                "--key",
            ])
            .arg(public)
            .arg(reference)
            .output()
            .context("cannot run cosign verify")?;
        Ok(if output.status.success() {
            Verdict::Verified
        } else {
            Verdict::Refused(String::from_utf8_lossy(&output.stderr).into_owned())
        })
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.path);
        command
            .env("COSIGN_PASSWORD", PASSWORD)
            .env("TUF_ROOT", &self.tuf_root)
            .env("TUF_MIRROR", TUF_MIRROR)
            .stdin(Stdio::null());
        command
    }
}
