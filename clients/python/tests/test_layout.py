"""Decode and compose, from a layout as three /decode answers describe it."""

from datetime import datetime, timedelta, timezone

import pytest

from kubeflake.layout import Layout

ZERO = {"id": "0", "tick": 0, "datacenter": 0, "worker": 0, "sequence": 0, "time": "2025-01-01T00:00:00.000Z"}
LARGEST = {"id": "9223372036854775807", "tick": 2**41 - 1, "datacenter": 3, "worker": 255, "sequence": 4095,
           "time": "2094-09-07T15:47:35.551Z"}
ONE_TICK = {"id": "4194304", "tick": 1, "datacenter": 0, "worker": 0, "sequence": 0, "time": "2025-01-01T00:00:00.010Z"}


def layout() -> Layout:
    return Layout.from_decodes(ZERO, LARGEST, 63, ONE_TICK)


def test_the_widths_come_from_the_largest_id_and_the_unit_from_one_tick():
    l = layout()
    assert (l.timestamp_bits, l.datacenter_bits, l.worker_bits, l.sequence_bits) == (41, 2, 8, 12)
    assert l.time_unit == timedelta(milliseconds=10)
    assert l.epoch == datetime(2025, 1, 1, tzinfo=timezone.utc)


def test_compose_and_decode_are_inverse():
    l = layout()
    value = l.compose(tick=123456, datacenter=1, worker=200, sequence=4000)
    d = l.decode(value)
    assert (d.tick, d.datacenter, d.worker, d.sequence) == (123456, 1, 200, 4000)
    assert d.time == l.epoch + 123456 * timedelta(milliseconds=10)


def test_a_field_too_wide_for_its_bits_is_refused():
    with pytest.raises(ValueError, match="worker=256"):
        layout().compose(tick=1, worker=256)


def test_tick_at_gives_the_smallest_id_of_a_time_for_range_queries():
    l = layout()
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first = l.compose(tick=l.tick_at(when))
    assert l.decode(first).time == when


def test_a_layout_with_a_key_form_is_not_decoded_locally():
    assert Layout.from_decodes(ZERO, {**LARGEST, "key": "1", "shard": 3}, 63, ONE_TICK) is None
    rotated = {**LARGEST, "sequence": 4094}
    assert Layout.from_decodes(ZERO, rotated, 63, ONE_TICK) is None
