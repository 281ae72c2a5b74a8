package io.kubeflake.client;

/**
 * When a buffer refills (clients/SPEC.md, "Range refills are sized and timed so that no caller
 * waits"; Snowflake buffers too, within maxAge: {@link BatchSizer}): it measures the refills' mean and slowest recent duration and the rate at which
 * values leave the buffer, and sets the low-water mark a safe distance ahead: a refill asked at
 * the mark arrives, were it as slow as the slowest recent one, while about {@code distance - 1}
 * such refills' worth of values is still left. The distance starts at two; a caller that finds
 * the buffer empty doubles it (CosId's SegmentChainId grows its safe distance when hungry), up to
 * {@link #MAX_DISTANCE}, and {@link #CALM_REFILLS} refills in a row without a wait halve it
 * again. Not thread-safe: {@link BatchSizer} calls it under {@link PrefetchBuffer}'s lock.
 */
final class RefillPace {
    static final int MIN_DISTANCE = 2;
    static final int MAX_DISTANCE = 16;
    static final int CALM_REFILLS = 1000;

    /** Exponential mean of successful refills' durations, in nanoseconds (weight 1/4 to the newest). */
    private long refillNanos;
    /**
     * The slowest recent refill, in nanoseconds: a longer one is taken at once, and it halves
     * every {@link #SLOW_HALF_LIFE_NANOS} after. The spread, not the mean, empties a buffer.
     */
    private double slowNanos;
    static final long SLOW_HALF_LIFE_NANOS = 10_000_000_000L;
    /** Values handed out per second between the last two arrivals. */
    private double rate;
    private long lastAt;
    private long lastHandedOut;
    private int arrivals;
    /** The low-water mark, in slowest recent refills at the measured rate. */
    private int distance = MIN_DISTANCE;
    /** Refills since the last wait. */
    private int calm;
    /** A caller waited since the last arrival (one empty buffer counts once, however many wait). */
    private boolean hungry;

    /** {@link #arrived(long, long, long, long)} after an interval in which the buffer was never empty. */
    void arrived(long now, long tookNanos, long handedOut) {
        arrived(now, tookNanos, handedOut, 0);
    }

    /**
     * A refill that took {@code tookNanos} arrived at {@code now} (System.nanoTime()), when
     * {@code handedOut} values had left the buffer in all, and the buffer had been empty (callers
     * waiting) for the last {@code emptyNanos} of the interval since the previous arrival. The
     * rate is measured over the rest of the interval: while callers wait, values leave at the
     * sidecar's pace, not the demand's, and a rate measured then would lower the mark just when
     * it proved too low. A higher rate is taken at once, a lower one a quarter of the way (an
     * exponential mean), so that one quiet interval does not undo it.
     */
    void arrived(long now, long tookNanos, long handedOut, long emptyNanos) {
        if (arrivals == 0) {
            refillNanos = tookNanos;
            slowNanos = tookNanos;
        } else {
            refillNanos += (tookNanos - refillNanos) / 4;
            slowNanos = Math.max(tookNanos, slowNanos * Math.pow(0.5, (double) (now - lastAt) / SLOW_HALF_LIFE_NANOS));
            long busy = now - lastAt - emptyNanos;
            if (busy > 0) {
                double sample = (handedOut - lastHandedOut) * 1e9 / busy;
                rate = sample >= rate ? sample : rate + (sample - rate) / 4;
            }
        }
        arrivals = Math.min(arrivals + 1, 2);
        lastAt = now;
        lastHandedOut = handedOut;
        hungry = false;
        if (++calm >= CALM_REFILLS) {
            calm = 0;
            distance = Math.max(MIN_DISTANCE, distance / 2);
        }
    }

    /**
     * A caller found the buffer empty: the mark was too low for the refills' spread. Doubles the
     * distance once per empty buffer, once the rate is measured (the first refills' waits are
     * the start, not a spread).
     */
    void waited() {
        if (hungry || arrivals < 2) {
            return;
        }
        hungry = true;
        calm = 0;
        distance = Math.min(MAX_DISTANCE, distance * 2);
    }

    /** {@code max(batch / 2, ceil(distance x slowest recent refill x rate))}, at most {@code ceiling}. */
    long lowWater(int batch, long ceiling) {
        double need = Math.ceil(distance * (slowNanos / 1e9) * rate);
        long low = Math.max(batch / 2, (long) Math.min(need, ceiling));
        return Math.min(low, ceiling);
    }

    long refillNanos() {
        return refillNanos;
    }

    long slowNanos() {
        return (long) slowNanos;
    }

    double rate() {
        return rate;
    }

    int distance() {
        return distance;
    }
}
