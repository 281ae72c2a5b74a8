package io.kubeflake.bench;

import io.kubeflake.client.ClientStats;
import io.kubeflake.client.KubeflakeClient;
import java.util.concurrent.TimeUnit;
import me.ahoo.cosid.segment.IdSegmentDistributor;
import me.ahoo.cosid.segment.SegmentChainId;
import me.ahoo.cosid.snowflake.MillisecondSnowflakeId;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Threads;
import org.openjdk.jmh.annotations.Warmup;

/**
 * One ID per call, each way side by side: KubeflakeClient's buffered {@code nextId()} against
 * a release standalone sidecar (Snowflake and segment mode, Unix socket), one HTTP request per
 * ID (the client with prefetch off, Unix socket and TCP), and CosId's in-process Snowflake and
 * SegmentChainId. Throughput gives IDs/s, SampleTime p50/p99/p99.9. Every kubeflake state
 * starts its own sidecar for the trial and prints the client's counters at the end (waits,
 * refills), which say whether the sidecar or the client was the limit.
 *
 * <p>Run by clients/java/bench.sh, which prints one table with the layout's ceiling beside it.
 */
@BenchmarkMode({Mode.Throughput, Mode.SampleTime})
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class IdBench {

    /**
     * Buffered nextId(), Snowflake mode, the default layout (4,096 IDs per ms for one worker)
     * with the default drift limit: the sidecar lends up to 2 s of ticks ahead of its clock to
     * a burst, so a run of a few seconds can exceed the ceiling.
     */
    @State(Scope.Benchmark)
    public static class Snowflake {
        BenchSidecar sidecar;
        KubeflakeClient client;

        @Setup(Level.Trial)
        public void start() throws Exception {
            sidecar = BenchSidecar.start();
            client = KubeflakeClient.builder().socket(sidecar.socket()).build();
            client.nextId(); // reads the mode, starts the refiller
        }

        @TearDown(Level.Trial)
        public void stop() {
            System.out.println("\nkubeflake snowflake client: " + client.stats());
            client.close();
            sidecar.close();
        }
    }

    /**
     * Buffered nextId(), Snowflake mode, with a layout whose ceiling no caller reaches
     * (timestampBits 40, workerBits 1, sequenceBits 22: 4,194,304 IDs per ms) and batches of
     * up to 100,000: the callers neither wait for the sidecar's clock nor, mostly, for a
     * refill, so the row's tail is the buffer's own path and the machine's (added 2026-11-30
     * for issue 58's p99.9: docs/notes/bench-2026-11-30-java-segment-refill.md).
     */
    @State(Scope.Benchmark)
    public static class SnowflakeWide {
        BenchSidecar sidecar;
        KubeflakeClient client;

        @Setup(Level.Trial)
        public void start() throws Exception {
            sidecar = BenchSidecar.start("--max-batch", "100000", "--sequence-file", BenchSidecar.sequenceFile(
                    "spec: {layout: {timestampBits: 40, workerBits: 1, sequenceBits: 22}}").toString());
            client = KubeflakeClient.builder().socket(sidecar.socket()).maxBatch(100_000).build();
            client.nextId();
        }

        @TearDown(Level.Trial)
        public void stop() {
            System.out.println("\nkubeflake snowflake (wide layout) client: " + client.stats());
            client.close();
            sidecar.close();
        }
    }

    /**
     * The same with {@code clock.maxDriftMillis: 50}: the sidecar lends at most 50 ms of ticks,
     * so no lending inflates the rate. It also shows what a drift limit below the 1 s of the
     * sidecar's Retry-After costs: once a batch no longer fits, the sidecar refuses it
     * (503 batch_too_large, Retry-After 1) and the refiller waits that second, in which the
     * lending is full after 50 ms and the rest of the ticks are lost.
     */
    @State(Scope.Benchmark)
    public static class SnowflakeSustained {
        BenchSidecar sidecar;
        KubeflakeClient client;

        @Setup(Level.Trial)
        public void start() throws Exception {
            sidecar = BenchSidecar.start("--sequence-file", BenchSidecar.sequenceFile(
                    "spec: {clock: {maxDriftMillis: 50}}").toString());
            client = KubeflakeClient.builder().socket(sidecar.socket()).build();
            client.nextId();
        }

        @TearDown(Level.Trial)
        public void stop() {
            System.out.println("\nkubeflake snowflake-sustained client: " + client.stats());
            client.close();
            sidecar.close();
        }
    }

    /** Buffered nextId(), segment mode (blocks of 1,000 growing to 1,000,000 values, each claim fsynced). */
    @State(Scope.Benchmark)
    public static class Segment {
        BenchSidecar sidecar;
        KubeflakeClient client;
        ClientStats last;

        String maxBlockSize() {
            return "1000000";
        }

        @Setup(Level.Trial)
        public void start() throws Exception {
            sidecar = BenchSidecar.start("--mode", "segment", "--block-size", "1000", "--max-block-size", maxBlockSize());
            client = KubeflakeClient.builder().socket(sidecar.socket()).build();
            client.nextId();
            last = client.stats();
        }

        /**
         * The client's counters over each iteration (warm-up ones included), so that the waits
         * of the measured iterations, a steady state, show apart from the start's.
         */
        @TearDown(Level.Iteration)
        public void iteration() {
            ClientStats now = client.stats();
            long refills = now.refills() - last.refills();
            long nanos = now.refillTime().minus(last.refillTime()).toNanos();
            System.out.printf("%nkubeflake segment iteration (max block %s): %,d IDs, %d refills, %.2f ms mean, %d waits, %.2f ms waited, %,d buffered%n",
                    maxBlockSize(), now.ids() - last.ids(), refills, refills == 0 ? 0 : nanos / 1e6 / refills,
                    now.waits() - last.waits(), now.waitTime().minus(last.waitTime()).toNanos() / 1e6, now.bufferDepth());
            last = now;
        }

        @TearDown(Level.Trial)
        public void stop() {
            System.out.println("\nkubeflake segment (max block " + maxBlockSize() + ") client: " + client.stats());
            client.close();
            sidecar.close();
        }
    }

    /**
     * The same with blocks that may grow to 100,000,000 values: at 50-70 million IDs/s a block
     * of 1,000,000 lasts 14-20 ms, and the blocks' claims (fsynced) then pace the refills
     * (docs/notes/bench-2026-11-30-java-segment-refill.md); this row shows the client without
     * that limit.
     */
    @State(Scope.Benchmark)
    public static class SegmentLargeBlocks extends Segment {
        @Override
        String maxBlockSize() {
            return "100000000";
        }
    }

    /** One HTTP request per ID: the client with prefetch off, on the Unix socket and on TCP. */
    @State(Scope.Benchmark)
    public static class PerRequest {
        BenchSidecar sidecar;
        KubeflakeClient unix;
        KubeflakeClient tcp;

        @Setup(Level.Trial)
        public void start() throws Exception {
            sidecar = BenchSidecar.start();
            unix = KubeflakeClient.builder().socket(sidecar.socket()).prefetch(false).build();
            tcp = KubeflakeClient.builder().url(sidecar.url()).prefetch(false).build();
            unix.nextId();
            tcp.nextId();
        }

        @TearDown(Level.Trial)
        public void stop() {
            unix.close();
            tcp.close();
            sidecar.close();
        }
    }

    /** CosId's MillisecondSnowflakeId: 41 bits of ms, 10 of machine, 12 of sequence, as kubeflake's default. */
    @State(Scope.Benchmark)
    public static class CosIdSnowflake {
        MillisecondSnowflakeId id;

        @Setup(Level.Trial)
        public void start() {
            id = new MillisecondSnowflakeId(1);
        }
    }

    /** CosId's SegmentChainId over an in-memory distributor: no database, so its best case. */
    @State(Scope.Benchmark)
    public static class CosIdSegment {
        SegmentChainId id;

        @Setup(Level.Trial)
        public void start() {
            id = new SegmentChainId(new IdSegmentDistributor.Atomic());
        }
    }

    @Benchmark
    public long kubeflakeSnowflake(Snowflake s) {
        return s.client.nextId();
    }

    /** {@link #kubeflakeSnowflake} with four threads on one client (see {@link #kubeflakeSegment4t}). */
    @Benchmark
    @Threads(4)
    public long kubeflakeSnowflake4t(Snowflake s) {
        return s.client.nextId();
    }

    @Benchmark
    public long kubeflakeSnowflakeWide(SnowflakeWide s) {
        return s.client.nextId();
    }

    @Benchmark
    public long kubeflakeSnowflakeSustained(SnowflakeSustained s) {
        return s.client.nextId();
    }

    @Benchmark
    public long kubeflakeSegment(Segment s) {
        return s.client.nextId();
    }

    /**
     * {@link #kubeflakeSegment} with four threads in the same JMH run as the one-thread rows
     * (JMH's {@code -t} would set every row's threads), so that rows meant to be compared share
     * the machine's load; bench.sh's {@code -t 4} run skips it.
     */
    @Benchmark
    @Threads(4)
    public long kubeflakeSegment4t(Segment s) {
        return s.client.nextId();
    }

    @Benchmark
    public long kubeflakeSegmentLargeBlocks(SegmentLargeBlocks s) {
        return s.client.nextId();
    }

    /** {@link #kubeflakeSegmentLargeBlocks} with four threads. */
    @Benchmark
    @Threads(4)
    public long kubeflakeSegmentLargeBlocks4t(SegmentLargeBlocks s) {
        return s.client.nextId();
    }

    @Benchmark
    public long httpPerIdUnix(PerRequest s) {
        return s.unix.nextId();
    }

    @Benchmark
    public long httpPerIdTcp(PerRequest s) {
        return s.tcp.nextId();
    }

    @Benchmark
    public long cosidSnowflake(CosIdSnowflake s) {
        return s.id.generate();
    }

    @Benchmark
    public long cosidSegmentChain(CosIdSegment s) {
        return s.id.generate();
    }

    /** {@link #cosidSegmentChain} with four threads, beside {@link #kubeflakeSegment4t}. */
    @Benchmark
    @Threads(4)
    public long cosidSegmentChain4t(CosIdSegment s) {
        return s.id.generate();
    }
}
