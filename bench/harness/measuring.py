"""bench/run's measurements of the full side-by-side run: the load generator
(bench/src/load.rs) and wrk, single IDs, batches, the in-process generators, the footprint
(binary size, start-up, memory) and the cluster figures (the e2e benchmarks)."""

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from .common import RELEASE, ROOT, log, sh
from .servers import free_port, http_status, redis_ping, spawn, stop, wait_until


def loadgen(name, peer_args, connections, secs, warmup=1.0):
    out = sh([RELEASE / "kubeflake-loadgen", "--name", name, "--connections", connections,
              "--secs", secs, "--warmup-secs", warmup, "--threads", "1", *peer_args],
             timeout=secs + warmup + 120)
    return json.loads(out.strip().splitlines()[-1])


def wrk(port, path, connections, secs):
    """wrk's view of an HTTP peer (requests/s of 200 answers, p50, p99 in us)."""
    out = sh(["wrk", "-t1", f"-c{connections}", f"-d{secs}s", "--latency",
              f"http://127.0.0.1:{port}{path}"], timeout=secs + 60)

    def us(v):
        for suffix, f in (("us", 1), ("ms", 1000), ("s", 1e6)):
            if v.endswith(suffix):
                return float(v[: -len(suffix)]) * f
        return float(v)
    p50 = p99 = None
    total = bad = 0
    seconds = secs
    for line in out.splitlines():
        parts = line.split()
        if line.strip().startswith("50%"):
            p50 = us(parts[1])
        elif line.strip().startswith("99%"):
            p99 = us(parts[1])
        elif " requests in " in line:
            total = int(parts[0])
            seconds = float(parts[3].rstrip("s,"))
        elif "Non-2xx" in line:
            bad = int(parts[-1])
    return {"requests_per_s": (total - bad) / seconds, "p50_us": p50, "p99_us": p99}


def rss_kb(pid, field="VmRSS"):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def single_ids(srv, peers, conns, reps, secs, results):
    log(f"single IDs: {len(peers)} peers x {conns} connections x {reps} repetitions x {secs} s")
    runs = {}
    for rep in range(reps):
        for c in conns:
            for name, args in peers:
                r = loadgen(name, args, c, secs)
                runs.setdefault((name, c), []).append(r)
        log(f"  repetition {rep + 1}/{reps} done")
    results["single"] = [{"peer": n, "connections": c, "runs": rs} for (n, c), rs in runs.items()]


def wrk_check(http_peers, conns, reps, secs, results):
    log(f"wrk cross-check: {len(http_peers)} HTTP peers x {conns} x {reps} x {secs} s")
    runs = {}
    for _ in range(reps):
        for c in conns:
            for name, port in http_peers:
                runs.setdefault((name, c), []).append(wrk(port, "/id", c, secs))
    results["wrk"] = [{"peer": n, "connections": c, "runs": rs} for (n, c), rs in runs.items()]


def batches(peers, conns, reps, secs, results):
    log(f"batches: {len(peers)} peers x {conns} connections x {reps} repetitions x {secs} s")
    runs = {}
    for _ in range(reps):
        for c in conns:
            for name, args, batch in peers:
                r = loadgen(name, args, c, secs)
                r["batch"] = batch
                runs.setdefault((name, c), []).append(r)
            # Let the sidecar's clock catch up with what the batches borrowed (drift 2 s).
            time.sleep(2.5)
    results["batches"] = [{"peer": n, "connections": c, "runs": rs} for (n, c), rs in runs.items()]


def generators(secs, reps, results):
    log("in-process generators")
    out = sh([RELEASE / "kubeflake-generators", "--secs", secs, "--runs", reps,
              "--threads", "1,2,4"], timeout=900)
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    grouped = {}
    for l in lines:
        grouped.setdefault((l["generator"], l["sharing"], l["threads"]), []).append(l["ids_per_s"])
    results["generators"] = [{"generator": g, "sharing": s, "threads": t, "ids_per_s": v}
                             for (g, s, t), v in grouped.items()]


