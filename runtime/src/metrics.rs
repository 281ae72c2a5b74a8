//! Prometheus metrics: one registrar that creates and registers in one step, and the
//! text rendering `/metrics` serves.
//!
//! Metric definitions are written at startup from constant names and help texts; an
//! invalid or duplicate definition is a programming error caught by each binary's tests,
//! so the registrar panics on it instead of returning an error nobody can handle.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Creates metrics and registers them in one registry.
#[derive(Debug, Clone, Copy)]
pub struct Registrar<'a>(pub &'a Registry);

impl Registrar<'_> {
    /// Registers any collector and hands it back.
    pub fn register<T: Collector + Clone + 'static>(&self, metric: T) -> T {
        self.0
            .register(Box::new(metric.clone()))
            .expect("metric names are unique within a binary");
        metric
    }

    pub fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help).expect("a valid metric definition"))
    }

    pub fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(
            IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric definition"),
        )
    }

    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        self.register(Gauge::new(name, help).expect("a valid metric definition"))
    }

    pub fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("a valid metric definition"))
    }

    pub fn int_gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(
            IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric definition"),
        )
    }

    pub fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        self.register(
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
                .expect("a valid metric definition"),
        )
    }

    pub fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: Vec<f64>,
    ) -> HistogramVec {
        self.register(
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .expect("a valid metric definition"),
        )
    }
}

/// The registry's metrics in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&registry.gather(), &mut out) {
        // Only a metric family that breaks the format fails here; serve what was written.
        tracing::error!(error = %e, "rendering metrics failed");
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_are_rendered_with_their_help_and_type() {
        let registry = Registry::new();
        let r = Registrar(&registry);
        r.counter("demo_requests_total", "Requests.").inc_by(3);
        r.counter_vec("demo_refusals_total", "Refusals.", &["reason"])
            .with_label_values(&["no_slot"])
            .inc();
        let text = render(&registry);
        assert!(
            text.contains("# HELP demo_requests_total Requests."),
            "{text}"
        );
        assert!(
            text.contains("# TYPE demo_requests_total counter"),
            "{text}"
        );
        assert!(text.contains("demo_requests_total 3"), "{text}");
        assert!(
            text.contains(r#"demo_refusals_total{reason="no_slot"} 1"#),
            "{text}"
        );
    }

    #[test]
    #[should_panic(expected = "unique")]
    fn a_name_registered_twice_is_a_programming_error() {
        let registry = Registry::new();
        let r = Registrar(&registry);
        r.counter("demo_total", "Once.");
        r.counter("demo_total", "Twice.");
    }
}
