package io.kubeflake.spring;

import io.kubeflake.client.ClientStats;
import io.kubeflake.client.Kind;
import io.kubeflake.client.KubeflakeClient;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.util.function.ToDoubleFunction;

/**
 * A client's counters as Micrometer meters, named so that a Prometheus registry shows the
 * names of clients/SPEC.md, "Observability": {@code kubeflake.client.buffer.depth} becomes
 * {@code kubeflake_client_buffer_depth}, {@code kubeflake.client.refills} becomes
 * {@code kubeflake_client_refills_total}, and so on.
 */
public class KubeflakeClientMetrics implements MeterBinder {
    private final KubeflakeClient client;

    public KubeflakeClientMetrics(KubeflakeClient client) {
        this.client = client;
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        gauge(registry, "kubeflake.client.buffer.depth", "IDs in the buffer now", s -> s.bufferDepth());
        gauge(registry, "kubeflake.client.batch.size", "the next refill's size", s -> s.batchSize());
        counter(registry, "kubeflake.client.ids", "IDs handed out from the buffer", null, s -> s.ids());
        counter(registry, "kubeflake.client.refills", "successful refills", null, s -> s.refills());
        counter(registry, "kubeflake.client.refill", "time spent in successful refills", "seconds",
                s -> s.refillTime().toNanos() / 1e9);
        counter(registry, "kubeflake.client.refill.errors", "failed refills", null, s -> s.refillErrors());
        counter(registry, "kubeflake.client.waits", "nextId() calls that found the buffer empty and waited", null,
                s -> s.waits());
        counter(registry, "kubeflake.client.wait", "the time those calls waited", "seconds",
                s -> s.waitTime().toNanos() / 1e9);
        counter(registry, "kubeflake.client.expired", "buffered IDs dropped as older than max-age", null,
                s -> s.expired());
        counter(registry, "kubeflake.client.direct.requests", "requests that bypassed the buffer", null,
                s -> s.direct());
        for (Kind kind : Kind.values()) {
            FunctionCounter.builder("kubeflake.client.errors", client,
                            c -> c.stats().errors().getOrDefault(kind, 0L))
                    .description("errors raised to the app, by kind")
                    .tag("kind", kind.wireName())
                    .register(registry);
        }
    }

    private void gauge(MeterRegistry registry, String name, String help, ToDoubleFunction<ClientStats> value) {
        Gauge.builder(name, client, c -> value.applyAsDouble(c.stats())).description(help).register(registry);
    }

    private void counter(MeterRegistry registry, String name, String help, String unit,
                         ToDoubleFunction<ClientStats> value) {
        FunctionCounter.builder(name, client, c -> value.applyAsDouble(c.stats()))
                .description(help).baseUnit(unit).register(registry);
    }
}
