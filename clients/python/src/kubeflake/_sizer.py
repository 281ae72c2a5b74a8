"""How many IDs the next refill asks for, and when it is asked (clients/SPEC.md, "The
prefetch buffer" and "Range refills are sized and timed so that no caller waits"): one
copy for the sync and the asyncio client, called under the sync client's lock or from
the asyncio client's one event loop."""

from __future__ import annotations

import math

from ._policy import Settings, low_water, next_batch_size


class Pace:
    """A segment buffer's refill time and rate: the low-water mark is what two refills
    take at the rate values leave the buffer, so a refill asked at it arrives while about
    one refill's worth of values is still left."""

    def __init__(self) -> None:
        self.refill_seconds: float | None = None  # exponential mean, weight 1/4 to the newest
        self.rate = 0.0                           # values handed out per second
        self._last_at: float | None = None
        self._last_handed_out = 0

    def arrived(self, now: float, took: float, handed_out: int) -> None:
        """A refill that took `took` seconds arrived at `now`, when `handed_out` values had
        left the buffer in all."""
        if self.refill_seconds is None:
            self.refill_seconds = took
        else:
            self.refill_seconds += (took - self.refill_seconds) / 4
        if self._last_at is not None and now > self._last_at:
            self.rate = (handed_out - self._last_handed_out) / (now - self._last_at)
        self._last_at, self._last_handed_out = now, handed_out

    def low_water(self, batch: int, ceiling: int) -> int:
        """max(batch // 2, ceil(2 x refill time x rate)), at most `ceiling`."""
        need = math.ceil(2 * (self.refill_seconds or 0.0) * self.rate)
        return min(max(batch // 2, min(need, ceiling)), ceiling)


class Sizer:
    """The batch size (Leaf's rule, within [min_batch, the ceiling]: max_range for a
    /range refill, else max_batch) and the low-water mark (half a batch; in segment mode
    the Pace's mark when that is more)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.batch = settings.min_batch
        self.max_batch = settings.max_batch
        self.max_range = settings.max_range
        self.low = low_water(self.batch)
        self.pace = Pace()
        self._last_refill_at: float | None = None

    def ceiling(self, ranges: bool) -> int:
        return self.max_range if ranges else self.max_batch

    def request(self, ranges: bool) -> int:
        """What the next refill asks for; `ranges`: it asks /range."""
        return min(self.batch, self.ceiling(ranges))

    def too_large(self, size: int, ranges: bool) -> bool:
        """A 400 to a refill of `size` (a sidecar with a smaller --max-batch, or --max-range
        when `ranges`): ask for half from now on. False when one ID was refused."""
        if size <= 1:
            return False
        if ranges:
            self.max_range = size // 2
        else:
            self.max_batch = size // 2
        self.batch = min(self.batch, self.ceiling(ranges))
        return True

    def refilled(self, now: float, took: float, handed_out: int, segment: bool, ranges: bool) -> None:
        """A refill arrived at `now` (time.monotonic()): size the next one by how long the
        last lasted, and set the low-water mark."""
        lasted = None if self._last_refill_at is None else now - self._last_refill_at
        self._last_refill_at = now
        ceiling = self.ceiling(ranges)
        self.batch = min(next_batch_size(self.batch, lasted, self.settings, ceiling), ceiling)
        if segment:
            self.pace.arrived(now, took, handed_out)
            self.low = self.pace.low_water(self.batch, ceiling)
        else:
            self.low = low_water(self.batch)
