"""Section 8 of docs/benchmarks.md, strict sequences beside PostgreSQL `nextval()`
(`bench/run --only strict`; bench/templates/strict.md), and the same run's figures between
the markers of docs/strict.md."""

from .figures import and_list, med, num, ratio, us


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
