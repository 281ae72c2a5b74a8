package io.kubeflake.client;

/** Something that is not the kubeflake sidecar answered (another server on the port, a proxy). */
public class ProtocolException extends KubeflakeException {
    private static final long serialVersionUID = 1L;

    ProtocolException(String message, Throwable cause) {
        super(Kind.PROTOCOL, message, cause);
    }
}
