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
 * them (clients/SPEC.md): batches in the order fetched, a refill asked for when the buffer
 * holds half a batch or less ({@link BatchSizer} sizes it), Snowflake IDs older than maxAge
 * dropped, a caller waiting at most maxWait. Everything is guarded by one lock, which also
 * guards the client's other counters (requests that bypass the buffer, errors by kind) so
 * that {@link #stats()} is one consistent snapshot, and whether the client is closed.
 *
 * <p>Segment mode holds ranges from {@code /range} instead (clients/SPEC.md, "Ranges in
 * segment mode"): {@link #take(boolean)} takes the current range's next value with one atomic
 * increment, without the lock, and takes the lock only to move to the next range, to wait,
 * or once per range to ask for a refill at the low-water mark.
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

    /** Segment mode: the range values are taken from, read and advanced without the lock. */
    private volatile Range current = Range.usedUp();
    // Guarded by lock: the ranges after it, in the order they arrived, and their values.
    private final ArrayDeque<Range> ranges = new ArrayDeque<>();
    private long queued;
    /**
     * Segment mode: a caller found the buffer empty since the last arrival, at emptySince; that
     * part of the interval measures the sidecar, not the demand ({@link RefillPace}).
     */
    private boolean empty;
    private long emptySince;
    /** Set by the first segment take: refills ask for ranges. */
    private boolean segment;
    /** The sidecar answered 404 to /range (0.1.0): refills ask /ids, whose runs become ranges. */
    private boolean noRanges;

    /**
     * Consecutive values {@code [first, end)}; {@code next} hands them out, and runs past
     * {@code end} once they are used up. Taking {@code askAt} asks for a refill.
     */
    private static final class Range {
        final long first;
        final long end;
        final AtomicLong next;
        long askAt = -1;

        Range(long first, long end) {
            this.first = first;
            this.end = end;
            this.next = new AtomicLong(first);
        }

        static Range usedUp() {
            return new Range(0, 0);
        }

        long left() {
            return Math.max(0, end - next.get());
        }
    }

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
        if (!snowflake) {
            Range r = current;
            long v = r.next.getAndIncrement();
            if (v < r.end) {
                if (v == r.askAt) {
                    lock.lock();
                    try {
                        askRefill();
                    } finally {
                        lock.unlock();
                    }
                }
                return v;
            }
        }
        long started = 0;
        boolean waited = false;
        lock.lock();
        try {
            while (true) {
                if (!snowflake) {
                    segment = true;
                    long v = nextOfRanges();
                    if (v >= 0) {
                        if (waited) {
                            waitNanos += System.nanoTime() - started;
                        }
                        return v;
                    }
                }
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
                    if (!snowflake) {
                        batch.waited();
                        if (!empty) {
                            empty = true;
                            emptySince = now;
                        }
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
     * The current range's next value, moving to the next range when it is used up; -1 when
     * no range holds a value. Lock is held: only here does {@code current} change.
     */
    private long nextOfRanges() {
        while (true) {
            Range r = current;
            long v = r.next.getAndIncrement();
            if (v < r.end) {
                if (v == r.askAt) {
                    askRefill();
                }
                return v;
            }
            Range n = ranges.poll();
            if (n == null) {
                return -1;
            }
            ids += r.end - r.first;
            queued -= n.end - n.first;
            // Ask once the values left (here and queued) are down to the low-water mark.
            long slack = batch.lowWater() - queued;
            n.askAt = slack < 0 ? -1 : Math.max(n.first, n.end - 1 - slack);
            current = n;
        }
    }

    /** Values handed out so far, those taken from the current range included; lock is held. */
    private long handedOutLocked() {
        Range r = current;
        return ids + (segment ? Math.min(r.next.get(), r.end) - r.first : 0);
    }

    /** Values buffered now; lock is held. */
    private long depthLocked() {
        return segment ? current.left() + queued : depth;
    }

    /**
     * Appends {@code first} to {@code last} (inclusive) to the ranges; lock is held. The
     * sequence's very last value, 2^63-1, is left out (a gap): {@code end} must fit a long.
     */
    private void addRange(long first, long last) {
        long end = last == Long.MAX_VALUE ? last : last + 1;
        if (end > first) {
            ranges.add(new Range(first, end));
            queued += end - first;
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
                        queue.add(new Batch(sent, got));
                        depth += got.length;
                    }
                    refills++;
                    refillNanos += done - sent;
                    if (segment) {
                        batch.refilled(done, done - sent, handedOutLocked(), empty ? done - emptySince : 0, !noRanges);
                        empty = false;
                    } else {
                        batch.refilled(done);
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
            head = EMPTY;
            pos = 0;
            queue.clear();
            depth = 0;
            Range r = current;
            ids += Math.min(r.next.get(), r.end) - r.first;
            current = Range.usedUp();
            ranges.clear();
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
