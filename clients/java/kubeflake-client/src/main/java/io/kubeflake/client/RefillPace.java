package io.kubeflake.client;

/**
 * When a segment buffer refills (clients/SPEC.md, "Range refills are sized and timed so that no
 * caller waits"): it measures the refills' mean duration and the rate at which values leave the
 * buffer, and sets the low-water mark so that a refill asked at it arrives while about one
 * refill's worth of values is still left. Not thread-safe: {@link BatchSizer} calls it under
 * {@link PrefetchBuffer}'s lock.
 */
final class RefillPace {
    /** Exponential mean of successful refills' durations, in nanoseconds (weight 1/4 to the newest). */
    private long refillNanos;
    /** Values handed out per second between the last two arrivals. */
    private double rate;
    private long lastAt;
    private long lastHandedOut;
    private boolean arrivedOnce;

    /**
     * A refill that took {@code tookNanos} arrived at {@code now} (System.nanoTime()), when
     * {@code handedOut} values had left the buffer in all.
     */
    void arrived(long now, long tookNanos, long handedOut) {
        if (!arrivedOnce) {
            refillNanos = tookNanos;
        } else {
            refillNanos += (tookNanos - refillNanos) / 4;
            long elapsed = now - lastAt;
            if (elapsed > 0) {
                rate = (handedOut - lastHandedOut) * 1e9 / elapsed;
            }
        }
        arrivedOnce = true;
        lastAt = now;
        lastHandedOut = handedOut;
    }

    /** {@code max(batch / 2, ceil(2 x refill time x rate))}, at most {@code ceiling}. */
    long lowWater(int batch, int ceiling) {
        double need = Math.ceil(2 * refillNanos / 1e9 * rate);
        long low = Math.max(batch / 2, (long) Math.min(need, ceiling));
        return Math.min(low, ceiling);
    }

    long refillNanos() {
        return refillNanos;
    }

    double rate() {
        return rate;
    }
}
