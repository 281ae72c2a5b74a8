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

/// Panics unless `promtool check metrics` finds nothing to say about `exposition` (a
/// `/metrics` text; `what` names it in the failure). There is no list of accepted
/// findings: a name promtool rejects is renamed (docs/alerts.md, "Deprecated metric
/// names"). For the tests of both binaries. Without promtool (the Debian package
/// prometheus, which scripts/install-deps.sh installs before every CI run) it says so on
/// stderr and returns, unless `CI` is set: then a missing promtool fails too.
pub fn assert_promtool_clean(exposition: &str, what: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::env::var_os("CI").is_none() => {
            eprintln!(
                "!!! SKIPPED `promtool check metrics` of {what}: promtool is not installed \
                 (scripts/install-deps.sh installs the Debian package prometheus) !!!"
            );
            return;
        }
        Err(e) => panic!("cannot run promtool for {what}: {e}"),
    };
    // promtool reads all of stdin before it answers; the pipe is closed when dropped.
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(exposition.as_bytes())
        .expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool's answer");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "`promtool check metrics` on {what} ({}):\n{said}\n--- exposition ---\n{exposition}",
        out.status
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promtool_rejects_a_counter_named_with_its_type() {
        // Shows that the check fails on what the old segment metric name did.
        let registry = Registry::new();
        Registrar(&registry).counter("demo_counter_behind_total", "Demo.");
        let text = render(&registry);
        if std::process::Command::new("promtool")
            .arg("--version")
            .output()
            .is_err()
        {
            return assert_promtool_clean(&text, "a demo registry");
        }
        let caught = std::panic::catch_unwind(|| assert_promtool_clean(&text, "a demo registry"));
        let message = *caught
            .expect_err("promtool accepted a counter named with its type")
            .downcast::<String>()
            .expect("a formatted panic");
        assert!(
            message.contains("should not include type 'counter'"),
            "{message}"
        );
        let fine = Registry::new();
        Registrar(&fine).counter("demo_claims_refused_total", "Demo.");
        assert_promtool_clean(&render(&fine), "a demo registry with a good name");
    }

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
