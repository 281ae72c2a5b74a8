package io.kubeflake.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Test;

/**
 * clients/SPEC.md section 2, "Range refills are sized and timed so that no caller waits", with
 * more than one range queued ahead: the ranges still leave the buffer in the order they arrived,
 * none twice (the order rule), across a sidecar restart too (section 4), and a wait moves the
 * low-water mark a safe distance further ahead.
 */
class RangeQueueTest {
    static final long MS = 1_000_000L;

    /**
     * A fake segment sidecar answering /range with at most {@code cap} values after
     * {@code delayMs} (every other range at most {@code shortCap}), a gap of 7 after each range (so a range served twice or out of order
     * shows), and recording each range served as {first, count}. {@code restart()} stops it and
     * starts another on the same port that serves from far above (as a sidecar restarted on its
     * state file claims a new block).
     */
    static final class FakeRanges implements AutoCloseable {
        final int cap;
        final int delayMs;
        /** Every other range is at most this many values. */
        final int shortCap;
        final List<long[]> served = new ArrayList<>();
        long next = 1;
        HttpServer server;
        int port;

        FakeRanges(int cap, int delayMs) throws Exception {
            this(cap, delayMs, cap);
        }

        FakeRanges(int cap, int delayMs, int shortCap) throws Exception {
            this.cap = cap;
            this.delayMs = delayMs;
            this.shortCap = shortCap;
            serve(0);
        }

