//! Prometheus metrics of the sidecar. Label values come from small fixed sets (routes,
//! status codes, refusal reasons), never from request data.

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::generator::Generator;

/// Every metric the sidecar exports.
pub struct Metrics {
    registry: Registry,
    pub ids_issued: IntCounter,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub refusals: IntCounterVec,
    pub clock_rollbacks: IntCounter,
    pub clock_rollback_last_seconds: Gauge,
    pub clock_forward_jumps: IntCounter,
    pub clock_forward_jump_last_seconds: Gauge,
    pub fence_writes: IntCounterVec,
    pub clock_skew_seconds: Gauge,
    /// 1 for the serving phase the sidecar is in (`crate::state::Phase`), 0 for the others.
    pub phase: IntGaugeVec,
    ahead_of_clock_seconds: Gauge,
    fence_headroom_seconds: Gauge,
    fence_tick: IntGauge,
    ready: IntGauge,
    worker_slot: IntGauge,
    timestamp_exhausts_at: Gauge,
    pub segment: SegmentMetrics,
}

/// Segment mode: block claims against the counter (cluster: API server writes).
#[derive(Clone)]
pub struct SegmentMetrics {
    pub blocks_claimed: IntCounter,
    pub claim_conflicts: IntCounter,
    pub claim_errors: IntCounter,
    pub claim_seconds: Histogram,
    /// Values taken for a batch that was then refused (a gap).
    pub values_dropped: IntCounter,
    pub block_size: IntGauge,
    pub buffered_values: IntGauge,
    /// Claims refused because the counter was below this sidecar's own top.
    pub counter_behind: IntCounter,
    /// End of the highest block claimed (a recovery hint when the counter is lost).
    pub claimed_top: IntGauge,
}

impl SegmentMetrics {
    fn new(r: &Registry) -> SegmentMetrics {
        let counter = |name: &str, help: &str| {
            register(r, IntCounter::new(name, help).expect("valid metric"))
        };
        let int_gauge =
            |name: &str, help: &str| register(r, IntGauge::new(name, help).expect("valid metric"));
        SegmentMetrics {
            blocks_claimed: counter(
                "kubeflake_segment_blocks_claimed_total",
                "Blocks of values claimed from the segment counter.",
            ),
            claim_conflicts: counter(
                "kubeflake_segment_claim_conflicts_total",
                "Claims that lost a compare-and-swap race and were retried.",
            ),
            claim_errors: counter(
                "kubeflake_segment_claim_errors_total",
                "Claims that failed (counter unreachable, too many conflicts) and were retried later.",
            ),
            claim_seconds: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "kubeflake_segment_claim_seconds",
                        "Time to claim one block, retries included.",
                    )
                    .buckets(vec![
                        1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 5.0,
                    ]),
                )
                .expect("valid metric"),
            ),
            values_dropped: counter(
                "kubeflake_segment_values_dropped_total",
                "Values taken for a batch that was then refused: gaps.",
            ),
            block_size: int_gauge(
                "kubeflake_segment_block_size",
                "Size of the block claimed last (adaptive sizing).",
            ),
            buffered_values: int_gauge(
                "kubeflake_segment_buffered_values",
                "Values buffered (current block's rest and the spare).",
            ),
            counter_behind: counter(
                "kubeflake_segment_counter_behind_total",
                "Claims refused because the counter was below this sidecar's own claimed top, \
                 or showed fewer claims than the IdSequence's status recorded (the counter was \
                 deleted and re-created, or restored from an older copy).",
            ),
            claimed_top: int_gauge(
                "kubeflake_segment_claimed_top",
                "End of the highest block this sidecar claimed: every value it issued is below. \
                 Exact below 2^53; the log has the exact value.",
            ),
        }
    }

    /// Metrics that are not exported (tests).
    pub fn unregistered() -> SegmentMetrics {
        SegmentMetrics::new(&Registry::new())
    }
}

