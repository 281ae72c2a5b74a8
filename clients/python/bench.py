#!/usr/bin/env python3
"""Measures kubeflake.Client.next(), in Snowflake and in segment mode, beside one HTTP request
per ID, an in-process Snowflake generator (snowflake-id's SnowflakeGenerator, the same
41/10/12 layout) and the layout's ceiling, in one run (pytest-benchmark), against standalone
sidecars it starts on Unix sockets. A benchmark, not a test: it asserts nothing.

    pip install -r clients/python/requirements-bench.txt    # into the tests' virtualenv
    clients/python/bench.py SIDECAR_BINARY [--ids 2000000] [--requests 5000]

Each row: pytest-benchmark's rounds of 100,000 next() calls (500 for one request per ID),
no clock read inside a round, give IDs/s; then a second pass of --ids calls, each timed with
time.perf_counter_ns() (one clock read a call: the interval from the read after the
previous call to the read after this one, so one read's cost, the "clock read" row, is
inside each figure), gives p50/p99/p99.9. The summary at the end puts the rows side by side.

snowflake-id's generator does not wait at its layout's ceiling: past 4,096 IDs in one
millisecond (or when the clock steps back) it returns None, so its row's caller calls again
until an ID comes, a spin until the next millisecond; the row counts those empty calls.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import pytest
    import pytest_benchmark  # noqa: F401
    from snowflake import SnowflakeGenerator  # snowflake-id, the in-process generator's row
except ImportError:
    sys.exit("bench.py needs pytest, pytest-benchmark and snowflake-id: run it with the tests' virtualenv after\n"
             "  ~/.cache/kubeflake/clients-py/venv/bin/pip install -r clients/python/requirements-bench.txt")

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import kubeflake  # noqa: E402

@pytest.fixture
def rows(request) -> list[tuple[str, float, str]]:
    """The summary's rows (main() registers the Summary plugin; this file is imported twice)."""
    plugins = request.config.pluginmanager.get_plugins()
    return next((p.rows for p in plugins if type(p).__name__ == "Summary"), [])


@pytest.fixture(scope="module")
def sidecar_bin() -> str:
    return os.environ["KUBEFLAKE_SIDECAR_BIN"]


