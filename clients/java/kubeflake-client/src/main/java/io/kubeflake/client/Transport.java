package io.kubeflake.client;

import java.time.Duration;

/** One HTTP/1.1 GET to the sidecar, kept alive; TCP or a Unix socket. */
interface Transport extends AutoCloseable {
    /** An answer of any status; NoSidecarException when none came within the timeout. */
    Response get(String path, Duration timeout);

    /** "unix" or "tcp". */
    String name();

    @Override
    void close();

    /** A status, the Retry-After header (null when absent) and the whole body. */
    final class Response {
        final int status;
        final String retryAfter;
        final byte[] body;

        Response(int status, String retryAfter, byte[] body) {
            this.status = status;
            this.retryAfter = retryAfter;
            this.body = body;
        }

        String text() {
            return new String(body, java.nio.charset.StandardCharsets.UTF_8);
        }
    }
}
