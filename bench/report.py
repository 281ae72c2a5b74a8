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
the page comes from the newest results file that has it. The functions below turn raw
results into the text of a section; `--ingest` reads the values back out of that text
through the section's template (bench/templates/NAME.md), so the template and these
functions must agree, and ingest fails if they do not.
"""

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import render
from hotspot_report import hotspot_section

LAYOUT_CEILING = 4_096_000  # 2^12 IDs per 1 ms tick per worker (the default layout)
KUBEFLAKE = "kubeflake GET /id"
SEGMENT = "kubeflake segment mode GET /id"
DB_PEERS = ("Redis INCR", "PostgreSQL nextval()")


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values):
    values = [v for v in values if v is not None]
    return f"{min(values):,.0f}–{max(values):,.0f}" if values else "–"


def num(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    return "–" if not a or not b else f"{a / b:.2f}×"


def index(entries):
    return {(e["peer"], e["connections"]): e["runs"] for e in entries}


def single_table(res):
    runs = index(res["single"])
    peers = list(dict.fromkeys(p for p, _ in runs))
    conns = sorted({c for _, c in runs})
    out = ["| peer | connections | requests/s, median (min–max) | p50 µs | p99 µs | p99.9 µs | "
           "kubeflake ÷ peer, throughput | kubeflake ÷ peer, p99 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in conns:
        kf = runs.get((KUBEFLAKE, c), [])
        kf_rps = med([r["requests_per_s"] for r in kf])
        kf_p99 = med([r["p99_us"] for r in kf])
        for p in peers:
            rs = runs.get((p, c), [])
            rps = med([r["requests_per_s"] for r in rs])
            p99 = med([r["p99_us"] for r in rs])
            same = p == KUBEFLAKE
            out.append(
                f"| {p} | {c} | {num(rps)} ({spread([r['requests_per_s'] for r in rs])}) | "
                f"{num(med([r['p50_us'] for r in rs]), 1)} | {num(p99, 1)} | "
                f"{num(med([r['p999_us'] for r in rs]), 1)} | "
                f"{'—' if same else ratio(kf_rps, rps)} | {'—' if same else ratio(kf_p99, p99)} |")
    return "\n".join(out)


def segment_table(res):
    """Segment mode is the database-sequence replacement, so its fair peers are Redis INCR
    and PostgreSQL nextval(): dense integers from one counter. This table compares it with
    them (the single-ID table compares everything with Snowflake mode)."""
    runs = index(res["single"])
    conns = sorted({c for p, c in runs if p == SEGMENT})
    if not conns:
        return None
    out = ["| connections | segment mode requests/s, median (min–max) | p99 µs | "
           "÷ Redis INCR, throughput | ÷ PostgreSQL nextval(), throughput | "
           "÷ Redis INCR, p99 | ÷ PostgreSQL nextval(), p99 |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for c in conns:
        seg = runs[(SEGMENT, c)]
        rps = med([r["requests_per_s"] for r in seg])
        p99 = med([r["p99_us"] for r in seg])
        cells = []
        for key in ("requests_per_s", "p99_us"):
            for peer in DB_PEERS:
                v = med([r[key] for r in runs.get((peer, c), [])])
                cells.append(ratio(rps if key == "requests_per_s" else p99, v))
        out.append(f"| {c} | {num(rps)} ({spread([r['requests_per_s'] for r in seg])}) | "
                   f"{num(p99, 1)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def wrk_table(res):
    if not res.get("wrk"):
        return "(not run)"
    runs = index(res["wrk"])
    out = ["| peer | connections | requests/s (wrk), median (min–max) | p50 µs | p99 µs |",
           "|---|---:|---:|---:|---:|"]
    for (p, c), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        out.append(f"| {p} | {c} | {num(med([r['requests_per_s'] for r in rs]))} "
                   f"({spread([r['requests_per_s'] for r in rs])}) | "
                   f"{num(med([r['p50_us'] for r in rs]), 1)} | {num(med([r['p99_us'] for r in rs]), 1)} |")
    return "\n".join(out)


def batch_table(res):
    runs = index(res["batches"])
    out = ["| peer | connections | IDs/s, median (min–max) | calls/s | p99 µs per call | "
           "refused calls/s | of the layout ceiling | kubeflake 1000 ÷ peer | kubeflake 10000 ÷ peer |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    conns = sorted({c for _, c in runs})
    for c in conns:
        kf1 = med([r["ids_per_s"] for r in runs.get(("kubeflake GET /ids?count=1000", c), [])])
        kf10 = med([r["ids_per_s"] for r in runs.get(("kubeflake GET /ids?count=10000", c), [])])
        for (p, cc), rs in runs.items():
            if cc != c:
                continue
            ids = med([r["ids_per_s"] for r in rs])
            refused = med([r["refused"] / r["secs"] for r in rs])
            is_kf = p.startswith("kubeflake")
            out.append(
                f"| {p} | {c} | {num(ids)} ({spread([r['ids_per_s'] for r in rs])}) | "
                f"{num(med([r['requests_per_s'] for r in rs]))} | {num(med([r['p99_us'] for r in rs]), 1)} | "
                f"{num(refused)} | {ids / LAYOUT_CEILING:.0%} | "
                f"{'—' if is_kf else ratio(kf1, ids)} | {'—' if is_kf else ratio(kf10, ids)} |")
    return "\n".join(out)


def generator_table(res):
    out = ["| generator | sharing across threads | threads | IDs/s, median (min–max) | ns per ID per thread | "
           "kubeflake (no borrowing) ÷ this |",
           "|---|---|---:|---:|---:|---:|"]
    gens = res["generators"]
    base = {g["threads"]: med(g["ids_per_s"]) for g in gens if g["generator"].startswith("kubeflake Generator, no borrowing")}
    for g in sorted(gens, key=lambda g: g["threads"]):
        m = med(g["ids_per_s"])
        same = g["generator"].startswith("kubeflake Generator, no borrowing")
        out.append(f"| {g['generator']} | {g['sharing']} | {g['threads']} | {num(m)} "
                   f"({spread(g['ids_per_s'])}) | {1e9 * g['threads'] / m:.1f} | "
                   f"{'—' if same else ratio(base.get(g['threads']), m)} |")
    return "\n".join(out)


def footprint_section(res):
    fp = res.get("footprint")
    if not fp:
        return "(not run)"
    s = fp["startup_s"]
    r = fp["redis_startup_s"]
    lines = [
        f"- Release binary `kubeflake-sidecar`: {fp['binary_bytes'] / 1e6:.1f} MB as built "
        f"(line tables kept for backtraces), {fp['binary_stripped_bytes'] / 1e6:.1f} MB stripped.",
        f"- Start-up to ready, standalone (spawn → first `GET /readyz` 200, fresh state dir, "
        f"{s['n']} runs): median {s['median'] * 1000:.1f} ms (min {s['min'] * 1000:.1f}, max "
        f"{s['max'] * 1000:.1f}); redis-server spawn → first PONG, {r['n']} runs: median "
        f"{r['median'] * 1000:.1f} ms.",
        "",
        "| process | RSS idle | RSS under load (sampled mid-run) | high-water mark (VmHWM) |",
        "|---|---:|---:|---:|",
    ]
    for name, m in fp["memory"].items():
        load = "; ".join(f"{l['load']}: {num((l['rss_kb'] or 0) / 1024, 1)} MiB" for l in m["load"])
        lines.append(f"| {name} | {num((m['idle_kb'] or 0) / 1024, 1)} MiB | {load} | "
                     f"{num((m['hwm_kb'] or 0) / 1024, 1)} MiB |")
    return "\n".join(lines)


def cluster_section(res):
    cl = res.get("cluster")
    if not cl:
        return "(not run: `--skip-cluster`)"
    figs = {f["figure"]: f for f in cl["figures"]}
    lines = []
    if f := figs.get("pod_created_to_sidecar_ready"):
        lines.append(f"- **{f['pods']} pods created at once**, each pod's cluster-mode sidecar "
                     f"started as soon as its pod existed (no kubelet: the sidecars are local "
                     f"processes): pod created → sidecar `/readyz` 200 p50 **{f['p50_s']:.2f} s**, "
                     f"p99 **{f['p99_s']:.2f} s**, max {f['max_s']:.2f} s (poll resolution "
                     f"{f['poll_resolution_ms']:.0f} ms). This includes the operator assigning "
                     f"slots, each sidecar's lease acquisition, clock-skew check and fence write.")
    if f := figs.get("steady_state_api_load"):
        verbs = ", ".join(f"{k} {v:.2f}/s" for k, v in sorted(f["by_verb_and_resource_per_s"].items()))
        lines.append(f"- **API load of {f['sidecars']} sidecars** in steady state "
                     f"(`lease.durationSeconds: {f['lease_duration_s']}`, {f['window_s']:.0f} s "
                     f"window): {f['api_requests_per_s']:.2f} requests/s in all, "
                     f"**{f['lease_writes_per_s']:.2f} lease writes/s** (formula N×3/duration = "
                     f"{f['formula_lease_writes_per_s']:.2f}/s). By verb and resource: {verbs}. "
                     f"Cluster-mode sidecar RSS (median of {f['sidecars']}): "
                     f"{(f['cluster_sidecar_rss_kb_median'] or 0) / 1024:.1f} MiB; operator RSS "
                     f"{(f['operator_rss_kb'] or 0) / 1024:.1f} MiB.")
    if f := figs.get("cluster_sidecar_restart_to_ready"):
        lines.append(f"- **Start-up to ready in cluster mode** (a sidecar stopped with SIGTERM "
                     f"and started again, its pod keeping its slot; {f['runs']} runs): median "
                     f"{f['median_s']:.2f} s (min {f['min_s']:.2f}, max {f['max_s']:.2f}).")
    if f := figs.get("operator_with_pods"):
        lines.append(f"- **Operator with {f['pods']} pods** (one sequence, 1,024 slots): every "
                     f"pod held a slot {f['all_assigned_s']:.1f} s after the first create; RSS "
                     f"{(f['rss_kb_idle'] or 0) / 1024:.1f} MiB idle → "
                     f"{(f['rss_kb_with_pods'] or 0) / 1024:.1f} MiB with the pods (high-water "
                     f"{(f['hwm_kb'] or 0) / 1024:.1f} MiB); {f['cpu_s_assigning']:.2f} CPU "
                     f"seconds to assign them all, then {f['cpu_s_per_s_steady'] * 1000:.1f} ms "
                     f"of CPU per second in steady state.")
    if f := figs.get("segment_api_writes"):
        lines.append(f"- **Segment mode, API server writes**: {f['sidecars']} sidecars on one "
                     f"segment sequence (`blockSize: {f['block_size']}`) asked for "
                     f"{f['requested_per_s']:.0f} values/s and served {f['values_per_s']:.0f}/s; "
                     f"the API server saw **{f['lease_writes_per_s']:.2f} counter writes/s** "
                     f"(409 conflicts included) and {f['lease_reads_per_s']:.2f} reads/s, i.e. "
                     f"about values/s ÷ blockSize; {f['claims']} block claims and "
                     f"{f['conflicts']} compare-and-swap conflicts over the run.")
    if not cl["ok"]:
        lines.append("- **The cluster benchmark failed in this run**; its output ends with:\n\n```\n"
                     + (cl["error"] or "")[-1500:] + "\n```")
    return "\n".join(lines) or "(no figures)"


def headline(res):
    runs = index(res["single"])
    out = []
    for c in (16, 1, 64):
        kf = med([r["requests_per_s"] for r in runs.get((KUBEFLAKE, c), [])])
        if not kf:
            continue
        parts = []
        for p in ("Redis INCR", "PostgreSQL nextval()", "bare hyper (ceiling)"):
            v = med([r["requests_per_s"] for r in runs.get((p, c), [])])
            if v:
                parts.append(f"{kf / v:.2f}× {p}")
        kf99 = med([r["p99_us"] for r in runs.get((KUBEFLAKE, c), [])])
        out.append(f"- Single ID over HTTP, {c} connection{'s' if c > 1 else ''}: kubeflake "
                   f"{kf:,.0f} requests/s (p99 {kf99:,.0f} µs) = " + ", ".join(parts) + ".")
    for c in (16,):
        seg = med([r["requests_per_s"] for r in runs.get((SEGMENT, c), [])])
        if seg:
            parts = [f"{ratio(seg, med([r['requests_per_s'] for r in runs.get((p, c), [])]))} {p}"
                     for p in DB_PEERS]
            out.append(f"- Segment mode (dense integers, the database-sequence replacement), "
                       f"{c} connections: {seg:,.0f} requests/s = " + ", ".join(parts) + ".")
    b = index(res["batches"])
    kf = med([r["ids_per_s"] for r in b.get(("kubeflake GET /ids?count=1000", 1), [])])
    rd = med([r["ids_per_s"] for r in b.get(("Redis INCRBY 1000 (a block per call)", 1), [])])
    pl = med([r["ids_per_s"] for r in b.get(("Redis INCR pipelined x1000", 1), [])])
    if kf:
        out.append(f"- Batches, 1 connection: `/ids?count=1000` gives {kf:,.0f} IDs/s = "
                   f"{kf / LAYOUT_CEILING:.0%} of the layout ceiling (4,096,000/s per worker); "
                   f"{ratio(kf, pl)} pipelined Redis INCR ×1000, {ratio(kf, rd)} Redis INCRBY 1000.")
    if res.get("socket"):
        out.append(socket_headline(res) + " (Section 7.)")
    return "\n".join(out)


SOCKET, TCP = "Unix socket", "TCP"
KF_AFTER = "kubeflake GET /id?after=<an earlier ID>"
KF_BATCH = "kubeflake GET /ids?count=100"


def socket_index(res):
    return {(r["peer"], r["transport"], r["connections"]): r["runs"]
            for r in res["socket"]["rows"]}


def socket_table(res):
    """Every row with its own spread; the socket row of a peer says socket ÷ TCP."""
    runs = socket_index(res)
    out = ["| peer | over | connections | requests/s, median (min–max) | p50 µs | p99 µs | "
           "p99.9 µs | socket ÷ TCP, throughput | socket ÷ TCP, p99 |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in sorted({c for _, _, c in runs}):
        for (p, t, cc), rs in runs.items():
            if cc != c or p == KF_BATCH:
                continue
            rps = med([r["requests_per_s"] for r in rs])
            p99 = med([r["p99_us"] for r in rs])
            tcp = runs.get((p, TCP, c), []) if t == SOCKET else []
            out.append(
                f"| {p} | {t} | {c} | {num(rps)} ({spread([r['requests_per_s'] for r in rs])}) | "
                f"{num(med([r['p50_us'] for r in rs]), 1)} | {num(p99, 1)} | "
                f"{num(med([r['p999_us'] for r in rs]), 1)} | "
                f"{ratio(rps, med([r['requests_per_s'] for r in tcp])) if tcp else '—'} | "
                f"{ratio(p99, med([r['p99_us'] for r in tcp])) if tcp else '—'} |")
    return "\n".join(out)


def socket_rps(runs, peer, transport, c, key="requests_per_s"):
    return med([r[key] for r in runs.get((peer, transport, c), [])])


def socket_ratio_table(res):
    """The ratios the issue asks about, one line per connection count."""
    runs = socket_index(res)
    kf, hy, rd = KUBEFLAKE, "bare hyper (ceiling)", "Redis INCR"
    cols = [("kubeflake socket ÷ kubeflake TCP", (kf, SOCKET), (kf, TCP)),
            ("bare hyper socket ÷ bare hyper TCP", (hy, SOCKET), (hy, TCP)),
            ("Redis socket ÷ Redis TCP", (rd, SOCKET), (rd, TCP)),
            ("**kubeflake socket ÷ Redis TCP**", (kf, SOCKET), (rd, TCP)),
            ("kubeflake socket ÷ Redis socket", (kf, SOCKET), (rd, SOCKET)),
            ("kubeflake socket ÷ bare hyper socket", (kf, SOCKET), (hy, SOCKET)),
            ("kubeflake TCP ÷ Redis TCP", (kf, TCP), (rd, TCP))]
    out = ["| requests/s, ratio of medians | " + " | ".join(f"{c} conn." for c in (1, 16, 64)) + " |",
           "|---|---:|---:|---:|"]
    for label, a, b in cols:
        out.append(f"| {label} | " + " | ".join(
            ratio(socket_rps(runs, *a, c), socket_rps(runs, *b, c)) for c in (1, 16, 64)) + " |")
    return "\n".join(out)


def after_table(res):
    runs = socket_index(res)
    out = ["| connections | `/id` requests/s | `/id?after=…` requests/s | with `after` ÷ without, "
           "throughput | p50 µs without → with | p99 µs without → with |",
           "|---:|---:|---:|---:|---:|---:|"]
    for c in (1, 16, 64):
        plain, after = runs.get((KUBEFLAKE, TCP, c), []), runs.get((KF_AFTER, TCP, c), [])
        if not plain or not after:
            continue
        m = lambda rs, k: med([r[k] for r in rs])
        out.append(f"| {c} | {num(m(plain, 'requests_per_s'))} | {num(m(after, 'requests_per_s'))} | "
                   f"{ratio(m(after, 'requests_per_s'), m(plain, 'requests_per_s'))} | "
                   f"{num(m(plain, 'p50_us'), 1)} → {num(m(after, 'p50_us'), 1)} | "
                   f"{num(m(plain, 'p99_us'), 1)} → {num(m(after, 'p99_us'), 1)} |")
    return "\n".join(out)


def socket_batch_table(res):
    runs = socket_index(res)
    out = ["| peer | over | connections | IDs/s, median (min–max) | calls/s | p99 µs per call | "
           "refused calls/s | socket ÷ TCP, IDs/s |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (p, t, c), rs in runs.items():
        if p != KF_BATCH:
            continue
        ids = med([r["ids_per_s"] for r in rs])
        tcp = runs.get((p, TCP, c), []) if t == SOCKET else []
        out.append(f"| {p} | {t} | {c} | {num(ids)} ({spread([r['ids_per_s'] for r in rs])}) | "
                   f"{num(med([r['requests_per_s'] for r in rs]))} | "
                   f"{num(med([r['p99_us'] for r in rs]), 1)} | "
                   f"{num(med([r['refused'] / r['secs'] for r in rs]))} | "
                   f"{ratio(ids, med([r['ids_per_s'] for r in tcp])) if tcp else '—'} |")
    return "\n".join(out)


def socket_headline(res):
    """Two sentences for the README: the ratios issue 18 asks for, as measured."""
    runs = socket_index(res)
    kf, rd, hy = KUBEFLAKE, "Redis INCR", "bare hyper (ceiling)"
    at = lambda c: (f"{ratio(socket_rps(runs, kf, SOCKET, c), socket_rps(runs, kf, TCP, c))}")
    vs_redis = lambda c: ratio(socket_rps(runs, kf, SOCKET, c), socket_rps(runs, rd, TCP, c))
    hy_sock = lambda c: ratio(socket_rps(runs, hy, SOCKET, c), socket_rps(runs, hy, TCP, c))
    kf16 = socket_rps(runs, kf, SOCKET, 16)
    return (f"- `GET /id` over the Unix socket ÷ over TCP: {at(1)} at 1 connection, {at(16)} at 16, "
            f"{at(64)} at 64 (the bare hyper server: {hy_sock(1)}, {hy_sock(16)}, {hy_sock(64)}); "
            f"kubeflake over the socket served {num(kf16)} requests/s at 16 connections.\n"
            f"- kubeflake over the socket ÷ Redis `INCR` over TCP: {vs_redis(1)} at 1 connection, "
            f"{vs_redis(16)} at 16, {vs_redis(64)} at 64.")


def socket_section(res):
    """Section 7 (`bench/run --only socket`, or a full run)."""
    sk = res.get("socket")
    if not sk:
        return "## 7. Over a Unix socket\n\n(not measured in this run)"
    loads = [float(l[0]) for l in sk["loads"]]
    return f"""## 7. Over a Unix socket: socket against TCP, and Redis both ways