def footprint(srv, reps, results):
    log("footprint: binary size, start-up, memory")
    fp = {}
    binary = RELEASE / "kubeflake-sidecar"
    stripped = srv.tmp / "kubeflake-sidecar.stripped"
    sh(["strip", "-o", stripped, binary])
    fp["binary_bytes"] = binary.stat().st_size
    fp["binary_stripped_bytes"] = stripped.stat().st_size
    starts = []
    for i in range(max(reps * 2, 5)):
        port = free_port()
        state = srv.tmp / f"startup-{i}"
        state.mkdir()
        t0 = time.monotonic()
        proc = spawn([binary, "standalone", "--listen", f"127.0.0.1:{port}", "--state-dir", state],
                     srv.tmp / "startup.log")
        wait_until("sidecar start-up", lambda: http_status(port, "/readyz") == 200, limit=20,
                   step=0.001)
        starts.append(time.monotonic() - t0)
        stop(proc)
    fp["startup_s"] = summarize(starts)
    redis_starts = []
    for _ in range(3):
        port = free_port()
        t0 = time.monotonic()
        proc = spawn(["redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "",
                      "--appendonly", "no"], srv.tmp / "redis-startup.log")
        wait_until("redis start-up", lambda: redis_ping(port), step=0.001)
        redis_starts.append(time.monotonic() - t0)
        stop(proc)
    fp["redis_startup_s"] = summarize(redis_starts)
    # Memory: a fresh process idle, then under load (/id at 64 connections, then
    # /ids?count=10000 at 16), sampled mid-run, and the high-water mark after.
    mem = {}
    for name, start, load in [
        ("kubeflake sidecar", srv.start_sidecar,
         [("/id x64", ["http", "--path", "/id"], 64),
          ("/ids?count=10000 x16", ["http", "--path", "/ids?count=10000", "--ids-per-answer", "10000"], 16)]),
        ("bare hyper ceiling", srv.start_ceiling, [("/id x64", ["http", "--path", "/id"], 64)]),
        ("redis-server", srv.start_redis, [("INCR x64", ["redis", "--op", "incr"], 64)]),
    ]:
        proc, port = start()
        time.sleep(1)
        entry = {"idle_kb": rss_kb(proc.pid), "load": []}
        for label, args, c in load:
            args = [args[0], "--addr", f"127.0.0.1:{port}", *args[1:]]
            gen = subprocess.Popen([str(RELEASE / "kubeflake-loadgen"), "--connections", str(c),
                                    "--secs", "4", "--warmup-secs", "0", *args],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(2)
            during = rss_kb(proc.pid)
            gen.wait(timeout=60)
            entry["load"].append({"load": label, "rss_kb": during})
            time.sleep(2.5)
        entry["hwm_kb"] = rss_kb(proc.pid, "VmHWM")
        mem[name] = entry
        stop(proc)
    fp["memory"] = mem
    results["footprint"] = fp


def cluster(results, timeout):
    log("cluster figures: operator + 100 cluster-mode sidecars against the e2e control plane")
    bin_dir = sh([ROOT / "e2e" / "controlplane" / "build.sh"], timeout=3600).strip().splitlines()[-1]
    env = dict(os.environ, KUBEFLAKE_BIN_DIR=bin_dir)
    proc = subprocess.run(
        ["cargo", "test", "--release", "--locked", "-q", "-p", "kubeflake-e2e", "--test",
         "bench_cluster", "--", "--ignored", "--nocapture", "--test-threads=1"],
        cwd=ROOT, env=env, text=True, capture_output=True, timeout=timeout)
    # Segment mode: API server writes at a given request rate (issue 8).
    seg = subprocess.run(
        ["cargo", "test", "--release", "--locked", "-q", "-p", "kubeflake-e2e", "--test",
         "segment", "api_server_writes_per_second_at_a_given_request_rate", "--", "--ignored",
         "--nocapture", "--exact"],
        cwd=ROOT, env=env, text=True, capture_output=True, timeout=timeout)
    # A line may start with libtest's progress dot of the previous test (`-q`), so a figure
    # is whatever follows "BENCH " anywhere on a line.
    figures = [json.loads(l.split("BENCH ", 1)[1]) for l in (proc.stdout + seg.stdout).splitlines()
               if "BENCH {" in l]
    if seg.returncode != 0:
        proc = subprocess.CompletedProcess(proc.args, seg.returncode, proc.stdout + seg.stdout,
                                           proc.stderr + seg.stderr)
    results["cluster"] = {"figures": figures, "ok": proc.returncode == 0,
                          "error": None if proc.returncode == 0 else proc.stdout[-2000:] + proc.stderr[-2000:]}
    if proc.returncode != 0:
        log("cluster figures failed; see the report")
