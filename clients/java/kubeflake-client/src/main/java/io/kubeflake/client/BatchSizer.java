package io.kubeflake.client;

/**
 * How many IDs the next refill asks for (clients/SPEC.md): it starts at minBatch, doubles when
 * the last batch lasted under half the refill period and halves when it lasted over four,
 * always within [minBatch, maxBatch]; a sidecar that refuses a batch as too large halves
 * maxBatch. Not thread-safe: {@link PrefetchBuffer} calls it under its lock.
 */
final class BatchSizer {
    private final int minBatch;
    private final long refillPeriod;
    private int maxBatch;
    private int size;
    private long lastRefill;
    private boolean refilledOnce;

    BatchSizer(int minBatch, int maxBatch, long refillPeriodNanos) {
        this.minBatch = minBatch;
        this.maxBatch = maxBatch;
        this.size = minBatch;
        this.refillPeriod = refillPeriodNanos;
    }

    /** The current batch size (what {@link ClientStats} reports). */
    int size() {
        return size;
    }

    /** What the next refill asks for. */
    int request() {
        return Math.min(size, maxBatch);
    }

    /** Refill when the buffer holds half a batch or less. */
    int lowWater() {
        return size / 2;
    }

    /**
     * The sidecar refused a batch of {@code requested} as too large (a smaller --max-batch):
     * ask for fewer from now on. False when one ID was refused, which fewer cannot help.
     */
    boolean tooLarge(int requested) {
        if (requested <= 1) {
            return false;
        }
        maxBatch = requested / 2;
        size = Math.min(size, maxBatch);
        return true;
    }

    /** A refill arrived at {@code now} (System.nanoTime()): size the next one by how long the last lasted. */
    void refilled(long now) {
        size = next(size, now - lastRefill, refilledOnce);
        lastRefill = now;
        refilledOnce = true;
    }

    /** Leaf's rule: double when the last batch lasted under half the period, halve over four. */
    private int next(int current, long lasted, boolean known) {
        int next = current;
        if (known) {
            if (lasted < refillPeriod / 2) {
                next = current * 2;
            } else if (lasted > refillPeriod * 4) {
                next = current / 2;
            }
        }
        return Math.min(Math.max(Math.min(next, maxBatch), minBatch), maxBatch);
    }
}