        private void serve(int onPort) throws Exception {
            HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), onPort), 0);
            s.createContext("/", exchange -> {
                String path = exchange.getRequestURI().getPath();
                String query = exchange.getRequestURI().getQuery();
                if (path.equals("/readyz")) {
                    SegmentRangeTest.reply(exchange, 200,
                            "{\"status\":\"ready\",\"mode\":\"Segment\",\"strict\":false,\"phase\":\"segment\"}");
                } else if (path.equals("/range") && query != null && query.startsWith("count=")) {
                    if (delayMs > 0) {
                        LockSupport.parkNanos(delayMs * MS);
                    }
                    int count = Integer.parseInt(query.substring("count=".length()));
                    long first;
                    int n;
                    synchronized (served) {
                        n = Math.min(count, served.size() % 2 == 1 ? shortCap : cap);
                        first = next;
                        next += n + 7;
                        served.add(new long[] {first, n});
                    }
                    SegmentRangeTest.reply(exchange, 200, "{\"first\":\"" + first + "\",\"count\":" + n + "}");
                } else {
                    SegmentRangeTest.reply(exchange, 404, "{\"error\":\"no route " + path + "\"}");
                }
            });
            s.start();
            server = s;
            port = s.getAddress().getPort();
        }

        String url() {
            return "http://127.0.0.1:" + port;
        }

        /** Every value served, in the order served. */
        List<Long> values() {
            List<Long> all = new ArrayList<>();
            synchronized (served) {
                for (long[] r : served) {
                    for (long v = r[0]; v < r[0] + r[1]; v++) {
                        all.add(v);
                    }
                }
            }
            return all;
        }

        /** Every range served, as {first, count}, in the order served. */
        List<long[]> ranges() {
            synchronized (served) {
                return new ArrayList<>(served);
            }
        }

        void restart() throws Exception {
            server.stop(0);
            synchronized (served) {
                next += 1_000_000_000L;
            }
            serve(port);
        }

        @Override
        public void close() {
            server.stop(0);
        }
    }

    /** {@code got} is the first values of {@code served}, in the same order: none twice, none skipped. */
    static void assertServedInOrder(List<Long> served, List<Long> got) {
        assertTrue(got.size() <= served.size(), got.size() + " values handed out, " + served.size() + " served");
        for (int i = 0; i < got.size(); i++) {
            long want = served.get(i);
            long was = got.get(i);
            int at = i;
            assertEquals(want, was, () -> "value " + was + " handed out as number " + at + ", where the sidecar's order has " + want);
        }
    }

    /**
     * {@link #assertServedInOrder} across a restart of the fake at {@code restartedFrom}: a range
     * the old fake recorded as served whose reply the stop cut off never reached the client (a
     * gap, never handed out), so the last range served before the restart is left out of the
     * order when the client handed out none of it; every other range is handed out whole, in
     * the order served.
     */
    static void assertServedInOrderAcrossRestart(List<long[]> ranges, List<Long> got, long restartedFrom) {
        int last = -1;
        for (int i = 0; i < ranges.size(); i++) {
            if (ranges.get(i)[0] < restartedFrom) {
                last = i;
            }
        }
        Set<Long> handedOut = new HashSet<>(got);
        List<Long> order = new ArrayList<>();
        for (int i = 0; i < ranges.size(); i++) {
            long[] r = ranges.get(i);
            if (i == last && !handedOut.contains(r[0])) {
                continue; // its reply was cut off by the stop
            }
            for (long v = r[0]; v < r[0] + r[1]; v++) {
                order.add(v);
            }
        }
        assertServedInOrder(order, got);
    }

    @Test
    void rangesQueuedAheadLeaveInTheOrderTheyArrivedNoneTwice() throws Exception {
        // Every other range is 3 values: the refiller, still under the mark after one, asks again
        // at once, so two ranges often wait in the queue behind the current one.
        List<Long> got = new ArrayList<>();
        try (FakeRanges fake = new FakeRanges(500, 0, 3);
                KubeflakeClient ids = KubeflakeClient.builder().url(fake.url()).maxRange(500).build()) {
            for (int i = 0; i < 300_000; i++) {
                got.add(ids.nextId());
                long until = System.nanoTime() + 1000; // about 1M values/s: slower than the fake
                while (System.nanoTime() - until < 0) {
                    Thread.onSpinWait();
                }
            }
            List<Long> served = fake.values();
            assertServedInOrder(served, got);
        }
    }

    @Test
    void concurrentCallersWithRangesQueuedAheadGetDistinctValuesEachIncreasing() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(8);
        try (FakeRanges fake = new FakeRanges(300, 0);
                KubeflakeClient ids = KubeflakeClient.builder().url(fake.url()).maxRange(300).build()) {
            List<Future<List<Long>>> results = new ArrayList<>();
            for (int w = 0; w < 8; w++) {
                results.add(pool.submit(() -> {
                    List<Long> mine = new ArrayList<>();
                    for (int i = 0; i < 40_000; i++) {
                        mine.add(ids.nextId());
                    }
                    return mine;
                }));
            }
            Set<Long> all = new HashSet<>();
            for (Future<List<Long>> f : results) {
                KubeflakeClientTest.assertIncreasing(f.get());
                all.addAll(f.get());
            }
            assertEquals(320_000, all.size(), "no value twice");
            assertTrue(new HashSet<>(fake.values()).containsAll(all), "only values the sidecar served");
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void aSidecarRestartedMidStreamYieldsNoDuplicateAndTheOrderHolds() throws Exception {
        List<Long> got = new ArrayList<>();
        try (FakeRanges fake = new FakeRanges(1000, 0);
                KubeflakeClient ids = KubeflakeClient.builder().url(fake.url()).maxRange(1000).build()) {
            for (int i = 0; i < 200_000; i++) {
                if (i == 70_000) {
                    fake.restart(); // the buffer still holds ranges from before it
                }
                got.add(ids.nextId());
            }
            // The ranges of before the restart first, then the new ones (the one whose reply the
            // restart cut off, if any, never handed out).
            assertServedInOrderAcrossRestart(fake.ranges(), got, 1_000_000_000L);
            assertTrue(got.get(got.size() - 1) > 1_000_000_000L, "values from after the restart were served");
        }
    }

    @Test
    void aWaitDoublesTheSafeDistanceOncePerEmptyBufferUpToItsBound() {
        RefillPace p = new RefillPace();
        p.waited();
        assertEquals(RefillPace.MIN_DISTANCE, p.distance(), "a wait before the rate is measured is the start");
        p.arrived(1000 * MS, MS, 0);
        p.arrived(2000 * MS, MS, 10_000_000); // 10M values/s, refills of 1 ms
        assertEquals(20_000, p.lowWater(64, 1_000_000), "2 x 1 ms x 10M/s");
        p.waited();
        p.waited(); // another caller on the same empty buffer
        assertEquals(40_000, p.lowWater(64, 1_000_000), "4 x 1 ms x 10M/s");
        for (int i = 0; i < 10; i++) {
            p.arrived((3000 + i) * MS, MS, 10_000_000 + 10_000L * (i + 1));
            p.waited();
        }
        assertEquals(RefillPace.MAX_DISTANCE, p.distance());
        for (int i = 0; i < RefillPace.CALM_REFILLS; i++) {
            p.arrived((4000 + i) * MS, MS, 20_000_000);
        }
        assertEquals(RefillPace.MAX_DISTANCE / 2, p.distance(), "calm refills halve it");
    }

    @Test
    void theRateLeavesOutTheTimeTheBufferWasEmptyAndFallsAQuarterOfTheWay() {
        RefillPace p = new RefillPace();
        p.arrived(1000 * MS, MS, 0);
        p.arrived(1100 * MS, MS, 1_000_000);
        assertEquals(10_000_000.0, p.rate(), "1M values in 100 ms");
        // 1M values in the next 100 ms, 90 of which the callers waited: 100M values/s while served.
        p.arrived(1200 * MS, MS, 2_000_000, 90 * MS);
        assertEquals(100_000_000.0, p.rate(), 1.0, "a higher rate is taken at once");
        p.arrived(1300 * MS, MS, 2_000_000);
        assertEquals(75_000_000.0, p.rate(), 1.0, "a quiet interval lowers it a quarter of the way");
    }

    @Test
    void theMarkCoversTheSlowestRecentRefillWhichHalvesEveryTenSeconds() {
        RefillPace p = new RefillPace();
        p.arrived(1000 * MS, MS, 0);
        p.arrived(1100 * MS, MS, 1_000_000); // 10M values/s, refills of 1 ms
        assertEquals(20_000, p.lowWater(64, 100_000_000), "2 x 1 ms x 10M/s");
        p.arrived(1200 * MS, 30 * MS, 2_000_000);
        assertEquals(600_000, p.lowWater(64, 100_000_000), "one refill of 30 ms: 2 x 30 ms x 10M/s");
        p.arrived(11_200 * MS, MS, 102_000_000); // 10 s later, still 10M values/s
        assertEquals(300_000, p.lowWater(64, 100_000_000), "10 s on, half of it");
    }

    @Test
    void segmentBatchesJumpToAPeriodAtTheRateAndTheMarkMayQueueSeveralRanges() {
        BatchSizer b = new BatchSizer(64, 10_000, 1000, 100 * MS);
        b.refilled(1000 * MS, 50 * MS, 0, 0, true);
        b.refilled(1100 * MS, 50 * MS, 1_000_000, 0, true); // 10M values/s, refills of 50 ms
        assertEquals(1000, b.request(true), "a period at the rate is 1M, the ceiling 1000");
        assertEquals(BatchSizer.RANGES_AHEAD * 1000L, b.lowWater(), "2 x 50 ms x 10M/s, capped at 4 ranges");
    }
}
