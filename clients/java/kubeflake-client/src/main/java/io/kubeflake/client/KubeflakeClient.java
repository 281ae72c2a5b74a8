package io.kubeflake.client;

import java.math.BigDecimal;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayDeque;
import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;

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

    private static final long[] EMPTY = new long[0];
    private static final long FIRST_BACKOFF = TimeUnit.MILLISECONDS.toNanos(50);
    private static final long LAST_BACKOFF = TimeUnit.SECONDS.toNanos(1);

    private final boolean prefetch;
    private final long maxAge;
    private final long maxWait;
    private final Duration requestTimeout;
    private final int minBatch;
    private final long refillPeriod;
    private final Transport transport;
    private final String where;

    private final ReentrantLock lock = new ReentrantLock();
    /** Signalled after every refill attempt, and on close. */
    private final Condition filled = lock.newCondition();
    /** Wakes the refiller. */
    private final Condition wanted = lock.newCondition();
    /** The refiller's own waits: only close cuts them short. */
    private final Condition stopping = lock.newCondition();

    // Guarded by lock.
    private long[] head = EMPTY;
    private long headSentAt;
    private int pos;
    private final ArrayDeque<Batch> queue = new ArrayDeque<>();
    private int depth;
    private int batchSize;
    private int maxBatch;
    private KubeflakeException refillError;
    private long retryAt;
    private long lastRefill;
    private boolean refilledOnce;
    private boolean refillWanted;
    private boolean closed;
    private Thread refiller;
    private Layout layout;
    private boolean layoutRead;
    private long ids;
    private long refills;
    private long refillNanos;
    private long refillErrors;
    private long waits;
    private long waitNanos;
    private long expired;
    private long direct;
    private final EnumMap<Kind, Long> errors = new EnumMap<>(Kind.class);

    private volatile String mode;

    private static final class Batch {
        final long sentAt;
        final long[] ids;

        Batch(long sentAt, long[] ids) {
            this.sentAt = sentAt;
            this.ids = ids;
        }
    }

    private KubeflakeClient(Builder b) {
        this.prefetch = b.prefetch;
        this.maxAge = b.maxAge.isNegative() || b.maxAge.isZero() ? Long.MAX_VALUE : b.maxAge.toNanos();
        this.maxWait = b.maxWait.toNanos();
        this.requestTimeout = b.requestTimeout;
        this.minBatch = b.minBatch;
        this.maxBatch = b.maxBatch;
        this.batchSize = b.minBatch;
        this.refillPeriod = b.refillPeriod.toNanos();
        Map<String, String> env = b.environment;
        if (b.socket != null) {
            transport = new UnixTransport(b.socket);
            where = "unix:" + b.socket;
        } else if (b.url == null && !env.getOrDefault("KUBEFLAKE_SOCKET", "").isEmpty()) {
            Path socket = Path.of(env.get("KUBEFLAKE_SOCKET"));
            transport = new UnixTransport(socket);
            where = "unix:" + socket;
        } else {
            String raw = b.url != null ? b.url : env.getOrDefault("KUBEFLAKE_URL", "");
            where = baseUrl(raw.isEmpty() ? DEFAULT_URL : raw);
            transport = new HttpTransport(where, requestTimeout);
        }
    }

    /** A client with the defaults of clients/SPEC.md, finding the sidecar from the environment. */
    public static KubeflakeClient create() {
        return builder().build();
    }

    /** Settings for a client; each has the default of clients/SPEC.md, section 7. */
    public static Builder builder() {
        return new Builder();
    }

    private static String baseUrl(String raw) {
        String hint = "KUBEFLAKE_URL must look like " + DEFAULT_URL + ", not \"" + raw
                + "\" (the sidecar speaks plain HTTP on loopback)";
        URI uri;
        try {
            uri = new URI(raw);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException(hint, e);
        }
        String path = uri.getRawPath();
        if (!"http".equals(uri.getScheme()) || uri.getHost() == null || uri.getRawQuery() != null
                || uri.getRawFragment() != null || uri.getRawUserInfo() != null
                || (path != null && !path.isEmpty() && !path.equals("/"))) {
            throw new IllegalArgumentException(hint);
        }
        return "http://" + uri.getHost() + ":" + (uri.getPort() < 0 ? 80 : uri.getPort());
    }

    /** How the client reaches the sidecar: {@code "unix"} or {@code "tcp"}. */
    public String transport() {
        return transport.name();
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
        boolean snowflake = "snowflake".equals(mode);
        long started = 0;
        boolean waited = false;
        lock.lock();
        try {
            while (true) {
                while (pos < head.length || !queue.isEmpty()) {
                    if (pos == head.length) {
                        Batch b = queue.poll();
                        head = b.ids;
                        headSentAt = b.sentAt;
                        pos = 0;
                    }
                    if (snowflake && maxAge != Long.MAX_VALUE && System.nanoTime() - headSentAt > maxAge) {
                        int dropped = head.length - pos;
                        expired += dropped;
                        depth -= dropped;
                        head = EMPTY;
                        pos = 0;
                        continue;
                    }
                    long id = head[pos++];
                    depth--;
                    ids++;
                    if (depth <= lowWater(batchSize)) {
                        askRefill();
                    }
                    if (waited) {
                        waitNanos += System.nanoTime() - started;
                    }
                    return id;
                }
                if (closed) {
                    throw new IllegalStateException("kubeflake: the client is closed");
                }
                long now = System.nanoTime();
                if (!waited) {
                    waited = true;
                    started = now;
                    waits++;
                }
                askRefill();
                long deadline = started + maxWait;
                if (refillError != null && (!refillError.retryable() || retryAt - deadline > 0) || now - deadline >= 0) {
                    // Waiting cannot help, the sidecar asked to wait past the bound, or the bound is over.
                    waitNanos += now - started;
                    KubeflakeException e = refillError;
                    if (e == null) {
                        e = new NoSidecarException("no ID from the kubeflake sidecar at " + where + " within "
                                + Duration.ofNanos(maxWait).toMillis() + " ms (maxWait)", null);
                    }
                    countLocked(e);
                    throw e;
                }
                try {
                    filled.awaitNanos(deadline - now);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    waitNanos += System.nanoTime() - started;
                    throw new NoSidecarException("interrupted while waiting for an ID from " + where, e);
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * An ID greater than {@code after}, whichever pod issued {@code after} (docs/api.md,
     * "after"). Never from the buffer: a buffered ID may be below it.
     */
    public long nextIdAfter(long after) {
        if (after < 0) {
            BadRequestException e = new BadRequestException("after must be an ID (>= 0), got " + after);
            count(e);
            throw e;
        }
        return direct("/id?after=" + after);
    }

    /** {@code count} IDs in increasing order, in one request, not from the buffer. */
    public long[] nextIds(int count) {
        if (count < 1) {
            throw new IllegalArgumentException("count must be at least 1, got " + count);
        }
        lock.lock();
        try {
            direct++;
        } finally {
            lock.unlock();
        }
        try {
            return retrying(() -> fetch("/ids?count=" + count, requestTimeout));
        } catch (KubeflakeException e) {
            count(e);
            throw e;
        }
    }

    private long direct(String path) {
        lock.lock();
        try {
            if (closed) {
                throw new IllegalStateException("kubeflake: the client is closed");
            }
            direct++;
        } finally {
            lock.unlock();
        }
        try {
            return retrying(() -> fetch(path, requestTimeout))[0];
        } catch (KubeflakeException e) {
            count(e);
            throw e;
        }
    }

    /** GET path and parse decimal IDs, one per line: the whole answer or an error, never a part. */
    private long[] fetch(String path, Duration timeout) {
        Transport.Response r = transport.get(path, timeout);
        if (r.status != 200) {
            throw errorOf(r, path);
        }
        return parseIds(r.body, path);
    }

    static long[] parseIds(byte[] body, String path) {
        int lines = 1;
        for (byte b : body) {
            if (b == '\n') {
                lines++;
            }
        }
        long[] out = new long[lines];
        int n = 0;
        long v = 0;
        boolean inNumber = false;
        for (int i = 0; i <= body.length; i++) {
            byte c = i < body.length ? body[i] : (byte) '\n';
            if (c == '\n') {
                if (inNumber) {
                    out[n++] = v;
                }
                v = 0;
                inNumber = false;
                continue;
            }
            int d = c - '0';
            if (d < 0 || d > 9 || v > (Long.MAX_VALUE - d) / 10) {
                throw new ProtocolException(path + ": the answer is not decimal IDs below 2^63, one per line", null);
            }
            v = v * 10 + d;
            inNumber = true;
        }
        if (n == 0) {
            throw new ProtocolException(path + ": the answer holds no ID", null);
        }
        return n == out.length ? out : java.util.Arrays.copyOf(out, n);
    }

    private static KubeflakeException errorOf(Transport.Response r, String path) {
        Map<String, Object> doc = Json.object(r.text());
        Object message = doc.get("error");
        String text = message instanceof String ? (String) message : r.text().strip();
        if (text.isEmpty()) {
            text = "HTTP " + r.status;
        }
        Object reason = doc.get("reason");
        Duration retryAfter = Duration.ZERO;
        if (r.retryAfter != null) {
            try {
                double seconds = Double.parseDouble(r.retryAfter.strip());
                if (seconds >= 0) {
                    retryAfter = Duration.ofMillis(Math.round(seconds * 1000));
                }
            } catch (NumberFormatException e) {
                // an HTTP date: the sidecar sends seconds only
            }
        }
        return KubeflakeException.fromResponse(r.status, text, reason instanceof String ? (String) reason : null,
                retryAfter, path);
    }

    /**
     * Runs one request until it succeeds, fails for good, or maxWait is over; waits Retry-After
     * between refusals, and raises at once when that wait would pass the bound.
     */
    private <T> T retrying(Supplier<T> request) {
        long deadline = System.nanoTime() + maxWait;
        long delay = 0;
        while (true) {
            try {
                return request.get();
            } catch (KubeflakeException e) {
                if (!e.retryable()) {
                    throw e;
                }
                long wait = e.retryAfter().toNanos();
                if (wait == 0) {
                    delay = backoff(delay);
                    wait = delay;
                }
                if (System.nanoTime() + wait - deadline > 0) {
                    throw e;
                }
                try {
                    TimeUnit.NANOSECONDS.sleep(wait);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw new NoSidecarException("interrupted while waiting to ask the sidecar at " + where + " again", ie);
                }
            }
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
            m = retrying(this::readMode);
        } catch (KubeflakeException e) {
            count(e);
            throw e;
        }
        mode = m;
        return m;
    }

    private String readMode() {
        Transport.Response r = transport.get("/readyz", requestTimeout);
        if (r.status != 200 && r.status != 503) {
            throw errorOf(r, "/readyz");
        }
        Object parsed;
        try {
            parsed = Json.parse(r.text());
        } catch (IllegalArgumentException e) {
            throw new ProtocolException("/readyz: the answer is not JSON", e);
        }
        Map<?, ?> doc = parsed instanceof Map ? (Map<?, ?>) parsed : Map.of();
        Object phase = doc.get("phase");
        Object strict = doc.get("strict");
        if ("snowflake".equals(phase)) {
            return "snowflake";
        }
        if ("segment".equals(phase) && strict instanceof Boolean) {
            return (Boolean) strict ? "strict" : "segment";
        }
        // It answers but cannot issue yet: in a pod, it waits for a worker slot.
        Object reason = doc.get("reason");
        Duration retryAfter = r.status == 503 ? errorOf(r, "/readyz").retryAfter() : Duration.ZERO;
        throw new SlotLostException("the kubeflake sidecar at " + where + " cannot issue yet: " + doc.get("error")
                + " (it waits for a worker slot; see the pod's Events)", r.status,
                reason instanceof String ? (String) reason : "no_slot", retryAfter);
    }

    /** Wakes the refiller, starting it on first use; lock is held. */
    private void askRefill() {
        if (refiller == null) {
            refiller = new Thread(this::refillLoop, "kubeflake-refill");
            refiller.setDaemon(true);
            refiller.start();
        }
        refillWanted = true;
        wanted.signal();
    }

    /**
     * The one thread that fills the buffer, one request at a time, appending batches in the
     * order fetched (so segment values leave the buffer in order).
     */
    private void refillLoop() {
        long delay = 0;
        lock.lock();
        try {
            while (true) {
                while (!refillWanted && !closed) {
                    wanted.await();
                }
                if (closed) {
                    return;
                }
                refillWanted = false;
                while (!closed) {
                    int size = Math.min(batchSize, maxBatch);
                    long sent = System.nanoTime();
                    long[] got = null;
                    KubeflakeException error = null;
                    lock.unlock();
                    try {
                        got = fetch("/ids?count=" + size, requestTimeout);
                    } catch (KubeflakeException e) {
                        error = e;
                    } finally {
                        lock.lock();
                    }
                    if (closed) {
                        return;
                    }
                    if (error != null) {
                        if (error.kind() == Kind.BAD_REQUEST && size > 1) {
                            // A sidecar with a smaller --max-batch: ask for fewer.
                            maxBatch = size / 2;
                            batchSize = Math.min(batchSize, maxBatch);
                            continue;
                        }
                        refillError = error;
                        refillErrors++;
                        long wait = error.retryAfter().toNanos();
                        if (wait == 0) {
                            delay = backoff(delay);
                            wait = delay;
                        }
                        retryAt = System.nanoTime() + wait;
                        filled.signalAll();
                        if (!error.retryable()) {
                            break;
                        }
                        while (wait > 0 && !closed) { // wait as asked; nextId calls do not cut it short
                            wait = stopping.awaitNanos(wait);
                        }
                        continue;
                    }
                    long done = System.nanoTime();
                    delay = 0;
                    queue.add(new Batch(sent, got));
                    depth += got.length;
                    refills++;
                    refillNanos += done - sent;
                    batchSize = nextBatchSize(batchSize, done - lastRefill, refilledOnce);
                    lastRefill = done;
                    refilledOnce = true;
                    refillError = null;
                    filled.signalAll();
                    if (depth > lowWater(batchSize)) {
                        break;
                    }
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            lock.unlock();
        }
    }

    /** Leaf's rule: double when the last batch lasted under half the period, halve over four. */
    private int nextBatchSize(int current, long lasted, boolean known) {
        int size = current;
        if (known) {
            if (lasted < refillPeriod / 2) {
                size = current * 2;
            } else if (lasted > refillPeriod * 4) {
                size = current / 2;
            }
        }
        return Math.min(Math.max(Math.min(size, maxBatch), minBatch), maxBatch);
    }

    /** Refill when the buffer holds half a batch or less. */
    private static int lowWater(int batch) {
        return batch / 2;
    }

    /** 50 ms doubling to 1 s, after a failure that named no Retry-After. */
    private static long backoff(long previous) {
        return previous <= 0 ? FIRST_BACKOFF : Math.min(previous * 2, LAST_BACKOFF);
    }

    /**
     * The sequence's layout, read once from the sidecar; empty in segment mode and for layouts
     * with a key form, whose IDs {@link #decode(long)} asks the sidecar about instead.
     */
    public Optional<Layout> layout() {
        lock.lock();
        try {
            if (layoutRead) {
                return Optional.ofNullable(layout);
            }
        } finally {
            lock.unlock();
        }
        Layout found = null;
        Map<String, Object> zero = decodeDoc(0);
        if (!"Segment".equals(zero.get("mode"))) {
            for (int total : new int[] {63, 53}) {
                Map<String, Object> largest;
                try {
                    largest = decodeDoc(total == 63 ? Long.MAX_VALUE : (1L << total) - 1);
                } catch (BadRequestException e) {
                    continue;
                }
                long tickMax = number(largest.get("tick"));
                int tickBits = 64 - Long.numberOfLeadingZeros(tickMax);
                Map<String, Object> oneTick = decodeDoc(1L << (total - tickBits));
                found = layoutOf(zero, largest, total, oneTick);
                break;
            }
        }
        lock.lock();
        try {
            layout = found;
            layoutRead = true;
        } finally {
            lock.unlock();
        }
        return Optional.ofNullable(found);
    }

    private static Layout layoutOf(Map<String, Object> zero, Map<String, Object> largest, int total,
                                   Map<String, Object> oneTick) {
        if (largest.containsKey("key") || largest.containsKey("shard")) {
            return null;
        }
        int[] widths = new int[4];
        String[] names = {"tick", "datacenter", "worker", "sequence"};
        int sum = 0;
        for (int i = 0; i < 4; i++) {
            long v = number(largest.get(names[i]));
            if (v < 0 || (v & (v + 1)) != 0) { // not 2^k - 1: a rotated or reversed field
                return null;
            }
            widths[i] = 64 - Long.numberOfLeadingZeros(v);
            sum += widths[i];
        }
        if (sum != total || number(oneTick.get("tick")) != 1) {
            return null;
        }
        Instant epoch = time(zero.get("time"));
        Instant next = time(oneTick.get("time"));
        if (epoch == null || next == null || !next.isAfter(epoch)) {
            return null;
        }
        return new Layout(total, widths[0], widths[1], widths[2], widths[3], epoch, Duration.between(epoch, next));
    }

    private static long number(Object v) {
        if (v instanceof BigDecimal) {
            try {
                return ((BigDecimal) v).longValueExact();
            } catch (ArithmeticException e) {
                return -1;
            }
        }
        return -1;
    }

    private static Instant time(Object v) {
        if (!(v instanceof String)) {
            return null;
        }
        try {
            return OffsetDateTime.parse((String) v).toInstant();
        } catch (java.time.format.DateTimeParseException e) {
            return null;
        }
    }

    private Map<String, Object> decodeDoc(long id) {
        String path = "/decode/" + id;
        return retrying(() -> {
            Transport.Response r = transport.get(path, requestTimeout);
            if (r.status != 200) {
                throw errorOf(r, path);
            }
            try {
                Object doc = Json.parse(r.text());
                if (doc instanceof Map) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> map = (Map<String, Object>) doc;
                    return map;
                }
            } catch (IllegalArgumentException e) {
                // below
            }
            throw new ProtocolException(path + ": the answer is not a JSON object", null);
        });
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
        Map<String, Object> doc = decodeDoc(id);
        if ("Segment".equals(doc.get("mode"))) {
            throw new IllegalArgumentException(id + " is a segment value: it carries no fields");
        }
        return new IdParts(id, number(doc.get("tick")), number(doc.get("datacenter")), number(doc.get("worker")),
                number(doc.get("sequence")), time(doc.get("time")));
    }

    /** A snapshot of the client's counters. */
    public ClientStats stats() {
        lock.lock();
        try {
            return new ClientStats(ids, depth, batchSize, refills, Duration.ofNanos(refillNanos), refillErrors, waits,
                    Duration.ofNanos(waitNanos), expired, direct, Map.copyOf(errors));
        } finally {
            lock.unlock();
        }
    }

    private void count(KubeflakeException e) {
        lock.lock();
        try {
            countLocked(e);
        } finally {
            lock.unlock();
        }
    }

    private void countLocked(KubeflakeException e) {
        errors.merge(e.kind(), 1L, Long::sum);
    }

    /** Stops the refiller and drops the buffer (gaps, never reused). Idempotent. */
    @Override
    public void close() {
        Thread t;
        lock.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
            head = EMPTY;
            pos = 0;
            queue.clear();
            depth = 0;
            t = refiller;
            wanted.signalAll();
            stopping.signalAll();
            filled.signalAll();
        } finally {
            lock.unlock();
        }
        if (t != null) {
            try {
                t.join(requestTimeout.toMillis() + 1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        transport.close();
    }

    @Override
    public String toString() {
        return "KubeflakeClient[" + where + "]";
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
            return new KubeflakeClient(this);
        }
    }
}
