"""Section 7 of docs/benchmarks.md, over a Unix socket against TCP (`bench/run --only
socket`, or a full run; bench/templates/socket.md)."""

from .figures import KUBEFLAKE, med, num, ratio, spread


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
