"""kubeflake._runs: an /ids answer held as runs of consecutive IDs gives exactly the IDs,
and the errors, of the line by line parse."""

import random

import pytest

from kubeflake import errors
from kubeflake._policy import parse_ids
from kubeflake._runs import parse_runs


def _expand(parts) -> list[int]:
    return [v for part in parts for v in part]


def _both(body: bytes):
    """What each parse makes of `body`: its IDs, or "error"."""
    out = []
    for parse in (lambda b: parse_ids(b, "/ids"), lambda b: _expand(parse_runs(b, "/ids"))):
        try:
            out.append(parse(body))
        except errors.ProtocolError:
            out.append("error")
    return out


def test_a_snowflake_batch_is_one_run_per_millisecond():
    base = (1_900_000_000_000 << 22) | (5 << 12)
    ids = [base + ((i // 4096) << 22) + i % 4096 for i in range(10_000)]
    parts = parse_runs(b"\n".join(b"%d" % v for v in ids) + b"\n", "/ids")
    assert [type(p) for p in parts] == [range] * 3 and [len(p) for p in parts] == [4096, 4096, 1808]
    assert _expand(parts) == ids


@pytest.mark.parametrize("body", [
    b"998\n999\n1000\n",               # widths change: the line by line parse
    b"1999\n2000\n2001\n",             # a carry across every column
    b"1005\n2006\n",                   # the last digits one more, the rest not
    b"7\n8\n8\n9\n", b"5\n3\n4\n", b"0\n1\n", b"0007\n0008\n",
    b"9223372036854775806\n9223372036854775807\n", b"9223372036854775807\n9223372036854775808\n",
    b"", b"\n", b"1\n-2\n", b"1\nx\n", b"1_0\n11\n", b" 1\n 2\n", b"12\n13", b"1\n\n2\n",
])
def test_runs_agree_with_the_line_by_line_parse(body):
    ids, runs = _both(body)
    assert ids == runs


def test_runs_agree_with_the_line_by_line_parse_on_damaged_answers():
    """Answers of runs with one to three bytes replaced: every one parses to the same IDs,
    or is refused by both; a run is never taken on the strength of its ends alone."""
    rng = random.Random(58)
    for trial in range(3000):
        if trial % 2:
            values = [1000 + i for i in range(30)] + [5000 + i for i in range(30)]
        else:
            start = rng.randrange(10**18, 10**19 - 100)
            values = list(range(start, start + 40))
        body = bytearray(b"\n".join(b"%d" % v for v in values) + b"\n")
        for _ in range(rng.randint(1, 3)):
            body[rng.randrange(len(body))] = rng.choice(b"0123456789\n x")
        ids, runs = _both(bytes(body))
        assert ids == runs, bytes(body)
