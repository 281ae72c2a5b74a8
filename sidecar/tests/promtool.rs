//! `promtool check metrics` over the sidecar's real `/metrics` text, with no accepted
//! finding: the binary in snowflake and in segment mode after it served requests, and
//! every family that only appears under faults (refusals) from the same `Metrics`.
//! Renamed metrics keep their old name only in the chart (docs/alerts.md, "Deprecated
//! metric names").

mod support;

use kubeflake_runtime::metrics::assert_promtool_clean;
use kubeflake_sidecar::metrics::Metrics;
use support::{SidecarProcess, get};

/// `/metrics` of a standalone sidecar (`extra` flags) after some good and bad requests.
fn served_metrics(extra: &[&str]) -> String {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let args: Vec<&str> = ["--state-dir", dir].iter().chain(extra).copied().collect();
    let p = SidecarProcess::start(&args, None);
    assert_eq!(get(p.addr, "/ids?count=3").status, 200);
    assert_eq!(get(p.addr, "/ids?count=0").status, 400);
    let metrics = get(p.addr, "/metrics");
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    metrics.body
}

#[test]
fn the_snowflake_sidecars_metrics_pass_promtool() {
    let text = served_metrics(&[]);
    assert!(text.contains("kubeflake_ids_issued_total 3"), "{text}");
    assert_promtool_clean(&text, "a snowflake sidecar's /metrics");
}

#[test]
fn the_segment_sidecars_metrics_pass_promtool_under_the_renamed_name_only() {
    let text = served_metrics(&["--mode", "segment"]);
    assert!(
        text.contains("# TYPE kubeflake_segment_claims_refused_behind_total counter"),
        "{text}"
    );
    // The 0.1.0 name is recorded by the chart's PrometheusRule, never exported (promtool
    // rejects it); it goes in 0.3.0.
    assert!(
        !text.contains("kubeflake_segment_counter_behind_total"),
        "{text}"
    );
    assert_promtool_clean(&text, "a segment sidecar's /metrics");
}

#[test]
fn families_that_appear_only_under_faults_pass_promtool() {
    let m = Metrics::new();
    m.refusals.with_label_values(&["no_slot"]).inc();
    m.held.with_label_values(&["fence_reached"]).inc();
    m.requests.with_label_values(&["id", "503"]).inc();
    m.request_duration.with_label_values(&["id"]).observe(0.001);
    m.segment.counter_behind.inc();
    m.clock_rollbacks.inc();
    assert_promtool_clean(&m.render(None), "the sidecar's metrics with every family");
    assert_promtool_clean(
        &m.render_segment(false, 0),
        "the sidecar's segment-mode metrics with every family",
    );
}
