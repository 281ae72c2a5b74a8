"""docs/benchmarks.md, rendered only from data: the results in bench/results/*.json (one file
per run: its date, command, machine and figures) put into the text of bench/templates/*.md.
Python 3.11 standard library only (no matplotlib: the chart is drawn apart, by
`bench/report.py --chart`). Used through bench/report.py:

    bench/report.py --write     renders docs/benchmarks.md
    bench/report.py --check     renders it in memory and fails (exit 1) if the file differs

A results file:

    {"benchmark": "side-by-side", "date": "2026-11-24 00:30 UTC", "command": "bench/run",
     "minutes": 36, "machine": {...} or null, "source": "how the figures got here",
     "sections": {"side-by-side": {"single_table": VALUE, ...}, "socket": {...}},
     "raw": {...}}   # bench/run's raw results, when the run kept them

A template names its values `{{name}}`. A VALUE is a string (put in as it is) or a list of
blocks, each {"table": {"columns": [...], "align": [...], "rows": [[...], ...]}},
{"bullets": [...]} or {"text": "..."}, joined by blank lines. For each section the newest
results file that has it is used. `unformat` is the way back: the values a template's text
holds (how bench/run's report and the figures printed before this file was generated
became results files).
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TEMPLATES = ROOT / "bench" / "templates"
DOC = ROOT / "docs" / "benchmarks.md"
PLACEHOLDER = re.compile(r"\{\{([a-z_-]+)\}\}")
# The sections in the order the page has them (each a template of that name).
SECTIONS = ("side-by-side", "socket", "strict", "hotspot")


# ---------------------------------------------------------------- values

def parse_table(lines: list[str]) -> dict:
    cells = [[c.strip() for c in line[1:-1].split("|")] for line in lines]
    return {"columns": cells[0], "align": cells[1], "rows": cells[2:]}


def format_table(table: dict) -> str:
    row = lambda cells: "| " + " | ".join(cells) + " |"
    return "\n".join([row(table["columns"]), "|" + "|".join(table["align"]) + "|",
                      *map(row, table["rows"])])


def parse_value(text: str):
    """A captured value: a string if it is one line of words, else its blocks."""
    if "\n" not in text and not text.startswith(("|", "- ")):
        return text
    blocks = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        if all(line.startswith("|") and line.endswith("|") for line in lines) and len(lines) >= 2:
            table = parse_table(lines)
            if format_table(table) == block:
                blocks.append({"table": table})
                continue
        if all(line.startswith("- ") for line in lines):
            blocks.append({"bullets": [line[2:] for line in lines]})
        else:
            blocks.append({"text": block})
    return blocks


def format_value(value) -> str:
    if isinstance(value, (str, int, float)):
        return str(value)
    out = []
    for block in value:
        if "table" in block:
            out.append(format_table(block["table"]))
        elif "bullets" in block:
            out.append("\n".join("- " + b for b in block["bullets"]))
        else:
            out.append(block["text"])
    return "\n\n".join(out)


def fill(template: str, values: dict, where: str) -> str:
    missing = sorted({m for m in PLACEHOLDER.findall(template) if m not in values})
    if missing:
        raise ValueError(f"{where}: no value for {', '.join(missing)}")
    return PLACEHOLDER.sub(lambda m: format_value(values[m.group(1)]), template)


def unformat(template: str, text: str, where: str) -> dict:
    """The values that make `template` into `text` exactly (ValueError if none do)."""
    pattern, seen, pos = [], set(), 0
    for m in PLACEHOLDER.finditer(template):
        pattern.append(re.escape(template[pos:m.start()]))
        name = m.group(1)
        pattern.append(f"(?P={name})" if name in seen else f"(?P<{name}>.*?)")
        seen.add(name)
        pos = m.end()
    pattern.append(re.escape(template[pos:]))
    found = re.fullmatch("".join(pattern), text, re.S)
    if not found:
        raise ValueError(f"{where}: the text does not have the template's shape")
    values = {k: parse_value(v) for k, v in found.groupdict().items()}
    if fill(template, values, where) != text:
        raise ValueError(f"{where}: the values do not render back to the same text")
    return values


# ---------------------------------------------------------------- results

def load_results() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        for key in ("benchmark", "date", "command", "sections"):
            if key not in data:
                raise ValueError(f"{path.relative_to(ROOT)}: no '{key}'")
        out.append((path.name, data))
    return out


def newest(results, section):
    having = [(data["date"], name, data) for name, data in results if section in data["sections"]]
    if not having:
        return None, None
    _, name, data = max(having)
    return name, data


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.md").read_text().rstrip("\n")


# ---------------------------------------------------------------- the page

ANCHORS = (  # a summary line's section, by how its headline sentence starts
    ("Segment mode", "#segment-mode-against-the-database-sequences-it-replaces", "section 1"),
    ("Batches", "#2-batches", "section 2"),
    ("`GET /id` over the Unix socket", "#7-over-a-unix-socket-socket-against-tcp-and-redis-both-ways", "section 7"),
    ("kubeflake over the socket", "#7-over-a-unix-socket-socket-against-tcp-and-redis-both-ways", "section 7"),
    ("", "#1-one-id-per-request", "section 1"),
)
STRICT_ANCHOR = "#8-strict-sequences-beside-postgresql-nextval"


def run_of(data: dict) -> str:
    minutes = f", {data['minutes']} min" if data.get("minutes") is not None else ""
    return f"`{data['command']}`, {data['date']}{minutes}"


def summary(results) -> str:
    lines = []
    name, data = newest(results, "side-by-side")
    if data:
        for b in data["sections"]["side-by-side"]["headline"][0]["bullets"]:
            b = b.removesuffix(" (Section 7.)")
            anchor, label = next((a, s) for p, a, s in ANCHORS if b.startswith(p))
            lines.append(f"- {b} ([{label}]({anchor}); {run_of(data)})")
    name, data = newest(results, "strict")
    if data:
        for b in next(v for v in data["sections"]["strict"]["verdicts"] if "bullets" in v)["bullets"]:
            if "against `nextval()` at 16 connections" in b:
                lines.append(f"- Strict sequences: {b} ([section 8]({STRICT_ANCHOR}); {run_of(data)})")
    lines.append("- Hotspots: the hottest range's share of writes and the `id % N` skew of each "
                 "key form, a deterministic simulation "
                 "([section 9](#9-hotspots-where-the-ids-land-in-a-range-partitioned-store-and-under-id--n)).")
    lines.append("- Pod start-up on a real node (kubelet, containerd, runc) and where its CPU "
                 "goes: measured by hand, in dated notes ([section 6](#6-real-node)); no "
                 "figure of theirs is in bench/results/ yet.")
    return "\n".join(lines)


def plot_note(results) -> str:
    name, data = newest(results, "side-by-side")
    if data and data.get("raw"):
        return (f"The chart: sections 1 and 2 of {run_of(data)}, drawn from "
                f"bench/results/{name} by `bench/report.py --chart`.")
    return ("The chart: sections 1 and 2 of the run of 2026-11-24 (`bench/run`), drawn by "
            "bench/run from that run's raw results, which were not kept; bench/results/ has "
            "the figures as they were printed (medians and spreads), so the chart cannot be "
            "drawn again from the data here. The next full run (`bench/run side-by-side`) "
            "keeps its raw results in its results file and draws it again.")


def section(results, key: str) -> str:
    name, data = newest(results, key)
    if not data:
        return f"(`{key}`: no results in bench/results/)"
    text = fill(template(key), {**data["sections"][key]}, f"bench/results/{name}, {key}")
    heading, rest = text.split("\n", 1)
    data_line = f"Data: [bench/results/{name}](../bench/results/{name}) ({run_of(data)})."
    if heading.startswith("## "):
        return f"{heading}\n\n{data_line}\n{rest}"
    return f"{data_line}\n\n{text}"


def render() -> str:
    results = load_results()
    values = {"summary": summary(results), "plot_note": plot_note(results)}
    for key in SECTIONS:
        values[key] = section(results, key)
    return fill(template("benchmarks"), values, "bench/templates/benchmarks.md") + "\n"


def write() -> int:
    DOC.write_text(render())
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


# Files in bench/ that are not benchmarks: bench/run and its report, and what scripts source.
NOT_BENCHMARKS = {"run", "report.py", "render.py", "hotspot_report.py", "node-chart.sh",
                  "proc-cpu.sh", "sidecar-lease.sh"}


def unlisted() -> list[str]:
    """Benchmark code that bench/benchmarks.toml does not name, and registry entries that
    bench/README.md does not describe (a `### name` heading each)."""
    with open(ROOT / "bench" / "benchmarks.toml", "rb") as f:
        entries = tomllib.load(f)["benchmark"]
    commands = " ".join(e["command"] + " " + e.get("run", "") for e in entries)
    wanted = {f"bench/{p.name}": f"bench/{p.name}"
              for p in (ROOT / "bench").iterdir()
              if p.is_file() and p.name not in NOT_BENCHMARKS and not p.name.endswith(".toml")
              and not p.name.endswith(".md")}
    wanted |= {f"e2e/tests/{p.name}": f"--test {p.stem}"
               for p in (ROOT / "e2e" / "tests").glob("bench_*.rs")}
    wanted |= {f"sidecar/benches/{p.name}": f"--bench {p.stem}"
               for p in (ROOT / "sidecar" / "benches").glob("*.rs")}
    wanted |= {f"runtime/examples/{p.name}": f"--example {p.stem}"
               for p in (ROOT / "runtime" / "examples").glob("*.rs")}
    out = [f"{path}: no command in bench/benchmarks.toml runs it"
           for path, word in sorted(wanted.items())
           if not re_word(word).search(commands)]
    readme = (ROOT / "bench" / "README.md")
    text = readme.read_text() if readme.exists() else ""
    out += [f"bench/README.md: no '### {e['name']}' heading" for e in entries
            if f"\n### {e['name']}\n" not in text]
    return out


def re_word(word: str):
    return re.compile(r"(?<![\w-])" + re.escape(word) + r"(?![\w.-])")


def check() -> int:
    missing = unlisted()
    if missing:
        print("\n".join(missing))
        print("\nEvery benchmark has an entry in bench/benchmarks.toml (what `bench/run --list` "
              "prints) and a section in bench/README.md.")
        return 1
    want = render()
    have = DOC.read_text() if DOC.exists() else ""
    if have == want:
        print(f"{DOC.relative_to(ROOT)} is what bench/results/ and bench/templates/ make")
        return 0
    diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(),
                                     "docs/benchmarks.md (the file)",
                                     "docs/benchmarks.md (rendered from bench/results/)",
                                     lineterm="", n=1))
    print("\n".join(diff[:40] + (["..."] if len(diff) > 40 else [])))
    print(f"\n{DOC.relative_to(ROOT)} differs from what bench/results/*.json and "
          "bench/templates/*.md make. It is generated only: change the templates or the "
          "results, then run `bench/report.py --write` to regenerate it (and commit both).")
    return 1
