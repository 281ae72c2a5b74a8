"""What bench/run records beside its figures (the machine, the load average), and the end of
a run: its raw results to target/bench/, then bench/report.py --ingest, --write and --chart."""

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .common import ROOT, STARTED, TARGET, VENV, log, sh
from .prepare import pg_bin
from .servers import cleanup


def machine():
    info = {"nproc": os.cpu_count(), "kernel": platform.release()}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            info["cpu"] = line.split(":", 1)[1].strip()
            break
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("PRETTY_NAME="):
            info["os"] = line.split("=", 1)[1].strip('"')

    def version(args):
        try:
            out = subprocess.run(args, capture_output=True, text=True, timeout=30)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "unknown"
    info["versions"] = {
        "rustc": version(["rustc", "--version"]),
        "redis": version(["redis-server", "--version"]),
        "postgres": version([pg_bin() / "postgres", "--version"]) if pg_bin() else "not installed",
        "wrk": version(["wrk", "--version"]),
    }
    return info


def load_average():
    return Path("/proc/loadavg").read_text().split()[:3]


def finish(results, out, tmp):
    """Stops every server, then keeps the raw results, makes the run's results file in
    bench/results/ from them and renders docs/benchmarks.md from bench/results/ (a full run
    also draws OUT/benchmarks.png)."""
    cleanup()
    shutil.rmtree(tmp, ignore_errors=True)
    results["load_after"] = load_average()
    results["seconds"] = round(time.monotonic() - STARTED)
    raw = TARGET / "bench" / (f"results-{results['only']}.json" if results["only"] else "results.json")
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1))
    report = ROOT / "bench" / "report.py"
    made = sh([sys.executable, report, "--ingest", raw], timeout=300).strip().splitlines()[-1]
    data = ROOT / made.removeprefix("wrote ")
    sh([sys.executable, report, "--write"], timeout=300)
    if not results["only"]:
        sh([VENV / "bin" / "python", report, "--chart", data, Path(out) / "benchmarks.png"],
           timeout=300)
    log(f"wrote {data.relative_to(ROOT)} (commit it) and docs/benchmarks.md from bench/results/"
        + ("" if results["only"] else f", and {Path(out) / 'benchmarks.png'}") + f" (raw: {raw})")
