package io.kubeflake.client;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * Hands out IDs from the kubeflake sidecar in the pod, from a prefetch buffer, so that
 * {@link #nextId()} is a memory read in a steady state. What it does is what every kubeflake
 * client does: clients/SPEC.md in the repository. Thread-safe; close it when done.
 *
 * <pre>{@code
 * try (KubeflakeClient ids = KubeflakeClient.create()) {   // KUBEFLAKE_SOCKET, else KUBEFLAKE_URL
 *     long orderId = ids.nextId();                          // from the buffer
 *     long replyId = ids.nextIdAfter(orderId);              // from the sidecar: greater than orderId
 * }
 * }</pre>
 *
 * <p>Every call is bounded by {@link Builder#maxWait(Duration) maxWait}, retries and waits
 * included, and raises a {@link KubeflakeException} of the kind that went wrong.
 */
public final class KubeflakeClient implements AutoCloseable {
    /** Where a sidecar listens when neither KUBEFLAKE_SOCKET nor KUBEFLAKE_URL is set. */
    public static final String DEFAULT_URL = "http://127.0.0.1:7070";

    private final boolean prefetch;
    private final SidecarApi sidecar;
    /** The buffer, and the counters {@link #stats()} reports. */
    private final PrefetchBuffer buffer;
    private volatile String mode;
    /** Null until read. */
    private volatile Optional<Layout> layout;

    private KubeflakeClient(Builder b) {
        this.prefetch = b.prefetch;
        long maxAge = b.maxAge.isNegative() || b.maxAge.isZero() ? Long.MAX_VALUE : b.maxAge.toNanos();
        long maxWait = b.maxWait.toNanos();
        this.sidecar = SidecarApi.locate(b.url, b.socket, b.environment, b.requestTimeout, maxWait);
        this.buffer = new PrefetchBuffer(sidecar, maxAge, maxWait,
                new BatchSizer(b.minBatch, b.maxBatch, b.maxRange, b.refillPeriod.toNanos(), maxAge));
    }

    /** A client with the defaults of clients/SPEC.md, finding the sidecar from the environment. */
    public static KubeflakeClient create() {
        return builder().build();
    }

    /** Settings for a client; each has the default of clients/SPEC.md, section 7. */
    public static Builder builder() {
        return new Builder();
    }

    /** How the client reaches the sidecar: {@code "unix"} or {@code "tcp"}. */
    public String transport() {
        return sidecar.transportName();
    }

    /**
     * The next ID: from the buffer, or from the sidecar directly for a strict sequence or
     * without prefetch. Waits at most {@code maxWait}.
     *
     * @throws KubeflakeException of the kind that went wrong; {@link NoSidecarException} also when
     *         the calling thread is interrupted while it waits (its interrupt flag stays set)
     * @throws IllegalStateException when the client is closed
     */
    public long nextId() {
        if (!prefetch) {
            return direct("/id");
        }
        if ("strict".equals(mode())) {
            return direct("/id");
        }
        return buffer.take("snowflake".equals(mode));
    }

    /**
     * An ID greater than {@code after}, whichever pod issued {@code after} (docs/api.md,
     * "after"). Never from the buffer: a buffered ID may be below it.
     */
    public long nextIdAfter(long after) {
        if (after < 0) {
            BadRequestException e = new BadRequestException("after must be an ID (>= 0), got " + after);
            buffer.count(e);
            throw e;
        }
        return direct("/id?after=" + after);
    }

    /** {@code count} IDs in increasing order, in one request, not from the buffer. */
    public long[] nextIds(int count) {
        if (count < 1) {
            throw new IllegalArgumentException("count must be at least 1, got " + count);
        }
        buffer.countDirect(false);
        try {
            return sidecar.retrying(() -> sidecar.fetch("/ids?count=" + count));
        } catch (KubeflakeException e) {
            buffer.count(e);
            throw e;
        }
    }

    private long direct(String path) {
        buffer.countDirect(true);
        try {
            return sidecar.retrying(() -> sidecar.fetch(path))[0];
        } catch (KubeflakeException e) {
            buffer.count(e);
            throw e;
        }
    }

    /**
     * The sequence's mode, {@code "snowflake"}, {@code "segment"} or {@code "strict"}, read
     * once from the sidecar's {@code /readyz}.
     */
    public String mode() {
        String m = mode;
        if (m != null) {
            return m;
        }
        try {
            m = sidecar.retrying(sidecar::readMode);
        } catch (KubeflakeException e) {
            buffer.count(e);
            throw e;
        }
        mode = m;
        return m;
    }

    /**
     * The sequence's layout, read once from the sidecar; empty in segment mode and for layouts
     * with a key form, whose IDs {@link #decode(long)} asks the sidecar about instead.
     */
    public Optional<Layout> layout() {
        Optional<Layout> l = layout;
        if (l == null) {
            l = Optional.ofNullable(LayoutProbe.read(sidecar));
            layout = l;
        }
        return l;
    }

    /**
     * An ID's fields: locally from the layout, or by the sidecar's {@code /decode} for a
     * layout with a key form.
     *
     * @throws IllegalArgumentException for a segment value, which carries no fields
     */
    public IdParts decode(long id) {
        Optional<Layout> l = layout();
        if (l.isPresent()) {
            return l.get().decode(id);
        }
        Map<String, Object> doc = sidecar.decodeDoc(id);
        if ("Segment".equals(doc.get("mode"))) {
            throw new IllegalArgumentException(id + " is a segment value: it carries no fields");
        }
        return LayoutProbe.partsOf(id, doc);
    }

    /** A snapshot of the client's counters. */
    public ClientStats stats() {
        return buffer.stats();
    }

    /** Stops the refiller and drops the buffer (gaps, never reused). Idempotent. */
    @Override
    public void close() {
        if (buffer.close()) {
            sidecar.close();
        }
    }

    @Override
    public String toString() {
        return "KubeflakeClient[" + sidecar.where() + "]";
    }

    /** A client's settings: clients/SPEC.md, section 7. */
    public static final class Builder {
        private String url;
        private Path socket;
        private boolean prefetch = true;
        private Duration maxAge = Duration.ofSeconds(1);
        private Duration maxWait = Duration.ofSeconds(5);
        private Duration requestTimeout = Duration.ofSeconds(2);
        private int minBatch = 64;
        private int maxBatch = 10_000;
        private int maxRange = 1_000_000;
        private Duration refillPeriod = Duration.ofMillis(100);
        private Map<String, String> environment = System.getenv();

        private Builder() {
        }

        /** The sidecar's {@code http://host:port}, instead of KUBEFLAKE_SOCKET and KUBEFLAKE_URL. */
        public Builder url(String url) {
            this.url = Objects.requireNonNull(url, "url");
            return this;
        }

        /** The sidecar's Unix socket, instead of the environment; never replaced by TCP. */
        public Builder socket(Path socket) {
            this.socket = Objects.requireNonNull(socket, "socket");
            return this;
        }

        /** Off: every {@code nextId()} is one request, nothing buffered (default on). */
        public Builder prefetch(boolean prefetch) {
            this.prefetch = prefetch;
            return this;
        }

        /** How long a buffered Snowflake ID may wait (default 1 s); zero or negative: forever. */
        public Builder maxAge(Duration maxAge) {
            this.maxAge = Objects.requireNonNull(maxAge, "maxAge");
            return this;
        }

        /** The bound on one call, retries and waits included (default 5 s). */
        public Builder maxWait(Duration maxWait) {
            this.maxWait = positive(maxWait, "maxWait");
            return this;
        }

        /** The bound on one HTTP exchange (default 2 s). */
        public Builder requestTimeout(Duration requestTimeout) {
            this.requestTimeout = positive(requestTimeout, "requestTimeout");
            return this;
        }

        /** The smallest refill (default 64). */
        public Builder minBatch(int minBatch) {
            this.minBatch = minBatch;
            return this;
        }

        /** The largest refill (default 10,000, the sidecar's default --max-batch). */
        public Builder maxBatch(int maxBatch) {
            this.maxBatch = maxBatch;
            return this;
        }

        /**
         * The largest segment refill from {@code /range} (default 1,000,000, the sidecar's default
         * --max-range): a range costs the same whatever its length, so it may be far above maxBatch.
         */
        public Builder maxRange(int maxRange) {
            this.maxRange = maxRange;
            return this;
        }

        /** What the batch size aims at: one refill per period (default 100 ms). */
        public Builder refillPeriod(Duration refillPeriod) {
            this.refillPeriod = positive(refillPeriod, "refillPeriod");
            return this;
        }

        /** The variables read instead of the process environment (for tests). */
        Builder environment(Map<String, String> environment) {
            this.environment = Map.copyOf(environment);
            return this;
        }

        private static Duration positive(Duration d, String name) {
            Objects.requireNonNull(d, name);
            if (d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException(name + " must be positive, got " + d);
            }
            return d;
        }

        /**
         * The client; it does not contact the sidecar until asked for an ID.
         *
         * @throws IllegalArgumentException when the batch range or KUBEFLAKE_URL is wrong
         */
        public KubeflakeClient build() {
            if (minBatch < 1 || minBatch > maxBatch) {
                throw new IllegalArgumentException("need 1 <= minBatch <= maxBatch, got " + minBatch + " and " + maxBatch);
            }
            if (maxRange < minBatch) {
                throw new IllegalArgumentException("need minBatch <= maxRange, got " + minBatch + " and " + maxRange);
            }
            return new KubeflakeClient(this);
        }
    }
}
