package io.kubeflake.client;

import java.time.Duration;
import java.util.Map;

/**
 * A client's counters, named as in clients/SPEC.md, "Observability" (there in Prometheus
 * spelling: {@code kubeflake_client_buffer_depth}, ...).
 *
 * @param ids IDs handed out from the buffer
 * @param bufferDepth IDs in the buffer now
 * @param batchSize the next refill's size
 * @param refills successful refills
 * @param refillTime their total duration
 * @param refillErrors failed refills
 * @param waits {@code nextId()} calls that found the buffer empty and waited
 * @param waitTime the time they waited
 * @param expired buffered IDs dropped as older than the maximum age
 * @param direct requests that bypassed the buffer
 * @param errors errors raised to the app, by kind
 */
public record ClientStats(long ids, int bufferDepth, int batchSize, long refills, Duration refillTime,
                          long refillErrors, long waits, Duration waitTime, long expired, long direct,
                          Map<Kind, Long> errors) {
}
