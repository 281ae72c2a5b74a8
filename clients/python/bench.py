#!/usr/bin/env python3
"""Measures kubeflake.Client.next() beside one HTTP request per ID, in one run, against a
standalone sidecar it starts. A benchmark, not a test: it asserts nothing.

    clients/python/bench.py SIDECAR_BINARY [--ids 1000000] [--requests 5000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import kubeflake  # noqa: E402


def percentiles(samples: list[int]) -> str:
    samples.sort()
    at = lambda p: samples[int((len(samples) - 1) * p)] / 1000  # noqa: E731  (ns -> us)
    return f"p50 {at(0.5):.2f} us, p99 {at(0.99):.2f} us, p99.9 {at(0.999):.2f} us"


def measure(client: kubeflake.Client, n: int) -> tuple[float, str]:
    client.next()  # connect and learn the mode outside the timing
    nxt, clock = client.next, time.perf_counter_ns
    started = time.perf_counter()
    for _ in range(n):
        nxt()
    rate = n / (time.perf_counter() - started)
    lat = []
    for _ in range(min(n, 200_000)):  # a second pass, each call timed
        t0 = clock()
        nxt()
        lat.append(clock() - t0)
    return rate, percentiles(lat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sidecar")
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=5_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sock = f"{tmp}/api.sock"
        proc = subprocess.Popen([args.sidecar, "standalone", "--listen", "127.0.0.1:0", "--listen-unix", sock,
                                 "--state-dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(400):
                if Path(sock).exists():
                    break
                time.sleep(0.05)
            with kubeflake.Client(socket=sock) as buffered:
                rate, lat = measure(buffered, args.ids)
                s = buffered.stats()
                print(f"next(), buffered:          {rate:>12,.0f} IDs/s  ({lat}; {s.refills} refills, {s.waits} waits)")
            with kubeflake.Client(socket=sock, prefetch=False) as direct:
                rate, lat = measure(direct, args.requests)
                print(f"next(), one request per ID: {rate:>11,.0f} IDs/s  ({lat})")
            print("the default layout's ceiling for one worker: 4,096,000 IDs/s (4,096 per ms)")
        finally:
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    main()
