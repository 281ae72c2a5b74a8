"""Section 9 of docs/benchmarks.md: where the IDs of N pods land (issue 25), from the JSON
lines of `kubeflake-hotspot` that `bench/run --only hotspot` collects. Used by report.py
(`--ingest`: the section's values are read back out of this text through
bench/templates/hotspot.md)."""

DEFAULT = "default (time-ordered)"


def pct(v):
    if v is None:
        return "–"
    if v >= 0.995:
        return f"{v * 100:.0f}%"
    return f"{v * 100:.1f}%" if v >= 0.01 else f"{v * 100:.2f}%"


def ideal(v):
    """An ideal share, 1/n, exactly enough to read: 6.25%, 1.56%, 1%."""
    return f"{v * 100:.3g}%"


def rates(res):
    seen = []
    for line in res["hotspot"]:
        if line["ids_per_s_per_pod"] not in seen:
            seen.append(line["ids_per_s_per_pod"])
    return seen


def lines_at(res, rate):
    return [l for l in res["hotspot"] if l["ids_per_s_per_pod"] == rate]


def find(res, rate, form):
    return next((l for l in lines_at(res, rate) if l["form"] == form), None)


def equal(line, ranges):
    return next((e["median"] for e in line["equal"] if e["ranges"] == ranges), None)


def modulo(line, n):
    return next((m["largest"] for m in line["modulo"] if m["n"] == n), None)


def rate_name(res, rate):
    low, high = min(rates(res)), max(rates(res))
    label = "low" if rate == low else "high" if rate == high else "middle"
    return f"{label} rate, {rate:,.0f} IDs/s per pod"


def summary_table(res, rate):
    first = lines_at(res, rate)[0]
    ranges = [e["ranges"] for e in first["equal"]]
    moduli = [m["n"] for m in first["modulo"]]
    head = (["key form", "bits"] + [f"{r} equal ranges (ideal {ideal(1 / r)})" for r in ranges]
            + ["split at size", "ranges at the end (ideal 1/ranges)"]
            + [f"`id % {n}` (ideal {ideal(1 / n)})" for n in moduli])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for l in lines_at(res, rate):
        s = l["split"]
        cells = ([l["form"], l["bits"]] + [pct(equal(l, r)) for r in ranges]
                 + [pct(s["median"]), f"{s['ranges_at_end']:,} ({ideal(1 / s['ranges_at_end'])})"]
                 + [pct(modulo(l, n)) for n in moduli])
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def over_time_table(res, rate):
    first = lines_at(res, rate)[0]
    w = first["window_secs"]
    count = len(first["split"]["hottest"])
    picks = sorted({i for i in (0, 1, 2, 3, 6, 12, count - 1) if 0 <= i < count})
    head = ["key form"] + [f"{i * w}–{(i + 1) * w} s" for i in picks]
    rows = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(picks)]
    for l in lines_at(res, rate):
        s = l["split"]
        rows.append("| " + " | ".join([l["form"]] + [
            f"{pct(s['hottest'][i])} ({s['ranges'][i]:,})" for i in picks]) + " |")
    return "\n".join(rows)


