package io.kubeflake.client;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The IDs fetched ahead of {@link KubeflakeClient#nextId()}, and the one thread that refills
 * them (clients/SPEC.md): batches in the order fetched, a refill asked for when the buffer
 * holds half a batch or less ({@link BatchSizer} sizes it), Snowflake IDs older than maxAge
 * dropped, a caller waiting at most maxWait. Everything is guarded by one lock, which also
 * guards the client's other counters (requests that bypass the buffer, errors by kind) so
 * that {@link #stats()} is one consistent snapshot, and whether the client is closed.
 */
final class PrefetchBuffer {
    private static final long[] EMPTY = new long[0];

    private final SidecarApi sidecar;
    private final long maxAge;
    private final long maxWait;

    private final ReentrantLock lock = new ReentrantLock();
    /** Signalled after every refill attempt, and on close. */
    private final Condition filled = lock.newCondition();
    /** Wakes the refiller. */
    private final Condition wanted = lock.newCondition();
    /** The refiller's own waits: only close cuts them short. */
    private final Condition stopping = lock.newCondition();

    // Guarded by lock.
    private long[] head = EMPTY;
    private long headSentAt;
    private int pos;
    private final ArrayDeque<Batch> queue = new ArrayDeque<>();
    private int depth;
    private final BatchSizer batch;
    private KubeflakeException refillError;
    private long retryAt;
    private boolean refillWanted;
    private boolean closed;
    private Thread refiller;
    private long ids;
    private long refills;
    private long refillNanos;
    private long refillErrors;
    private long waits;
    private long waitNanos;
    private long expired;
    private long direct;
    private final EnumMap<Kind, Long> errors = new EnumMap<>(Kind.class);

    private static final class Batch {
        final long sentAt;
        final long[] ids;

        Batch(long sentAt, long[] ids) {
            this.sentAt = sentAt;
            this.ids = ids;
        }
    }

    /**
     * @param maxAge how long a buffered Snowflake ID may wait, in nanoseconds; Long.MAX_VALUE: forever
     * @param maxWait the bound on one {@link #take(boolean)}, in nanoseconds
     */
    PrefetchBuffer(SidecarApi sidecar, long maxAge, long maxWait, BatchSizer batch) {
        this.sidecar = sidecar;
        this.maxAge = maxAge;
        this.maxWait = maxWait;
        this.batch = batch;
    }

    /**
     * The next buffered ID, waiting for a refill at most maxWait; {@code snowflake}: the IDs
     * expire after maxAge.
     *
     * @throws KubeflakeException the refill's error, or {@link NoSidecarException} when maxWait is
     *         over or the calling thread is interrupted (its interrupt flag stays set)
     * @throws IllegalStateException when the client is closed
     */
    long take(boolean snowflake) {
        long started = 0;
        boolean waited = false;
        lock.lock();
        try {
            while (true) {
                while (pos < head.length || !queue.isEmpty()) {
                    if (pos == head.length) {
                        Batch b = queue.poll();
                        head = b.ids;
                        headSentAt = b.sentAt;
                        pos = 0;
                    }
                    if (snowflake && maxAge != Long.MAX_VALUE && System.nanoTime() - headSentAt > maxAge) {
                        int dropped = head.length - pos;
                        expired += dropped;
                        depth -= dropped;
                        head = EMPTY;
                        pos = 0;
                        continue;
                    }
                    long id = head[pos++];
                    depth--;
                    ids++;
                    if (depth <= batch.lowWater()) {
                        askRefill();
                    }
                    if (waited) {
                        waitNanos += System.nanoTime() - started;
                    }
                    return id;
                }
                if (closed) {
                    throw new IllegalStateException("kubeflake: the client is closed");
                }
                long now = System.nanoTime();
                if (!waited) {
                    waited = true;
                    started = now;
                    waits++;
                }
                askRefill();
                long deadline = started + maxWait;
                if (refillError != null && (!refillError.retryable() || retryAt - deadline > 0) || now - deadline >= 0) {
                    // Waiting cannot help, the sidecar asked to wait past the bound, or the bound is over.
                    waitNanos += now - started;
                    KubeflakeException e = refillError;
                    if (e == null) {
                        e = new NoSidecarException("no ID from the kubeflake sidecar at " + sidecar.where() + " within "
                                + Duration.ofNanos(maxWait).toMillis() + " ms (maxWait)", null);
                    }
                    countLocked(e);
                    throw e;
                }
                try {
                    filled.awaitNanos(deadline - now);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    waitNanos += System.nanoTime() - started;
                    throw new NoSidecarException("interrupted while waiting for an ID from " + sidecar.where(), e);
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /** Wakes the refiller, starting it on first use; lock is held. */
    private void askRefill() {
        if (refiller == null) {
            refiller = new Thread(this::refillLoop, "kubeflake-refill");
            refiller.setDaemon(true);
            refiller.start();
        }
        refillWanted = true;
        wanted.signal();
    }

    /**
     * The one thread that fills the buffer, one request at a time, appending batches in the
     * order fetched (so segment values leave the buffer in order).
     */
    private void refillLoop() {
        long delay = 0;
        lock.lock();
        try {
            while (true) {
                while (!refillWanted && !closed) {
                    wanted.await();
                }
                if (closed) {
                    return;
                }
                refillWanted = false;
                while (!closed) {
                    int size = batch.request();
                    long sent = System.nanoTime();
                    long[] got = null;
                    KubeflakeException error = null;
                    lock.unlock();
                    try {
                        got = sidecar.fetch("/ids?count=" + size);
                    } catch (KubeflakeException e) {
                        error = e;
                    } finally {
                        lock.lock();
                    }
                    if (closed) {
                        return;
                    }
                    if (error != null) {
                        if (error.kind() == Kind.BAD_REQUEST && batch.tooLarge(size)) {
                            continue;
                        }
                        refillError = error;
                        refillErrors++;
                        long wait = error.retryAfter().toNanos();
                        if (wait == 0) {
                            delay = SidecarApi.backoff(delay);
                            wait = delay;
                        }
                        retryAt = System.nanoTime() + wait;
                        filled.signalAll();
                        if (!error.retryable()) {
                            break;
                        }
                        while (wait > 0 && !closed) { // wait as asked; nextId calls do not cut it short
                            wait = stopping.awaitNanos(wait);
                        }
                        continue;
                    }
                    long done = System.nanoTime();
                    delay = 0;
                    queue.add(new Batch(sent, got));
                    depth += got.length;
                    refills++;
                    refillNanos += done - sent;
                    batch.refilled(done);
                    refillError = null;
                    filled.signalAll();
                    if (depth > batch.lowWater()) {
                        break;
                    }
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Counts a request that bypasses the buffer.
     *
     * @throws IllegalStateException when {@code whenOpen} and the client is closed
     */
    void countDirect(boolean whenOpen) {
        lock.lock();
        try {
            if (whenOpen && closed) {
                throw new IllegalStateException("kubeflake: the client is closed");
            }
            direct++;
        } finally {
            lock.unlock();
        }
    }

    /** Counts an error that reached the app, by its kind. */
    void count(KubeflakeException e) {
        lock.lock();
        try {
            countLocked(e);
        } finally {
            lock.unlock();
        }
    }

    private void countLocked(KubeflakeException e) {
        errors.merge(e.kind(), 1L, Long::sum);
    }

    /** A snapshot of the counters. */
    ClientStats stats() {
        lock.lock();
        try {
            return new ClientStats(ids, depth, batch.size(), refills, Duration.ofNanos(refillNanos), refillErrors,
                    waits, Duration.ofNanos(waitNanos), expired, direct, Map.copyOf(errors));
        } finally {
            lock.unlock();
        }
    }

    /**
     * Stops the refiller (waiting for it a request's time) and drops the buffer: gaps, never
     * reused. False when it was closed already.
     */
    boolean close() {
        Thread t;
        lock.lock();
        try {
            if (closed) {
                return false;
            }
            closed = true;
            head = EMPTY;
            pos = 0;
            queue.clear();
            depth = 0;
            t = refiller;
            wanted.signalAll();
            stopping.signalAll();
            filled.signalAll();
        } finally {
            lock.unlock();
        }
        if (t != null) {
            try {
                t.join(sidecar.requestTimeout().toMillis() + 1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        return true;
    }
}
