package io.kubeflake.client;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The sidecar's HTTP API as the client uses it: where it listens (KUBEFLAKE_SOCKET, else
 * KUBEFLAKE_URL), one request retried until maxWait, and what its answers mean (decimal IDs,
 * an error of a {@link Kind}, the mode in {@code /readyz}, a {@code /decode} document).
 * Keeps no state but the connection, so any thread may call it.
 */
final class SidecarApi {
    private static final long FIRST_BACKOFF = TimeUnit.MILLISECONDS.toNanos(50);
    private static final long LAST_BACKOFF = TimeUnit.SECONDS.toNanos(1);

    private final Transport transport;
    private final String where;
    private final Duration requestTimeout;
    private final long maxWait;

    private SidecarApi(Transport transport, String where, Duration requestTimeout, long maxWait) {
        this.transport = transport;
        this.where = where;
        this.requestTimeout = requestTimeout;
        this.maxWait = maxWait;
    }

    /**
     * The sidecar at {@code socket}, else at {@code url}, else at the environment's
     * KUBEFLAKE_SOCKET, else at its KUBEFLAKE_URL, else at {@link KubeflakeClient#DEFAULT_URL}.
     *
     * @throws IllegalArgumentException when the URL is not a plain {@code http://host:port}
     */
    static SidecarApi locate(String url, Path socket, Map<String, String> env, Duration requestTimeout,
                             long maxWait) {
        if (socket != null) {
            return new SidecarApi(new UnixTransport(socket), "unix:" + socket, requestTimeout, maxWait);
        }
        if (url == null && !env.getOrDefault("KUBEFLAKE_SOCKET", "").isEmpty()) {
            Path fromEnv = Path.of(env.get("KUBEFLAKE_SOCKET"));
            return new SidecarApi(new UnixTransport(fromEnv), "unix:" + fromEnv, requestTimeout, maxWait);
        }
        String raw = url != null ? url : env.getOrDefault("KUBEFLAKE_URL", "");
        String where = baseUrl(raw.isEmpty() ? KubeflakeClient.DEFAULT_URL : raw);
        return new SidecarApi(new HttpTransport(where, requestTimeout), where, requestTimeout, maxWait);
    }

    private static String baseUrl(String raw) {
        String hint = "KUBEFLAKE_URL must look like " + KubeflakeClient.DEFAULT_URL + ", not \"" + raw
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

    /** {@code unix:PATH} or {@code http://host:port}, for messages. */
    String where() {
        return where;
    }

    /** {@code "unix"} or {@code "tcp"}. */
    String transportName() {
        return transport.name();
    }

    Duration requestTimeout() {
        return requestTimeout;
    }

    /** GET path and parse decimal IDs, one per line: the whole answer or an error, never a part. */
    long[] fetch(String path) {
        Transport.Response r = transport.get(path, requestTimeout);
        if (r.status != 200) {
            throw errorOf(r, path);
        }
        return parseIds(r.body, path);
    }

    /**
     * GET {@code /range?count=N} (segment mode): {@code {first, n}} for the values first to
     * first+n-1, n between 1 and count; null when the sidecar answers 404 (a 0.1.0 sidecar,
     * which has no {@code /range}: ask {@code /ids} instead).
     */
    long[] fetchRange(int count) {
        String path = "/range?count=" + count;
        Transport.Response r = transport.get(path, requestTimeout);
        if (r.status == 404) {
            return null;
        }
        if (r.status != 200) {
            throw errorOf(r, path);
        }
        return parseRange(r.text(), count, path);
    }

    static long[] parseRange(String text, int count, String path) {
        String shape = path + ": the answer is not {\"first\":\"F\",\"count\":n} with F below 2^63 and n from 1 to "
                + count + ": " + text.strip();
        Map<String, Object> doc = Json.object(text);
        Object first = doc.get("first");
        Object n = doc.get("count");
        if (!(first instanceof String) || !(n instanceof java.math.BigDecimal)) {
            throw new ProtocolException(shape, null);
        }
        try {
            long f = Long.parseLong((String) first);
            long c = ((java.math.BigDecimal) n).longValueExact();
            if (f < 0 || c < 1 || c > count || f > Long.MAX_VALUE - (c - 1) || !((String) first).matches("[0-9]+")) {
                throw new ProtocolException(shape, null);
            }
            return new long[] {f, c};
        } catch (NumberFormatException | ArithmeticException e) {
            throw new ProtocolException(shape, e);
        }
    }

    static long[] parseIds(byte[] body, String path) {
        // One ID per line, the last line ended by '\n' or not: sized exactly in the usual case,
        // so that a refill allocates one array, not a second to trim it (less garbage, fewer GCs).
        int lines = body.length > 0 && body[body.length - 1] == '\n' ? 0 : 1;
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
    <T> T retrying(Supplier<T> request) {
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

    /** 50 ms doubling to 1 s, after a failure that named no Retry-After. */
    static long backoff(long previous) {
        return previous <= 0 ? FIRST_BACKOFF : Math.min(previous * 2, LAST_BACKOFF);
    }

    /** The mode {@code /readyz} names, once: {@code "snowflake"}, {@code "segment"} or {@code "strict"}. */
    String readMode() {
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

    /** The sidecar's {@code /decode/ID} document, retried until maxWait. */
    Map<String, Object> decodeDoc(long id) {
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

    void close() {
        transport.close();
    }
}
