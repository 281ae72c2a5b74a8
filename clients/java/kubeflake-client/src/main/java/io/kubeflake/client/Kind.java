package io.kubeflake.client;

/** What went wrong, named as in every kubeflake client (clients/SPEC.md, "Errors and waits"). */
public enum Kind {
    /** 400: the request is wrong; the message says what to fix. Not retried. */
    BAD_REQUEST("bad_request", false),
    /** The sidecar's clock is behind what it must issue; clears by itself. Retried. */
    CLOCK_BEHIND("clock_behind", true),
    /** The sidecar holds no worker slot (waiting for one, lost it, stopping). Retried. */
    SLOT_LOST("slot_lost", true),
    /** The sequence can issue no more: waiting does not help. Not retried. */
    EXHAUSTED("exhausted", false),
    /** Any other refusal (503): the fence not renewed in time, a block not claimed. Retried. */
    REFUSED("refused", true),
    /** Nothing answered: no socket, connection refused, or no answer in time. Retried. */
    NO_SIDECAR("no_sidecar", true),
    /** An answer the sidecar's API does not promise: another server on the port. Not retried. */
    PROTOCOL("protocol", false);

    private final String wireName;
    private final boolean retryable;

    Kind(String wireName, boolean retryable) {
        this.wireName = wireName;
        this.retryable = retryable;
    }

    /** The name shared by every client: {@code clock_behind}, {@code no_sidecar}, ... */
    public String wireName() {
        return wireName;
    }

    /** Whether asking again later may succeed with nothing changed by the caller. */
    public boolean retryable() {
        return retryable;
    }

    static Kind ofReason(String reason) {
        if (reason == null) {
            return REFUSED;
        }
        switch (reason) {
            case "ahead_of_clock":
            case "clock_before_epoch":
            case "after_ahead_of_clock":
                return CLOCK_BEHIND;
            case "no_slot":
            case "stopped":
            case "stopping":
                return SLOT_LOST;
            case "timestamp_exhausted":
            case "exhausted":
            case "after_above_counter":
                return EXHAUSTED;
            default:
                return REFUSED;
        }
    }
}
