//! Earlier releases of kubeflake, for the upgrade tests: which one is the previous release
//! (`releases.txt`), its images built from its commit (`e2e/images/build.sh --ref`), and
//! its own tree (the chart and CRDs it shipped).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::bin_dir::{repo_file, script_output_dir_with_args};

/// One release: its version, the commit it was cut at, its tree and its image archives.
#[derive(Debug, Clone)]
pub struct Release {
    pub version: String,
    pub commit: String,
    /// The release's tree (`git archive` of its commit): its chart, CRDs and docs.
    pub tree: PathBuf,
    /// Its operator, sidecar and example-app image archives.
    pub images: PathBuf,
}

impl Release {
    /// The newest release in `releases.txt`, its images built (or found in the cache).
    pub fn previous() -> Result<Release> {
        let (version, commit) = previous_point()?;
        let images = script_output_dir_with_args(
            &repo_file("e2e/images/build.sh"),
            &["--ref", &commit, "--tag", &version],
        )?;
        // The script's layout: <cache>/releases/<commit>/{src, images/<version>}.
        let tree = images
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join("src"))
            .context("the release's image directory has no parent")?;
        if !tree.join("charts/kubeflake/Chart.yaml").is_file() {
            bail!("{} holds no chart of release {version}", tree.display());
        }
        Ok(Release {
            version,
            commit,
            tree,
            images,
        })
    }

    /// The release's chart.
    pub fn chart(&self) -> PathBuf {
        self.tree.join("charts/kubeflake")
    }

    /// The image `localhost/kubeflake/<name>:<version>` (operator, sidecar, example-app).
    pub fn image(&self, name: &str) -> String {
        format!("localhost/kubeflake/{name}:{}", self.version)
    }

    /// Loads the release's images into the test node's containerd.
    pub fn load_into_node(&self) -> Result<()> {
        for name in ["operator", "sidecar", "example-app"] {
            crate::node::load_image(&self.images.join(format!("{name}.tar")))?;
        }
        Ok(())
    }
}

/// The newest `<version>` and `<commit>` of `releases.txt`, without building anything.
pub fn previous_point() -> Result<(String, String)> {
    let path = repo_file("releases.txt");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    newest(&text).with_context(|| format!("{} lists no release", path.display()))
}

/// The last `<version> <commit>` line of a releases file (comments and blanks skipped).
fn newest(text: &str) -> Option<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
        })
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_release_is_the_last_listed_one() {
        let text = "# header\n0.1.0 aaa\n\n# why\n0.2.0 bbb\n";
        assert_eq!(newest(text), Some(("0.2.0".into(), "bbb".into())));
        assert_eq!(newest("# nothing\n"), None);
    }

    #[test]
    fn releases_txt_names_a_release_older_than_the_working_tree() {
        let (version, commit) = previous_point().unwrap();
        assert_ne!(
            version,
            env!("CARGO_PKG_VERSION"),
            "the working tree is the next release"
        );
        assert_eq!(commit.len(), 40, "a full commit hash: {commit}");
    }

    /// `build.sh` with bad arguments: a clear message, and no build.
    fn build_sh(args: &[&str]) -> std::process::Output {
        std::process::Command::new("bash")
            .arg(repo_file("e2e/images/build.sh"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    #[test]
    fn build_sh_refuses_an_unknown_argument_with_its_usage() {
        let out = build_sh(&["--reff", "v0.1.0"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("unknown argument --reff") && err.contains("usage"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "printed an output dir");
    }

    #[test]
    fn build_sh_refuses_a_commit_missing_from_this_clone_naming_releases_txt() {
        let out = build_sh(&[
            "--ref",
            "0000000000000000000000000000000000000000",
            "--tag",
            "9.9.9",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("no commit 0000") && err.contains("releases.txt"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "printed an output dir");
    }
}
