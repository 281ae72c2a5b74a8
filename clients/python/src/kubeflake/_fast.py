"""The sync client's buffer, with a path for next() that takes no lock (clients/SPEC.md,
"Prefetch"; the asyncio client, on one event loop, keeps kubeflake._buffer).

Why the fast path is safe without a lock (CPython with the GIL):

- Each batch becomes one C iterator once (a list's or a range's), and every ID leaves the
  buffer through one call of that iterator's `__next__`, directly or through the C
  iterators `islice` and `chain` over it. Such a call runs no Python code and does not
  release the GIL, so two threads never get the same item: uniqueness needs no lock.
  Batches are never copied into a second iterator, so no ID is reachable twice.
- The age bound: next() reads `(until, take)` as one attribute (one tuple, replaced whole
  under the lock), takes an ID, and only then reads the clock: an ID is served only if the
  clock, read after it left the buffer, is still before its batch's `until` (fetched_at +
  max_age). An ID taken too late is dropped (counted as expired), never served.
- Everything else (the next batch, the low-water mark, refills, waits, expiry) is the slow
  path, under the client's lock: the fast iterator returns None when the slow path is due,
  after at most `budget` IDs (the mark, or a short chunk while a refill is out).

Free-threaded CPython (3.13t, the GIL disabled) runs those `__next__` calls in parallel:
the argument above does not hold there, so `lock_free()` is False and every call takes
the locked path.
"""

from __future__ import annotations

import sys
from collections import deque
from itertools import chain, islice, repeat
from operator import length_hint

NEVER = float("inf")
SLOW = (0.0, repeat(None).__next__)  # the fast path's state when it must not serve: always None


def lock_free() -> bool:
    """Whether one C-level `__next__` call is atomic: False on free-threaded CPython."""
    gil = getattr(sys, "_is_gil_enabled", None)
    return gil is None or bool(gil())


class FastBuffer:
    """Batches in the order fetched, each one iterator; the one being served is the head.
    Every method runs under the client's lock; only the `take` that `fast()` returns runs
    outside it. Counters are kept per batch, not per ID: depth from the iterators'
    positions, IDs handed out from what was added, dropped and is left."""

    def __init__(self) -> None:
        self._batches: deque[tuple[float, object, int]] = deque()
        self._queued = 0     # IDs in self._batches
        self._head = iter(())
        self._head_at = 0.0
        self.added = 0
        self.expired = 0

    def add(self, fetched_at: float, ids) -> None:
        """A refill's IDs (a list, or a range for a segment refill), served after the rest."""
        self._batches.append((fetched_at, iter(ids), len(ids)))
        self._queued += len(ids)
        self.added += len(ids)

    def depth(self) -> int:
        return length_hint(self._head) + self._queued

    def handed_out(self) -> int:
        return self.added - self.expired - self.depth()

    def take(self, now: float, max_age: float | None) -> int | None:
        """The next ID under the lock, or None when the buffer is empty. A batch fetched
        longer ago than `max_age` is dropped (gaps, never reused), not served."""
        while True:
            if max_age is not None and now - self._head_at > max_age:
                # list() drains the iterator in one C call: no fast-path caller can take
                # one of the IDs counted here after the count.
                self.expired += len(list(self._head))
            else:
                value = next(self._head, None)
                if value is not None:
                    return value
            if not self._batches:
                return None
            self._head_at, self._head, size = self._batches.popleft()
            self._queued -= size

    def fast(self, budget: int, max_age: float | None) -> tuple[float, object]:
        """The fast path's `(until, take)`: `take()` gives up to `budget` IDs of the head
        batch, then None; `until` is when the head batch's IDs expire."""
        if budget <= 0:
            return SLOW
        until = NEVER if max_age is None else self._head_at + max_age
        return until, chain(islice(self._head, budget), repeat(None)).__next__

