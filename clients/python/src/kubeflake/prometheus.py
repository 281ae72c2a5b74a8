"""A Prometheus collector for a client's counters (needs prometheus_client).

    from prometheus_client import REGISTRY
    from kubeflake.prometheus import ClientCollector
    REGISTRY.register(ClientCollector(ids))
"""

from __future__ import annotations

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "kubeflake.prometheus needs prometheus_client: pip install 'kubeflake[prometheus]'") from e


class ClientCollector:
    """Exposes a Client's or AsyncClient's stats() under the names of clients/SPEC.md."""

    def __init__(self, client, name: str = "default"):
        self._client = client
        self._name = name

    def collect(self):
        s = self._client.stats()
        labels = ["client"]
        values = [self._name]

        def gauge(name, doc, value):
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, value)
            return g

        def counter(name, doc, value):
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(values, value)
            return c

        yield gauge("kubeflake_client_buffer_depth", "IDs in the prefetch buffer now.", s.buffer_depth)
        yield gauge("kubeflake_client_batch_size", "The size of the next refill.", s.batch_size)
        yield counter("kubeflake_client_ids", "IDs handed out from the buffer.", s.ids)
        yield counter("kubeflake_client_refills", "Successful refills of the buffer.", s.refills)
        yield counter("kubeflake_client_refill_seconds", "Time spent in successful refills.", s.refill_seconds)
        yield counter("kubeflake_client_refill_errors", "Refills that failed.", s.refill_errors)
        yield counter("kubeflake_client_waits", "next() calls that found the buffer empty and waited.", s.waits)
        yield counter("kubeflake_client_wait_seconds", "Time next() calls spent waiting for a refill.", s.wait_seconds)
        yield counter("kubeflake_client_expired", "Buffered IDs dropped as older than max_age.", s.expired)
        yield counter("kubeflake_client_direct_requests", "Requests that bypass the buffer.", s.direct)
        errors = CounterMetricFamily("kubeflake_client_errors", "Errors raised to the app, by kind.",
                                     labels=labels + ["kind"])
        for kind, count in sorted(s.errors.items()):
            errors.add_metric(values + [kind], count)
        yield errors