/// Registers through the shared runtime's registrar (one home for registration).
fn register<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: T) -> T {
    kubeflake_runtime::metrics::Registrar(registry).register(metric)
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let counter = |name: &str, help: &str| {
            register(&r, IntCounter::new(name, help).expect("valid metric"))
        };
        let gauge =
            |name: &str, help: &str| register(&r, Gauge::new(name, help).expect("valid metric"));
        let int_gauge =
            |name: &str, help: &str| register(&r, IntGauge::new(name, help).expect("valid metric"));
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            register(
                &r,
                IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"),
            )
        };
        let metrics = Metrics {
            ids_issued: counter("kubeflake_ids_issued_total", "IDs issued."),
            requests: counter_vec(
                "kubeflake_http_requests_total",
                "HTTP requests by route and status code.",
                &["route", "code"],
            ),
            request_duration: register(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "kubeflake_http_request_duration_seconds",
                        "Time to answer an HTTP request, by route.",
                    )
                    .buckets(vec![
                        1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5,
                    ]),
                    &["route"],
                )
                .expect("valid metric"),
            ),
            refusals: counter_vec(
                "kubeflake_refusals_total",
                "Requests refused with 503, by reason.",
                &["reason"],
            ),
            clock_rollbacks: counter(
                "kubeflake_clock_rollbacks_total",
                "Wall-clock steps back detected.",
            ),
            clock_rollback_last_seconds: gauge(
                "kubeflake_clock_rollback_last_seconds",
                "Size of the last wall-clock step back.",
            ),
            clock_forward_jumps: counter(
                "kubeflake_clock_forward_jumps_total",
                "Wall-clock jumps forward detected.",
            ),
            clock_forward_jump_last_seconds: gauge(
                "kubeflake_clock_forward_jump_last_seconds",
                "Size of the last wall-clock jump forward.",
            ),
            fence_writes: counter_vec(
                "kubeflake_fence_writes_total",
                "Writes of the fence, by result (ok, error).",
                &["result"],
            ),
            clock_skew_seconds: gauge(
                "kubeflake_clock_skew_seconds",
                "Local wall clock minus the API server's, last measured (cluster mode).",
            ),
            phase: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "kubeflake_sidecar_phase",
                        "1 for the serving phase the sidecar is in (waiting, snowflake, segment, \
                         stopping), 0 for the others.",
                    ),
                    &["phase"],
                )
                .expect("valid metric"),
            ),
            ahead_of_clock_seconds: gauge(
                "kubeflake_generator_ahead_of_clock_seconds",
                "How far the generator's tick runs ahead of the wall clock.",
            ),
            fence_headroom_seconds: gauge(
                "kubeflake_fence_headroom_seconds",
                "Time left before the wall clock reaches the fence.",
            ),
            fence_tick: int_gauge(
                "kubeflake_fence_tick",
                "The fence in force, in ticks since the epoch.",
            ),
            ready: int_gauge(
                "kubeflake_ready",
                "1 when the sidecar can issue IDs, else 0.",
            ),
            worker_slot: int_gauge(
                "kubeflake_worker_slot",
                "The worker slot this sidecar issues for.",
            ),
            timestamp_exhausts_at: gauge(
                "kubeflake_timestamp_exhausts_at_seconds",
                "Unix time at which the layout's timestamp bits run out.",
            ),
            segment: SegmentMetrics::new(&r),
            registry: r,
        };
        metrics.fence_writes.with_label_values(&["ok"]);
        metrics.fence_writes.with_label_values(&["error"]);
        for phase in crate::state::Phase::ALL {
            metrics.phase.with_label_values(&[phase.label()]);
        }
        metrics
    }

    /// Renders the Prometheus text format in segment mode.
    pub fn render_segment(&self, ready: bool, buffered: u64) -> String {
        self.ready.set(i64::from(ready));
        self.segment
            .buffered_values
            .set(i64::try_from(buffered).unwrap_or(i64::MAX));
        self.encode()
    }

    /// Renders the Prometheus text format, first refreshing the values derived from the
    /// generator's state (none while waiting or stopping).
    pub fn render(&self, generator: Option<&Generator>) -> String {
        if let Some(g) = generator {
            let config = g.config();
            self.ahead_of_clock_seconds
                .set(g.ahead_of_clock_ms() as f64 / 1000.0);
            self.fence_headroom_seconds
                .set(g.fence_headroom_ms() as f64 / 1000.0);
            self.fence_tick
                .set(i64::try_from(g.fence().0).unwrap_or(i64::MAX));
            self.ready.set(i64::from(g.check_ready().is_ok()));
            self.worker_slot.set(i64::from(config.slot.0));
            self.timestamp_exhausts_at
                .set(config.timebase.exhausts_at_ms(&config.layout) as f64 / 1000.0);
        } else {
            self.ready.set(0);
        }
        self.encode()
    }

    fn encode(&self) -> String {
        kubeflake_runtime::metrics::render(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
