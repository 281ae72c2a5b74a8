package io.kubeflake.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/**
 * clients/SPEC.md, "Range refills are sized and timed so that no caller waits", for Snowflake
 * buffers: the low-water mark keeps a safe distance of (slowest recent) refills at the measured
 * rate, as segment's, but never holds more IDs than the rate hands out in half of maxAge (less a
 * batch), so that buffered IDs are handed out young instead of expiring
 * (docs/notes/bench-2026-11-30-java-paced.md: with half a batch, a caller at 0.9x the default
 * layout's ceiling waited whenever one refill took over 1.35 ms).
 */
class SnowflakePacingTest {
    static final long MS = 1_000_000L;

    /** Batches of 10,000 from the start; refills of {@code took}, 3,690,000 IDs/s between them. */
    static BatchSizer measured(long maxAge, long took) {
        BatchSizer b = new BatchSizer(10_000, 10_000, 1_000_000, 100 * MS, maxAge);
        b.refilled(1000 * MS, took, 0, 0);
        b.refilled(1100 * MS, took, 369_000, 0);
        return b;
    }

    @Test
    void theMarkIsHalfABatchUntilTheRateIsMeasured() {
        BatchSizer b = new BatchSizer(10_000, 10_000, 1_000_000, 100 * MS, 1000 * MS);
        b.refilled(1000 * MS, 5 * MS, 0, 0);
        assertEquals(5_000, b.lowWater());
    }

    @Test
    void theMarkCoversTwoSlowestRefillsAtTheMeasuredRate() {
        assertEquals(36_900, measured(1000 * MS, 5 * MS).lowWater(), "2 x 5 ms x 3.69M/s, not half a batch");
        assertEquals(80_000, measured(1000 * MS, 50 * MS).lowWater(), "at most 8 batches");
    }

    @Test
    void theMarkNeverHoldsMoreThanHalfOfMaxAgeAtTheRate() {
        assertEquals(26_900, measured(20 * MS, 5 * MS).lowWater(), "3.69M/s x 10 ms, less a batch");
        assertEquals(8_450, measured(10 * MS, 5 * MS).lowWater(), "3.69M/s x 5 ms, less a batch");
        assertEquals(5_000, measured(5 * MS, 5 * MS).lowWater(), "half a batch when maxAge leaves no room (9,225 - 10,000)");
        assertEquals(36_900, measured(Long.MAX_VALUE, 5 * MS).lowWater(), "no maxAge: no bound but 8 batches");
    }

    @Test
    void aCallerFindingTheBufferEmptyDoublesTheDistanceWithinMaxAge() {
        BatchSizer b = measured(1000 * MS, 5 * MS);
        b.waited();
        assertEquals(4, b.distance());
        assertEquals(73_800, b.lowWater(), "4 x 5 ms x 3.69M/s");
        BatchSizer young = measured(20 * MS, 5 * MS);
        young.waited();
        assertEquals(26_900, young.lowWater(), "still within half of maxAge");
    }
}
