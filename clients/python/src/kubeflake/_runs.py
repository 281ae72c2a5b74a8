"""An /ids answer as runs of consecutive IDs, checked byte for byte at the speed of C.

The sync client's refill thread parses up to 10,000 IDs a refill inside the GIL it shares
with the callers; `int()` or `json` per line costs about as much as the callers' next()
(docs/notes/bench-2026-12-01-py-node-fast-path.md). Most lines of a Snowflake batch are the
previous plus one (one run per millisecond), so a batch is held as a few `range`s instead.

How a run is proven, not assumed: when every line has the same width (the sidecar's IDs of
one batch have the same number of digits), the answer is a grid, and a column of it (the
k-th digit from the right of every line) is one strided slice. The k-th digits of first,
first + 1, ..., first + count - 1 are a known pattern, built with bytes repetition; a run
is accepted only when each of its columns, and the newline column, equals the pattern. So
every byte of the answer is compared with the text of the values the runs stand for. Where
a run ends is found by bisection on the parsed lines (a guess, right for an increasing
answer); a wrong guess only fails the comparison. Anything else (lines of mixed widths, a
run that does not compare equal) falls back to `_policy.parse_ids`, which says what is
wrong.
"""

from __future__ import annotations

from ._policy import parse_ids

# The k-th digit from the right of 0, 1, ..., 10^(k+1) - 1, as ASCII: what the column of a
# run repeats, for the columns that change within a few lines.
_PATTERNS = [bytes(48 + (v // 10**k) % 10 for v in range(10 ** (k + 1))) for k in range(4)]
_MAX_ID = 2**63 - 1


def parse_runs(body: bytes, what: str) -> list:
    """The IDs of an /ids answer as runs (`range`s), or as one list when they are not a
    grid of runs; a ProtocolError when they are not IDs (as `parse_ids`)."""
    runs = _runs(body)
    return [parse_ids(body, what)] if runs is None else runs


def _runs(body: bytes) -> list[range] | None:
    width = body.find(b"\n") + 1
    if not 2 <= width <= 20 or len(body) % width:
        return None
    lines = len(body) // width
    digits = width - 1
    if body[digits::width] != b"\n" * lines:
        return None

    def line(j: int) -> int:
        return int(body[j * width:j * width + digits])

    runs: list[range] = []
    i = 0
    while i < lines:
        try:
            first = line(i)
            good, bad = 1, lines - i + 1  # a run of `good` lines is likely; one of `bad` is not
            if line(lines - 1) == first + lines - 1 - i:
                good = lines - i
            while bad - good > 1:
                mid = (good + bad) // 2
                if line(i + mid - 1) == first + mid - 1:
                    good = mid
                else:
                    bad = mid
        except ValueError:
            return None
        if first + good - 1 > min(_MAX_ID, 10**digits - 1) or not _is_run(body, width, i, good, first):
            return None
        runs.append(range(first, first + good))
        i += good
    return runs


def _is_run(body: bytes, width: int, i: int, count: int, first: int) -> bool:
    """Whether lines i to i + count - 1 read first, first + 1, ... exactly."""
    block = body[i * width:(i + count) * width]
    digits = width - 1
    return all(block[digits - 1 - k::width] == _column(first, count, k) for k in range(digits))


def _column(first: int, count: int, k: int) -> bytes:
    """The k-th digit from the right of first, first + 1, ..., first + count - 1."""
    if k < len(_PATTERNS):
        period = 10 ** (k + 1)
        start = first % period
        return (_PATTERNS[k] * ((start + count) // period + 1))[start:start + count]
    unit, parts, value, end = 10**k, [], first, first + count
    while value < end:
        step = min(end, (value // unit + 1) * unit) - value
        parts.append(bytes((48 + (value // unit) % 10,)) * step)
        value += step
    return b"".join(parts)
