#!/usr/bin/env python3
"""The documentation site: stage, navigation, and the link check (scripts/docs-site.sh runs it).

    docs_site.py stage STAGE      copy the repository's files into STAGE and write STAGE/SUMMARY.md
                                  and STAGE/book.toml for mdBook (nothing is written in the repo)
    docs_site.py check SITE       every link of the built site leads somewhere: a page or file of
                                  the site, and a heading id when it names one

The site's source is the repository itself, as a reader browses it: the README, docs/, the
CHANGELOG and the READMEs beside the code, so that a link written for the repository (such as
`../e2e/README.md#a-control-plane-by-hand` from docs/) works unchanged in the site. The
navigation is made here, not kept by hand: the pages in SECTIONS in that order, and every other
Markdown page of the repository under "More" (so a new page is never left out of the site, and
a link to it never breaks).
"""

from __future__ import annotations

import html.parser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent

# The navigation: (section, [(path, title or None for the page's own heading)]).
SECTIONS: list[tuple[str, list[str]]] = [
    ("Start", ["README.md", "docs/install.md", "docs/configuration.md", "docs/api.md"]),
    (
        "Use",
        [
            "docs/layouts.md",
            "docs/segment.md",
            "docs/strict.md",
            "docs/sql.md",
            "docs/kubectl-plugin.md",
            "docs/multicluster.md",
            "examples/app/README.md",
        ],
    ),
    (
        "From your app",
        [
            "docs/clients.md",
            "clients/SPEC.md",
            "clients/conformance/README.md",
            "clients/python/README.md",
            "clients/java/README.md",
            "clients/node/README.md",
        ],
    ),
    (
        "Operate",
        ["docs/operations.md", "docs/alerts.md", "docs/scale.md", "docs/security.md"],
    ),
    (
        "The promise",
        ["docs/safety.md", "docs/known-limits.md", "docs/users.md", "docs/api-versions.md"],
    ),
    (
        "Inside kubeflake",
        [
            "docs/architecture.md",
            "docs/testing.md",
            "docs/checks.md",
            "docs/e2e-node.md",
            "e2e/README.md",
            "docs/benchmarks.md",
            "bench/README.md",
            "CHANGELOG.md",
        ],
    ),
]
# Markdown files that are not pages: templates the benchmark reports are rendered from.
NOT_PAGES = ("bench/templates/",)


def repo_files() -> list[str]:
    """Every file of the working tree git knows or would add (tracked, and new but not ignored)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    return sorted({p for p in out.decode().split("\0") if p and (ROOT / p).is_file()})


def title_of(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def summary(pages: list[str], stage: Path) -> str:
    listed = [p for _, section in SECTIONS for p in section]
    missing = [p for p in listed if p not in pages]
    if missing:
        sys.exit(f"docs_site: SECTIONS names pages that do not exist: {missing}")
    lines = ["# Summary", ""]
    # The README is the site's front page (its introduction, outside the numbered chapters).
    lines += [f"[{title_of(stage / 'README.md')}](README.md)", ""]
    for name, section in SECTIONS:
        lines += [f"# {name}", ""]
        lines += [f"- [{title_of(stage / p)}]({p})" for p in section if p != "README.md"]
        lines.append("")
    rest = [p for p in pages if p not in listed]
    groups = [
        ("Design records", [p for p in rest if p.startswith("docs/design/")]),
        ("Notes", [p for p in rest if p.startswith("docs/notes/")]),
    ]
    grouped = {p for _, g in groups for p in g}
    groups.insert(0, ("More", [p for p in rest if p not in grouped]))
    for name, group in groups:
        if group:
            lines += [f"# {name}", ""]
            lines += [f"- [{title_of(stage / p)}]({p})" for p in group]
            lines.append("")
    return "\n".join(lines)


BOOK_TOML = """[book]
title = "kubeflake"
description = "Unique 64-bit IDs for every pod, without a central sequence"
src = "."
language = "en"

[build]
# Without the index preprocessor, README.md stays README.html (mdBook would turn each into
# index.html, and links written for the repository would break); the links preprocessor
# ({{#include}}) is not used by any page.
use-default-preprocessors = false

[output.html]
no-section-label = true

[output.html.search]
enable = true
"""


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def linked_files(pages: list[str], files: list[str]) -> set[str]:
    """The repository's files the pages link to (a folder: the files in it)."""
    known = set(files)
    wanted: set[str] = set()
    for page in pages:
        for target in LINK.findall((ROOT / page).read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue
            rel = os.path.normpath(os.path.join(os.path.dirname(page), unquote(target)))
            if rel in known:
                wanted.add(rel)
            else:
                wanted.update(f for f in files if f.startswith(rel.rstrip("/") + "/"))
    return wanted


def stage(target: Path) -> None:
    """The pages, and the other files they link to, as they sit in the repository."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    files = repo_files()
    pages = [p for p in files if p.endswith(".md") and not p.startswith(NOT_PAGES)]
    for rel in sorted(set(pages) | linked_files(pages, files)):
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    (target / "SUMMARY.md").write_text(summary(pages, target), encoding="utf-8")
    (target / "book.toml").write_text(BOOK_TOML, encoding="utf-8")


class Links(html.parser.HTMLParser):
    """The ids and the links of one page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            if (tag, name) in (("a", "href"), ("img", "src")):
                self.links.append(value)


def check(site: Path) -> int:
    pages: dict[Path, Links] = {}
    for page in site.rglob("*.html"):
        parsed = Links()
        parsed.feed(page.read_text(encoding="utf-8", errors="replace"))
        pages[page.resolve()] = parsed
    # mdBook's own pages (print, 404, toc) carry every chapter again: check chapters only.
    skip = {"print.html", "404.html", "toc.html"}
    broken: list[str] = []
    checked = 0
    for page, parsed in sorted(pages.items()):
        if page.name in skip:
            continue
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # outside the site: not fetched (no network here)
            checked += 1
            where = f"{page.relative_to(site.resolve())}: {link}"
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_relative_to(site.resolve()):
                broken.append(f"{where}: leaves the site")
                continue
            if target.is_dir():
                continue  # a folder of the repository (as a repository browser shows it)
            if not target.exists():
                broken.append(f"{where}: no such page or file")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages.get(target)
                if ids is not None and unquote(parts.fragment) not in ids.ids:
                    broken.append(f"{where}: no heading #{parts.fragment} there")
    for line in broken:
        print(f"docs-site: broken link in {line}", file=sys.stderr)
    print(
        f"docs-site: {checked} links in {len(pages)} pages checked, {len(broken)} broken",
        file=sys.stderr,
    )
    return 1 if broken else 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("stage", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "stage":
        stage(Path(argv[2]))
        return 0
    return check(Path(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
