package io.kubeflake.client;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** TCP through the JDK's HttpClient: HTTP/1.1, kept alive, never through a proxy. */
final class HttpTransport implements Transport {
    private final String base;
    private final HttpClient client;

    HttpTransport(String base, Duration connectTimeout) {
        this.base = base;
        this.client = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .proxy(HttpClient.Builder.NO_PROXY)
                .connectTimeout(connectTimeout)
                .followRedirects(HttpClient.Redirect.NEVER)
                .build();
    }

    @Override
    public Response get(String path, Duration timeout) {
        HttpRequest request = HttpRequest.newBuilder(URI.create(base + path))
                .timeout(timeout)
                .header("Accept", "text/plain")
                .GET()
                .build();
        try {
            HttpResponse<byte[]> r = client.send(request, HttpResponse.BodyHandlers.ofByteArray());
            return new Response(r.statusCode(), r.headers().firstValue("Retry-After").orElse(null), r.body());
        } catch (IOException e) {
            throw new NoSidecarException("no kubeflake sidecar answered at " + base
                    + " within " + timeout.toMillis() + " ms; check KUBEFLAKE_URL and that the sidecar runs", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new NoSidecarException("interrupted while asking the sidecar at " + base, e);
        }
    }

    @Override
    public String name() {
        return "tcp";
    }

    @Override
    public void close() {
        // HttpClient closes its idle connections when it is collected (close() is Java 21).
    }
}