def _start(binary: str, *args: str):
    tmp = tempfile.TemporaryDirectory()
    sock = f"{tmp.name}/api.sock"
    proc = subprocess.Popen([binary, "standalone", "--listen", "127.0.0.1:0", "--listen-unix", sock,
                             "--state-dir", tmp.name, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):  # at most 20 s
        if Path(sock).exists():
            break
        time.sleep(0.05)
    return tmp, proc, sock


@pytest.fixture(scope="module")
def snowflake(sidecar_bin):
    tmp, proc, sock = _start(sidecar_bin)
    yield sock
    proc.terminate()
    proc.wait(timeout=15)
    tmp.cleanup()


@pytest.fixture(scope="module")
def segment(sidecar_bin):
    tmp, proc, sock = _start(sidecar_bin, "--mode", "segment")
    yield sock
    proc.terminate()
    proc.wait(timeout=15)
    tmp.cleanup()


# The default sequence but for a 10 ms drift limit: the sidecar lends a burst of at most
# 10 ms of ticks, so even a short pass measures the rate it sustains (as Go's
# BenchmarkSnowflakeSustained; with the default 2 s, a pass of 2 million IDs is mostly lent).
TIGHT = "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: tight}\nspec: {clock: {maxDriftMillis: 10}}\n"


@pytest.fixture(scope="module")
def snowflake_sustained(sidecar_bin):
    spec = tempfile.TemporaryDirectory()
    path = Path(spec.name) / "tight.yaml"
    path.write_text(TIGHT)
    tmp, proc, sock = _start(sidecar_bin, "--sequence-file", str(path))
    yield sock
    proc.terminate()
    proc.wait(timeout=15)
    tmp.cleanup()
    spec.cleanup()


@pytest.fixture(scope="module")
def segment_growing(sidecar_bin):
    """Blocks growing from 1,000 to 1,000,000 values (--max-block-size, as the Java and Go
    benchmarks' segment rows): a /range answer never crosses a block, so only then can one
    refill bring more than 1,000 values."""
    tmp, proc, sock = _start(sidecar_bin, "--mode", "segment", "--block-size", "1000", "--max-block-size", "1000000")
    yield sock
    proc.terminate()
    proc.wait(timeout=15)
    tmp.cleanup()


def _measure(benchmark, rows, name: str, take, calls: int, per_round: int, extra=lambda: "") -> None:
    take()  # connect and learn the mode outside the timing

    def rounds(n: int = per_round) -> None:
        for _ in range(n):
            take()

    benchmark.group = "next()"
    benchmark.pedantic(rounds, rounds=max(1, calls // per_round), warmup_rounds=1, iterations=1)
    stats = benchmark.stats.stats
    rate = per_round * len(stats.data) / stats.total
    clock, lat = time.perf_counter_ns, []
    append = lat.append
    prev = clock()
    for _ in range(calls):
        take()
        now = clock()
        append(now - prev)
        prev = now
    lat.sort()
    at = lambda p: lat[int((len(lat) - 1) * p)] / 1000  # noqa: E731  (ns -> us)
    pct = f"p50 {at(0.5):.2f} us, p99 {at(0.99):.2f} us, p99.9 {at(0.999):.2f} us"
    benchmark.extra_info.update(ids_per_second=round(rate), p50_us=at(0.5), p99_us=at(0.99), p999_us=at(0.999))
    rows.append((name, rate, f"{pct}{extra()}"))


def _buffer(client: kubeflake.Client):
    def extra() -> str:
        s = client.stats()
        mean = s.refill_seconds / max(1, s.refills) * 1000
        return f"; {s.refills} refills, {mean:.2f} ms mean, {s.waits} waits"
    return extra


def test_next_snowflake(benchmark, rows, snowflake):
    with kubeflake.Client(socket=snowflake) as ids:
        _measure(benchmark, rows, "next(), buffered, Snowflake", ids.next, int(os.environ["BENCH_IDS"]), 100_000, _buffer(ids))
        layout = ids.layout()
    rows.append(("the layout's ceiling, one worker", 2 ** layout.sequence_bits / layout.time_unit.total_seconds(), ""))


def test_next_snowflake_sustained(benchmark, rows, snowflake_sustained):
    with kubeflake.Client(socket=snowflake_sustained) as ids:
        _measure(benchmark, rows, "next(), buffered, Snowflake, 10 ms lent", ids.next, int(os.environ["BENCH_IDS"]),
                 100_000, _buffer(ids))


def test_next_segment(benchmark, rows, segment):
    with kubeflake.Client(socket=segment) as ids:
        _measure(benchmark, rows, "next(), buffered, segment", ids.next, int(os.environ["BENCH_IDS"]), 100_000, _buffer(ids))


def test_next_segment_growing_blocks(benchmark, rows, segment_growing):
    with kubeflake.Client(socket=segment_growing) as ids:
        _measure(benchmark, rows, "next(), buffered, segment, blocks grow", ids.next, int(os.environ["BENCH_IDS"]),
                 100_000, _buffer(ids))


def test_one_request_per_id(benchmark, rows, snowflake):
    with kubeflake.Client(socket=snowflake, prefetch=False) as ids:
        _measure(benchmark, rows, "one HTTP request per ID (kept alive)", ids.next, int(os.environ["BENCH_REQUESTS"]), 500)


TWITTER_EPOCH_MS = 1_288_834_974_657  # the epoch of Twitter's layout, 41/10/12 as the sidecar's default


def test_snowflake_id_in_process(benchmark, rows):
    gen, empty = SnowflakeGenerator(1, epoch=TWITTER_EPOCH_MS), 0

    def take() -> int:
        nonlocal empty
        value = next(gen)
        while value is None:  # past 4,096 in this millisecond: None until the next one
            empty += 1
            value = next(gen)
        return value

    version = importlib.metadata.version("snowflake-id")
    _measure(benchmark, rows, f"snowflake-id {version}, in process", take, int(os.environ["BENCH_IDS"]), 100_000,
             lambda: f"; {empty} calls returned None (ceiling reached), retried")


def test_clock_read(benchmark, rows):
    _measure(benchmark, rows, "clock read alone (a call of nothing)", lambda: None, int(os.environ["BENCH_IDS"]), 100_000)


class Summary:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, str]] = []

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_sep("-", "side by side (one caller, Unix socket)")
        for name, rate, rest in sorted(self.rows, key=lambda r: r[0]):
            terminalreporter.write_line(f"{name:<38} {rate:>12,.0f} IDs/s  {rest}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sidecar")
    parser.add_argument("--ids", type=int, default=2_000_000)
    parser.add_argument("--requests", type=int, default=5_000)
    args = parser.parse_args()
    os.environ.update(KUBEFLAKE_SIDECAR_BIN=str(Path(args.sidecar).resolve()),
                      BENCH_IDS=str(args.ids), BENCH_REQUESTS=str(args.requests))
    return pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--benchmark-only",
                        "--benchmark-columns=min,median,mean,max,rounds", "--benchmark-sort=name"],
                       plugins=[Summary()])


if __name__ == "__main__":
    sys.exit(main())
