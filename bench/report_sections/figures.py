"""How the report writes a figure: medians, spreads, ratios and numbers as the tables show
them, and the names of the rows every section compares against."""

import statistics


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


def us(v):
    """Microseconds as the tables show them (from 1 ms on, in ms)."""
    if v is None:
        return "–"
    return f"{v / 1000:,.1f} ms" if v >= 1000 else f"{v:,.0f} µs"


def and_list(items):
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
