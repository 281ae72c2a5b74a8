package io.kubeflake.client;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The IDs fetched ahead of {@link KubeflakeClient#nextId()}, and the one thread that refills
 * them (clients/SPEC.md): batches in the order fetched, a refill asked for at the low-water
 * mark ({@link BatchSizer} sizes it), Snowflake IDs older than maxAge dropped, a caller
 * waiting at most maxWait. One lock guards the queue, the counters (so that {@link #stats()}
 * is one consistent snapshot) and whether the client is closed.
 *
 * <p>The steady state takes no lock (clients/SPEC.md, "Order"): {@link #take(boolean)} claims
 * the next index of the current batch ({@link Cursor}: a Snowflake batch from {@code /ids}, or
 * a segment range from {@code /range}) with one atomic increment. Why that is safe:
 * <ul>
 *   <li>no ID twice: {@code getAndIncrement} gives each index to exactly one caller, and an
 *       index at or past the batch's end is never served;</li>
 *   <li>in order: only the lock's holder replaces {@code current}, and only once every index
 *       of it was claimed (or, Snowflake, once it is older than maxAge and its rest was
 *       claimed away at once, see {@link #nextLocked()}); batches are queued in the order
 *       they arrived, so each caller's IDs increase;</li>
 *   <li>maxAge: a caller checks the batch's age before claiming, as the locked path did;</li>
 *   <li>a batch's IDs are seen whole: the refiller fills the array before queueing it under
 *       the lock, and the lock's holder publishes it by the volatile write of {@code current}.</li>
 * </ul>
 * The lock is taken only to move to the next batch, to wait, or once per batch to ask for a
 * refill at the low-water mark ({@code askAt}).
 */
final class PrefetchBuffer {
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

    /** The batch IDs are claimed from, read without the lock; only the lock's holder replaces it. */
    private volatile Cursor current = Cursor.none();
    // Guarded by lock: the batches after it, in the order they arrived, and their IDs.
    private final ArrayDeque<Cursor> queue = new ArrayDeque<>();
    private long queued;
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

    /**
     * A caller found the buffer empty since the last arrival, at emptySince; that part of the
     * interval measures the sidecar, not the demand ({@link RefillPace}).
     */
    private boolean empty;
    private long emptySince;
    /** Set by the first segment take: refills ask for ranges. */
    private boolean segment;
    /** The sidecar answered 404 to /range (0.1.0): refills ask /ids, whose runs become ranges. */
    private boolean noRanges;

    /**
     * A batch callers claim IDs from without the lock: {@code ids} (Snowflake, or segment values
     * from {@code /ids}), or, when {@code ids} is null, the consecutive values {@code first} to
     * {@code first + count - 1} (a segment range).
     */
    private static final class Cursor {
        /** What {@code taken} is set to when the rest of a batch is dropped: no claim succeeds after. */
        static final long USED_UP = Long.MAX_VALUE / 2;

        final long[] ids;
        final long first;
        final long count;
        /** When the batch was asked for (System.nanoTime()), for maxAge. */
        final long sentAt;
        /** Its IDs expire after maxAge (Snowflake with a maxAge). */
        final boolean ages;
        /**
         * Indexes claimed so far: a caller claims index i by one getAndIncrement; at or past
         * count once used up (callers that find it so go to the locked path).
         */
        final AtomicLong taken = new AtomicLong();
        /**
         * The index whose claim asks for a refill (the low-water mark), -1: none. Written under
         * the lock before the cursor becomes {@code current}; the volatile write publishes it.
         */
        long askAt = -1;

        Cursor(long[] ids, long first, long count, long sentAt, boolean ages) {
            this.ids = ids;
            this.first = first;
            this.count = count;
            this.sentAt = sentAt;
            this.ages = ages;
        }

        /** Nothing to claim: the buffer's start, and what it holds once empty or closed. */
        static Cursor none() {
            return new Cursor(null, 0, 0, 0, false);
        }

        long at(long i) {
            return ids == null ? first + i : ids[(int) i];
        }

        /** IDs not claimed yet. */
        long left() {
            return Math.max(0, count - taken.get());
        }

        /** Drops the IDs not claimed yet, none claimable after; how many were claimed before. */
        long drop() {
            return Math.min(taken.getAndSet(USED_UP), count);
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
        // The steady state: one atomic claim, no lock.
        Cursor c = current;
        if (!c.ages || System.nanoTime() - c.sentAt <= maxAge) {
            long i = c.taken.getAndIncrement();
            if (i < c.count) {
                if (i == c.askAt) {
                    lock.lock();
                    try {
                        askRefill();
                    } finally {
                        lock.unlock();
                    }
                }
                return c.at(i);
            }
        }
        // The batch is used up (or too old): move on under the lock, waiting if need be.
        long started = 0;
        boolean waited = false;
        lock.lock();
        try {
            while (true) {
                if (!snowflake) {
                    segment = true;
                }
                long id = nextLocked();
                if (id >= 0) {
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
                    batch.waited();
                    if (!empty) {
                        empty = true;
                        emptySince = now;
                    }
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

    /**
     * The current batch's next ID, moving to the next batch when it is used up or (Snowflake)
     * older than maxAge; -1 when the buffer holds none. Lock is held: only here and in
     * {@link #close()} does {@code current} change.
     */
    private long nextLocked() {
        while (true) {
            Cursor c = current;
            if (c.ages && System.nanoTime() - c.sentAt > maxAge) {
                // Callers that claimed before the drop keep their IDs (checked young just before);
                // no claim succeeds after it.
                long claimed = c.drop();
                ids += claimed;
                expired += c.count - claimed;
            } else {
                long i = c.taken.getAndIncrement();
                if (i < c.count) {
                    if (i == c.askAt) {
                        askRefill();
                    }
                    return c.at(i);
                }
                ids += c.count; // every index was claimed
            }
            Cursor n = queue.poll();
            if (n == null) {
                current = Cursor.none();
                return -1;
            }
            queued -= n.count;
            // Ask once the IDs left (here and queued) are down to the low-water mark.
            long slack = batch.lowWater() - queued;
            n.askAt = slack < 0 ? -1 : Math.max(0, n.count - 1 - slack);
            current = n;
        }
    }

    /** IDs handed out so far, those claimed from the current batch included; lock is held. */
    private long handedOutLocked() {
        Cursor c = current;
        return ids + Math.min(c.taken.get(), c.count);
    }

    /** IDs buffered now; lock is held. */
    private long depthLocked() {
        return current.left() + queued;
    }

    /** Appends a batch behind the others; lock is held. */
    private void enqueue(Cursor c) {
        queue.add(c);
        queued += c.count;
    }

    /**
     * Appends {@code first} to {@code last} (inclusive) to the ranges; lock is held. The
     * sequence's very last value, 2^63-1, is left out (a gap): {@code end} must fit a long.
     */
    private void addRange(long first, long last) {
        long end = last == Long.MAX_VALUE ? last : last + 1;
        if (end > first) {
            enqueue(new Cursor(null, first, end - first, 0, false));
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
                    boolean askRange = segment && !noRanges;
                    int size = batch.request(askRange);
                    long sent = System.nanoTime();
                    long[] got = null;
                    long[] range = null;
                    KubeflakeException error = null;
                    lock.unlock();
                    try {
                        if (askRange) {
                            range = sidecar.fetchRange(size);
                        } else {
                            got = sidecar.fetch("/ids?count=" + size);
                        }
                    } catch (KubeflakeException e) {
                        error = e;
                    } finally {
                        lock.lock();
                    }
                    if (closed) {
                        return;
                    }
                    if (error != null) {
                        if (error.kind() == Kind.BAD_REQUEST && batch.tooLarge(size, askRange)) {
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
                    if (askRange && range == null) {
                        noRanges = true; // a 0.1.0 sidecar: /ids from now on
                        continue;
                    }
                    long done = System.nanoTime();
                    delay = 0;
                    if (range != null) {
                        addRange(range[0], range[0] + (range[1] - 1));
                    } else if (segment) {
                        addRuns(got);
                    } else {
                        enqueue(new Cursor(got, 0, got.length, sent, maxAge != Long.MAX_VALUE));
                    }
                    refills++;
                    refillNanos += done - sent;
                    long emptyFor = empty ? done - emptySince : 0;
                    empty = false;
                    if (segment) {
                        batch.refilled(done, done - sent, handedOutLocked(), emptyFor, !noRanges);
                    } else {
                        batch.refilled(done, done - sent, handedOutLocked(), emptyFor);
                    }
                    refillError = null;
                    filled.signalAll();
                    if (depthLocked() > batch.lowWater()) {
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

    /** Appends the runs of consecutive values of {@code values} (increasing) as ranges; lock is held. */
    private void addRuns(long[] values) {
        int start = 0;
        for (int i = 1; i <= values.length; i++) {
            if (i == values.length || values[i] != values[i - 1] + 1) {
                addRange(values[start], values[i - 1]);
                start = i;
            }
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
            int buffered = (int) Math.min(Integer.MAX_VALUE, depthLocked());
            return new ClientStats(handedOutLocked(), buffered, batch.size(), refills, Duration.ofNanos(refillNanos), refillErrors,
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
            ids += current.drop(); // a caller that read current before this can claim nothing more
            current = Cursor.none();
            queue.clear();
            queued = 0;
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
