package io.kubeflake.client;

import java.time.Duration;
import java.time.Instant;

/**
 * A Snowflake sequence's bit layout, read once from the sidecar ({@link KubeflakeClient#layout()}):
 * decodes and composes IDs locally, agreeing with the sidecar's {@code /decode}.
 *
 * @param totalBits 63, or 53 for a JavaScript-safe layout
 * @param timestampBits bits of the tick
 * @param datacenterBits bits of the datacenter
 * @param workerBits bits of the worker slot
 * @param sequenceBits bits of the sequence number
 * @param epoch the time of tick 0
 * @param timeUnit the length of one tick
 */
public record Layout(int totalBits, int timestampBits, int datacenterBits, int workerBits, int sequenceBits,
                     Instant epoch, Duration timeUnit) {

    private int tickShift() {
        return sequenceBits + workerBits + datacenterBits;
    }

    /** Splits an ID into its fields; IllegalArgumentException for a value outside the layout. */
    public IdParts decode(long id) {
        if (id < 0 || (totalBits < 63 && id >= 1L << totalBits)) {
            throw new IllegalArgumentException(id + " is not an ID of this layout: IDs are below 2^" + totalBits);
        }
        long tick = field(id, tickShift(), timestampBits);
        return new IdParts(id, tick, field(id, sequenceBits + workerBits, datacenterBits),
                field(id, sequenceBits, workerBits), field(id, 0, sequenceBits), timeOf(tick));
    }

    /** The ID with these fields; IllegalArgumentException names a field too wide for its bits. */
    public long compose(long tick, long datacenter, long worker, long sequence) {
        check("tick", tick, timestampBits);
        check("datacenter", datacenter, datacenterBits);
        check("worker", worker, workerBits);
        check("sequence", sequence, sequenceBits);
        return tick << tickShift() | datacenter << (sequenceBits + workerBits) | worker << sequenceBits | sequence;
    }

    /** The tick a time falls in: {@code compose(tickAt(t), 0, 0, 0)} is the smallest ID of it, for range queries. */
    public long tickAt(Instant time) {
        if (time.isBefore(epoch)) {
            return 0;
        }
        return Duration.between(epoch, time).dividedBy(timeUnit);
    }

    /** When a tick began. */
    public Instant timeOf(long tick) {
        return epoch.plus(timeUnit.multipliedBy(tick));
    }

    private static long field(long id, int shift, int width) {
        return width == 0 ? 0 : (id >>> shift) & ((1L << width) - 1);
    }

    private static void check(String name, long value, int width) {
        if (value < 0 || (width < 63 && value >= 1L << width)) {
            throw new IllegalArgumentException(name + "=" + value + " does not fit the layout's " + width + " bits");
        }
    }
}
