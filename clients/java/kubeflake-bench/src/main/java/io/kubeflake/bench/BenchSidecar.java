package io.kubeflake.bench;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A standalone kubeflake sidecar for one benchmark trial: the binary in KUBEFLAKE_SIDECAR_BIN
 * (clients/java/bench.sh sets it), on a free loopback port and a Unix socket in a temporary
 * directory, stopped and removed on close.
 */
final class BenchSidecar implements AutoCloseable {
    private final Process process;
    private final Path dir;
    private final int port;

    private BenchSidecar(Process process, Path dir, int port) {
        this.process = process;
        this.dir = dir;
        this.port = port;
    }

    /** Starts {@code kubeflake-sidecar standalone} with these extra arguments; returns once it is ready. */
    static BenchSidecar start(String... args) throws IOException, InterruptedException {
        String bin = System.getenv("KUBEFLAKE_SIDECAR_BIN");
        if (bin == null || bin.isEmpty() || !Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("set KUBEFLAKE_SIDECAR_BIN to a kubeflake-sidecar binary "
                    + "(clients/java/bench.sh does), not " + bin);
        }
        Path dir = Files.createTempDirectory("kubeflake-java-bench-");
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = s.getLocalPort();
        }
        List<String> command = new ArrayList<>(List.of(bin, "standalone", "--listen", "127.0.0.1:" + port,
                "--listen-unix", dir.resolve("api.sock").toString(), "--state-dir", dir.resolve("state").toString()));
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(dir.resolve("log").toFile()).start();
        BenchSidecar sidecar = new BenchSidecar(p, dir, port);
        for (int i = 0; i < 200 && p.isAlive(); i++) { // 20 s at most
            if (sidecar.ready()) {
                return sidecar;
            }
            Thread.sleep(100);
        }
        String log = Files.readString(dir.resolve("log"));
        sidecar.close();
        throw new IllegalStateException("the sidecar did not become ready; its log:\n" + log);
    }

    /** A temporary IdSequence file for {@code --sequence-file}, named "bench", with this spec line. */
    static Path sequenceFile(String specLine) throws IOException {
        Path f = Files.createTempFile("kubeflake-java-bench-", ".yaml");
        f.toFile().deleteOnExit();
        Files.writeString(f, "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: bench}\n"
                + specLine + "\n");
        return f;
    }

    /** One plain GET /readyz, so that this needs nothing but sockets. */
    private boolean ready() {
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            s.setSoTimeout(2000);
            OutputStream out = s.getOutputStream();
            out.write("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                    .getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            byte[] head = in.readNBytes(12); // "HTTP/1.1 200"
            return new String(head, StandardCharsets.US_ASCII).endsWith(" 200");
        } catch (IOException e) {
            return false; // not listening yet
        }
    }

    String url() {
        return "http://127.0.0.1:" + port;
    }

    Path socket() {
        return dir.resolve("api.sock");
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        }
        try (var paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // a temporary directory left behind
        }
    }
}
