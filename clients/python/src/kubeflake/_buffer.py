"""The IDs taken ahead, and what next() decides from them: one copy for the sync and the
asyncio client (clients/SPEC.md, "Prefetch"). Not thread-safe by itself: the sync client
calls it under its lock, the asyncio client from its one event loop.
"""

from __future__ import annotations

from collections import deque

from .errors import KubeflakeError, NoSidecar


class Buffer:
    """Batches in the order fetched (segment values leave in the order the sidecar issued
    them), the one being served, and the counters kept in `stats`."""

    def __init__(self, stats) -> None:
        self.stats = stats
        self._batches: deque[tuple[float, list[int]]] = deque()
        self._head: list[int] = []
        self._head_at = 0.0
        self._pos = 0

    def add(self, fetched_at: float, ids: list[int]) -> None:
        self._batches.append((fetched_at, ids))
        self.stats.buffer_depth += len(ids)

    def take(self, now: float, max_age: float | None) -> int | None:
        """The next buffered ID, or None when the buffer is empty. With `max_age`, a batch
        fetched longer ago than that is dropped (gaps, never reused), not served."""
        while True:
            if self._pos < len(self._head):
                if max_age is not None and now - self._head_at > max_age:
                    dropped = len(self._head) - self._pos
                    self.stats.expired += dropped
                    self.stats.buffer_depth -= dropped
                    self._head, self._pos = [], 0
                    continue
                value = self._head[self._pos]
                self._pos += 1
                self.stats.buffer_depth -= 1
                self.stats.ids += 1
                return value
            if not self._batches:
                return None
            self._head_at, self._head = self._batches.popleft()
            self._pos = 0


def wait_left(started: float, now: float, max_wait: float, error: KubeflakeError | None,
              retry_at: float, endpoint) -> float:
    """How long next() may still wait for a refill, having waited since `started`; raises
    the error next() must give instead once `max_wait` is over, or at once when the
    sidecar asked (Retry-After) to wait past it: the last refill's, else NoSidecar."""
    remaining = started + max_wait - now
    if remaining <= 0 or (error is not None and retry_at > started + max_wait):
        raise error or NoSidecar(
            f"no ID from the kubeflake sidecar at {endpoint} within {max_wait} s (max_wait)")
    return remaining
