package io.kubeflake.client;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The Java client's driver for the shared conformance suite: one JSON command a line on
 * stdin, one JSON answer a line on stdout (clients/conformance/README.md). Run by
 * clients/test.sh with the client's classes and test classes on the class path.
 */
public final class ConformanceDriver {
    private KubeflakeClient client;

    public static void main(String[] args) throws IOException {
        ConformanceDriver driver = new ConformanceDriver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> command = Json.object(line);
            Map<String, Object> answer = new LinkedHashMap<>();
            try {
                Map<String, Object> result = driver.handle(command);
                answer.put("ok", true);
                answer.putAll(result);
            } catch (KubeflakeException e) {
                answer.put("ok", false);
                answer.put("error", errorDoc(e));
            } catch (RuntimeException e) {
                answer.put("ok", false);
                answer.put("error", Map.of("kind", "internal", "message", String.valueOf(e)));
            }
            out.println(Json.write(answer));
            if ("close".equals(command.get("op"))) {
                return;
            }
        }
        if (driver.client != null) {
            driver.client.close();
        }
    }

    private static Map<String, Object> errorDoc(KubeflakeException e) {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("kind", e.kind().wireName());
        doc.put("message", e.getMessage());
        if (e.status() != 0) {
            doc.put("status", e.status());
            doc.put("reason", e.reason().orElse(""));
            doc.put("retry_after_ms", e.retryAfter().toMillis());
        }
        return doc;
    }

    private static long ms(Object v) {
        return ((BigDecimal) v).longValue();
    }

    private static long decimal(Object v) {
        return Long.parseLong(String.valueOf(v));
    }

    private Map<String, Object> handle(Map<String, Object> c) throws IOException {
        String op = String.valueOf(c.get("op"));
        switch (op) {
            case "open": {
                KubeflakeClient.Builder b = KubeflakeClient.builder();
                Object settings = c.get("settings");
                if (settings instanceof Map) {
                    for (Map.Entry<?, ?> e : ((Map<?, ?>) settings).entrySet()) {
                        Object v = e.getValue();
                        switch (String.valueOf(e.getKey())) {
                            case "max_wait_ms": b.maxWait(Duration.ofMillis(ms(v))); break;
                            case "request_timeout_ms": b.requestTimeout(Duration.ofMillis(ms(v))); break;
                            case "max_age_ms": b.maxAge(Duration.ofMillis(ms(v))); break;
                            case "min_batch": b.minBatch((int) ms(v)); break;
                            case "max_batch": b.maxBatch((int) ms(v)); break;
                            case "prefetch": b.prefetch(Boolean.TRUE.equals(v)); break;
                            default: throw new IllegalArgumentException("unknown setting " + e.getKey());
                        }
                    }
                }
                client = b.build();
                return Map.of("transport", client.transport());
            }
            case "next":
                return Map.of("id", Long.toString(client.nextId()));
            case "next_after":
                return Map.of("id", Long.toString(client.nextIdAfter(decimal(c.get("after")))));
            case "decode": {
                IdParts p = client.decode(decimal(c.get("id")));
                Map<String, Object> fields = new LinkedHashMap<>();
                fields.put("tick", p.tick());
                fields.put("datacenter", p.datacenter());
                fields.put("worker", p.worker());
                fields.put("sequence", p.sequence());
                fields.put("time_ms", p.time().toEpochMilli());
                return Map.of("fields", fields);
            }
            case "compose": {
                Layout layout = client.layout().orElseThrow(
                        () -> new IllegalStateException("no local layout (segment mode or a key form)"));
                return Map.of("id", Long.toString(layout.compose(decimal(c.get("tick")), decimal(c.get("datacenter")),
                        decimal(c.get("worker")), decimal(c.get("sequence")))));
            }
            case "stats": {
                ClientStats s = client.stats();
                Map<String, Object> errors = new LinkedHashMap<>();
                s.errors().forEach((k, v) -> errors.put(k.wireName(), v));
                Map<String, Object> stats = new LinkedHashMap<>();
                stats.put("ids", s.ids());
                stats.put("buffer_depth", s.bufferDepth());
                stats.put("refills", s.refills());
                stats.put("waits", s.waits());
                stats.put("expired", s.expired());
                stats.put("direct", s.direct());
                stats.put("refill_errors", s.refillErrors());
                stats.put("batch_size", s.batchSize());
                stats.put("errors", errors);
                return Map.of("stats", stats);
            }
            case "run":
                return run((int) ms(c.get("workers")), (int) ms(c.get("count")), Path.of(String.valueOf(c.get("out"))));
            case "close":
                if (client != null) {
                    client.close();
                }
                return Map.of();
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private Map<String, Object> run(int workers, int count, Path out) throws IOException {
        AtomicInteger left = new AtomicInteger(count);
        List<List<Long>> taken = new ArrayList<>();
        Map<String, Integer> errors = new LinkedHashMap<>();
        List<Thread> threads = new ArrayList<>();
        long started = System.nanoTime();
        for (int w = 0; w < workers; w++) {
            List<Long> mine = new ArrayList<>();
            taken.add(mine);
            Thread t = new Thread(() -> {
                while (left.getAndDecrement() > 0) {
                    try {
                        mine.add(client.nextId());
                    } catch (KubeflakeException e) {
                        synchronized (errors) {
                            errors.merge(e.kind().wireName(), 1, Integer::sum);
                        }
                        return;
                    }
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            try {
                t.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted", e);
            }
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        int total = 0;
        try (BufferedWriter w = Files.newBufferedWriter(out)) {
            for (int n = 0; n < taken.size(); n++) {
                for (long id : taken.get(n)) {
                    w.write(n + " " + id + "\n");
                    total++;
                }
            }
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("count", total);
        result.put("errors", errors);
        result.put("seconds", seconds);
        return result;
    }
}
