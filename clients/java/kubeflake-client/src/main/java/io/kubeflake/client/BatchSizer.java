package io.kubeflake.client;

/**
 * How many IDs the next refill asks for, and when (clients/SPEC.md): the size starts at
 * minBatch, doubles when the last batch lasted under half the refill period and halves when it
 * lasted over four, within [minBatch, the ceiling]: maxRange for a segment refill from
 * {@code /range}, else maxBatch; a sidecar that refuses a refill as too large halves that
 * ceiling. In segment mode the size also jumps at once to what one refill period takes at the
 * measured rate. The low-water mark is half a batch, or a safe distance of (slowest recent)
 * refill times at the measured rate ({@link RefillPace}) when that is more, up to
 * {@link #RANGES_AHEAD} ceilings: more than one batch may be queued. Snowflake IDs age, so a
 * Snowflake mark is also at most what the rate hands out in half of maxAge, less a batch (an
 * ID asked at the mark is then handed out within maxAge / 2 at that rate). Not thread-safe:
 * {@link PrefetchBuffer} calls it under its lock.
 */
final class BatchSizer {
    /** The low-water mark is at most this many refill ceilings. */
    static final int RANGES_AHEAD = 8;

    private final int minBatch;
    private final long refillPeriod;
    /** Snowflake IDs expire after this, in nanoseconds; Long.MAX_VALUE: never. */
    private final long maxAge;
    private final RefillPace pace = new RefillPace();
    private int maxBatch;
    private int maxRange;
    private int size;
    private long lowWater;
    private long lastRefill;
    private boolean refilledOnce;
    /** The last segment refill asked /range. */
    private boolean ranges;
    /** The last refill was a Snowflake one: the mark is bounded by maxAge too. */
    private boolean snowflake;

    BatchSizer(int minBatch, int maxBatch, int maxRange, long refillPeriodNanos) {
        this(minBatch, maxBatch, maxRange, refillPeriodNanos, Long.MAX_VALUE);
    }

    /** @param maxAgeNanos how long a buffered Snowflake ID may wait; Long.MAX_VALUE: forever */
    BatchSizer(int minBatch, int maxBatch, int maxRange, long refillPeriodNanos, long maxAgeNanos) {
        this.maxAge = maxAgeNanos;
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

    /**
     * A Snowflake refill that took {@code tookNanos} arrived at {@code now} (System.nanoTime()),
     * when {@code handedOut} IDs had left the buffer in all, which had been empty for the last
     * {@code emptyNanos}: size the next one by how long the last lasted (Leaf's rule), and set the
     * mark a safe distance ahead within maxAge.
     */
    void refilled(long now, long tookNanos, long handedOut, long emptyNanos) {
        size = next(size, now - lastRefill, refilledOnce, maxBatch);
        lastRefill = now;
        refilledOnce = true;
        snowflake = true;
        pace.arrived(now, tookNanos, handedOut, emptyNanos);
        mark();
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
        snowflake = false;
        mark();
    }

    /** A caller found the buffer empty: the mark moves a safe distance further ahead. */
    void waited() {
        pace.waited();
        mark();
    }

    private void mark() {
        long cap = (long) RANGES_AHEAD * ceiling(ranges && !snowflake);
        if (snowflake && maxAge != Long.MAX_VALUE) {
            // An ID asked at the mark leaves the buffer within (mark + size) / rate.
            cap = Math.min(cap, (long) (pace.rate() * (maxAge / 2e9)) - size);
        }
        lowWater = cap <= size / 2 ? size / 2 : pace.lowWater(size, cap);
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
