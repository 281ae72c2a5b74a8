"""How many IDs the next refill asks for, and when it is asked (clients/SPEC.md, "The
prefetch buffer" and "Range refills are sized and timed so that no caller waits"): one
copy for the sync and the asyncio client, called under the sync client's lock or from
the asyncio client's one event loop. The mark's rules are kubeflake._pace's."""

from __future__ import annotations

import math

from ._pace import RANGES_AHEAD, Pace
from ._policy import Settings, low_water, next_batch_size


class Sizer:
    """The batch size (Leaf's rule, within [min_batch, the ceiling]: max_range for a
    /range refill, else max_batch; in segment mode at least what one refill period takes
    at the measured rate) and the low-water mark: half a batch, or a safe distance ahead
    (the Pace's) when that is more, up to RANGES_AHEAD ceilings, and for Snowflake IDs
    within half of max_age at the rate, less a batch (the Java client's BatchSizer)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.batch = settings.min_batch
        self.max_batch = settings.max_batch
        self.max_range = settings.max_range
        self.low = low_water(self.batch)
        self.pace = Pace()
        self._last_refill_at: float | None = None
        self._snowflake = False  # the last refill was a Snowflake one: max_age bounds the mark
        self._ranges = False     # the last segment refill asked /range

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

    def refilled(self, now: float, took: float, handed_out: int, segment: bool, ranges: bool,
                 empty: float = 0.0) -> None:
        """A refill that took `took` arrived at `now` (time.monotonic()), when `handed_out`
        values had left the buffer in all, which had been empty for the last `empty`
        seconds: size the next one by how long the last lasted, and set the mark."""
        lasted = None if self._last_refill_at is None else now - self._last_refill_at
        self._last_refill_at = now
        ceiling = self.ceiling(ranges)
        self.batch = min(next_batch_size(self.batch, lasted, self.settings, ceiling), ceiling)
        self.pace.arrived(now, took, handed_out, empty)
        self._snowflake, self._ranges = not segment, ranges
        if segment:
            # A range costs the same whatever its length: reach one refill period at the
            # rate at once, instead of doubling from min_batch.
            per_period = math.ceil(self.pace.rate * self.settings.refill_period)
            self.batch = min(max(self.batch, per_period), ceiling)
        self._mark()

    def waited(self) -> None:
        """A caller found the buffer empty: the mark moves a safe distance further ahead."""
        self.pace.waited()
        self._mark()

    def _mark(self) -> None:
        ceiling = RANGES_AHEAD * self.ceiling(self._ranges and not self._snowflake)
        if self._snowflake:
            self.low = self.pace.snowflake_low_water(self.batch, ceiling, self.settings.max_age)
        else:
            self.low = self.pace.low_water(self.batch, ceiling)
