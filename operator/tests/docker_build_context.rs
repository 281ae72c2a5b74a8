//! The Dockerfile's build stage must see the whole Cargo workspace: `cargo build --locked`
//! loads every member listed in the root `Cargo.toml`, even when it builds only two of
//! them. No container runtime is available here, so the test assembles the build context
//! the way `docker build` would (the build stage's `COPY` lines, minus what
//! `.dockerignore` excludes) in a temporary directory and asks cargo to load the
//! workspace there.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the operator crate lives in the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The `[workspace] members` of the root manifest.
fn workspace_members(manifest: &str) -> Vec<String> {
    let start = manifest
        .find("members")
        .expect("the root Cargo.toml lists workspace members");
    let list = &manifest[start..];
    let open = list.find('[').expect("members = [");
    let close = list.find(']').expect("members = [...]");
    list[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// One `COPY <src>... <dest>` of the build stage (sources relative to the context).
#[derive(Debug)]
struct Copy {
    sources: Vec<String>,
    dest: String,
}

/// The `COPY` lines of the stage named `stage` (those taking files from the build
/// context, not `--from` another stage).
fn build_stage_copies(dockerfile: &str, stage: &str) -> Vec<Copy> {
    let mut in_stage = false;
    let mut copies = Vec::new();
    for line in dockerfile.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().map(|w| w.to_ascii_uppercase()).as_deref() {
            Some("FROM") => {
                in_stage = words.len() >= 4
                    && words[words.len() - 2].eq_ignore_ascii_case("AS")
                    && words[words.len() - 1] == stage;
            }
            Some("COPY") if in_stage => {
                let args: Vec<&str> = words[1..]
                    .iter()
                    .copied()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                if words[1..].iter().any(|w| w.starts_with("--from")) || args.len() < 2 {
                    continue;
                }
                let (dest, sources) = args.split_last().expect("two or more words");
                copies.push(Copy {
                    sources: sources.iter().map(|s| s.to_string()).collect(),
                    dest: dest.to_string(),
                });
            }
            _ => {}
        }
    }
    copies
}

/// `.dockerignore` as Docker reads it: one pattern a line, `#` comments, `!` re-includes,
/// the last matching pattern wins, and a path is excluded with its parent directory.
struct Ignore(Vec<(bool, Vec<String>)>);

impl Ignore {
    fn parse(text: &str) -> Ignore {
        Ignore(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| {
                    let (include, pattern) = match l.strip_prefix('!') {
                        Some(p) => (true, p.trim()),
                        None => (false, l),
                    };
                    let segments = pattern
                        .trim_start_matches('/')
                        .trim_end_matches('/')
                        .split('/')
                        .filter(|s| !s.is_empty() && *s != ".")
                        .map(str::to_string)
                        .collect();
                    (include, segments)
                })
                .collect(),
        )
    }

    /// Whether `path` (relative to the context, `/`-separated) is left out of the context.
    fn excludes(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.split('/').collect();
        // A path is excluded if it, or a directory above it, matches.
        (1..=segments.len()).any(|n| self.excludes_exactly(&segments[..n]))
    }

    fn excludes_exactly(&self, path: &[&str]) -> bool {
        let mut excluded = false;
        for (include, pattern) in &self.0 {
            if matches_path(pattern, path) {
                excluded = !include;
            }
        }
        excluded
    }
}

/// Path match with `**` spanning any number of segments.
fn matches_path(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| matches_path(rest, &path[skip..]))
        }
        Some((first, rest)) => path.split_first().is_some_and(|(p, path_rest)| {
            matches_segment(first, p) && matches_path(rest, path_rest)
        }),
    }
}

/// One segment with `*` (any run of characters) and `?` (one character).
fn matches_segment(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    fn go(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some(('?', rest)) => !n.is_empty() && go(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && go(rest, &n[1..]),
        }
    }
    go(&p, &n)
}

