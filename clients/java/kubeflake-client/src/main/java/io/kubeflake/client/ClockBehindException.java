package io.kubeflake.client;

import java.time.Duration;

/** The sidecar's clock is behind what it must issue (it stepped back, demand outran the layout, the epoch lies ahead, or an {@code after} is ahead of this pod's clock). It clears by itself; the client retried until its max wait. */
public class ClockBehindException extends RefusedException {
    private static final long serialVersionUID = 1L;

    ClockBehindException(String message, int status, String reason, Duration retryAfter) {
        super(Kind.CLOCK_BEHIND, message, status, reason, retryAfter);
    }
}
