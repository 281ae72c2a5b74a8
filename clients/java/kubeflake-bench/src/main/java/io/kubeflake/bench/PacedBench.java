package io.kubeflake.bench;

import io.kubeflake.client.ClientStats;
import io.kubeflake.client.KubeflakeClient;
import io.kubeflake.client.Layout;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;

/**
 * Snowflake {@code nextId()} at a paced rate, every call timed: what issue 58's goal states
 * ("sustains at least 0.9x the layout's ceiling for one worker ... with p99.9 under 1 us").
 * JMH cannot pace its callers (its sample mode times what it calls, a pause included) and
 * times only a sample of the calls; its Snowflake rows call faster than the ceiling, so their
 * callers wait for the sidecar's clock and those waits decide their p99.9
 * (docs/notes/bench-2026-11-30-java-segment-refill.md). Here:
 * <ul>
 *   <li>a fresh standalone sidecar (default layout: 4,096 IDs per ms for one worker) and a
 *       client with the default settings per row;</li>
 *   <li>T threads share the rate {@code fraction x ceiling}: call k of thread t is due at
 *       {@code start + (k x T + t) / rate}; a thread spins (reading the clock) until its call is
 *       due, and one that is late calls at once (so it catches up after a pause);</li>
 *   <li>each call is timed as in docs/clients.md, "Speed": the interval between one
 *       monotonic clock read after the previous call (the spin's last read) and one after
 *       this call, so one clock read is in every figure. Every call of the measured seconds
 *       goes into the histogram (1 ns buckets up to 131 us, exact above);</li>
 *   <li>the pace was held when the last call due returned at most 1 % of the run after the
 *       schedule's end; the output also says how far behind the threads fell at worst, and
 *       how many calls started over 1 ms late;</li>
 *   <li>waits (calls that found the buffer empty), refills and expired IDs are the client's
 *       counters over the measured seconds; GC, the JVM's collectors' counts and times over
 *       them (run with {@code -Xlog:gc} to see each pause);</li>
 *   <li>before each Snowflake row, a row times the same paced loop and threads with no call in
 *       it: the clock reads and the machine's own tail at this pace, against which the
 *       client's is read.</li>
 * </ul>
 * A benchmark, not a test: nothing is asserted. Run by clients/java/bench-paced.sh:
 * {@code PacedBench [--fraction 0.9] [--seconds 10] [--warmup 5] [--threads 1,4]}.
 */
public final class PacedBench {
    private static final int FINE = 1 << 17; // 1 ns buckets below this many ns

    /** One thread's record of its calls. */
    static final class Record {
        final long[] fine = new long[FINE];
        long[] coarse = new long[64];
        int coarseN;
        long calls;
        long over1us;
        long maxLag;
        long lateOver1ms;
        /** When the last call returned (System.nanoTime()). */
        long lastEnd;
        /** When the schedule began (System.nanoTime()). */
        long start;

        void add(long ns) {
            calls++;
            if (ns > 1000) {
                over1us++;
            }
            if (ns < FINE) {
                fine[(int) Math.max(0, ns)]++;
            } else {
                if (coarseN == coarse.length) {
                    coarse = Arrays.copyOf(coarse, coarseN * 2);
                }
                coarse[coarseN++] = ns;
            }
        }

        void merge(Record o) {
            for (int i = 0; i < FINE; i++) {
                fine[i] += o.fine[i];
            }
            for (int i = 0; i < o.coarseN; i++) {
                if (coarseN == coarse.length) {
                    coarse = Arrays.copyOf(coarse, coarseN * 2);
                }
                coarse[coarseN++] = o.coarse[i];
            }
            calls += o.calls;
            over1us += o.over1us;
            maxLag = Math.max(maxLag, o.maxLag);
            lateOver1ms += o.lateOver1ms;
            lastEnd = Math.max(lastEnd, o.lastEnd);
        }