/// Copies `rel` (a file or directory of the context) to `to`, leaving out what `ignore`
/// excludes, as the Docker client does when it sends the context.
fn copy_context_path(root: &Path, rel: &str, to: &Path, ignore: &Ignore) {
    if ignore.excludes(rel) {
        return;
    }
    let from = root.join(rel);
    let meta = std::fs::symlink_metadata(&from)
        .unwrap_or_else(|e| panic!("COPY {rel}: not in the build context: {e}"));
    if meta.is_dir() {
        std::fs::create_dir_all(to).expect("create a directory in the temporary context");
        let mut entries: Vec<_> = std::fs::read_dir(&from)
            .expect("read a context directory")
            .map(|e| e.expect("a directory entry").file_name())
            .collect();
        entries.sort();
        for name in entries {
            let name = name.to_string_lossy().into_owned();
            copy_context_path(root, &format!("{rel}/{name}"), &to.join(&name), ignore);
        }
    } else if meta.is_file() {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).expect("create a directory in the temporary context");
        }
        std::fs::copy(&from, to).expect("copy a context file");
    }
}

/// The build stage's `/src` as `docker build` would fill it, in a temporary directory.
fn assemble_build_stage(root: &Path) -> (tempfile::TempDir, Vec<Copy>) {
    let ignore = Ignore::parse(&read(&root.join(".dockerignore")));
    let copies = build_stage_copies(&read(&root.join("Dockerfile")), "build");
    assert!(
        !copies.is_empty(),
        "the Dockerfile has a stage `AS build` with COPY lines"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    for copy in &copies {
        let into_dir = copy.dest.ends_with('/') || copy.dest == "." || copy.sources.len() > 1;
        for source in &copy.sources {
            let source = source.trim_start_matches("./").trim_end_matches('/');
            let dest = dir.path().join(copy.dest.trim_start_matches("./"));
            let target = if into_dir {
                let base = Path::new(source).file_name().expect("a source name");
                dest.join(base)
            } else {
                dest
            };
            copy_context_path(root, source, &target, &ignore);
        }
    }
    (dir, copies)
}

#[test]
fn the_build_stage_receives_every_workspace_member_and_cargo_loads_the_workspace() {
    let root = repo_root();
    let (dir, copies) = assemble_build_stage(&root);
    let members = workspace_members(&read(&root.join("Cargo.toml")));
    assert!(members.len() >= 2, "members: {members:?}");
    let missing: Vec<&String> = members
        .iter()
        .filter(|m| !dir.path().join(m).join("Cargo.toml").is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "workspace members missing from the Dockerfile's build stage (add a COPY line, and \
         make sure .dockerignore does not exclude them): {missing:?}\nCOPY lines: {copies:?}"
    );
    assert!(
        dir.path().join("Cargo.lock").is_file(),
        "`cargo build --locked` needs Cargo.lock in the build stage"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--locked",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .current_dir(dir.path())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo cannot load the workspace as the Dockerfile's build stage sees it:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dockerignore_matching_follows_docker_rules() {
    let ignore = Ignore::parse("# comment\ntarget\n**/target\ndocs\n*.md\n!README.md\n");
    assert!(ignore.excludes("target"));
    assert!(ignore.excludes("operator/target/debug/x"));
    assert!(ignore.excludes("docs/install.md"));
    assert!(ignore.excludes("notes.md"));
    assert!(
        !ignore.excludes("README.md"),
        "a later ! pattern re-includes"
    );
    assert!(!ignore.excludes("operator/src/lib.rs"));
    assert!(
        !ignore.excludes("operator/notes.md"),
        "*.md is anchored at the root"
    );
}

#[test]
fn copy_lines_of_other_stages_and_from_other_stages_are_not_the_build_context() {
    let dockerfile = "FROM rust AS build\nCOPY Cargo.toml Cargo.lock ./\nCOPY --link crds crds\n\
                      FROM scratch AS runtime\nCOPY --from=build /out/x /x\nCOPY extra extra\n";
    let copies = build_stage_copies(dockerfile, "build");
    let sources: Vec<_> = copies.iter().flat_map(|c| c.sources.clone()).collect();
    assert_eq!(sources, ["Cargo.toml", "Cargo.lock", "crds"]);
}
