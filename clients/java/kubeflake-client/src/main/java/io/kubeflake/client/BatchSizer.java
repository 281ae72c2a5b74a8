package io.kubeflake.client;

/**
 * How many IDs the next refill asks for, and when (clients/SPEC.md): the size starts at
 * minBatch, doubles when the last batch lasted under half the refill period and halves when it
 * lasted over four, within [minBatch, the ceiling]: maxRange for a segment refill from
 * {@code /range}, else maxBatch; a sidecar that refuses a refill as too large halves that
 * ceiling. The low-water mark is half a batch, or in segment mode what two refills take at the
 * measured rate ({@link RefillPace}) when that is more. Not thread-safe: {@link PrefetchBuffer}
 * calls it under its lock.
 */
final class BatchSizer {
    private final int minBatch;
    private final long refillPeriod;
    private final RefillPace pace = new RefillPace();
    private int maxBatch;
    private int maxRange;
    private int size;
    private long lowWater;
    private long lastRefill;
    private boolean refilledOnce;

    BatchSizer(int minBatch, int maxBatch, int maxRange, long refillPeriodNanos) {
        this.minBatch = minBatch;
        this.maxBatch = maxBatch;
        this.maxRange = maxRange;
        this.size = minBatch;
        this.lowWater = minBatch / 2;
        this.refillPeriod = refillPeriodNanos;
    }

    /** The current batch size (what {@link ClientStats} reports). */
    int size() {
        return size;
    }

    /** What the next refill asks for; {@code ranges}: it asks {@code /range}. */
    int request(boolean ranges) {
        return Math.min(size, ceiling(ranges));
    }

    /** Refill when the buffer holds this many values or fewer. */
    long lowWater() {
        return lowWater;
    }

    private int ceiling(boolean ranges) {
        return ranges ? maxRange : maxBatch;
    }

    /**
     * The sidecar refused a refill of {@code requested} as too large (a smaller --max-batch, or
     * --max-range when {@code ranges}): ask for fewer from now on. False when one ID was
     * refused, which fewer cannot help.
     */
    boolean tooLarge(int requested, boolean ranges) {
        if (requested <= 1) {
            return false;
        }
        if (ranges) {
            maxRange = requested / 2;
        } else {
            maxBatch = requested / 2;
        }
        size = Math.min(size, ceiling(ranges));
        return true;
    }

    /** A Snowflake refill arrived at {@code now} (System.nanoTime()): size the next one by how long the last lasted. */
    void refilled(long now) {
        size = next(size, now - lastRefill, refilledOnce, maxBatch);
        lastRefill = now;
        refilledOnce = true;
        lowWater = size / 2;
    }

    /**
     * A segment refill that took {@code tookNanos} arrived at {@code now}, when {@code handedOut}
     * values had left the buffer in all; {@code ranges}: the next refill asks {@code /range}.
     */
    void refilled(long now, long tookNanos, long handedOut, boolean ranges) {
        size = next(size, now - lastRefill, refilledOnce, ceiling(ranges));
        lastRefill = now;
        refilledOnce = true;
        pace.arrived(now, tookNanos, handedOut);
        lowWater = pace.lowWater(size, ceiling(ranges));
    }

    /** Leaf's rule: double when the last batch lasted under half the period, halve over four. */
    private int next(int current, long lasted, boolean known, int ceiling) {
        long next = current;
        if (known) {
            if (lasted < refillPeriod / 2) {
                next = current * 2L;
            } else if (lasted > refillPeriod * 4) {
                next = current / 2;
            }
        }
        return (int) Math.min(Math.max(Math.min(next, ceiling), minBatch), ceiling);
    }
}
