#!/usr/bin/env python3
"""Checks the module graph of every crate in the workspace (docs/checks.md).

Fails, listing what it found, when
  - modules depend on each other in a circle (a cycle), in any crate, or
  - a source file in any language (Rust, Python, Go, Java, TypeScript, JavaScript, shell,
    scripts) has more than 600 lines and is not a test file, or a Rust file has more than
    400 and its module doc (`//!`) does not say why it is one piece, in a line starting
    `//! One piece (`: scripts/source_sizes.py, which defines a test file and holds the
    limits (for Rust, an inline `#[cfg(test)] mod tests { ... }` counts: move a big one to
    a sibling `tests.rs` declared with `#[cfg(test)] mod tests;`).

How the graph is read (as text, Python 3.11 standard library only):
  - Every file that is a crate root (`src/lib.rs`, `src/main.rs`, `src/bin/*`, `tests/*.rs`,
    `benches/*.rs`) starts a tree; `mod x;` (and `#[path = "..."] mod x;`) adds a file to
    it, `mod x { ... }` an inline module.
  - An arrow is a path into the crate: `crate::a::b`, `super::a`, `self::a`, or a child
    module's name (`x::f`), in a `use` (braces expanded) or anywhere in code. It points
    at the deepest module the path names. Comments and string literals are not read.
  - A module and the modules inside it are one unit: arrows between them are not
    counted (a `tests` module reads its parent with `use super::*`). Every other arrow is
    lifted to the two modules under their closest common parent, and a circle among
    those siblings is a cycle. So `a::x -> b` and `b -> a` is the cycle `a -> b -> a`.

`--self-test` runs only the checker's own tests, source_sizes.py's included (the normal
run starts with them too). One piece (over 400 lines): reading the module trees, resolving
paths in them and finding cycles all work on the one Crate/Module model below.
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import source_sizes

SKIP_DIRS = {"target", ".git", "node_modules"}


@dataclass
class Module:
    """One module: a file, or an inline `mod x { ... }` inside one."""

    path: tuple[str, ...]  # the module path inside its crate, () for the root
    file: Path
    children: dict[str, "Module"] = field(default_factory=dict)


@dataclass
class Crate:
    root: Path
    modules: dict[tuple[str, ...], Module] = field(default_factory=dict)
    # (from module path, to module path, file the arrow was read in)
    arrows: list[tuple[tuple[str, ...], tuple[str, ...], Path]] = field(default_factory=list)


# ---------------------------------------------------------------- reading Rust as text

def strip_comments_and_strings(text: str) -> str:
    """Blanks comments and string/char literals, keeping line breaks and braces in code."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and (m := re.compile(r"'(\\.[^']*|[^\\'])'").match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


USE_RE = re.compile(r"\buse\s+([^;]*);")
MOD_RE = re.compile(r'(#\[path\s*=\s*"([^"]*)"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])')
PATH_RE = re.compile(r"(?<![\w:])((?:crate|super|self|r#\w+|[A-Za-z_]\w*)(?:\s*::\s*(?:\w+))+)")


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`] (`as` renames dropped)."""
    tree = re.sub(r"\s+", " ", tree).strip()
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    if "{" not in tree:
        return [tree.replace(" ", "")]
    head, _, rest = tree.partition("{")
    inner = rest[: rest.rfind("}")]
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    head = head.replace(" ", "")
    result = []
    for part in parts:
        if part.strip():
            for tail in expand_use(part):
                result.append(head + tail if tail != "self" else head.rstrip(":"))
    return result


# ---------------------------------------------------------------- building the trees

def child_dir(file: Path, is_root_like: bool) -> Path:
    """Where `mod x;` declared in `file` looks for x.rs or x/mod.rs."""
    if is_root_like or file.name == "mod.rs":
        return file.parent
    return file.parent / file.stem


def load_crate(root: Path) -> Crate:
    crate = Crate(root=root)
    pending: list[tuple[Path, tuple[str, ...], bool]] = [(root, (), True)]
    texts: dict[tuple[str, ...], tuple[Path, str, bool]] = {}
    while pending:
        file, mpath, root_like = pending.pop()
        if not file.is_file() or mpath in crate.modules:
            continue
        code = strip_comments_and_strings(file.read_text(encoding="utf-8", errors="replace"))
        crate.modules[mpath] = Module(mpath, file)
        texts[mpath] = (file, code, root_like)
        # inline modules: track braces to know which `mod x {` encloses what
        stack: list[tuple[tuple[str, ...], int]] = []  # (module path, brace depth at open)
        depth = 0
        for m in re.finditer(r"[{}]|" + MOD_RE.pattern, code):
            tok = m.group(0)
            if tok == "{":
                depth += 1
                continue
            if tok == "}":
                depth -= 1
                while stack and stack[-1][1] > depth:
                    stack.pop()
                continue
            attr_path, name, end = m.group(2), m.group(3), m.group(4)
            here = stack[-1][0] if stack else mpath
            child = here + (name,)
            if end == "{":
                depth += 1
                stack.append((child, depth))
                crate.modules.setdefault(child, Module(child, file))
                continue
            base = child_dir(file, root_like) if not stack else child_dir(file, root_like).joinpath(*here[len(mpath):])
            if attr_path:
                target = (file.parent / attr_path) if not stack else base / attr_path
                pending.append((target.resolve(), child, False))
            else:
                for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                    if cand.is_file():
                        pending.append((cand, child, False))
                        break
    for mpath, (file, code, _) in texts.items():
        read_arrows(crate, mpath, file, code)
    return crate


def enclosing_modules(crate: Crate, mpath: tuple[str, ...], code: str) -> list[tuple[int, tuple[str, ...]]]:
    """(offset, module) changes through the file: inline modules start and end."""
    marks = [(0, mpath)]
    stack: list[tuple[tuple[str, ...], int]] = []
    depth = 0
    for m in re.finditer(r"[{}]|" + MOD_RE.pattern, code):
        tok = m.group(0)
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if stack and stack[-1][1] > depth:
                stack.pop()
                marks.append((m.end(), stack[-1][0] if stack else mpath))
        elif m.group(4) == "{":
            depth += 1
            here = stack[-1][0] if stack else mpath
            stack.append((here + (m.group(3),), depth))
            marks.append((m.end(), stack[-1][0]))
    return marks


def resolve(crate: Crate, here: tuple[str, ...], path: list[str]) -> tuple[str, ...] | None:
    """The deepest module a path from module `here` names, or None if not in the crate."""
    first = path[0]
    if first == "crate":
        base, rest = (), path[1:]
    elif first in ("super", "self"):
        base, rest = here, path
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            rest = rest[1:]
    elif here + (first,) in crate.modules:
        base, rest = here, path
    else:
        return None
    for seg in rest:
        if base + (seg,) in crate.modules:
            base = base + (seg,)
        else:
            break
    return base


def read_arrows(crate: Crate, mpath: tuple[str, ...], file: Path, code: str) -> None:
    marks = enclosing_modules(crate, mpath, code)

    def module_at(offset: int) -> tuple[str, ...]:
        current = mpath
        for at, mod in marks:
            if at <= offset:
                current = mod
            else:
                break
        return current

    paths: list[tuple[int, str]] = []
    for m in USE_RE.finditer(code):
        for p in expand_use(m.group(1)):
            paths.append((m.start(), p))
    used = [(m.start(), m.end()) for m in USE_RE.finditer(code)]
    for m in PATH_RE.finditer(code):
        if not any(a <= m.start() < b for a, b in used):
            paths.append((m.start(), re.sub(r"\s+", "", m.group(1))))
    for offset, p in paths:
        segs = [s for s in p.lstrip(":").split("::") if s]
        if not segs:
            continue
        here = module_at(offset)
        target = resolve(crate, here, segs)
        if target is not None:
            crate.arrows.append((here, target, file))


# ---------------------------------------------------------------- cycles

def lifted(src: tuple[str, ...], dst: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The arrow between the two modules under src's and dst's closest common parent."""
    k = 0
    while k < len(src) and k < len(dst) and src[k] == dst[k]:
        k += 1
    if k == len(src) or k == len(dst):
        return None  # one contains the other: one unit
    return src[: k + 1], dst[: k + 1]


def cycles(crate: Crate) -> list[list[str]]:
    """Each cycle as lines: the circle of sibling modules, then the arrows behind it."""
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    why: dict[tuple, set[str]] = {}
    for src, dst, file in crate.arrows:
        pair = lifted(src, dst)
        if pair is None:
            continue
        a, b = pair
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
        why.setdefault((a, b), set()).add(f"{'::'.join(src) or 'crate'} -> {'::'.join(dst)}")
    # Tarjan's strongly connected components
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    found: list[list[tuple[str, ...]]] = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    report = []
    for comp in found:
        members = set(comp)
        name = lambda m: "::".join(m)
        lines = [", ".join(name(m) for m in comp) + " depend on each other:"]
        for a in comp:
            for b in sorted(graph[a] & members):
                lines.append(f"    {name(a)} -> {name(b)}: " + ", ".join(sorted(why[(a, b)])))
        report.append(lines)
    return report


# ---------------------------------------------------------------- the workspace

def crate_roots(repo: Path) -> list[Path]:
    roots = []
    for manifest in sorted(repo.rglob("Cargo.toml")):
        if SKIP_DIRS & set(manifest.relative_to(repo).parts):
            continue
        if "[package]" not in manifest.read_text(encoding="utf-8"):
            continue
        d = manifest.parent
        roots += [p for p in (d / "src/lib.rs", d / "src/main.rs") if p.is_file()]
        roots += sorted((d / "src/bin").glob("*.rs")) + sorted((d / "src/bin").glob("*/main.rs"))
        for sub in ("tests", "benches", "examples"):
            roots += sorted((d / sub).glob("*.rs"))
    return roots


def check(repo: Path, pending: dict[str, str] = source_sizes.PENDING) -> tuple[list[str], list[str]]:
    """(problems, notes): module cycles and files too long; files pending a split."""
    problems = []
    for root in crate_roots(repo):
        for lines in cycles(load_crate(root)):
            problems.append(f"cycle in {root.relative_to(repo)}: " + "\n".join(lines))
    too_long, notes = source_sizes.long_files(repo, pending)
    return problems + too_long, notes


# ---------------------------------------------------------------- self-test

def self_test() -> None:
    files = {
        "Cargo.toml": "[package]\nname = \"t\"\n",
        "src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\nmod d { pub mod e {} }\n"
        "#[cfg(test)]\nmod tests;\n",
        # a and b: a cycle through a's child and a grouped use
        "src/a.rs": "mod x;\npub struct A;\n",
        "src/a/x.rs": "use crate::{b::{B}, c};\nuse super::A; // a child reads its parent: not an arrow\n",
        "src/b.rs": "pub struct B;\nfn f() -> crate::a::A { todo!() }\n",
        # c: only comments and strings name a and b; its inline tests read its parent
        "src/c.rs": "// crate::a::A\nconst S: &str = \"crate::b::B\";\n"
        "#[cfg(test)]\nmod tests { use super::*; }\n",
        "src/tests.rs": "use super::*;\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        for name, text in files.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        problems, _ = check(repo, pending={})
        cycle_reports = [p for p in problems if p.startswith("cycle")]
        assert len(cycle_reports) == 1, problems
        assert cycle_reports[0].startswith("cycle in src/lib.rs: a, b depend"), cycle_reports
        assert "a::x -> b" in cycle_reports[0] and "b -> a" in cycle_reports[0], cycle_reports
        assert problems == cycle_reports, problems
        # breaking the cycle (b no longer names a) leaves no cycle
        (repo / "src/b.rs").write_text("pub struct B;\n")
        assert check(repo, pending={})[0] == [], check(repo, pending={})
    assert expand_use("crate::{a, b::{c as d, self}}") == ["crate::a", "crate::b::c", "crate::b"]
    assert "crate" not in strip_comments_and_strings('let s = r#"crate::a"#; /* crate::b */')
    source_sizes.self_test()


def main(argv: list[str]) -> int:
    self_test()
    if "--self-test" in argv:
        print("check-modules: self-test passed")
        return 0
    repo = Path(__file__).resolve().parent.parent
    problems, notes = check(repo)
    for n in notes:
        print(f"note: {n}")
    for p in problems:
        print(p)
    if problems:
        print(f"check-modules: {len(problems)} problem(s)")
        return 1
    print(
        f"check-modules: no module cycles in {len(crate_roots(repo))} crate roots, no source "
        f"file over {source_sizes.MAX_LINES} lines but test files"
        + (f" and {len(notes)} pending" if notes else "")
        + f", every Rust file over {source_sizes.NOTE_LINES} says why it is one piece"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
