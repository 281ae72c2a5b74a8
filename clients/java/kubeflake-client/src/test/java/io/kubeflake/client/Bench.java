package io.kubeflake.client;

import java.time.Duration;
import java.util.Arrays;

/**
 * A measurement, not a test: {@code nextId()} from the buffer against one HTTP request per ID
 * (prefetch off), one caller, against a standalone sidecar this starts from
 * KUBEFLAKE_SIDECAR_BIN. Prints IDs/s and p50/p99/p99.9 latencies. The command is in
 * docs/clients.md, "Speed".
 *
 * <pre>java -cp kubeflake-client/target/classes:kubeflake-client/target/test-classes io.kubeflake.client.Bench [IDS [REQUESTS]]</pre>
 */
public final class Bench {
    private Bench() {
    }

    public static void main(String[] args) throws Exception {
        int count = args.length > 0 ? Integer.parseInt(args[0]) : 2_000_000;
        int requests = args.length > 1 ? Integer.parseInt(args[1]) : 5_000;
        try (Sidecar sidecar = Sidecar.start()) {
            try (KubeflakeClient ids = KubeflakeClient.builder().socket(sidecar.socket()).build()) {
                for (int i = 0; i < 200_000; i++) { // warm-up: the JIT, the batch size
                    ids.nextId();
                }
                report("nextId(), buffered, Unix socket", ids::nextId, count);
                System.out.println("    " + ids.stats());
            }
            try (KubeflakeClient ids = KubeflakeClient.builder().socket(sidecar.socket()).prefetch(false).build()) {
                report("one request per ID, Unix socket", ids::nextId, requests);
            }
            try (KubeflakeClient ids = KubeflakeClient.builder().url(sidecar.url()).prefetch(false).build()) {
                report("one request per ID, TCP", ids::nextId, requests);
            }
        }
    }

    private static void report(String what, java.util.function.LongSupplier next, int n) {
        for (int i = 0; i < Math.min(n / 10, 1000); i++) {
            next.getAsLong();
        }
        long[] took = new long[n];
        long started = System.nanoTime();
        for (int i = 0; i < n; i++) {
            long t = System.nanoTime();
            next.getAsLong();
            took[i] = System.nanoTime() - t;
        }
        Duration total = Duration.ofNanos(System.nanoTime() - started);
        Arrays.sort(took);
        System.out.printf("%s: %,d IDs in %d ms, %,.0f IDs/s; p50 %s, p99 %s, p99.9 %s%n", what, n, total.toMillis(),
                n / (total.toNanos() / 1e9), us(took[n / 2]), us(took[(int) (n * 0.99)]), us(took[(int) (n * 0.999)]));
    }

    private static String us(long nanos) {
        return String.format("%.2f us", nanos / 1000.0);
    }
}
