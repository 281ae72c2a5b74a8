package io.kubeflake.client;

/**
 * How many IDs the next refill asks for, and when (clients/SPEC.md): the size starts at
 * minBatch, doubles when the last batch lasted under half the refill period and halves when it
 * lasted over four, within [minBatch, the ceiling]: maxRange for a segment refill from
 * {@code /range}, else maxBatch; a sidecar that refuses a refill as too large halves that
 * ceiling. In segment mode the size also jumps at once to what one refill period takes at the
 * measured rate, and the low-water mark is half a batch or a safe distance of (slowest recent)
 * refill times at that rate ({@link RefillPace}) when that is more, up to {@link #RANGES_AHEAD} ceilings: more
 * than one range may be queued. Snowflake's mark stays half a batch (its IDs age). Not
 * thread-safe: {@link PrefetchBuffer} calls it under its lock.
 */
final class BatchSizer {
    /** A segment buffer's low-water mark is at most this many refill ceilings. */
    static final int RANGES_AHEAD = 8;

    private final int minBatch;
    private final long refillPeriod;
    private final RefillPace pace = new RefillPace();
    private int maxBatch;
    private int maxRange;
    private int size;
    private long lowWater;
    private long lastRefill;
    private boolean refilledOnce;
    /** The last segment refill asked /range. */
    private boolean ranges;

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
     * values had left the buffer in all, which had been empty for the last {@code emptyNanos};
     * {@code ranges}: the next refill asks {@code /range}.
     */
    void refilled(long now, long tookNanos, long handedOut, long emptyNanos, boolean ranges) {
        int ceiling = ceiling(ranges);
        size = next(size, now - lastRefill, refilledOnce, ceiling);
        lastRefill = now;
        refilledOnce = true;
        this.ranges = ranges;
        pace.arrived(now, tookNanos, handedOut, emptyNanos);
        double perPeriod = Math.ceil(pace.rate() * (refillPeriod / 1e9));
        size = (int) Math.min(Math.max(size, perPeriod), ceiling);
        segmentMark();
    }

    /** A caller found the segment buffer empty: the mark moves a safe distance further ahead. */
    void waited() {
        pace.waited();
        segmentMark();
    }

    private void segmentMark() {
        lowWater = pace.lowWater(size, (long) RANGES_AHEAD * ceiling(ranges));
    }

    /** The safe distance, in refill times (not in {@link ClientStats}; for tests). */
    int distance() {
        return pace.distance();
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
