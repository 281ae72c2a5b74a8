package io.kubeflake.client;

import java.time.Duration;

/** The sidecar holds no worker slot: it waits for one, lost it, or is stopping. See the pod's Events and {@code kubectl get idseq}. */
public class SlotLostException extends RefusedException {
    private static final long serialVersionUID = 1L;

    SlotLostException(String message, int status, String reason, Duration retryAfter) {
        super(Kind.SLOT_LOST, message, status, reason, retryAfter);
    }
}
