package io.kubeflake.client;

import java.time.Duration;
import java.util.Optional;

/**
 * The sidecar refused (503, or 409 for an {@code after} it cannot honour now); the parent of
 * {@link ClockBehindException}, {@link SlotLostException} and {@link ExhaustedException}.
 * Carries the sidecar's status, reason and Retry-After.
 */
public class RefusedException extends KubeflakeException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String reason;
    private final Duration retryAfter;

    RefusedException(Kind kind, String message, int status, String reason, Duration retryAfter) {
        super(kind, reason == null || reason.isEmpty() ? message : message + " (reason " + reason + ")", null);
        this.status = status;
        this.reason = reason;
        this.retryAfter = retryAfter == null ? Duration.ZERO : retryAfter;
    }

    @Override
    public int status() {
        return status;
    }

    @Override
    public Optional<String> reason() {
        return Optional.ofNullable(reason).filter(r -> !r.isEmpty());
    }

    @Override
    public Duration retryAfter() {
        return retryAfter;
    }
}