Generated by `{res['command']}` on {res['started']} ({sk['seconds'] // 60} min of measuring;
{sk['reps']} interleaved repetitions of {sk['secs']:g} s after a 1 s warm-up). Same load
generator as above, connecting with `--addr unix:PATH` or `--addr 127.0.0.1:PORT`, one code
path for both (bench/src/target.rs). The servers each listen on both at once, so a peer's
socket and TCP rows are one process, measured back to back in every repetition:
`kubeflake-sidecar standalone --listen 127.0.0.1:PORT --listen-unix DIR/kubeflake.sock`,
`kubeflake-ceiling --listen 127.0.0.1:PORT --listen-unix DIR/ceiling.sock` (the bare
hyper server on the sidecar's own serve loop), and `redis-server --port PORT --unixsocket
DIR/redis.sock --unixsocketperm 700` (no persistence; {res['machine']['versions']['redis'].split(' sha=')[0]}).
Load average {' / '.join(res['load_before'])} (1/5/15 min) at the start, 1-minute load
{min(loads):.2f}–{max(loads):.2f} after each repetition. Anything else running shares
these {res['machine']['nproc']} cores; every row saw the same conditions, so read the
ratios, not the absolutes.

{socket_headline(res)}

{socket_ratio_table(res)}

{socket_table(res)}

**What `after` costs.** `GET /id?after=X` with X an ID the sidecar issued when the run
began ({sk['after']}), so it is below the clock and costs its parsing and one comparison;
against plain `GET /id`, both over TCP, same sidecar, same run:

{after_table(res)}

**Batches over the socket.** `GET /ids?count=100` at 1 connection (at more, 100 IDs a call
would reach the layout's own ceiling of 4,096,000 IDs/s and measure that):

{socket_batch_table(res)}"""


def chart(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = index(res["single"])
    peers = list(dict.fromkeys(p for p, _ in runs))
    conns = sorted({c for _, c in runs})
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    width = 0.8 / len(peers)
    for i, p in enumerate(peers):
        xs = [j + i * width for j in range(len(conns))]
        rps = [med([r["requests_per_s"] for r in runs.get((p, c), [])]) or 0 for c in conns]
        p99 = [med([r["p99_us"] for r in runs.get((p, c), [])]) or 0 for c in conns]
        axes[0].bar(xs, rps, width, label=p)
        axes[1].bar(xs, p99, width, label=p)
    for ax, title in ((axes[0], "Single ID: requests/s (higher is better)"),
                      (axes[1], "Single ID: p99 latency, µs (log; lower is better)")):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(conns))])
        ax.set_xticklabels([f"{c} conn." for c in conns])
        ax.set_title(title, fontsize=10)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    b = index(res["batches"])
    names = [p for p, c in b if c == 1]
    vals = [med([r["ids_per_s"] for r in b[(p, 1)]]) / 1e6 for p in names]
    axes[2].barh(range(len(names)), vals, color=["C0" if n.startswith("kubeflake") else "C2" for n in names])
    axes[2].axvline(LAYOUT_CEILING / 1e6, color="red", linestyle="--", label="layout ceiling 4.096M/s")
    axes[2].set_yticks(range(len(names)))
    axes[2].set_yticklabels([n.replace(" (a block per call)", "").replace(" (generate_series)", "") for n in names], fontsize=8)
    axes[2].set_xscale("log")
    axes[2].set_title("Batches, 1 connection: million IDs/s (log)", fontsize=10)
    axes[2].legend(fontsize=8)
    fig.suptitle(f"kubeflake side by side ({res['started']}, {res['machine']['nproc']} cores, "
                 f"medians of {res['reps']} runs)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def machine_note(res):
    """The load averages around the measurements, stated without a verdict: the 1-minute
    figure before still counts the release build bench/run does just before measuring."""
    return (f"Load average {' / '.join(res['load_before'])} (1/5/15 min) when the measurements "
            "began (these still count the release build that bench/run does just before "
            f"them, and anything else running) and {' / '.join(res['load_after'])} at the end. "
            "Repetitions are interleaved (every peer once, then again), so drift during the "
            "run affects every peer alike; compare ratios across machines, not absolutes.")


def us(v):
    """Microseconds as the tables show them (from 1 ms on, in ms)."""
    if v is None:
        return "–"
    return f"{v / 1000:,.1f} ms" if v >= 1000 else f"{v:,.0f} µs"


TRANSPORTS = ("tcp", "unix")


def strict_rows(res):
    """(name, sidecars, transport, clients, values/s, p50 µs, p99 µs, refused, sidecars' CPU
    µs per value, writes/s, 409/s, reads/s). Runs before both transports were measured: nextval() over its unix
    socket, the sidecars over TCP."""
    nextval = {}
    for r in res["nextval"]:
        nextval.setdefault((r.get("transport", "unix"), r["connections"]), []).append(r)
    rows = []
    for transport, c in sorted(nextval, key=lambda k: (TRANSPORTS.index(k[0]), k[1])):
        rs = nextval[(transport, c)]
        rows.append(("PostgreSQL `nextval()`", None, transport, c,
                     med([r["requests_per_s"] for r in rs]),
                     med([r["p50_us"] for r in rs]), med([r["p99_us"] for r in rs]),
                     sum(r.get("refused", 0) for r in rs), None, None, None, None))
    for f in sorted(res["strict"], key=lambda f: TRANSPORTS.index(f.get("transport", "tcp"))):
        name = {"strict": "strict sequence",
                "snowflake": "Snowflake IDs (no coordination: the ceiling)"}.get(
                    f["sequence"], "segment sequence, blockSize 1000")
        rows.append((name, f["sidecars"], f.get("transport", "tcp"), f["clients"],
                     f["values_per_sec"], f.get("p50_us"), f.get("p99_us"), f.get("refused"),
                     f.get("sidecar_cpu_us_per_value"), f["lease_writes_per_sec"], f["conflicts_per_sec"],
                     f.get("lease_reads_per_sec")))
    return rows


def strict_table(res):
    lines = ["| peer | sidecars | transport | clients (connections) | values/s | p50 | p99 | "
             "refused | sidecars' CPU per value | lease writes/s | of which 409 | lease reads/s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    dash = lambda v, f: "-" if v is None else f(v)
    for (name, sidecars, transport, c, vps, p50, p99, refused, cpu, writes, conflicts,
         reads) in strict_rows(res):
        lines.append(f"| {name} | {dash(sidecars, str)} | {transport} | {c} | {num(vps)} | "
                     f"{us(p50)} | {us(p99)} | {dash(refused, num)} | "
                     f"{dash(cpu, lambda v: f'{v:.1f} µs')} | {dash(writes, num)} | "
                     f"{dash(conflicts, num)} | {dash(reads, lambda v: f'{v:.1f}')} |")
    return "\n".join(lines)


def and_list(items):
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def strict_verdicts(res):
    """The issue's acceptance, read off this run's rows (not hard-coded), per transport:
    each row against PostgreSQL reached the same way."""
    rows = strict_rows(res)
    out = []
    for transport in TRANSPORTS:
        here = [r for r in rows if r[2] == transport]
        nextval = {c: vps for name, s, t, c, vps, *_ in here if s is None}
        strict = {(s, c): vps for name, s, t, c, vps, *_ in here
                  if name == "strict sequence"}
        if not strict:
            continue
        Over = {"tcp": "Over TCP", "unix": "Over Unix sockets"}[transport]
        if (4, 16) in strict and 16 in nextval:
            a, b = strict[(4, 16)], nextval[16]
            out.append(f"- **{Over}: strict, 4 sidecars × 4 connections (16 "
                       f"clients), against `nextval()` at 16 connections**: {num(a)} against "
                       f"{num(b)} values/s, {ratio(a, b)} (the goal is at least 1×: "
                       f"{'met' if a >= b else 'not met'} in this run).")
        snowflake = {s: vps for name, s, t, c, vps, *_ in here
                     if name.startswith("Snowflake") and c == 16}
        if 4 in snowflake and 16 in nextval:
            a, b = snowflake[4], nextval[16]
            out.append(f"- **{Over}, the ceiling**: Snowflake IDs, which 4 "
                       f"sidecars serve from their own memory with no coordination at all, at "
                       f"4 × 4 connections: {num(a)} values/s, {ratio(a, b)} `nextval()` at 16"
                       + (f" and {ratio(a, snowflake[1])} the same 16 connections on 1 sidecar"
                          if 1 in snowflake else "")
                       + (f"; strict served {ratio(strict[(4, 16)], a)} of it"
                          if (4, 16) in strict else "") + ".")
        pairs = [(c, strict[(4, c)], strict[(1, c)]) for c in (1, 4, 16)
                 if (4, c) in strict and (1, c) in strict]
        if pairs:
            worse = [c for c, four, one in pairs if four < one]
            out.append(f"- **{Over}, 4 sidecars against 1**, strict, at " +
                       " / ".join(str(c) for c, *_ in pairs) + " clients: " +
                       " / ".join(ratio(four, one) for _, four, one in pairs) +
                       (" (4 sidecars served fewer values than 1 at " + and_list(worse) +
                        " clients)" if worse
                        else " (never fewer than 1 sidecar in this run)") + ".")
    return "\n".join(out)


def nextval_drift(res):
    """How nextval() at 16 connections moved between the repetitions before and after."""
    parts = []
    for transport in TRANSPORTS:
        at = lambda when: [r["requests_per_s"] for r in res["nextval"]
                           if r.get("when") == when and r["connections"] == 16
                           and r.get("transport", "unix") == transport]
        if at("before") and at("after"):
            parts.append(f"{num(med(at('before')))} before and {num(med(at('after')))} after "
                         f"over {'TCP' if transport == 'tcp' else 'its socket'} at 16 connections")
    return "; ".join(parts) or "all before"


def strict_handover(res):
    out = []
    for h in res.get("strict_handover", []):
        new = h.get("new_oracle_after_s")
        in_place = h.get("after_kill") == "RestartInPlace"
        what = ("then started again at once with its pod's identity and state dir, as the "
                "kubelet restarts a killed container" if in_place
                else "and was not restarted (its pod gone for good)")
        who = "its own pod again" if in_place else "another pod"
        out.append(
            f"**The hand-over gap, {'restart in place' if in_place else 'oracle lost'}**: "
            f"{h['clients']} clients on {h['sidecars']} sidecars "
            f"(oracle Lease `leaseDurationSeconds` {h.get('lease_duration_s', '?')}); "
            f"{h['killed_after_s']:.1f} s in, the oracle's process got `kill -9`, {what}. "
            f"The longest time without a value across all clients was "
            f"**{h['longest_gap_s']:.2f} s** "
            f"(from {h['gap_from_s']:+.2f} s to {h['gap_to_s']:+.2f} s after the kill; "
            f"before the kill the longest was {h['longest_gap_before_kill_s'] * 1000:,.1f} ms). "
            f"The oracle Lease began a new term ({who}) "
            f"{'after ' + format(new, '.2f') + ' s' if new is not None else 'not within the window'}; "
            f"meanwhile {h['refused']:,} requests were refused (each refused client waits 5 ms "
            f"before asking again) and {h['broken']:,} connections broke or could not be made "
            f"(the killed sidecar's clients then move to the next sidecar). "
            f"{h['values']:,} values in {h['window_s']:.0f} s, every client's values increasing.")
    return "\n\n".join(out) or "(the hand-over was not measured in this run)"


def strict_section(res):
    """Section 8, strict sequences beside PostgreSQL nextval() (`--only strict`)."""
    window = res.get("strict_window_s", 10)
    command = res.get("strict_command", "cargo test -p kubeflake-e2e --test bench_cluster -- "
                      "--ignored --nocapture bench_strict")
    return f"""## 8. Strict sequences beside PostgreSQL `nextval()`

Generated by `{res['command']}` on {res['started']} ({res['seconds'] // 60} min). One run:
PostgreSQL `nextval()` (linearizable too; a private server, reached over its unix
socket and over TCP on 127.0.0.1; {res['reps']} repetitions of {res['secs']} s, medians, some
before and the rest after the sidecars' rows, {nextval_drift(res)}) and
`{command}` (release build, the e2e control plane: one etcd, one kube-apiserver on this
machine, the sidecars as processes, each reached over TCP and over its Unix socket;
{window:g} s per row). Every row has the same client: `kubeflake-loadgen`'s closed loop
(one client thread, N keep-alive connections, one request in flight on each, 1 s of
warm-up), connection i to sidecar i mod sidecars with the oracle's sidecar last, so that 1
client of 4 sidecars asks a sidecar that forwards; on a strict sequence every
connection's values must increase or the run fails. Compare each row with `nextval()`
over the same transport. p50/p99: the latency of every answered request. Load average {' / '.join(res['load_before'])} at the start,
{' / '.join(res['load_after'])} at the end. What the figures mean:
[strict.md](strict.md#figures-measured).

{strict_table(res)}

{strict_verdicts(res)}

{strict_handover(res)}"""


FIGURES_BEGIN = "<!-- figures: written by `bench/run --only strict` (bench/report.py) -->"
FIGURES_END = "<!-- end of figures -->"


def strict_figures(res):
    """The figures part of docs/strict.md: the same run as section 8 of benchmarks.md."""
    return f"""{FIGURES_BEGIN}
`{res['command']}`, {res['started']}, one run on this machine ({res['machine']['nproc']} cores;
load average {' / '.join(res['load_before'])} at the start, {' / '.join(res['load_after'])} at
the end): PostgreSQL `nextval()` ({nextval_drift(res)}) and
`{res.get('strict_command', 'bench_strict')}`
(release build; one etcd and one kube-apiserver on this machine, the sidecars as processes;
every row driven by the same closed-loop load generator, one client thread, `GET /id` on
keep-alive connections, connection `i` to sidecar `i mod sidecars` with the oracle's
sidecar last; PostgreSQL and the sidecars each over TCP and over a Unix socket). Lease writes and reads are the API server's own count
of PATCH/PUT and of GET on Leases (a watch's events are not requests). The method in full:
[benchmarks.md, section 8](benchmarks.md).

{strict_table(res)}

{strict_verdicts(res)}

{strict_handover(res)}
{FIGURES_END}"""


def side_by_side_text(res):
    """Sections 1-5 of a full run (bench/templates/side-by-side.md)."""
    m = res["machine"]
    v = m["versions"]
    seg_table = segment_table(res)
    segment = (f"""### Segment mode against the database sequences it replaces

The segment-mode row above is a standalone sidecar started with
`kubeflake-sidecar {' '.join(res.get('segment_args', ['standalone', '--mode', 'segment']))}`: its counter lives in a file in the
state directory, and each block claim is a locked, fsynced write of that file (in a cluster
the counter is a Lease in the API server instead; the cluster section below has its write
rate). Redis `INCR` and PostgreSQL `nextval()` are its fair peers: dense integers from one
counter, one round trip per value.

{seg_table}""" if seg_table else "(segment mode was not measured in this run)")
    return f"""## Machine and method

- {m['nproc']} cores ({m.get('cpu', '?')}), {m.get('memory_gib', '?')} GiB, {m.get('os', '?')},
  kernel {m['kernel']}. {v['rustc']}; {v['redis']}; {v['postgres']}; {v['wrk']}.
- {machine_note(res)}
- Every server binds 127.0.0.1 (PostgreSQL: a unix socket only) and is started by the run:
  kubeflake standalone (release build, default layout 41/0/10/12 bits, 1 ms ticks); a bare
  hyper 1 server answering a constant ID with the sidecar's exact tokio/hyper setup
  (`kubeflake-ceiling`, the ceiling for any HTTP sidecar on this stack); redis-server with no
  persistence; a private PostgreSQL cluster (`initdb` in a temp dir, default settings).
- One load generator for all (`kubeflake-loadgen`, bench/src/load.rs): N keep-alive
  connections, closed loop (one request in flight per connection), one client thread,
  1 s warm-up, then {res['secs']} s measured; latency per request in an HDR histogram
  (3 significant digits). Redis: `INCR`, no pipelining; PostgreSQL: prepared
  `SELECT nextval('…')` over the socket. Single-ID figures: {res['reps']} repetitions,
  batches {res['batch_reps']}; tables give the median and the min–max spread.
- Ratios are ratios of medians. "kubeflake ÷ peer, p99" below 1 means kubeflake's p99 is lower.

## 1. One ID per request

{single_table(res)}

{segment}

Cross-check with wrk (HTTP peers only; wrk cannot speak RESP or the PostgreSQL protocol,
which is why the table above uses one load generator of our own for everyone):

{wrk_table(res)}

## 2. Batches

IDs per second. The layout's own ceiling is 2^sequenceBits IDs per tick per worker:
2^12 per 1 ms = 4,096,000 IDs/s at the defaults. kubeflake may run ahead of the clock by
at most the drift limit (2 s) and then refuses with 503 and `Retry-After` (the "refused"
column) rather than issue IDs from further in the future; so sustained batch throughput
per worker is the ceiling, and more needs more `sequenceBits` or more pods.

Which Redis row is the fair peer? `INCRBY key 1000` hands out a block of 1000 numbers in
one call, as `/ids?count=1000` does: same round trips, same result (the caller expands
the block). Pipelined `INCR` ×1000 makes Redis do 1000 operations per round trip and is
shown as the upper bound a client could get by pipelining. PostgreSQL gets 1000
`nextval()` per statement via `generate_series`.

{batch_table(res)}

## 3. In process: kubeflake's generator against Snowflake crates

`kubeflake-generators` (bench/src/bin/generators.rs): every thread calls the generator in a
loop for the same time; IDs/s summed over threads ({res['reps']} runs). A crate whose
generator needs `&mut self` is shared as a user would share it, behind a `Mutex`. All of
these use 4,096 IDs per ms (sonyflake: 256 per 10 ms), so a generator that is faster than
the layout either waits for the next tick (kubeflake with drift 0, snowflaked,
rs-snowflake, sonyflake) or borrows future ticks (kubeflake within its drift limit, shown
separately). rs-snowflake's `generate` reads the clock once per 4,096 IDs, so its IDs can
carry a time that is already past; sonyflake sleeps once its 256 IDs per 10 ms are used.

{generator_table(res)}

## 4. Footprint

{footprint_section(res)}

## 5. Cluster

From `cargo test --release -p kubeflake-e2e --test bench_cluster -- --ignored --nocapture
--test-threads=1` (a real etcd + kube-apiserver + kube-controller-manager on loopback, the
release operator and sidecars as local processes).

{cluster_section(res)}"""


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
