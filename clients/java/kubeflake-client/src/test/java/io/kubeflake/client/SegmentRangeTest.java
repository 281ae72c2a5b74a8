package io.kubeflake.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/** clients/SPEC.md, "Ranges in segment mode": segment refills are ranges, and a sidecar without /range gets /ids. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SegmentRangeTest {
    Sidecar segment;

    @BeforeAll
    void start() throws Exception {
        segment = Sidecar.start("--mode", "segment", "--block-size", "700");
    }

    @AfterAll
    void stop() {
        segment.close();
    }

    /** The sidecar's count of 200 answers to one route (its /metrics). */
    long answered(Sidecar sidecar, String route) throws Exception {
        Matcher m = Pattern.compile("kubeflake_http_requests_total\\{code=\"200\",route=\"" + route + "\"} (\\d+)")
                .matcher(sidecar.get("/metrics").body());
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    @Test
    void segmentRefillsAreRangesAndEveryValueComesOnceInOrder() throws Exception {
        long idsBefore = answered(segment, "ids");
        List<Long> got = new ArrayList<>();
        try (KubeflakeClient ids = KubeflakeClient.builder().socket(segment.socket()).build()) {
            for (int i = 0; i < 20_000; i++) {
                got.add(ids.nextId());
            }
            assertEquals(20_000, ids.stats().ids(), "every value handed out is counted");
            assertTrue(ids.stats().refills() > 0);
        }
        for (int i = 1; i < got.size(); i++) {
            assertTrue(got.get(i - 1) < got.get(i), got.get(i) + " came after " + got.get(i - 1));
        }
        assertTrue(answered(segment, "range") > 0, "the refills asked /range");
        assertEquals(idsBefore, answered(segment, "ids"), "and never /ids");
    }

    @Test
    void aSidecarWithoutRangeAnswering404IsAskedForIdsAndItsRunsServedInOrder() throws Exception {
        // A 0.1.0 sidecar in segment mode: no /range; /ids values with a gap every 7 (two blocks).
        AtomicInteger rangeAsked = new AtomicInteger();
        long[] next = {1000};
        HttpServer old = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        old.createContext("/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            String query = exchange.getRequestURI().getQuery();
            if (path.equals("/readyz")) {
                reply(exchange, 200, "{\"status\":\"ready\",\"mode\":\"Segment\",\"strict\":false,\"phase\":\"segment\"}");
            } else if (path.equals("/ids") && query != null && query.startsWith("count=")) {
                int count = Integer.parseInt(query.substring("count=".length()));
                StringBuilder body = new StringBuilder();
                synchronized (next) {
                    for (int i = 0; i < count; i++) {
                        body.append(next[0]).append('\n');
                        next[0] += next[0] % 7 == 0 ? 3 : 1;
                    }
                }
                reply(exchange, 200, body.toString());
            } else {
                if (path.equals("/range")) {
                    rangeAsked.incrementAndGet();
                }
                reply(exchange, 404, "{\"error\":\"no route " + path + "\"}");
            }
        });
        old.start();
        List<Long> got = new ArrayList<>();
        try (KubeflakeClient ids = KubeflakeClient.builder()
                .url("http://127.0.0.1:" + old.getAddress().getPort()).build()) {
            for (int i = 0; i < 3_000; i++) {
                got.add(ids.nextId());
            }
        } finally {
            old.stop(0);
        }
        long expected = 1000;
        for (long v : got) {
            assertEquals(expected, v, "the values of /ids, in their order, none skipped");
            expected += expected % 7 == 0 ? 3 : 1;
        }
        assertEquals(1, rangeAsked.get(), "/range was asked once, then never again");
    }

    @Test
    void aRangeAnswerOfAnotherShapeIsAProtocolError() {
        for (String bad : new String[] {"{\"first\":5,\"count\":3}", "{\"first\":\"5\",\"count\":0}",
                "{\"first\":\"5\",\"count\":11}", "{\"first\":\"-5\",\"count\":3}", "{\"first\":\"5\"}",
                "{\"first\":\"9223372036854775807\",\"count\":2}", "{\"first\":\"9223372036854775806\",\"count\":3}", "<html>", "{\"first\":\"+5\",\"count\":3}"}) {
            assertThrows(ProtocolException.class, () -> SidecarApi.parseRange(bad, 10, "/range?count=10"), bad);
        }
        long[] r = SidecarApi.parseRange("{\"first\":\"9223372036854775798\",\"count\":10}", 10, "/range");
        assertEquals(9223372036854775798L, r[0], "the last range of the sequence ends at 2^63-1");
        assertEquals(10, r[1]);
    }

    static void reply(HttpExchange exchange, int status, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.US_ASCII);
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }
}
