package io.kubeflake.bench;

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

        @Setup(Level.Trial)
        public void start() throws Exception {
            sidecar = BenchSidecar.start("--mode", "segment", "--block-size", "1000", "--max-block-size", "1000000");
            client = KubeflakeClient.builder().socket(sidecar.socket()).build();
            client.nextId();
        }

        @TearDown(Level.Trial)
        public void stop() {
            System.out.println("\nkubeflake segment client: " + client.stats());
            client.close();
            sidecar.close();
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

    @Benchmark
    public long kubeflakeSnowflakeSustained(SnowflakeSustained s) {
        return s.client.nextId();
    }

    @Benchmark
    public long kubeflakeSegment(Segment s) {
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
}
