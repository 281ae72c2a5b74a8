package io.kubeflake.client;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A real standalone kubeflake sidecar for a test, on a free loopback port and a Unix
 * socket, from the binary in KUBEFLAKE_SIDECAR_BIN; stopped and removed on close.
 */
public final class Sidecar implements AutoCloseable {
    private static final HttpClient HTTP = HttpClient.newBuilder().proxy(HttpClient.Builder.NO_PROXY).build();

    private final Process process;
    private final Path dir;
    private final int port;

    private Sidecar(Process process, Path dir, int port) {
        this.process = process;
        this.dir = dir;
        this.port = port;
    }

    /** The binary the tests run: KUBEFLAKE_SIDECAR_BIN, which clients/java/test.sh sets. */
    public static String binary() {
        String bin = System.getenv("KUBEFLAKE_SIDECAR_BIN");
        if (bin == null || bin.isEmpty() || !Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("set KUBEFLAKE_SIDECAR_BIN to a kubeflake-sidecar binary "
                    + "(clients/java/test.sh does), not " + bin);
        }
        return bin;
    }

    /** Starts one with these extra arguments of {@code kubeflake-sidecar standalone}, ready to issue. */
    public static Sidecar start(String... args) throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("kubeflake-java-test-");
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        List<String> command = new ArrayList<>(List.of(binary(), "standalone", "--listen", "127.0.0.1:" + port,
                "--listen-unix", dir.resolve("api.sock").toString(), "--state-dir", dir.resolve("state").toString()));
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(dir.resolve("log").toFile()).start();
        Sidecar sidecar = new Sidecar(p, dir, port);
        for (int i = 0; i < 200; i++) { // 20 s at most
            if (!p.isAlive()) {
                break;
            }
            try {
                if (sidecar.get("/readyz").statusCode() == 200) {
                    return sidecar;
                }
            } catch (IOException e) {
                // not listening yet
            }
            Thread.sleep(100);
        }
        String log = Files.readString(dir.resolve("log"));
        sidecar.close();
        throw new IllegalStateException("the sidecar did not become ready; its log:\n" + log);
    }

    public String url() {
        return "http://127.0.0.1:" + port;
    }

    public Path socket() {
        return dir.resolve("api.sock");
    }

    /** The environment a pod's app container gets: both variables. */
    public Map<String, String> podEnvironment() {
        return Map.of("KUBEFLAKE_SOCKET", socket().toString(), "KUBEFLAKE_URL", url());
    }

    public HttpResponse<String> get(String path) throws IOException, InterruptedException {
        return HTTP.send(HttpRequest.newBuilder(URI.create(url() + path)).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(Duration.ofSeconds(10).toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS)) {
                process.destroyForcibly().waitFor();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        }
        try (var paths = Files.walk(dir)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // a temporary directory left behind
        }
    }
}
