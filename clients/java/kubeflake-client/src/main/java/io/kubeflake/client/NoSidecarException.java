package io.kubeflake.client;

/**
 * Nothing answered within the bound: no socket, connection refused, or no answer within the
 * request timeout. Check {@code KUBEFLAKE_SOCKET} / {@code KUBEFLAKE_URL} and that the sidecar runs.
 */
public class NoSidecarException extends KubeflakeException {
    private static final long serialVersionUID = 1L;

    NoSidecarException(String message, Throwable cause) {
        super(Kind.NO_SIDECAR, cause == null ? message : message + ": " + cause, cause);
    }
}
