package io.kubeflake.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/** The client against real standalone sidecars: clients/SPEC.md, rule by rule. */
class KubeflakeClientTest {
    static Sidecar snowflake;

    @BeforeAll
    static void startSidecar() throws Exception {
        snowflake = Sidecar.start("--worker-id", "5");
    }

    @AfterAll
    static void stopSidecar() {
        snowflake.close();
    }

    static KubeflakeClient.Builder inPod() {
        return KubeflakeClient.builder().environment(snowflake.podEnvironment());
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    static void assertIncreasing(List<Long> ids) {
        for (int i = 1; i < ids.size(); i++) {
            assertTrue(ids.get(i - 1) < ids.get(i), "ID " + ids.get(i) + " came after " + ids.get(i - 1));
        }
    }

    @Nested
    class Transport {
        @Test
        void theUnixSocketIsUsedWhenKubeflakeSocketIsSet() {
            try (KubeflakeClient ids = KubeflakeClient.builder()
                    .environment(Map.of("KUBEFLAKE_SOCKET", snowflake.socket().toString(),
                            "KUBEFLAKE_URL", "http://127.0.0.1:1"))
                    .build()) {
                assertEquals("unix", ids.transport());
                assertTrue(ids.nextId() > 0);
            }
        }

        @Test
        void kubeflakeUrlIsUsedOverTcpWithoutASocket() {
            try (KubeflakeClient ids = KubeflakeClient.builder()
                    .environment(Map.of("KUBEFLAKE_SOCKET", "", "KUBEFLAKE_URL", snowflake.url())).build()) {
                assertEquals("tcp", ids.transport());
                assertTrue(ids.nextId() > 0);
            }
        }

        @Test
        void aSocketThatIsNotThereIsNoSidecarNeverTcp() {
            try (KubeflakeClient ids = KubeflakeClient.builder()
                    .environment(Map.of("KUBEFLAKE_SOCKET", "/nonexistent/kubeflake.sock", "KUBEFLAKE_URL", snowflake.url()))
                    .maxWait(Duration.ofMillis(300)).build()) {
                KubeflakeException e = assertThrows(NoSidecarException.class, ids::nextId);
                assertTrue(e.getMessage().contains("/nonexistent/kubeflake.sock"), e.getMessage());
            }
        }

        @Test
        void aUrlThatIsNotPlainHttpIsRejectedWhenTheClientIsMade() {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> KubeflakeClient.builder().environment(Map.of("KUBEFLAKE_URL", "https://127.0.0.1:7070/x")).build());
            assertTrue(e.getMessage().contains(KubeflakeClient.DEFAULT_URL), e.getMessage());
        }

        @Test
        void nothingListeningIsNoSidecarOnceMaxWaitIsOver() throws IOException {
            try (KubeflakeClient ids = KubeflakeClient.builder().url("http://127.0.0.1:" + freePort())
                    .maxWait(Duration.ofMillis(300)).build()) {
                assertTimeoutPreemptively(Duration.ofSeconds(10), () -> assertThrows(NoSidecarException.class, ids::nextId));
                assertEquals(1L, ids.stats().errors().get(Kind.NO_SIDECAR));
            }
        }

        @Test
        void aListenerThatNeverAnswersIsNoSidecarNotAHang() throws IOException {
            try (ServerSocket silent = new ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress());
                 KubeflakeClient ids = KubeflakeClient.builder().url("http://127.0.0.1:" + silent.getLocalPort())
                         .maxWait(Duration.ofMillis(800)).requestTimeout(Duration.ofMillis(200)).build()) {
                assertTimeoutPreemptively(Duration.ofSeconds(10), () -> assertThrows(NoSidecarException.class, ids::nextId));
            }
        }
    }

    @Nested
    class Buffer {
        @Test
        void nextIdServesIncreasingIdsFromBatches() {
            try (KubeflakeClient ids = inPod().build()) {
                List<Long> got = new ArrayList<>();
                for (int i = 0; i < 5_000; i++) {
                    got.add(ids.nextId());
                }
                assertIncreasing(got);
                ClientStats s = ids.stats();
                assertEquals(5_000, s.ids());
                assertEquals(0, s.direct());
                assertTrue(s.refills() < 5_000 / 64 + 2, "one refill per batch, not per ID: " + s);
            }
        }

        @Test
        void theBatchSizeGrowsWithTheRate() {
            try (KubeflakeClient ids = inPod().build()) {
                for (int i = 0; i < 50_000; i++) {
                    ids.nextId();
                }
                assertTrue(ids.stats().batchSize() > 64, "batch size still the minimum: " + ids.stats());
            }
        }

        @Test
        void concurrentCallersGetDistinctIdsEachIncreasing() throws Exception {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try (KubeflakeClient ids = inPod().build()) {
                List<Future<List<Long>>> results = new ArrayList<>();
                for (int w = 0; w < 8; w++) {
                    results.add(pool.submit(() -> {
                        List<Long> mine = new ArrayList<>();
                        for (int i = 0; i < 20_000; i++) {
                            mine.add(ids.nextId());
                        }
                        return mine;
                    }));
                }
                Set<Long> all = new HashSet<>();
                for (Future<List<Long>> f : results) {
                    List<Long> mine = f.get();
                    assertIncreasing(mine);
                    all.addAll(mine);
                }
                assertEquals(8 * 20_000, all.size(), "duplicates among the IDs");
            } finally {
                pool.shutdownNow();
            }
        }

        @Test
        void aBufferedIdOlderThanMaxAgeIsDroppedNotServed() throws InterruptedException {
            try (KubeflakeClient ids = inPod().maxAge(Duration.ofMillis(100)).minBatch(1_000).build()) {
                long first = ids.nextId();
                Thread.sleep(400);
                long second = ids.nextId();
                Layout layout = ids.layout().orElseThrow();
                Duration between = Duration.between(layout.decode(first).time(), layout.decode(second).time());
                assertTrue(between.compareTo(Duration.ofMillis(300)) >= 0, "a stale ID was served: " + between);
                assertTrue(ids.stats().expired() > 0, "nothing expired: " + ids.stats());
            }
        }

        @Test
        void aSidecarWithASmallerMaxBatchHalvesTheRefillUntilItFits() throws Exception {
            try (Sidecar small = Sidecar.start("--max-batch", "100");
                 KubeflakeClient ids = KubeflakeClient.builder().socket(small.socket()).build()) {
                List<Long> got = new ArrayList<>();
                for (int i = 0; i < 20_000; i++) {
                    got.add(ids.nextId());
                }
                assertIncreasing(got);
                assertTrue(ids.stats().batchSize() <= 100, "still asking for more than --max-batch: " + ids.stats());
                assertTrue(ids.stats().errors().isEmpty(), "the 400s reached the app: " + ids.stats());
            }
        }

        @Test
        void withoutPrefetchEveryNextIdIsOneRequest() {
            try (KubeflakeClient ids = inPod().prefetch(false).build()) {
                for (int i = 0; i < 5; i++) {
                    ids.nextId();
                }
                assertEquals(5, ids.stats().direct());
                assertEquals(0, ids.stats().refills());
            }
        }

        @Test
        void aClosedClientRefusesAndDropsItsBuffer() {
            KubeflakeClient ids = inPod().build();
            ids.nextId();
            ids.close();
            assertEquals(0, ids.stats().bufferDepth());
            assertThrows(IllegalStateException.class, ids::nextId);
            ids.close(); // idempotent
        }
    }

    @Nested
    class BypassingTheBuffer {
        @Test
        void nextIdAfterIsAboveAfterThoughTheBufferHoldsSmallerIds() {
            try (KubeflakeClient ids = inPod().minBatch(1_000).build()) {
                long first = ids.nextId();
                Layout layout = ids.layout().orElseThrow();
                IdParts p = layout.decode(first);
                long after = layout.compose(p.tick() + 200, p.datacenter(), p.worker(), 0);
                assertTrue(ids.nextIdAfter(after) > after);
                assertEquals(1, ids.stats().direct());
                assertTrue(ids.nextId() < after, "the buffer still serves its own IDs");
            }
        }

        @Test
        void theLargestIdHasNothingAboveItABadRequestRaisedAtOnce() {
            try (KubeflakeClient ids = inPod().build()) {
                BadRequestException e = assertThrows(BadRequestException.class, () -> ids.nextIdAfter(Long.MAX_VALUE));
                assertEquals(400, e.status());
                assertTrue(e.getMessage().contains("largest ID"), e.getMessage());
            }
        }

        @Test
        void anAfterFarAheadIsClockBehindWithTheSidecarsRetryAfter() {
            try (KubeflakeClient ids = inPod().maxWait(Duration.ofSeconds(1)).build()) {
                Layout layout = ids.layout().orElseThrow();
                long after = layout.compose(layout.tickAt(Instant.now().plusSeconds(3600)), 0, 0, 0);
                ClockBehindException e = assertThrows(ClockBehindException.class, () -> ids.nextIdAfter(after));
                assertEquals(409, e.status());
                assertEquals("after_ahead_of_clock", e.reason().orElseThrow());
                assertTrue(e.retryAfter().compareTo(Duration.ofMinutes(50)) > 0, "Retry-After: " + e.retryAfter());
                assertInstanceOf(RefusedException.class, e);
            }
        }

        @Test
        void nextIdsIsOneRequestHandedOverWhole() {
            try (KubeflakeClient ids = inPod().build()) {
                long[] batch = ids.nextIds(100);
                assertEquals(100, batch.length);
                for (int i = 1; i < batch.length; i++) {
                    assertTrue(batch[i - 1] < batch[i]);
                }
                assertEquals(0, ids.stats().refills());
            }
        }
    }

    @Nested
    @TestInstance(TestInstance.Lifecycle.PER_CLASS)
    class Segments {
        Sidecar segment;
        Sidecar strict;

        @BeforeAll
        void start() throws Exception {
            segment = Sidecar.start("--mode", "segment", "--block-size", "500");
            strict = Sidecar.start("--mode", "segment", "--strict");
        }

        @AfterAll
        void stop() {
            segment.close();
            strict.close();
        }

        @Test
        void segmentValuesLeaveTheBufferInOrderNoneTwice() throws Exception {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try (KubeflakeClient ids = KubeflakeClient.builder().socket(segment.socket()).build()) {
                assertEquals("segment", ids.mode());
                List<Future<List<Long>>> results = new ArrayList<>();
                for (int w = 0; w < 8; w++) {
                    results.add(pool.submit(() -> {
                        List<Long> mine = new ArrayList<>();
                        for (int i = 0; i < 5_000; i++) {
                            mine.add(ids.nextId());
                        }
                        return mine;
                    }));
                }
                Set<Long> all = new HashSet<>();
                for (Future<List<Long>> f : results) {
                    assertIncreasing(f.get());
                    all.addAll(f.get());
                }
                assertEquals(40_000, all.size());
                assertTrue(ids.layout().isEmpty(), "segment values carry no fields");
            } finally {
                pool.shutdownNow();
            }
        }

        @Test
        void everyNextIdOfAStrictSequenceIsARequest() {
            try (KubeflakeClient ids = KubeflakeClient.builder().socket(strict.socket()).build()) {
                List<Long> got = new ArrayList<>();
                for (int i = 0; i < 5; i++) {
                    got.add(ids.nextId());
                }
                assertIncreasing(got);
                assertEquals("strict", ids.mode());
                assertEquals(5, ids.stats().direct());
                assertEquals(0, ids.stats().refills());
            }
        }
    }

    @Nested
    class Decode {
        @Test
        void localDecodeAgreesWithTheSidecarsDecode() throws Exception {
            try (KubeflakeClient ids = inPod().build()) {
                long[] samples = {0, 1, 4096, ids.nextId(), ids.nextId(), Long.MAX_VALUE};
                for (long id : samples) {
                    IdParts local = ids.decode(id);
                    Map<String, Object> remote = Json.object(snowflake.get("/decode/" + id).body());
                    assertEquals(((Number) remote.get("tick")).longValue(), local.tick(), "tick of " + id);
                    assertEquals(((Number) remote.get("worker")).longValue(), local.worker(), "worker of " + id);
                    assertEquals(((Number) remote.get("sequence")).longValue(), local.sequence(), "sequence of " + id);
                    assertEquals(Instant.parse((String) remote.get("time")), local.time(), "time of " + id);
                    Layout layout = ids.layout().orElseThrow();
                    assertEquals(id, layout.compose(local.tick(), local.datacenter(), local.worker(), local.sequence()));
                }
                assertEquals(5, ids.decode(ids.nextId()).worker(), "the sidecar's --worker-id");
            }
        }

        @Test
        void composeNamesAFieldTooWideForItsBits() {
            try (KubeflakeClient ids = inPod().build()) {
                Layout layout = ids.layout().orElseThrow();
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> layout.compose(0, 0, 1 << 10, 0));
                assertTrue(e.getMessage().contains("worker"), e.getMessage());
            }
        }

        @Test
        void anAnswerThatIsNotDecimalIdsIsAProtocolError() {
            assertThrows(ProtocolException.class,
                    () -> SidecarApi.parseIds("<html>".getBytes(StandardCharsets.US_ASCII), "/ids"));
            assertThrows(ProtocolException.class,
                    () -> SidecarApi.parseIds("9223372036854775808\n".getBytes(StandardCharsets.US_ASCII), "/ids"));
            assertEquals(2, SidecarApi.parseIds("1\n2\n".getBytes(StandardCharsets.US_ASCII), "/ids").length);
        }
    }
}
