"""Sections 1-5 of docs/benchmarks.md, from a full run's raw results (`bench/run
side-by-side`; bench/templates/side-by-side.md): the machine and method, one ID per
request, segment mode, batches, the in-process generators, the footprint and the cluster
figures; and `headline`, the summary lines of the page."""

from .figures import DB_PEERS, KUBEFLAKE, LAYOUT_CEILING, SEGMENT, index, med, num, ratio, spread
from .unix_socket import socket_headline


def machine_note(res):
    """The load averages around the measurements, stated without a verdict: the 1-minute
    figure before still counts the release build bench/run does just before measuring."""
    return (f"Load average {' / '.join(res['load_before'])} (1/5/15 min) when the measurements "
            "began (these still count the release build that bench/run does just before "
            f"them, and anything else running) and {' / '.join(res['load_after'])} at the end. "
            "Repetitions are interleaved (every peer once, then again), so drift during the "
            "run affects every peer alike; compare ratios across machines, not absolutes.")


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