        /** The latency at quantile q (0..1): the value below which that share of the calls fell. */
        long quantile(double q) {
            long rank = (long) Math.ceil(q * calls);
            long seen = 0;
            for (int i = 0; i < FINE; i++) {
                seen += fine[i];
                if (seen >= rank) {
                    return i;
                }
            }
            long[] big = Arrays.copyOf(coarse, coarseN);
            Arrays.sort(big);
            return big[(int) Math.min(coarseN - 1, Math.max(0, rank - seen - 1))];
        }

        long max() {
            long m = 0;
            for (int i = 0; i < coarseN; i++) {
                m = Math.max(m, coarse[i]);
            }
            if (m > 0) {
                return m;
            }
            for (int i = FINE - 1; i >= 0; i--) {
                if (fine[i] > 0) {
                    return i;
                }
            }
            return 0;
        }
    }

    /**
     * Thread {@code t} of {@code threads} calls from {@code start} until {@code end} at the shared
     * {@code rate} (IDs/s), each call timed; {@code client} null: no call, the clock reads alone.
     */
    static Record run(KubeflakeClient client, int t, int threads, double rate, long start, long end) {
        Record r = new Record();
        double step = 1e9 * threads / rate; // ns between this thread's calls
        double offset = 1e9 * t / rate;
        long sink = 0;
        for (long k = 0; ; k++) {
            long due = start + (long) (offset + k * step);
            if (due >= end) {
                break;
            }
            long now;
            while ((now = System.nanoTime()) < due) {
                Thread.onSpinWait();
            }
            long lag = now - due;
            if (lag > r.maxLag) {
                r.maxLag = lag;
            }
            if (lag > 1_000_000) {
                r.lateOver1ms++;
            }
            if (client != null) {
                sink ^= client.nextId();
            }
            long done = System.nanoTime();
            r.add(done - now);
            r.lastEnd = done;
        }
        if (sink == 42) {
            System.out.print(""); // keeps the IDs used
        }
        return r;
    }

    /**
     * Runs {@code threads} paced threads for {@code nanos}; their records merged, {@code start}
     * set to the schedule's start.
     */
    static Record phase(KubeflakeClient client, int threads, double rate, long nanos) throws InterruptedException {
        Record[] records = new Record[threads];
        Thread[] workers = new Thread[threads];
        CountDownLatch ready = new CountDownLatch(threads);
        long start = System.nanoTime() + 50_000_000L; // every thread spins from the same start
        long end = start + nanos;
        for (int t = 0; t < threads; t++) {
            int id = t;
            workers[t] = new Thread(() -> {
                ready.countDown();
                records[id] = run(client, id, threads, rate, start, end);
            }, "paced-" + t);
            workers[t].start();
        }
        ready.await();
        Record all = new Record();
        all.start = start;
        for (int t = 0; t < threads; t++) {
            workers[t].join();
            all.merge(records[t]);
        }
        return all;
    }

