package io.kubeflake.client;

import java.time.Instant;

/**
 * An ID's fields, as the sidecar's {@code /decode} gives them.
 *
 * @param id the ID
 * @param tick time units since the sequence's epoch
 * @param datacenter the datacenter field
 * @param worker the worker slot
 * @param sequence the sequence number within the tick
 * @param time when the tick began
 */
public record IdParts(long id, long tick, long datacenter, long worker, long sequence, Instant time) {
}
