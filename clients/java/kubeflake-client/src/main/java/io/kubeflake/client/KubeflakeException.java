package io.kubeflake.client;

import java.time.Duration;
import java.util.Optional;

/**
 * Every error a {@link KubeflakeClient} raises. Catch a subclass for one {@link Kind}
 * ({@link ClockBehindException}, {@link NoSidecarException}, ...), or {@link RefusedException}
 * for every refusal of the sidecar.
 */
public class KubeflakeException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final Kind kind;

    KubeflakeException(Kind kind, String message, Throwable cause) {
        super("kubeflake: " + message, cause);
        this.kind = kind;
    }

    /** What went wrong. */
    public Kind kind() {
        return kind;
    }

    /** Whether asking again later may succeed; the client already did until its max wait. */
    public boolean retryable() {
        return kind.retryable();
    }

    /** The sidecar's HTTP status, 0 when no answer came. */
    public int status() {
        return 0;
    }

    /** The sidecar's reason for a refusal (docs/openapi.yaml), if it gave one. */
    public Optional<String> reason() {
        return Optional.empty();
    }

    /** The sidecar's Retry-After, {@link Duration#ZERO} when none came. */
    public Duration retryAfter() {
        return Duration.ZERO;
    }

    /** Builds the exception of the right class for an HTTP answer that is not a 200. */
    static KubeflakeException fromResponse(int status, String message, String reason, Duration retryAfter, String path) {
        String text = path + ": " + message;
        switch (status) {
            case 400:
                return new BadRequestException(text);
            case 409:
            case 503:
                switch (Kind.ofReason(reason)) {
                    case CLOCK_BEHIND:
                        return new ClockBehindException(text, status, reason, retryAfter);
                    case SLOT_LOST:
                        return new SlotLostException(text, status, reason, retryAfter);
                    case EXHAUSTED:
                        return new ExhaustedException(text, status, reason, retryAfter);
                    default:
                        return new RefusedException(Kind.REFUSED, text, status, reason, retryAfter);
                }
            default:
                return new ProtocolException(path + ": unexpected HTTP " + status + ": " + message, null);
        }
    }
}
