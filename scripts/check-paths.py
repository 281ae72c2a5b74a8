#!/usr/bin/env python3
"""Checks that every repository path the maps name exists (docs/checks.md).

The README, docs/, the crates' manifests and module docs point newcomers at files ("to change
X, look in Y"). Files move; a map that still names the old place misleads. This check reads
  - every Markdown file (README.md, CHANGELOG.md, docs/, bench/, charts/, e2e/, ...),
  - every Cargo.toml (its comments), and
  - the doc comments (`//!`, `///`) and plain comments (`//`) of every Rust source file,
and finds the paths they name: a word that starts with one of the repository's top-level
folders (`operator/src/run.rs`, `docs/safety.md`), or, in a crate's own files, a path with a
file extension relative to the crate (`src/fake_api.rs`, `controller/fake_api.rs`), to its
`src/`, or to the file's own folder. Each must exist. A path with a placeholder or a
wildcard (`<name>`, `*`, `{a,b}`, `...`) is not checked, nor one under `target/`.

Exits 1 listing `file:line: path` for each path that does not exist. Python 3.11 standard
library only. `--self-test` runs the checker's own tests (the normal run starts with them).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

SKIP_DIRS = {"target", ".git", "node_modules", "corpus"}
# Paths a file names that are made at run time, not kept in the repository.
# (Not `.go`: the Go paths the docs name are Kubernetes' own.)
EXTENSIONS = (
    "rs", "md", "toml", "yaml", "yml", "sh", "py", "json", "tsv", "txt", "tpl", "lock",
    "png", "csv",
)
WORD = re.compile(r"[A-Za-z0-9_.\-/<>*{}$]+")
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.|XXX")


def top_dirs(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and p.name not in SKIP_DIRS} | {".ci"}


def crate_dir(root: Path, file: Path) -> Path | None:
    """The closest folder above `file` (inside `root`) holding a Cargo.toml."""
    for parent in file.parents:
        if parent == root.parent:
            return None
        if (parent / "Cargo.toml").is_file() and parent != root:
            return parent
        if parent == root:
            return None
    return None


def comment_lines(file: Path) -> list[tuple[int, str]]:
    """The lines of `file` a map may live in: all of a Markdown file, comments elsewhere."""
    text = file.read_text(encoding="utf-8", errors="replace").splitlines()
    if file.suffix == ".md":
        return list(enumerate(text, 1))
    out = []
    for n, line in enumerate(text, 1):
        stripped = line.lstrip()
        if file.suffix == ".rs" and stripped.startswith("//"):
            out.append((n, stripped))
        elif file.suffix == ".toml" and "#" in line:
            out.append((n, line[line.index("#"):]))
    return out


def candidates(word: str, tops: set[str]) -> tuple[str, bool] | None:
    """(path, rooted) when `word` names a path: rooted when it starts at a top-level folder
    (any path with a folder and a known extension counts too)."""
    word = word.strip(".-/")
    # A trailing "s" of "files/foo.rs's" or a sentence's full stop was stripped above.
    if not word or PLACEHOLDER.search(word) or "//" in word:
        return None
    first = word.split("/", 1)[0]
    if "/" in word and first in tops:
        return word, True
    ext = word.rsplit(".", 1)[-1] if "." in word.rsplit("/", 1)[-1] else ""
    if "/" in word and ext in EXTENSIONS:
        return word, False
    return None


def static_bases(root: Path, file: Path) -> list[Path]:
    """Where a path named in `file` may start: the repository, the file's folder (a
    rooted-looking "sidecar/response.rs" in a module whose child folder is sidecar/), its
    crate and the crate's src/, and the chart."""
    bases = [root, file.parent, *sorted(root.glob("charts/*/"))]
    crate = crate_dir(root, file)
    if crate is not None:
        bases += [crate, crate / "src"]
    return bases


def exists(path: str, bases: list[Path]) -> bool:
    """Whether `path` exists under one of `bases`."""
    if path.startswith("target/") or "/target/" in path:
        return True
    for base in bases:
        full = base / path
        if full.exists():
            return True
        # `foo/bar` may name the module `foo/bar.rs` or `foo/bar/mod.rs`.
        if (base / (path + ".rs")).exists() or (base / path / "mod.rs").exists():
            return True
    return False


def files(root: Path):
    for p in sorted(root.rglob("*")):
        if any(part in SKIP_DIRS for part in p.relative_to(root).parts):
            continue
        if p.is_file() and (p.suffix in (".md", ".rs") or p.name == "Cargo.toml"):
            yield p


def check(root: Path) -> list[str]:
    tops = top_dirs(root)
    missing = []
    for file in files(root):
        named = []
        for n, line in comment_lines(file):
            # A URL's path is someone else's.
            line = re.sub(r"[a-z]+://\S+", " ", line)
            for m in WORD.finditer(line):
                found = candidates(m.group(0), tops)
                if found is not None:
                    named.append((n, *found))
        # "operator/src/controller/apply.rs, controller/silence.rs": a relative path may be
        # short for one under a folder the same file names (in full, or relative itself).
        bases = static_bases(root, file)
        context: list[Path] = []
        for _ in range(3):
            found = {
                parent
                for _, path, _ in named
                for base in [*bases, *context]
                if (base / path).exists()
                for parent in (base / path).parents
                if parent != root and root in parent.parents
            }
            if found <= set(context):
                break
            context = sorted(found | set(context))
        for n, path, rooted in named:
            if not exists(path, [*bases, *context]):
                missing.append(f"{file.relative_to(root)}:{n}: {path}")
    return missing


def self_test() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "operator/src/controller").mkdir(parents=True)
        (root / "operator/Cargo.toml").write_text(
            "[package]\n# the fake: src/fake_api.rs, and controller/gone.rs\n"
        )
        (root / "operator/src/fake_api.rs").write_text("")
        (root / "operator/src/controller/mod.rs").write_text(
            "//! see operator/src/fake_api.rs and operator/src/backoff.rs\n"
            "//! a placeholder operator/src/<name>.rs is not checked\n"
            "let s = \"operator/src/not_a_comment.rs\";\n"
        )
        (root / "docs").mkdir()
        (root / "docs/a.md").write_text(
            "Look in `operator/src/controller` and [x](../operator/src/fake_api.rs),\n"
            "not docs/missing.md. A URL https://example.org/operator/src/x.rs is fine.\n"
        )
        got = check(root)
        want = [
            "docs/a.md:2: docs/missing.md",
            "operator/Cargo.toml:2: controller/gone.rs",
            "operator/src/controller/mod.rs:1: operator/src/backoff.rs",
        ]
        assert got == want, f"self-test: got {got}, want {want}"


def main() -> int:
    self_test()
    if sys.argv[1:] == ["--self-test"]:
        print("check-paths: self-test passed")
        return 0
    root = Path(__file__).resolve().parent.parent
    missing = check(root)
    if missing:
        print("check-paths: these files name repository paths that do not exist:", file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        print("Point them at where the file is now (git log --follow helps), or drop the mention.",
              file=sys.stderr)
        return 1
    print("check-paths: every path named in the docs, manifests and module docs exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
