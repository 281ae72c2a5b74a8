package io.kubeflake.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * HTTP/1.1 over the sidecar's Unix socket (JDK 16+ {@link UnixDomainSocketAddress}): a
 * minimal exchange of GETs on kept-alive connections from a small pool. A kept connection
 * the sidecar closed meanwhile is retried once at once on a new one. The timeout closes
 * the connection, which ends a blocked read.
 */
final class UnixTransport implements Transport {
    private static final int POOL = 16;
    private static final int MAX_HEADER = 64 * 1024;

    private final Path socket;
    private final ConcurrentLinkedDeque<SocketChannel> idle = new ConcurrentLinkedDeque<>();
    private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "kubeflake-unix-timeout");
        t.setDaemon(true);
        return t;
    });
    private volatile boolean closed;

    UnixTransport(Path socket) {
        this.socket = socket;
    }

    @Override
    public Response get(String path, Duration timeout) {
        SocketChannel kept = idle.pollFirst();
        if (kept != null) {
            try {
                return exchange(kept, path, timeout, true);
            } catch (StaleConnection e) {
                // the sidecar closed it meanwhile: once more on a new connection, at once
            }
        }
        SocketChannel fresh;
        try {
            fresh = SocketChannel.open(StandardProtocolFamily.UNIX);
            fresh.connect(UnixDomainSocketAddress.of(socket));
        } catch (IOException e) {
            throw noSidecar(e);
        }
        try {
            return exchange(fresh, path, timeout, false);
        } catch (StaleConnection e) {
            throw noSidecar(e.getCause());
        }
    }

    private NoSidecarException noSidecar(Throwable cause) {
        return new NoSidecarException("no kubeflake sidecar answered on the Unix socket " + socket
                + "; check KUBEFLAKE_SOCKET and that the sidecar runs (a socket is never replaced by TCP)", cause);
    }

    /** A kept connection that broke before any byte of the answer: safe to retry. */
    private static final class StaleConnection extends Exception {
        private static final long serialVersionUID = 1L;

        StaleConnection(Throwable cause) {
            super(cause);
        }
    }

    private Response exchange(SocketChannel ch, String path, Duration timeout, boolean wasKept) throws StaleConnection {
        AtomicBoolean timedOut = new AtomicBoolean();
        ScheduledFuture<?> deadline = timer.schedule(() -> {
            timedOut.set(true);
            closeQuietly(ch);
        }, Math.max(1, timeout.toMillis()), TimeUnit.MILLISECONDS);
        boolean keep = false;
        boolean gotBytes = false;
        try {
            byte[] request = ("GET " + path + " HTTP/1.1\r\nHost: kubeflake\r\nAccept: text/plain\r\n\r\n")
                    .getBytes(StandardCharsets.US_ASCII);
            ByteBuffer out = ByteBuffer.wrap(request);
            while (out.hasRemaining()) {
                ch.write(out);
            }
            Reader in = new Reader(ch);
            String status = in.line();
            gotBytes = true;
            String[] parts = status.split(" ", 3);
            if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
                throw new ProtocolException(path + ": the answer on " + socket + " is not HTTP/1.1", null);
            }
            int code = Integer.parseInt(parts[1]);
            long length = -1;
            boolean chunked = false;
            boolean connectionClose = parts[0].equals("HTTP/1.0");
            String retryAfter = null;
            for (String line = in.line(); !line.isEmpty(); line = in.line()) {
                int colon = line.indexOf(':');
                if (colon < 0) {
                    continue;
                }
                String name = line.substring(0, colon).trim().toLowerCase(Locale.ROOT);
                String value = line.substring(colon + 1).trim();
                switch (name) {
                    case "content-length":
                        length = Long.parseLong(value);
                        break;
                    case "transfer-encoding":
                        chunked = value.toLowerCase(Locale.ROOT).contains("chunked");
                        break;
                    case "connection":
                        connectionClose = value.equalsIgnoreCase("close");
                        break;
                    case "retry-after":
                        retryAfter = value;
                        break;
                    default:
                }
            }
            byte[] body;
            if (chunked) {
                ByteArrayOutputStream all = new ByteArrayOutputStream();
                while (true) {
                    String size = in.line();
                    int semi = size.indexOf(';');
                    int n = Integer.parseInt((semi < 0 ? size : size.substring(0, semi)).trim(), 16);
                    if (n == 0) {
                        while (!in.line().isEmpty()) {
                            // trailers
                        }
                        break;
                    }
                    all.write(in.bytes(n));
                    in.line();
                }
                body = all.toByteArray();
            } else if (length >= 0) {
                body = in.bytes((int) length);
            } else {
                body = in.rest();
                connectionClose = true;
            }
            keep = !connectionClose;
            return new Response(code, retryAfter, body);
        } catch (IOException | RuntimeException e) {
            if (e instanceof ProtocolException) {
                throw (ProtocolException) e;
            }
            if (timedOut.get()) {
                throw new NoSidecarException("the kubeflake sidecar on " + socket + " did not answer "
                        + path + " within " + timeout.toMillis() + " ms", null);
            }
            if (wasKept && !gotBytes && e instanceof IOException) {
                throw new StaleConnection(e);
            }
            if (e instanceof NumberFormatException) {
                throw new ProtocolException(path + ": the answer on " + socket + " is not well-formed HTTP", e);
            }
            throw noSidecar(e);
        } finally {
            deadline.cancel(false);
            if (keep && !timedOut.get() && !closed && idle.size() < POOL) {
                idle.addFirst(ch);
            } else {
                closeQuietly(ch);
            }
        }
    }

    /** Buffered reads of lines and counted bytes from a channel. */
    private static final class Reader {
        private final SocketChannel ch;
        private final ByteBuffer buf = ByteBuffer.allocate(16 * 1024);

        Reader(SocketChannel ch) {
            this.ch = ch;
            buf.flip();
        }

        private boolean fill() throws IOException {
            buf.compact();
            int n = ch.read(buf);
            buf.flip();
            return n > 0;
        }

        String line() throws IOException {
            StringBuilder sb = new StringBuilder();
            while (true) {
                while (buf.hasRemaining()) {
                    char c = (char) (buf.get() & 0xff);
                    if (c == '\n') {
                        int len = sb.length();
                        return len > 0 && sb.charAt(len - 1) == '\r' ? sb.substring(0, len - 1) : sb.toString();
                    }
                    sb.append(c);
                    if (sb.length() > MAX_HEADER) {
                        throw new IOException("a header line longer than " + MAX_HEADER + " bytes");
                    }
                }
                if (!fill()) {
                    throw new IOException("the connection closed in the middle of the answer");
                }
            }
        }

        byte[] bytes(int n) throws IOException {
            byte[] out = new byte[n];
            int off = 0;
            while (off < n) {
                if (!buf.hasRemaining() && !fill()) {
                    throw new IOException("the connection closed after " + off + " of " + n + " bytes of the body");
                }
                int k = Math.min(buf.remaining(), n - off);
                buf.get(out, off, k);
                off += k;
            }
            return out;
        }

        byte[] rest() throws IOException {
            ByteArrayOutputStream all = new ByteArrayOutputStream();
            do {
                byte[] chunk = new byte[buf.remaining()];
                buf.get(chunk);
                all.write(chunk);
            } while (fill());
            return all.toByteArray();
        }
    }

    private static void closeQuietly(SocketChannel ch) {
        try {
            ch.close();
        } catch (IOException e) {
            // nothing to do
        }
    }

    @Override
    public String name() {
        return "unix";
    }

    @Override
    public void close() {
        closed = true;
        for (SocketChannel ch; (ch = idle.pollFirst()) != null; ) {
            closeQuietly(ch);
        }
        timer.shutdownNow();
    }
}
