"""Decode and compose IDs from a sequence's layout, read once from the sidecar.

The sidecar does not serve its layout as such; `Layout.probe_plan()` names three IDs whose
`/decode` answers give it: 0 (the epoch), the largest ID (every field at its maximum, so
each field's width) and the lowest timestamp bit (the time unit). Layouts with a key form
(shard bits, bit-reversed or rotating-start keys: docs/layouts.md) store their fields in
other numbers; for them `from_decodes` returns None and decoding stays with the sidecar.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from .errors import BadRequest


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Decoded:
    """An ID's fields, as `/decode` gives them."""

    id: int
    tick: int
    datacenter: int
    worker: int
    sequence: int
    time: datetime


@dataclass(frozen=True)
class Layout:
    total_bits: int
    timestamp_bits: int
    datacenter_bits: int
    worker_bits: int
    sequence_bits: int
    epoch: datetime
    time_unit: timedelta

    # The IDs whose /decode answers describe a layout: 0, the largest, the lowest tick bit.
    @staticmethod
    def largest_candidates() -> tuple[int, int]:
        return (2**63 - 1, 2**53 - 1)

    @classmethod
    def from_decodes(cls, zero: dict, largest: dict, total_bits: int,
                     one_tick: dict | None) -> "Layout | None":
        """The layout from `/decode` of 0, of the largest ID and of the ID with only the
        lowest timestamp bit set; None when the answers are not those of a plain
        (key-form free) layout, so that local decoding cannot be trusted."""
        if "fields" in largest or "key" in largest or "shard" in largest:
            return None
        widths = []
        for name in ("tick", "datacenter", "worker", "sequence"):
            value = int(largest[name])
            if value & (value + 1):  # not 2^k - 1: a rotated or reversed field
                return None
            widths.append(value.bit_length())
        if sum(widths) != total_bits or one_tick is None:
            return None
        epoch = _parse_time(zero["time"])
        unit = _parse_time(one_tick["time"]) - epoch
        if int(one_tick["tick"]) != 1 or unit <= timedelta(0):
            return None
        return cls(total_bits, *widths, epoch=epoch, time_unit=unit)

    @property
    def sequence_shift(self) -> int:
        return 0

    @property
    def worker_shift(self) -> int:
        return self.sequence_bits

    @property
    def datacenter_shift(self) -> int:
        return self.sequence_bits + self.worker_bits

    @property
    def tick_shift(self) -> int:
        return self.sequence_bits + self.worker_bits + self.datacenter_bits

    def decode(self, value: int) -> Decoded:
        if not 0 <= value < 2**self.total_bits:
            raise ValueError(f"{value} is not an ID of this layout: IDs are below 2^{self.total_bits}")

        def field(shift: int, bits: int) -> int:
            return (value >> shift) & ((1 << bits) - 1)

        tick = field(self.tick_shift, self.timestamp_bits)
        return Decoded(
            id=value,
            tick=tick,
            datacenter=field(self.datacenter_shift, self.datacenter_bits),
            worker=field(self.worker_shift, self.worker_bits),
            sequence=field(0, self.sequence_bits),
            time=self.epoch + tick * self.time_unit,
        )

    def compose(self, *, tick: int, datacenter: int = 0, worker: int = 0, sequence: int = 0) -> int:
        """The ID with these fields; ValueError if one does not fit its bits."""
        for name, value, bits in (("tick", tick, self.timestamp_bits),
                                  ("datacenter", datacenter, self.datacenter_bits),
                                  ("worker", worker, self.worker_bits),
                                  ("sequence", sequence, self.sequence_bits)):
            if not 0 <= value < 2**bits:
                raise ValueError(f"{name}={value} does not fit the layout's {bits} bits")
        return (tick << self.tick_shift | datacenter << self.datacenter_shift
                | worker << self.worker_shift | sequence)

    def tick_at(self, when: datetime) -> int:
        """The tick a time falls in: compose(tick=layout.tick_at(t)) is the smallest ID of
        that tick, for range queries by time."""
        if when.tzinfo is None:
            raise ValueError("give a timezone-aware datetime (UTC)")
        return max(0, (when - self.epoch) // self.time_unit)


def _decoded(doc: dict) -> Decoded:
    if doc.get("fields", ...) is None:
        raise ValueError(f"{doc.get('id')} is a segment value: it carries no fields")
    return Decoded(int(doc["id"]), int(doc["tick"]), int(doc["datacenter"]), int(doc["worker"]),
                   int(doc["sequence"]), _parse_time(doc["time"]))


def _read_layout(decode) -> Layout | None:
    """The layout from three /decode answers (see kubeflake.layout); `decode(path)` gives
    one as a dict and raises BadRequest for an ID outside the layout."""
    zero = decode("/decode/0")
    if zero.get("mode") == "Segment":
        return None
    largest, total = None, 0
    for total_bits in (63, 53):
        try:
            largest = decode(f"/decode/{2**total_bits - 1}")
            total = total_bits
            break
        except BadRequest:
            continue
    if largest is None or "tick" not in largest:
        return None
    tick_width = int(largest["tick"]).bit_length()
    one_tick = decode(f"/decode/{1 << (total - tick_width)}")
    return Layout.from_decodes(zero, largest, total, one_tick)
