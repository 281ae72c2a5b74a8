"""The sections bench/run also runs alone (`--only`, or by name): strict (section 8), hotspot
(section 9) and socket (section 7, also part of the full run)."""

import json
import os
import shlex
import subprocess
import time
import urllib.request

from .common import RELEASE, ROOT, fail, log, sh
from .measuring import loadgen
from .results import load_average
from .servers import cleanup


def first_id(port):
    """An ID issued now: below the sidecar's clock by the time it is passed as `after`, so
    `after` costs only its parsing and one comparison."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/id", timeout=5) as r:
        return int(r.read().decode().strip())


def strict_section(srv, reps, secs, results):
    """Strict sequences (issues 17 and 24): PostgreSQL `nextval()` (also linearizable) at
    1/4/16 connections over its unix socket and over TCP, then the e2e benchmark of strict
    sequences on the control plane, in one run: 1 and 4 sidecars at 1/4/16 connections over
    TCP and over Unix sockets (values/s, p50/p99), a segment sequence and Snowflake IDs (no
    coordination: the ceiling) beside them, and the hand-over gap (the oracle's sidecar
    killed under load). Both drive their peer with the same load generator (bench/src/load.rs,
    one client thread). The e2e test is a release build, like the
    sidecars it starts: a strict sequence served by its oracle is bounded by CPU, not by
    API server writes. Each strict row is measured once
    for as long as nextval's repetitions of one row together (reps x secs). nextval() is
    measured before the e2e benchmark and again after it (the server idle meanwhile), so a
    machine that got faster or slower during the run shows in its figures, not as a
    difference between the peers."""
    _, pg_dir, pg_port = srv.start_postgres()
    # Over both transports the e2e benchmark drives the sidecars with (TCP, and the Unix
    # socket an app gets as KUBEFLAKE_SOCKET), with the same load generator.
    pg = {"unix": ["postgres", "--socket-dir", str(pg_dir), "--port", str(pg_port)],
          "tcp": ["postgres", "--addr", f"127.0.0.1:{pg_port}"]}
    runs = []

    def nextval(when, count):
        for rep in range(count):
            for transport, args in pg.items():
                for c in (1, 4, 16):
                    r = loadgen("PostgreSQL nextval()",
                                args + ["--user", "bench", "--batch", "1"], c, secs)
                    runs.append({"rep": rep, "when": when, "connections": c,
                                 "transport": transport, **r})
            log(f"strict: nextval repetition {rep + 1}/{count} ({when})")
    before = (reps + 1) // 2
    nextval("before", before)
    bin_dir = sh([ROOT / "e2e" / "controlplane" / "build.sh"], timeout=3600).strip().splitlines()[-1]
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
    env["KUBEFLAKE_BIN_DIR"] = bin_dir
    window = reps * secs
    env["KUBEFLAKE_BENCH_STRICT_SECS"] = str(window)
    results["strict_window_s"] = window
    results["strict_command"] = (
        f"KUBEFLAKE_BENCH_STRICT_SECS={window:g} cargo test --release -p kubeflake-e2e "
        "--test bench_cluster -- --ignored --nocapture --exact "
        "bench_strict_sequence_values_per_second_and_api_writes")
    log(f"strict: the e2e benchmark (bench_strict, release; 20 rows of {window:g} s and the "
        "hand-over)")
    proc = subprocess.run(
        ["cargo", "test", "--release", "--locked", "-q", "-p", "kubeflake-e2e", "--test",
         "bench_cluster", "--", "--ignored", "--nocapture", "--exact",
         "bench_strict_sequence_values_per_second_and_api_writes"],
        cwd=ROOT, env=env, text=True, capture_output=True, timeout=3600)
    figures = [json.loads(l.split("BENCH ", 1)[1]) for l in proc.stdout.splitlines()
               if "BENCH {" in l]
    results["strict"] = [f for f in figures if f.get("figure") == "strict"]
    results["strict_handover"] = [f for f in figures if f.get("figure") == "strict_handover"]
    if proc.returncode != 0 or not results["strict"]:
        fail("the strict benchmark failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    nextval("after", reps - before)
    results["nextval"] = runs
    cleanup()


HOTSPOT_ARGS = ["--pods", "16", "--rates", "100,5000", "--split-keys", "2048,65536",
                "--secs", "180", "--window-secs", "10", "--ranges", "16,64",
                "--moduli", "16,100", "--start-days", "30", "--seed", "1"]


def hotspot_section(results):
    """Issue 25: the hottest range's share of writes and the `id % N` skew of each key form,
    from a deterministic simulation (bench/src/hotspot.rs); no servers, no clocks."""
    exe = RELEASE / "kubeflake-hotspot"
    log("hotspot: simulating 16 pods at 100 and 5,000 IDs/s each, every key form")
    began = time.monotonic()
    out = sh([exe, *HOTSPOT_ARGS], timeout=1800)
    results["hotspot_seconds"] = round(time.monotonic() - began)
    results["hotspot_command"] = shlex.join(
        [str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else str(exe), *HOTSPOT_ARGS])
    results["hotspot"] = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if not results["hotspot"]:
        fail("kubeflake-hotspot printed no figures")


def socket_section(srv, reps, secs, results):
    """Section 7 (issue 18): the same requests over the Unix socket and over TCP, to the
    same server processes, in one interleaved run; and what `after` costs on `GET /id`."""
    _, kf_port = srv.start_sidecar("kubeflake", unix=True)
    _, ceil_port = srv.start_ceiling(unix=True)
    _, redis_port = srv.start_redis(unix=True)
    after = first_id(kf_port)
    socket_of = {"kubeflake": f"unix:{srv.socket_path('kubeflake')}",
                 "ceiling": f"unix:{srv.socket_path('ceiling')}",
                 "redis": f"unix:{srv.socket_path('redis')}"}
    tcp_of = {"kubeflake": f"127.0.0.1:{kf_port}", "ceiling": f"127.0.0.1:{ceil_port}",
              "redis": f"127.0.0.1:{redis_port}"}
    http = lambda addr, path, n=1: ["http", "--addr", addr, "--path", path,
                                    "--ids-per-answer", str(n)]
    redis = lambda addr: ["redis", "--addr", addr, "--op", "incr"]
    single, batch = [1, 16, 64], [1]
    # (peer, transport, loadgen arguments, connection counts, IDs per call); the two
    # transports of a peer run back to back. Batches run at 1 connection only: 100 IDs per
    # call at 16 connections would pass the layout's own ceiling (4,096,000 IDs/s per
    # worker) and then measure that, not the transport.
    both = lambda peer, args_of, conns, n=1: [(peer, t, args_of(addr), conns, n) for t, addr in
                                              (("Unix socket", socket_of), ("TCP", tcp_of))]
    rows = (both("kubeflake GET /id", lambda a: http(a["kubeflake"], "/id"), single)
            + [("kubeflake GET /id?after=<an earlier ID>", "TCP",
                http(tcp_of["kubeflake"], f"/id?after={after}"), single, 1)]
            + both("bare hyper (ceiling)", lambda a: http(a["ceiling"], "/id"), single)
            + both("Redis INCR", lambda a: redis(a["redis"]), single)
            + both("kubeflake GET /ids?count=100",
                   lambda a: http(a["kubeflake"], "/ids?count=100", 100), batch, 100))
    log(f"unix socket: {len(rows)} rows x {reps} repetitions x {secs} s, interleaved")
    runs, loads = {}, []
    t0 = time.monotonic()
    for rep in range(reps):
        for c in sorted({c for *_, conns, _ in rows for c in conns}):
            for peer, transport, args, conns, per_call in rows:
                if c in conns:
                    r = loadgen(f"{peer} ({transport})", args, c, secs)
                    runs.setdefault((peer, transport, c, per_call), []).append(r)
        loads.append(load_average())
        log(f"  repetition {rep + 1}/{reps} done (load average {' '.join(loads[-1])})")
    results["socket"] = {
        "after": after, "reps": reps, "secs": secs, "loads": loads,
        "seconds": round(time.monotonic() - t0),
        "rows": [{"peer": p, "transport": t, "connections": c, "ids_per_call": n, "runs": rs}
                 for (p, t, c, n), rs in runs.items()]}