    private static long gcCount() {
        long n = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            n += Math.max(0, gc.getCollectionCount());
        }
        return n;
    }

    private static long gcMillis() {
        long n = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            n += Math.max(0, gc.getCollectionTime());
        }
        return n;
    }

    private static String loadavg() {
        try {
            String[] f = java.nio.file.Files.readString(java.nio.file.Path.of("/proc/loadavg")).strip().split(" ");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (java.io.IOException e) {
            return "unknown";
        }
    }

    public static void main(String[] args) throws Exception {
        double fraction = 0.9;
        int seconds = 10;
        int warmup = 5;
        List<Integer> threadCounts = new ArrayList<>(List.of(1, 4));
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--fraction" -> fraction = Double.parseDouble(args[i + 1]);
                case "--seconds" -> seconds = Integer.parseInt(args[i + 1]);
                case "--warmup" -> warmup = Integer.parseInt(args[i + 1]);
                case "--threads" -> {
                    threadCounts.clear();
                    for (String s : args[i + 1].split(",")) {
                        threadCounts.add(Integer.parseInt(s.strip()));
                    }
                }
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (--fraction F, --seconds S, --warmup S, --threads 1,4)");
            }
        }
        List<String> table = new ArrayList<>();
        for (int threads : threadCounts) {
            {
                // The machine's own tail at this pace: the same loop and clock reads, no call.
                double rate = fraction * 4_096_000;
                phase(null, threads, rate, warmup * 1_000_000_000L);
                String loadBefore = loadavg();
                Record r = phase(null, threads, rate, seconds * 1_000_000_000L);
                double elapsed = (r.lastEnd - r.start) / 1e9;
                table.add(String.format(Locale.ROOT,
                        "| clock reads alone, %d | %,.0f | %.3f | %s | %,d | %,d ns | %,d ns | %,d ns | %,d ns | %,d ns | %,d | | | | | %s -> %s |",
                        threads, r.calls / elapsed, r.calls / elapsed / 4_096_000, elapsed <= seconds * 1.01 ? "held" : "NOT held",
                        r.calls, r.quantile(0.5), r.quantile(0.99), r.quantile(0.999), r.quantile(0.9999), r.max(), r.over1us,
                        loadBefore, loadavg()));
            }
            try (BenchSidecar sidecar = BenchSidecar.start();
                 KubeflakeClient client = KubeflakeClient.builder().socket(sidecar.socket()).build()) {
                client.nextId(); // reads the mode, starts the refiller
                Layout layout = client.layout().orElseThrow();
                double ceiling = (1L << layout.sequenceBits()) * 1e9 / layout.timeUnit().toNanos();
                double rate = fraction * ceiling;
                System.out.printf(Locale.ROOT, "%npaced: %d thread(s) sharing %,.0f IDs/s (%.2fx the ceiling %,.0f), "
                        + "%d s warm-up, %d s measured; loadavg %s%n", threads, rate, fraction, ceiling, warmup, seconds, loadavg());
                phase(client, threads, rate, warmup * 1_000_000_000L);
                ClientStats before = client.stats();
                long gcN = gcCount();
                long gcMs = gcMillis();
                String loadBefore = loadavg();
                Record r = phase(client, threads, rate, seconds * 1_000_000_000L);
                ClientStats after = client.stats();
                // Every call due is made (a late thread catches up); held: the last returned at
                // most 1 % of the run after the schedule's end.
                double elapsed = (r.lastEnd - r.start) / 1e9;
                long due = r.calls;
                boolean held = elapsed <= seconds * 1.01;
                long refills = after.refills() - before.refills();
                long refillNs = after.refillTime().minus(before.refillTime()).toNanos();
                String row = String.format(Locale.ROOT,
                        "| Snowflake nextId(), %d | %,.0f | %.3f | %s | %,d | %,d ns | %,d ns | %,d ns | %,d ns | %,d ns | %,d | %,d (%.1f ms) | %,d, %.2f ms mean | %,d | %d (%d ms) | %s -> %s |",
                        threads, r.calls / elapsed, r.calls / elapsed / ceiling, held ? "held" : "NOT held", r.calls,
                        r.quantile(0.5), r.quantile(0.99), r.quantile(0.999), r.quantile(0.9999), r.max(), r.over1us,
                        after.waits() - before.waits(), after.waitTime().minus(before.waitTime()).toNanos() / 1e6,
                        refills, refills == 0 ? 0 : refillNs / 1e6 / refills, after.expired() - before.expired(),
                        gcCount() - gcN, gcMillis() - gcMs, loadBefore, loadavg());
                System.out.printf(Locale.ROOT, "paced: %s; %,d calls due in %d s, made in %.3f s; at worst %.3f ms behind schedule; "
                        + "%,d calls started over 1 ms late; batch %,d%n", held ? "the pace was held" : "the pace was NOT held",
                        due, seconds, elapsed, r.maxLag / 1e6, r.lateOver1ms, after.batchSize());
                System.out.println("paced client: " + after);
                table.add(row);
            }
        }
        System.out.println();
        System.out.println("| row, threads | IDs/s | x ceiling | pace | calls | p50 | p99 | p99.9 | p99.99 | max | calls over 1 us "
                + "| waits (time) | refills | expired | GC (time) | loadavg |");
        System.out.println("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        table.forEach(System.out::println);
    }

    private PacedBench() {
    }
}
