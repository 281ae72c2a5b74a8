package io.kubeflake.client;

/** The sidecar rejected the request (400): the message says what to fix. Never retried. */
public class BadRequestException extends KubeflakeException {
    private static final long serialVersionUID = 1L;

    BadRequestException(String message) {
        super(Kind.BAD_REQUEST, message, null);
    }

    @Override
    public int status() {
        return 400;
    }
}
