package io.kubeflake.client;

import java.time.Duration;

/** The sequence can issue no more (timestamp bits or the segment counter used up, or an {@code after} above the counter): create a new IdSequence. Never retried. */
public class ExhaustedException extends RefusedException {
    private static final long serialVersionUID = 1L;

    ExhaustedException(String message, int status, String reason, Duration retryAfter) {
        super(Kind.EXHAUSTED, message, status, reason, retryAfter);
    }
}
