package io.kubeflake.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.IntFunction;
import org.junit.jupiter.api.Test;

/**
 * clients/SPEC.md section 2, "Order", and section 4: {@code nextId()} claims an ID of the
 * current batch with one atomic increment and no lock (Snowflake and segment alike). Many
 * callers racing over many batches must still get every ID once, each caller its IDs in
 * increasing order, and never a Snowflake ID older than maxAge.
 */
class LockFreeTakeTest {
    static final int CALLERS = 16;

    /** Runs {@code CALLERS} threads, each returning what it took; fails on the first error. */
    static List<List<Long>> race(IntFunction<List<Long>> caller) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(CALLERS);
        try {
            List<Future<List<Long>>> futures = new ArrayList<>();
            for (int w = 0; w < CALLERS; w++) {
                int me = w;
                futures.add(pool.submit(() -> caller.apply(me)));
            }
            List<List<Long>> got = new ArrayList<>();
            for (Future<List<Long>> f : futures) {
                got.add(f.get());
            }
            return got;
        } finally {
            pool.shutdownNow();
        }
    }

    /** Every caller's IDs increase; no ID twice among all; returns them all. */
    static Set<Long> assertDistinctEachIncreasing(List<List<Long>> got, int each) {
        Set<Long> all = new HashSet<>();
        for (List<Long> mine : got) {
            assertEquals(each, mine.size());
            KubeflakeClientTest.assertIncreasing(mine);
            for (long id : mine) {
                assertTrue(all.add(id), () -> "ID " + id + " handed out twice");
            }
        }
        return all;
    }

    @Test
    void sixteenCallersOverManySegmentRangesGetEveryValueOnceInOrderNoneSkipped() throws Exception {
        int each = 50_000;
        // Ranges of at most 500 values: 1,600 of them or more, so callers race on many switches.
        try (RangeQueueTest.FakeRanges fake = new RangeQueueTest.FakeRanges(500, 0);
                KubeflakeClient ids = KubeflakeClient.builder().url(fake.url()).maxRange(500).build()) {
            List<List<Long>> got = race(w -> {
                List<Long> mine = new ArrayList<>(each);
                for (int i = 0; i < each; i++) {
                    mine.add(ids.nextId());
                }
                return mine;
            });
            Set<Long> all = assertDistinctEachIncreasing(got, each);
            // The values handed out are the first ones served, none skipped.
            List<Long> served = fake.values();
            assertTrue(all.size() <= served.size(), "more values handed out than served");
            assertEquals(new HashSet<>(served.subList(0, all.size())), all, "a value was skipped or made up");
            assertEquals(CALLERS * (long) each, ids.stats().ids(), "the counters: " + ids.stats());
        }
    }

    @Test
    void sixteenCallersOverManySnowflakeBatchesGetEveryIdOnceEachIncreasing() throws Exception {
        int each = 60_000;
        try (Sidecar sidecar = Sidecar.start();
                KubeflakeClient ids = KubeflakeClient.builder().socket(sidecar.socket()).maxBatch(1_000).build()) {
            List<List<Long>> got = race(w -> {
                List<Long> mine = new ArrayList<>(each);
                for (int i = 0; i < each; i++) {
                    mine.add(ids.nextId());
                }
                return mine;
            });
            assertDistinctEachIncreasing(got, each);
            ClientStats s = ids.stats();
            assertEquals(CALLERS * (long) each, s.ids(), "the counters: " + s);
            assertTrue(s.refills() >= CALLERS * (long) each / 1_000, "fewer batches than asked for: " + s);
            assertTrue(s.bufferDepth() >= 0, "a negative depth: " + s);
        }
    }

    @Test
    void racingCallersNeverGetASnowflakeIdOlderThanMaxAge() throws Exception {
        int each = 4_000;
        Duration maxAge = Duration.ofMillis(20);
        // The age is taken from the moment the call began, not from its return: the buffer checks
        // the batch's age after that moment, so an ID older than maxAge then breaks the rule
        // however long the caller is descheduled (a loaded machine). The slack is the ID's
        // millisecond and the wall clock's granularity, not a timing allowance.
        Duration slack = Duration.ofMillis(5);
        try (Sidecar sidecar = Sidecar.start();
                KubeflakeClient ids = KubeflakeClient.builder().socket(sidecar.socket()).maxAge(maxAge).minBatch(2_000)
                        .build()) {
            Layout layout = ids.layout().orElseThrow();
            List<List<Long>> got = race(w -> {
                List<Long> mine = new ArrayList<>(each);
                for (int i = 0; i < each; i++) {
                    Instant called = Instant.now();
                    long id = ids.nextId();
                    Duration age = Duration.between(layout.decode(id).time(), called);
                    assertTrue(age.compareTo(maxAge.plus(slack)) <= 0, "ID " + id + " was " + age + " old when its call began");
                    mine.add(id);
                    if (i % 1_000 == 999) {
                        sleep(200); // all callers about together: the current batch grows old
                    }
                }
                return mine;
            });
            assertDistinctEachIncreasing(got, each);
            ClientStats s = ids.stats();
            assertTrue(s.expired() > 0, "no buffered ID expired, though callers slept past maxAge: " + s);
            assertEquals(CALLERS * (long) each, s.ids(), "the counters: " + s);
            assertTrue(s.bufferDepth() >= 0, "a negative depth: " + s);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
