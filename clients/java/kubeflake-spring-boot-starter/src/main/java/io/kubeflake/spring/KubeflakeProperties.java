package io.kubeflake.spring;

import java.nio.file.Path;
import java.time.Duration;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code kubeflake.*}: the client's settings (clients/SPEC.md, section 7). Each left unset
 * keeps the client's default; without {@code url} and {@code socket} the client reads
 * {@code KUBEFLAKE_SOCKET}, else {@code KUBEFLAKE_URL}, as the webhook sets them in a pod.
 */
@ConfigurationProperties(prefix = "kubeflake")
public class KubeflakeProperties {
    /** The sidecar's http://host:port, instead of the environment. */
    private String url;
    /** The sidecar's Unix socket, instead of the environment; never replaced by TCP. */
    private Path socket;
    /** Off: every nextId() is one request, nothing buffered. */
    private boolean prefetch = true;
    /** How long a buffered Snowflake ID may wait before it is dropped (default 1s). */
    private Duration maxAge;
    /** The bound on one call, retries and waits included (default 5s). */
    private Duration maxWait;
    /** The bound on one HTTP exchange (default 2s). */
    private Duration requestTimeout;
    /** The smallest refill (default 64). */
    private Integer minBatch;
    /** The largest refill (default 10000). */
    private Integer maxBatch;
    /** The largest segment refill from /range (default 1000000, the sidecar's default --max-range). */
    private Integer maxRange;
    /** What the batch size aims at: one refill per period (default 100ms). */
    private Duration refillPeriod;

    public String getUrl() {
        return url;
    }

    public void setUrl(String url) {
        this.url = url;
    }

    public Path getSocket() {
        return socket;
    }

    public void setSocket(Path socket) {
        this.socket = socket;
    }

    public boolean isPrefetch() {
        return prefetch;
    }

    public void setPrefetch(boolean prefetch) {
        this.prefetch = prefetch;
    }

    public Duration getMaxAge() {
        return maxAge;
    }

    public void setMaxAge(Duration maxAge) {
        this.maxAge = maxAge;
    }

    public Duration getMaxWait() {
        return maxWait;
    }

    public void setMaxWait(Duration maxWait) {
        this.maxWait = maxWait;
    }

    public Duration getRequestTimeout() {
        return requestTimeout;
    }

    public void setRequestTimeout(Duration requestTimeout) {
        this.requestTimeout = requestTimeout;
    }

    public Integer getMinBatch() {
        return minBatch;
    }

    public void setMinBatch(Integer minBatch) {
        this.minBatch = minBatch;
    }

    public Integer getMaxBatch() {
        return maxBatch;
    }

    public void setMaxBatch(Integer maxBatch) {
        this.maxBatch = maxBatch;
    }

    public Integer getMaxRange() {
        return maxRange;
    }

    public void setMaxRange(Integer maxRange) {
        this.maxRange = maxRange;
    }

    public Duration getRefillPeriod() {
        return refillPeriod;
    }

    public void setRefillPeriod(Duration refillPeriod) {
        this.refillPeriod = refillPeriod;
    }
}
