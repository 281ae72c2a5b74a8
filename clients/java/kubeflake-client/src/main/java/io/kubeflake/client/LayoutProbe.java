package io.kubeflake.client;

import java.math.BigDecimal;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.Map;

/**
 * A sequence's {@link Layout}, worked out from what the sidecar's {@code /decode} says of three
 * IDs: 0 (the epoch), the largest ID (each field's width) and the first ID of tick 1 (the
 * tick's length). And the fields of one {@code /decode} document, for
 * {@link KubeflakeClient#decode(long)} when there is no layout to decode with locally.
 */
final class LayoutProbe {
    private LayoutProbe() {
    }

    /**
     * The layout, or null in segment mode and for layouts with a key form (rotated or reversed
     * fields, a shard), which only the sidecar decodes.
     */
    static Layout read(SidecarApi sidecar) {
        Map<String, Object> zero = sidecar.decodeDoc(0);
        if ("Segment".equals(zero.get("mode"))) {
            return null;
        }
        for (int total : new int[] {63, 53}) {
            Map<String, Object> largest;
            try {
                largest = sidecar.decodeDoc(total == 63 ? Long.MAX_VALUE : (1L << total) - 1);
            } catch (BadRequestException e) {
                continue;
            }
            long tickMax = number(largest.get("tick"));
            int tickBits = 64 - Long.numberOfLeadingZeros(tickMax);
            Map<String, Object> oneTick = sidecar.decodeDoc(1L << (total - tickBits));
            return layoutOf(zero, largest, total, oneTick);
        }
        return null;
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

    /** An ID's fields as a {@code /decode} document gives them. */
    static IdParts partsOf(long id, Map<String, Object> doc) {
        return new IdParts(id, number(doc.get("tick")), number(doc.get("datacenter")), number(doc.get("worker")),
                number(doc.get("sequence")), time(doc.get("time")));
    }

    /** A JSON integer that fits a long, else -1. */
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

    /** An RFC 3339 time, else null. */
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
}
