#!/usr/bin/env python3
"""bench/run's report: docs/benchmarks.md rendered only from the results committed in
bench/results/ (bench/render.py, standard library only), and the way a run's raw results
become such a file.

    bench/report.py --check            fails (exit 1) if docs/benchmarks.md is not what
                                       bench/results/ and bench/templates/ make (a step of
                                       scripts/test.sh)
    bench/report.py --write            renders docs/benchmarks.md from them
    bench/report.py --ingest RAW_JSON  a run's raw results (bench/run writes them to
                                       target/bench/) -> bench/results/DATE-NAME.json, the
                                       raw results kept in it; a strict run also rewrites
                                       the figures between docs/strict.md's markers
    bench/report.py --chart RESULTS_JSON PNG
                                       draws docs/benchmarks.png from a results file that
                                       kept its raw results (needs matplotlib: bench/run
                                       runs this with its venv's python)

A full run (`bench/run side-by-side`) gives sections 1-5 and 7; `--only socket`, `strict`
and `hotspot` one section each (section 9 is written by hotspot_report.py). Each section of
the page comes from the newest results file that has it. bench/report_sections/ turns raw
results into the text of a section (a module per section); `--ingest` reads the values back
out of that text through the section's template (bench/templates/NAME.md), so the template
and those functions must agree, and ingest fails if they do not.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import render
from hotspot_report import hotspot_section
from report_sections.chart import chart
from report_sections.side_by_side import headline, side_by_side_text
from report_sections.strict import FIGURES_BEGIN, FIGURES_END, strict_figures, strict_section
from report_sections.unix_socket import socket_section


# What each kind of run gives: the sections (templates) and the text of each.
RUN_SECTIONS = {
    None: {"side-by-side": side_by_side_text, "socket": socket_section},
    "socket": {"socket": socket_section},
    "strict": {"strict": strict_section},
    "hotspot": {"hotspot": hotspot_section},
}
RUN_NAMES = {None: "side-by-side", "socket": "socket", "strict": "strict", "hotspot": "hotspot"}


def ingest(raw_path):
    """A run's raw results -> bench/results/DATE-NAME.json (returns its path)."""
    res = json.loads(Path(raw_path).read_text())
    only = res.get("only")
    name = RUN_NAMES[only]
    sections = {}
    for key, text_of in RUN_SECTIONS[only].items():
        sections[key] = render.unformat(render.template(key), text_of(res).rstrip("\n"),
                                        f"{raw_path}, section {key}")
    if only is None:
        sections["side-by-side"]["headline"] = render.parse_value(headline(res))
    day, clock = res["started"][:10], res["started"][11:16].replace(":", "")
    path = render.RESULTS / f"{day}-{name}.json"
    if path.exists():
        path = render.RESULTS / f"{day}-{clock}-{name}.json"
    data = {"benchmark": name, "date": res["started"], "command": res["command"],
            "minutes": res["seconds"] // 60, "machine": res["machine"],
            "source": f"`{res['command']}`: bench/report.py --ingest of its raw results "
                      "(kept below, as \"raw\")",
            "sections": sections, "raw": res}
    render.RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    if only == "strict":
        # docs/strict.md carries the same figures between its own markers (only there: the
        # rest of that file is written by people).
        strict_doc = render.ROOT / "docs" / "strict.md"
        if strict_doc.exists():
            text = strict_doc.read_text()
            pattern = re.compile(re.escape(FIGURES_BEGIN) + ".*?" + re.escape(FIGURES_END), re.S)
            if pattern.search(text):
                figures = strict_figures(res)
                strict_doc.write_text(pattern.sub(lambda _: figures, text, count=1))
    print(f"wrote {path.relative_to(render.ROOT)}")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="fail if docs/benchmarks.md is not what the data makes")
    mode.add_argument("--write", action="store_true", help="render docs/benchmarks.md")
    mode.add_argument("--ingest", metavar="RAW_JSON",
                      help="a run's raw results -> bench/results/DATE-NAME.json")
    mode.add_argument("--chart", nargs=2, metavar=("RESULTS_JSON", "PNG"),
                      help="draw the chart from a results file with raw results")
    args = ap.parse_args()
    try:
        if args.check:
            return render.check()
        if args.write:
            return render.write()
        if args.ingest:
            ingest(args.ingest)
            return 0
        data = json.loads(Path(args.chart[0]).read_text())
        if not data.get("raw"):
            print(f"{args.chart[0]} has no raw results to draw from", file=sys.stderr)
            return 1
        chart(data["raw"], Path(args.chart[1]))
        return 0
    except ValueError as e:
        print(f"bench/report.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
