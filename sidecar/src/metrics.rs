//! Prometheus metrics of the sidecar. Label values come from small fixed sets (routes,
//! status codes, refusal reasons), never from request data.

use kubeflake_runtime::metrics::Registrar;
use prometheus::{
    Gauge, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

use crate::generator::Generator;

/// Every metric the sidecar exports.
pub struct Metrics {
    registry: Registry,
    pub(crate) ids_issued: IntCounter,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub refusals: IntCounterVec,
    /// ID requests held over a refusal that clears by itself, before their answer.
    pub held: IntCounterVec,
    pub clock_rollbacks: IntCounter,
    pub(crate) clock_rollback_last_seconds: Gauge,
    pub(crate) clock_forward_jumps: IntCounter,
    pub(crate) clock_forward_jump_last_seconds: Gauge,
    pub(crate) fence_writes: IntCounterVec,
    /// 1 while the lease fence is held at its ID-space block's bound (rule 17).
    pub(crate) fence_at_block_bound: IntGauge,
    pub(crate) clock_skew_seconds: Gauge,
    /// 1 for the serving phase the sidecar is in (`crate::phase::Phase`), 0 for the others.
    pub(crate) phase: IntGaugeVec,
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
    pub(crate) blocks_claimed: IntCounter,
    pub(crate) claim_conflicts: IntCounter,
    pub(crate) claim_errors: IntCounter,
    pub(crate) claim_seconds: Histogram,
    /// Values taken for a batch that was then refused (a gap).
    pub(crate) values_dropped: IntCounter,
    pub(crate) block_size: IntGauge,
    pub(crate) buffered_values: IntGauge,
    /// Claims refused because the counter was below this sidecar's own top
    /// (`kubeflake_segment_claims_refused_behind_total`).
    pub counter_behind: IntCounter,
    /// End of the highest block claimed (a recovery hint when the counter is lost).
    pub(crate) claimed_top: IntGauge,
    /// 1 while this sidecar is its strict sequence's oracle and its term serves.
    pub(crate) strict_oracle: IntGauge,
    /// Oracle terms this sidecar began (take-overs of the oracle Lease).
    pub(crate) strict_terms: IntCounter,
    /// Groups of strict requests forwarded to the oracle, and those that got no values.
    pub(crate) strict_forwards: IntCounter,
    pub(crate) strict_forward_errors: IntCounter,
    /// 1 while this sidecar's watch of the oracle Lease knows it (it reads nothing then).
    pub(crate) strict_lease_watched: IntGauge,
    /// Reads of the oracle Lease (while the watch does not know it, and after a conflict).
    pub(crate) strict_lease_reads: IntCounter,
    /// Peers refused on the oracle port, by side (`forwarder`: this oracle refused a
    /// forwarder; `oracle`: this forwarder did not believe an oracle) and reason
    /// (`peer_token::TokenError::reason`, or `not_claimant`, `not_holder`, `no_welcome`).
    pub(crate) strict_peer_refusals: IntCounterVec,
}

impl SegmentMetrics {
    fn new(r: &Registry) -> SegmentMetrics {
        let r = Registrar(r);
        SegmentMetrics {
            blocks_claimed: r.counter(
                "kubeflake_segment_blocks_claimed_total",
                "Blocks of values claimed from the segment counter.",
            ),
            claim_conflicts: r.counter(
                "kubeflake_segment_claim_conflicts_total",
                "Claims that lost a compare-and-swap race and were retried.",
            ),
            claim_errors: r.counter(
                "kubeflake_segment_claim_errors_total",
                "Claims that failed (counter unreachable, too many conflicts) and were retried later.",
            ),
            claim_seconds: r.histogram(
                "kubeflake_segment_claim_seconds",
                "Time to claim one block, retries included.",
                vec![1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 5.0],
            ),
            values_dropped: r.counter(
                "kubeflake_segment_values_dropped_total",
                "Values taken for a batch that was then refused: gaps.",
            ),
            block_size: r.int_gauge(
                "kubeflake_segment_block_size",
                "Size of the block claimed last (adaptive sizing).",
            ),
            buffered_values: r.int_gauge(
                "kubeflake_segment_buffered_values",
                "Values buffered (current block's rest and the spare).",
            ),
            // Named kubeflake_segment_counter_behind_total up to 0.1.0 (promtool rejects a
            // counter's name with "counter" in it). The chart's PrometheusRule records the old
            // name from this one for 0.2.x (group kubeflake-deprecated in
            // charts/kubeflake/files/alerts.yaml); the alias goes in 0.3.0.
            counter_behind: r.counter(
                "kubeflake_segment_claims_refused_behind_total",
                "Claims refused because the counter was below this sidecar's own claimed top, \
                 or showed fewer claims than the IdSequence's status recorded (the counter was \
                 deleted and re-created, or restored from an older copy).",
            ),
            claimed_top: r.int_gauge(
                "kubeflake_segment_claimed_top",
                "End of the highest block this sidecar claimed: every value it issued is below. \
                 Exact below 2^53; the log has the exact value.",
            ),
            strict_oracle: r.int_gauge(
                "kubeflake_strict_oracle",
                "1 while this sidecar is its strict sequence's oracle (it holds the oracle Lease), else 0.",
            ),
            strict_terms: r.counter(
                "kubeflake_strict_oracle_terms_total",
                "Times this sidecar took the strict oracle Lease and began serving.",
            ),
            strict_forwards: r.counter(
                "kubeflake_strict_forwards_total",
                "Groups of strict requests this sidecar forwarded to the oracle.",
            ),
            strict_forward_errors: r.counter(
                "kubeflake_strict_forward_errors_total",
                "Forwarded groups that got no values (oracle unreachable or refusing, e.g. during a hand-over).",
            ),
            strict_lease_watched: r.int_gauge(
                "kubeflake_strict_oracle_lease_watched",
                "1 while this sidecar's watch of its strict sequence's oracle Lease knows the Lease, \
                 0 while it reads the Lease instead (the watch broke, lists again, or is refused) \
                 and on a sidecar of a sequence that is not strict.",
            ),
            strict_lease_reads: r.counter(
                "kubeflake_strict_oracle_lease_reads_total",
                "Reads of the strict oracle Lease by this sidecar: at start, while its watch does not know the Lease, after a write conflict.",
            ),
            strict_peer_refusals: r.counter_vec(
                "kubeflake_strict_peer_refusals_total",
                "Peers refused on the strict oracle port: side=forwarder, a forwarder this oracle \
                 refused; side=oracle, an oracle this forwarder did not believe; by reason (no_token, \
                 audience, signature, expired, not_claimant, not_holder, ...).",
                &["side", "reason"],
            ),
        }
    }

    /// Metrics that are not exported (tests).
    #[cfg(test)]
    pub(crate) fn unregistered() -> SegmentMetrics {
        SegmentMetrics::new(&Registry::new())
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let r = Registrar(&registry);
        let metrics = Metrics {
            ids_issued: r.counter("kubeflake_ids_issued_total", "IDs issued."),
            requests: r.counter_vec(
                "kubeflake_http_requests_total",
                "HTTP requests by route and status code.",
                &["route", "code"],
            ),
            request_duration: r.histogram_vec(
                "kubeflake_http_request_duration_seconds",
                "Time to answer an HTTP request, by route.",
                &["route"],
                vec![1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5],
            ),
            refusals: r.counter_vec(
                "kubeflake_refusals_total",
                "Requests refused with 503, by reason.",
                &["reason"],
            ),
            held: r.counter_vec(
                "kubeflake_held_requests_total",
                "ID requests held (up to 1 s) over a refusal that clears by itself, by the \
                 refusal's reason; those still refused after it are also in \
                 kubeflake_refusals_total.",
                &["reason"],
            ),
            clock_rollbacks: r.counter(
                "kubeflake_clock_rollbacks_total",
                "Wall-clock steps back detected.",
            ),
            clock_rollback_last_seconds: r.gauge(
                "kubeflake_clock_rollback_last_seconds",
                "Size of the last wall-clock step back.",
            ),
            clock_forward_jumps: r.counter(
                "kubeflake_clock_forward_jumps_total",
                "Wall-clock jumps forward detected.",
            ),
            clock_forward_jump_last_seconds: r.gauge(
                "kubeflake_clock_forward_jump_last_seconds",
                "Size of the last wall-clock jump forward.",
            ),
            fence_writes: r.counter_vec(
                "kubeflake_fence_writes_total",
                "Writes of the fence, by result (ok, error).",
                &["result"],
            ),
            fence_at_block_bound: r.int_gauge(
                "kubeflake_fence_at_block_bound",
                "1 while the lease fence is held at the bound of the ID-space block its slot \
                 lies in (the Lease's fence cap): the cluster could not renew its block on the \
                 hub; the sidecar refuses (block_bound_reached) once its clock reaches it.",
            ),
            clock_skew_seconds: r.gauge(
                "kubeflake_clock_skew_seconds",
                "Local wall clock minus the API server's, last measured (cluster mode).",
            ),
            phase: r.int_gauge_vec(
                "kubeflake_sidecar_phase",
                "1 for the serving phase the sidecar is in (waiting, snowflake, segment, \
                 stopping), 0 for the others.",
                &["phase"],
            ),
            ahead_of_clock_seconds: r.gauge(
                "kubeflake_generator_ahead_of_clock_seconds",
                "How far the generator's tick runs ahead of the wall clock.",
            ),
            fence_headroom_seconds: r.gauge(
                "kubeflake_fence_headroom_seconds",
                "Time left before the wall clock reaches the fence this sidecar can serve up to \
                 without the API server: the lease fence while the local fence file can be \
                 written (+Inf standalone while its fence file can be written).",
            ),
            fence_tick: r.int_gauge(
                "kubeflake_fence_tick",
                "The fence in force, in ticks since the epoch.",
            ),
            ready: r.int_gauge(
                "kubeflake_ready",
                "1 when the sidecar can issue IDs, else 0.",
            ),
            worker_slot: r.int_gauge(
                "kubeflake_worker_slot",
                "The worker slot this sidecar issues for.",
            ),
            timestamp_exhausts_at: r.gauge(
                "kubeflake_timestamp_exhausts_at_seconds",
                "Unix time at which the layout's timestamp bits run out.",
            ),
            segment: SegmentMetrics::new(&registry),
            registry,
        };
        metrics.fence_writes.with_label_values(&["ok"]);
        metrics.fence_writes.with_label_values(&["error"]);
        for phase in crate::phase::Phase::ALL {
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
            self.fence_headroom_seconds.set(
                g.fence_headroom_ms()
                    .map_or(f64::INFINITY, |ms| ms as f64 / 1000.0),
            );
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
