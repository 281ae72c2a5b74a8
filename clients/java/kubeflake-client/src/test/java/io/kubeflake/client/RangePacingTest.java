package io.kubeflake.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** clients/SPEC.md, "Range refills are sized and timed so that no caller waits". */
class RangePacingTest {
    static final long MS = 1_000_000L;

    @Test
    void theLowWaterMarkIsHalfABatchUntilRefillsAreMeasured() {
        assertEquals(500, new RefillPace().lowWater(1000, 1_000_000));
    }

    @Test
    void theLowWaterMarkCoversTwoRefillTimesAtTheMeasuredRate() {
        RefillPace p = new RefillPace();
        p.arrived(1000 * MS, 800_000, 0);
        // 10,000,000 values in the second since: 10M values/s; refills take 0.8 ms.
        p.arrived(2000 * MS, 800_000, 10_000_000);
        assertEquals(16_000, p.lowWater(10_000, 1_000_000), "2 x 0.8 ms x 10M/s");
        assertEquals(50_000, p.lowWater(100_000, 1_000_000), "never below half the batch");
        assertEquals(12_000, p.lowWater(10_000, 12_000), "never above the ceiling");
    }

    @Test
    void theRefillTimeIsAnExponentialMeanGivingTheNewestAQuarter() {
        RefillPace p = new RefillPace();
        p.arrived(1000 * MS, 4 * MS, 0);
        p.arrived(2000 * MS, 0, 1000);
        assertEquals(3 * MS, p.refillNanos(), "4 ms, then a quarter of the way to 0");
        p.arrived(4000 * MS, 0, 5000);
        assertEquals(2000.0, p.rate(), "4000 values in 2 s");
    }

    @Test
    void segmentRefillsGrowPastMaxBatchUpToMaxRangeAndA400HalvesMaxRange() {
        BatchSizer b = new BatchSizer(64, 100, 6400, 100 * MS);
        long now = 0;
        for (int i = 0; i < 20; i++) {
            now += MS; // each batch lasted 1 ms: double
            b.refilled(now, 10_000, 0, 0, true);
        }
        assertEquals(6400, b.request(true), "a /range refill is bounded by maxRange");
        assertEquals(100, b.request(false), "an /ids refill by maxBatch");
        assertTrue(b.tooLarge(6400, true));
        assertEquals(3200, b.request(true), "a 400 to /range halves maxRange");
        assertEquals(100, b.request(false), "and leaves maxBatch");
    }

    /** A fake segment sidecar: answers /range with min(count, cap) values, and 400 above max. */
    static HttpServer rangeSidecar(int cap, int max, List<Integer> asked) throws Exception {
        long[] next = {1};
        HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        s.createContext("/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            String query = exchange.getRequestURI().getQuery();
            if (path.equals("/readyz")) {
                SegmentRangeTest.reply(exchange, 200,
                        "{\"status\":\"ready\",\"mode\":\"Segment\",\"strict\":false,\"phase\":\"segment\"}");
            } else if (path.equals("/range") && query != null && query.startsWith("count=")) {
                int count = Integer.parseInt(query.substring("count=".length()));
                synchronized (asked) {
                    asked.add(count);
                    if (count > max) {
                        SegmentRangeTest.reply(exchange, 400, "{\"error\":\"count must be a whole number from 1 to " + max + "\"}");
                        return;
                    }
                    int n = Math.min(count, cap);
                    SegmentRangeTest.reply(exchange, 200, "{\"first\":\"" + next[0] + "\",\"count\":" + n + "}");
                    next[0] += n;
                }
            } else {
                SegmentRangeTest.reply(exchange, 404, "{\"error\":\"no route " + path + "\"}");
            }
        });
        s.start();
        return s;
    }

    @Test
    void rangeRefillsAskFarMoreThanMaxBatchAndTheValuesComeInOrder() throws Exception {
        List<Integer> asked = new ArrayList<>();
        HttpServer s = rangeSidecar(1 << 30, 1000, asked);
        try (KubeflakeClient ids = KubeflakeClient.builder().url("http://127.0.0.1:" + s.getAddress().getPort())
                .maxBatch(100).maxRange(4096).build()) {
            for (long i = 1; i <= 20_000; i++) {
                assertEquals(i, ids.nextId());
            }
        } finally {
            s.stop(0);
        }
        List<Integer> seen;
        synchronized (asked) {
            seen = List.copyOf(asked);
        }
        int largest = seen.stream().filter(n -> n <= 1000).mapToInt(Integer::intValue).max().orElse(0);
        long refused = seen.stream().filter(n -> n > 1000).count();
        assertTrue(largest > 100, "ranges above maxBatch (100) were asked: " + seen);
        assertTrue(refused >= 1 && refused <= 3, "a 400 halved maxRange until the sidecar took it: " + seen);
    }
}
