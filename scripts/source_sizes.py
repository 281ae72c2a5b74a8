"""The file-size rule of scripts/check-modules.py (docs/checks.md): no source file over
MAX_LINES lines, in any language, test files excepted; and a Rust file over NOTE_LINES
lines says why it is one piece, in a module-doc line starting NOTE.

A source file is
  - a file whose name ends in one of SOURCE_EXTENSIONS (Rust, Python, Go, Java,
    TypeScript, JavaScript, shell), anywhere in the repository, or
  - a file with no extension that starts with `#!` (a script), under SCRIPT_DIRS.
Folders in SKIP_DIRS (build output, installed packages) and hidden folders other than
.ci/ are not read.

A test file (`is_test`) is one
  - inside a folder named `tests`, `test` or `__tests__` (a crate's tests/, e2e/tests/,
    Maven's src/test/, a client's test/), or
  - whose name says so: `tests.rs`, `*_tests.rs`, `*_test.go`, `test_*.py`, `*_test.py`,
    `conftest.py`, `*.test.js`, `*.test.ts`, `*.spec.js`, `*.spec.ts`.

PENDING names files known to be over the limit and not yet split: each is printed as a
note rather than a failure, and an entry fails once its file is back under the limit (or
gone), so the list only shrinks. Python 3.11 standard library only.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

MAX_LINES = 600
NOTE_LINES = 400
NOTE = "//! One piece ("
SKIP_DIRS = {"target", ".git", "node_modules", "__pycache__"}
SOURCE_EXTENSIONS = (".rs", ".py", ".go", ".java", ".ts", ".js", ".mjs", ".cjs", ".sh")
SCRIPT_DIRS = ("bench", "scripts", "e2e", ".ci")
TEST_DIRS = {"tests", "test", "__tests__"}
TEST_NAME = re.compile(
    r"^(tests\.rs|.*_tests\.rs|.*_test\.go|test_.*\.py|.*_test\.py|conftest\.py"
    r"|.*\.(test|spec)\.[cm]?[jt]s)$"
)
# Over the limit, not yet split: path -> why it is listed.
PENDING: dict[str, str] = {}


def is_test(path: Path) -> bool:
    """Whether a path (relative to the repository) is a test file, as the module doc says."""
    return bool(TEST_DIRS & set(path.parts[:-1])) or bool(TEST_NAME.match(path.name))


def is_script(file: Path) -> bool:
    try:
        with open(file, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def source_files(repo: Path) -> list[Path]:
    """Every source file (relative to repo), test files included, sorted."""
    found = []
    for here, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and (not d.startswith(".") or d == ".ci")]
        rel = Path(here).relative_to(repo)
        in_script_dir = bool(rel.parts) and rel.parts[0] in SCRIPT_DIRS
        for name in files:
            if name.endswith(SOURCE_EXTENSIONS) or (
                in_script_dir and "." not in name and is_script(Path(here) / name)
            ):
                found.append(rel / name)
    return sorted(found)


def long_files(repo: Path, pending: dict[str, str] = PENDING) -> tuple[list[str], list[str]]:
    """(problems, notes): non-test files over MAX_LINES, Rust files over NOTE_LINES whose
    module doc has no NOTE, stale `pending` entries; and the `pending` files still over."""
    problems, notes = [], []
    for name in source_files(repo):
        if is_test(name):
            continue
        text = (repo / name).read_text(encoding="utf-8", errors="replace")
        lines = text.count("\n")
        if lines > MAX_LINES:
            if name.as_posix() in pending:
                notes.append(f"{name}: {lines} lines, over {MAX_LINES}; pending: "
                             f"{pending[name.as_posix()]}")
            else:
                problems.append(f"{name}: {lines} lines, over the limit of {MAX_LINES} for a "
                                f"source file that is not a test file (split it)")
        elif name.suffix == ".rs" and lines > NOTE_LINES:
            doc = [l for l in text.splitlines() if l.startswith("//!")]
            if not any(l.startswith(NOTE) for l in doc):
                problems.append(
                    f"{name}: {lines} lines, over {NOTE_LINES}, and its module doc does not say "
                    f"why it is one piece (a line `{NOTE}...): why`)"
                )
    for path in sorted(pending):
        f = repo / path
        if not f.is_file() or f.read_text(encoding="utf-8", errors="replace").count("\n") <= MAX_LINES:
            problems.append(f"{path}: listed in PENDING (scripts/source_sizes.py) but not over "
                            f"{MAX_LINES} lines: remove the entry")
    return problems, notes


def self_test() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_self(Path(tmp))


def check_self(repo: Path) -> None:
    """The rule's own tests, in an empty folder `repo`."""
    over = "\n" * (MAX_LINES + 1)
    files = {
        # over the limit: counted in every language; a script only where scripts live
        "src/long.rs": over, "bench/long.py": over, "clients/go/client.go": over,
        "clients/java/src/main/java/A.java": over, "clients/node/src/a.js": over,
        "clients/node/src/a.d.ts": over, "scripts/long.sh": over,
        "bench/script": "#!/usr/bin/env python3\n" + over,
        "docs/notes.md": over, "charts/values.yaml": over, "bench/data": over,
        "examples/script": "#!/bin/sh\n" + over,
        # test files are not
        "tests/big.rs": over, "e2e/tests/big.rs": over, "src/tests.rs": over,
        "src/a_tests.rs": over, "clients/go/client_test.go": over,
        "clients/java/src/test/java/ATest.java": over, "clients/python/tests/helper.py": over,
        "bench/test_x.py": over, "bench/x_test.py": over, "clients/node/test/sidecar.js": over,
        "clients/node/src/a.test.ts": over, "clients/node/src/a.spec.js": over,
        # a Rust file over NOTE_LINES needs the note; other languages do not
        "src/noted.rs": NOTE + "over 400 lines): why.\n" + "\n" * NOTE_LINES,
        "src/unnoted.rs": "//! A module.\n" + "\n" * NOTE_LINES,
        "bench/unnoted.py": "\n" * (NOTE_LINES + 1),
        # not read: build output, packages, hidden folders
        "target/debug/x.rs": over, "clients/node/node_modules/x.js": over, ".venv/x.py": over,
        ".ci/run": "#!/bin/bash\n" + over,
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    pending = {"bench/pending": "to be split"}
    problems, notes = long_files(repo, pending)
    too_long = sorted(p.split(":")[0] for p in problems if "over the limit" in p)
    assert too_long == [".ci/run", "bench/long.py", "bench/script", "clients/go/client.go",
                        "clients/java/src/main/java/A.java", "clients/node/src/a.d.ts",
                        "clients/node/src/a.js", "scripts/long.sh", "src/long.rs"], too_long
    assert f"src/long.rs: {MAX_LINES + 1} lines, over the limit of {MAX_LINES}" in "\n".join(problems)
    unnoted = [p for p in problems if "one piece" in p]
    assert len(unnoted) == 1 and unnoted[0].startswith("src/unnoted.rs: 401 lines, over 400"), unnoted
    stale = [p for p in problems if "PENDING" in p]
    assert [p.split(":")[0] for p in stale] == ["bench/pending"], stale
    assert notes == []
    # a pending file over the limit is a note, not a problem
    (repo / "bench/pending").write_text("#!/bin/sh\n" + over)
    problems, notes = long_files(repo, pending)
    assert not any(p.startswith("bench/pending") for p in problems), problems
    assert notes == [f"bench/pending: {MAX_LINES + 2} lines, over {MAX_LINES}; pending: to be split"], notes
    # at the limit is within it
    (repo / "bench/long.py").write_text("\n" * MAX_LINES)
    assert not any(p.startswith("bench/long.py") for p in long_files(repo, pending)[0])
