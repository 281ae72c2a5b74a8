"""When a buffer refills (clients/SPEC.md, "Range refills are sized and timed so that no
caller waits", "a safe distance", and "Snowflake refills keep a safe distance too, bounded
by the age"), as the Java client's RefillPace and the Go client's pace: pure, the clock
given by the caller (seconds, time.monotonic() in the clients), not thread-safe (the sync
client calls it under its lock, the asyncio client from its one event loop).

The low-water mark covers `distance` times the slowest recent refill at the rate values
leave the buffer: a refill asked at the mark arrives, were it as slow as that one, while
about distance - 1 such refills' worth of values is still left. The refills' spread, not
their mean, empties a buffer (docs/notes/bench-2026-11-30-java-segment-refill.md).
"""

from __future__ import annotations

import math

MIN_DISTANCE = 2
MAX_DISTANCE = 16
CALM_REFILLS = 1000          # refills in a row without a wait that halve the distance
SLOW_HALF_LIFE = 10.0        # seconds: the slowest recent refill halves every this long
RANGES_AHEAD = 8             # the mark is at most this many refill ceilings


class Pace:
    """The refills' mean and slowest recent duration, the rate values leave the buffer
    (the time it was empty left out), and the safe distance."""

    def __init__(self) -> None:
        self.refill_seconds = 0.0  # exponential mean of the refills' durations, 1/4 to the newest
        self.slow = 0.0            # the slowest recent refill, s: a longer one at once, then halving
        self.rate = 0.0            # values handed out per second while the buffer was not empty
        self.distance = MIN_DISTANCE
        self._last_at = 0.0
        self._last_handed_out = 0
        self._arrivals = 0         # up to 2: the rate is measured from the second
        self._calm = 0             # refills since the last wait
        self._hungry = False       # a caller waited since the last arrival

    def arrived(self, now: float, took: float, handed_out: int, empty: float = 0.0) -> None:
        """A refill that took `took` seconds arrived at `now`, when `handed_out` values had
        left the buffer in all, and the buffer had been empty (callers waiting) for the last
        `empty` seconds since the previous arrival. The rate is measured over the rest of the
        interval: while callers wait, values leave at the sidecar's pace, not the demand's,
        and a rate measured then would lower the mark just when it proved too low. A higher
        rate is taken at once, a lower one a quarter of the way."""
        if self._arrivals == 0:
            self.refill_seconds = took
            self.slow = took
        else:
            self.refill_seconds += (took - self.refill_seconds) / 4
            decay = 0.5 ** ((now - self._last_at) / SLOW_HALF_LIFE)
            self.slow = max(took, self.slow * decay)
            busy = now - self._last_at - empty
            if busy > 0:
                sample = (handed_out - self._last_handed_out) / busy
                self.rate = sample if sample >= self.rate else self.rate + (sample - self.rate) / 4
        self._arrivals = min(self._arrivals + 1, 2)
        self._last_at, self._last_handed_out = now, handed_out
        self._hungry = False
        self._calm += 1
        if self._calm >= CALM_REFILLS:
            self._calm = 0
            self.distance = max(MIN_DISTANCE, self.distance // 2)

    def waited(self) -> None:
        """A caller found the buffer empty: the mark was too low for the refills' spread.
        Doubles the distance once per empty buffer (however many callers wait), once the
        rate is measured (the first refills' waits are the start, not a spread)."""
        if self._hungry or self._arrivals < 2:
            return
        self._hungry = True
        self._calm = 0
        self.distance = min(MAX_DISTANCE, self.distance * 2)

    def low_water(self, batch: int, ceiling: int) -> int:
        """max(batch // 2, ceil(distance x slowest recent refill x rate)), at most `ceiling`."""
        need = math.ceil(self.distance * self.slow * self.rate)
        return min(max(batch // 2, min(need, ceiling)), ceiling)

    def snowflake_low_water(self, batch: int, ceiling: int, max_age: float | None) -> int:
        """A Snowflake buffer's mark: low_water's, but Snowflake IDs age, so with a
        `max_age` (None: forever) at most what the rate hands out in half of it, less a
        batch (an ID asked at the mark then leaves the buffer within max_age / 2 at that
        rate instead of expiring); never below half a batch (so half a batch until the rate
        is measured, and when max_age leaves no room)."""
        bound = ceiling
        if max_age is not None:
            bound = min(bound, math.floor(self.rate * max_age / 2) - batch)
        if bound <= batch // 2:
            return batch // 2
        return self.low_water(batch, bound)
