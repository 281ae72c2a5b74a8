"""The text of each section of docs/benchmarks.md, made from a run's raw results, for
`bench/report.py --ingest` (which reads the values back out of it through the section's
template, bench/templates/NAME.md) and `--chart`:

    figures.py       medians, spreads, ratios and numbers as the tables write them
    side_by_side.py  sections 1-5 and the summary lines (a full run)
    unix_socket.py   section 7 (`--only socket`, or a full run)
    strict.py        section 8 and docs/strict.md's figures (`--only strict`)
    chart.py         docs/benchmarks.png (matplotlib)

Section 9 is bench/hotspot_report.py. A directory rather than bench/report_*.py files:
bench/render.py takes every file directly in bench/ for a benchmark unless it names it.
"""