def reading(res):
    """What the numbers show per option, with the figures of this run."""
    lo, hi = min(rates(res)), max(rates(res))
    get = lambda rate, form: find(res, rate, form) or {"equal": [], "modulo": [], "split": {}}
    d_lo, d_hi = get(lo, DEFAULT), get(hi, DEFAULT)
    out = []
    out.append(
        f"- **Default (time-ordered)**: {pct(equal(d_lo, 16))} of every window's writes on one "
        f"range, at both rates and in both stores: the split store keeps splitting its last range "
        f"({d_hi['split'].get('ranges_at_end', '?')} ranges at the end of the high-rate run), "
        "but new IDs are always larger than every key written so far, so they all go to the "
        f"newest one. `id % 16`: {pct(modulo(d_lo, 16))} of the IDs on one residue at the low "
        f"rate (the sequence field is 0 and 16 divides 2^12), {pct(modulo(d_hi, 16))} at the "
        f"high rate (5 IDs per tick: sequence 0 is one ID in five); `id % 100` "
        f"{pct(modulo(d_lo, 100))} (with the sequence field at 0 every ID is a multiple of "
        "4,096, so only the 25 residues that are multiples of 4 occur).")
    shard = [(k, get(lo, f"shardBits {k}"), get(hi, f"shardBits {k}")) for k in (2, 4, 8)]
    parts = "; ".join(
        f"k = {k}: {pct(equal(h, 16))} on 16 equal ranges and {pct(equal(h, 64))} on 64 "
        f"(ideal {ideal(max(1 / 2 ** k, 1 / 16))} / {ideal(max(1 / 2 ** k, 1 / 64))}), split "
        f"store {pct(h['split'].get('median'))}, {pct(h['split']['hottest'][-1])} in the last "
        "window"
        for k, _, h in shard if h.get("equal"))
    out.append(
        "- **`shardBits` k** (taken from the timestamp): the hottest share falls from 100% to "
        f"1/2^k, at both rates (high rate: {parts}). With k = 8 the 16 or 64 equal ranges are "
        "the floor, and the split store approaches 1/256 only as it grows to hundreds of "
        "ranges. Gives up: raw IDs are ordered only within a shard (a time range is 2^k key "
        "ranges, one per shard; `kubectl kubeflake sql` prints the time-ordered key), and k "
        "timestamp bits: 41 − 8 = 33 bits of 1 ms ticks last 99 days instead of 69 years, so "
        "k = 8 needs a coarser time unit or the bits from `workerBits`/`sequenceBits`. "
        f"`id % 16` stays at {pct(modulo(shard[1][1], 16))} (the low bits are untouched).")
    b_lo, b_hi = get(lo, "bitReversed"), get(hi, "bitReversed")
    out.append(
        f"- **`bitReversed`**: on equal ranges {pct(equal(b_lo, 16))} at the low rate and "
        f"{pct(equal(b_hi, 16))} at the high: the sequence field's bits become the ID's top "
        "bits, and at one ID per tick they are 0, so every ID falls below 2^51, in the first "
        "of the equal ranges. Ranges split at the keys actually written spread it best of all "
        f"({pct(b_lo['split'].get('median'))} low, {pct(b_hi['split'].get('median'))} high: "
        "every range takes writes, so the hottest share is about 1/ranges). `id % 16`: "
        f"{pct(modulo(b_lo, 16))}, since the ID's low bits are the timestamp's top bits, which "
        "do not change for years. Gives up: any order at all in the raw IDs, and `id % N`.")
    r_lo = get(lo, "sequenceStart Rotating")
    out.append(
        f"- **`sequenceStart: Rotating`**: `id % 16` {pct(modulo(r_lo, 16))} and `id % 100` "
        f"{pct(modulo(r_lo, 100))} at the low rate (ideal 6.25% / 1%), where the default "
        f"puts {pct(modulo(d_lo, 16))} on one residue; ranges unchanged "
        f"({pct(equal(r_lo, 16))}): the IDs still grow tick by tick, and a query over a time "
        "range is still one key range. Gives up the order within a tick: a tick's sequence "
        "numbers start at an offset and wrap, so one pod's IDs of one tick do not always "
        "increase.")
    s_lo, x_lo = get(lo, "shardBits 4 + Rotating"), get(lo, "bitReversed + Rotating")
    out.append(
        f"- **Combined**: `shardBits 4` + Rotating gets both, {pct(equal(s_lo, 16))} on 16 "
        f"equal ranges and {pct(modulo(s_lo, 16))} for `id % 16` at the low rate. "
        f"`bitReversed` + Rotating fills the reversed top bits even at one ID per tick "
        f"({pct(equal(x_lo, 16))} on 16 equal ranges, {pct(equal(x_lo, 64))} on 64), but "
        f"`id % 16` stays at {pct(modulo(x_lo, 16))}.")
    return "\n".join(out)


def hotspot_section(res):
    """Section 9 (`bench/run --only hotspot`)."""
    lines = res.get("hotspot") or []
    if not lines:
        return "## 9. Hotspots\n\n(not simulated in this run)"
    first = lines[0]
    m = res["machine"]
    tables = "\n\n".join(
        f"**{rate_name(res, rate)}** ({lines_at(res, rate)[0]['ids']:,} IDs over "
        f"{first['secs']} s; the split store splits past "
        f"{lines_at(res, rate)[0]['split_keys']:,} keys), hottest range's share, median over "
        f"the windows after the first; `id % N`: the largest residue class over the run:\n\n"
        f"{summary_table(res, rate)}" for rate in rates(res))
    over_time = "\n\n".join(
        f"**{rate_name(res, rate)}**, store split at size: hottest range's share in the window "
        f"(ranges when it began):\n\n{over_time_table(res, rate)}" for rate in rates(res))
    days = first["start_tick"] // 86_400_000
    return f"""## 9. Hotspots: where the IDs land in a range-partitioned store and under `id % N`

Generated by `{res['command']}` on {res['started']}, which ran
`{res['hotspot_command']}`
(bench/src/hotspot.rs; {res.get('hotspot_seconds', '?')} s on {m['nproc']} cores,
{m.get('cpu', '?')}, {m['versions']['rustc']}). A simulation, not a store: simulated time
and a seeded PRNG, so the figures are the same on every machine, and the tests in
bench/src/hotspot/tests.rs assert them on shorter runs.

{first['pods']} pods (slots 0–{first['pods'] - 1}, datacenter 0) issue IDs at Poisson instants for
{first['secs']} simulated seconds, starting {days} days after the epoch, 1 ms ticks. Each ID
is the sidecar's: position
`max(last + 1, now_tick << sequenceBits)` per pod, turned into an ID by the real
`Layout::id_at` of each key form (the default 41/0/10/12 and its options; shard bits come
out of the timestamp). The stores: R *equal ranges* splitting [0, 2^63) evenly (a table
pre-split by key), and a *split-at-size* store that starts as one range and splits a range
at its median key once it holds more than S keys, as CockroachDB splits by size (S chosen so
that both rates end with a few hundred ranges). The figure is the hottest range's share of
each {first['window_secs']} s window's writes. The split store is read through its ranges as
they were when the window began: a range that splits during a window counts as one until
the window ends (both halves stay on the same nodes until a rebalancer moves one), so the
last range of a time-ordered table, which keeps splitting, shows as the one hot range it is.

{tables}

Over time (the acceptance of issue 25: from ~100% toward 1/2^k):

{over_time}

What the numbers show:

{reading(res)}"""
