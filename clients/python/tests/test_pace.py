"""clients/SPEC.md, "a safe distance" and "Snowflake refills keep a safe distance too,
bounded by the age": kubeflake._pace and the Sizer's mark, pure, with the clock given
(the Go client's pace_test.go and snowflake_pace_test.go, the Java client's
RangePacingTest and SnowflakePacingTest, with the same figures)."""

from __future__ import annotations

import pytest

from kubeflake._pace import CALM_REFILLS, MAX_DISTANCE, MIN_DISTANCE, RANGES_AHEAD, Pace
from kubeflake._policy import Settings
from kubeflake._sizer import Sizer

T0 = 1000.0
MS = 0.001


def test_a_wait_doubles_the_safe_distance_once_per_empty_buffer_up_to_its_bound():
    p = Pace()
    p.waited()
    assert p.distance == MIN_DISTANCE, "a wait before the rate is measured is the start, not a spread"
    p.arrived(T0, MS, 0)
    p.arrived(T0 + 1, MS, 10_000_000)  # 10M values/s, refills of 1 ms
    assert p.low_water(64, 1_000_000) == 20_000, "2 x 1 ms x 10M/s"
    p.waited()
    p.waited()  # another caller on the same empty buffer
    assert p.low_water(64, 1_000_000) == 40_000, "4 x 1 ms x 10M/s: once per empty buffer"
    for i in range(10):
        p.arrived(T0 + 2 + i * MS, MS, 10_000_000 + 10_000 * (i + 1))
        p.waited()
    assert p.distance == MAX_DISTANCE
    for i in range(CALM_REFILLS):
        p.arrived(T0 + 3 + i * MS, MS, 20_000_000)
    assert p.distance == MAX_DISTANCE // 2, "calm refills halve it"


def test_the_rate_leaves_out_the_time_the_buffer_was_empty_and_falls_a_quarter_of_the_way():
    p = Pace()
    p.arrived(T0, MS, 0)
    p.arrived(T0 + 0.1, MS, 1_000_000)
    assert p.rate == pytest.approx(10_000_000), "1M values in 100 ms"
    # 1M values in the next 100 ms, 90 of which the callers waited: 100M values/s while served.
    p.arrived(T0 + 0.2, MS, 2_000_000, empty=0.09)
    assert p.rate == pytest.approx(100_000_000), "a higher rate is taken at once"
    p.arrived(T0 + 0.3, MS, 2_000_000)
    assert p.rate == pytest.approx(75_000_000), "a quiet interval lowers it a quarter of the way"


def test_the_mark_covers_the_slowest_recent_refill_which_halves_every_ten_seconds():
    p = Pace()
    p.arrived(T0, MS, 0)
    p.arrived(T0 + 0.1, MS, 1_000_000)  # 10M values/s, refills of 1 ms
    assert p.low_water(64, 100_000_000) == 20_000
    p.arrived(T0 + 0.2, 30 * MS, 2_000_000)
    assert p.low_water(64, 100_000_000) == 600_000, "one refill of 30 ms: 2 x 30 ms x 10M/s (not the mean)"
    p.arrived(T0 + 10.2, MS, 102_000_000)  # 10 s later, still 10M values/s
    assert p.low_water(64, 100_000_000) == 300_000, "10 s on, half of it"


def test_a_segment_mark_is_at_most_eight_ceilings_and_the_next_range_covers_a_refill_period():
    s = Sizer(Settings(min_batch=64, max_batch=100, max_range=10_000))
    s.refilled(T0, 50 * MS, 0, segment=True, ranges=True)
    s.refilled(T0 + 1, 50 * MS, 1_000_000, segment=True, ranges=True)  # 1M values/s, refills of 50 ms
    assert s.batch == 10_000, "at least 1M/s x 100 ms, within max_range: not 128 from doubling"
    assert s.low == RANGES_AHEAD * 10_000, "2 x 50 ms x 1M/s = 100,000, capped at 8 x max_range"
    s.refilled(T0 + 1.1, 50 * MS, 1_100_000, segment=True, ranges=False)  # the /ids fallback
    assert s.batch == 100 and s.low == RANGES_AHEAD * 100, "on /ids the ceiling is max_batch"


def _measured_snowflake(max_age: float | None, took: float) -> Sizer:
    """Batches of 10,000 from the start; refills of `took`, 3,690,000 IDs/s between them
    (461,250 in 125 ms: binary fractions, so that the rate is exact)."""
    s = Sizer(Settings(min_batch=10_000, max_batch=10_000, max_age=max_age))
    s.refilled(T0, took, 0, segment=False, ranges=False)
    s.refilled(T0 + 0.125, took, 461_250, segment=False, ranges=False)
    return s


def test_the_snowflake_mark_is_half_a_batch_until_the_rate_is_measured():
    s = Sizer(Settings(min_batch=10_000, max_batch=10_000))
    s.refilled(T0, 5 * MS, 0, segment=False, ranges=False)
    assert s.low == 5_000


def test_the_snowflake_mark_covers_two_slowest_refills_at_the_rate_up_to_eight_batches():
    assert _measured_snowflake(1.0, 5 * MS).low == 36_900, "2 x 5 ms x 3.69M/s, not half a batch"
    assert _measured_snowflake(1.0, 50 * MS).low == 80_000, "at most 8 batches"


@pytest.mark.parametrize("max_age, want, why", [
    (20 * MS, 26_900, "3.69M/s x 10 ms, less a batch"),
    (10 * MS, 8_450, "3.69M/s x 5 ms, less a batch"),
    (5 * MS, 5_000, "half a batch when max_age leaves no room (9,225 - 10,000)"),
    (None, 36_900, "no max_age: no bound but 8 batches"),
])
def test_the_snowflake_mark_never_holds_more_than_half_of_max_age_at_the_rate_less_a_batch(max_age, want, why):
    assert _measured_snowflake(max_age, 5 * MS).low == want, why


def test_a_snowflake_wait_doubles_the_distance_within_max_age():
    s = _measured_snowflake(1.0, 5 * MS)
    s.waited()
    assert s.pace.distance == 4
    assert s.low == 73_800, "4 x 5 ms x 3.69M/s"
    young = _measured_snowflake(20 * MS, 5 * MS)
    young.waited()
    assert young.low == 26_900, "still within half of max_age"
