//! Prometheus metrics of the operator. Labels take values from small fixed sets only
//! (results, reasons); per-sequence figures are in each IdSequence's status instead of
//! in labels, so the series count does not grow with the number of objects.

use std::collections::HashMap;
use std::sync::Mutex;

use kubeflake_runtime::metrics::Registrar;
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};

/// Every `result` label of `kubeflake_operator_reconciles_total`: `ok` or an error's
/// `metric_label()`; pre-registered so each series exists from the start (a test in
/// `controller/tests.rs` checks this against every controller error variant).
pub const RESULT_LABELS: [&str; 6] = [
    "ok",
    "kube",
    "no_namespace",
    "bad_lease",
    "invalid_spec",
    "bad_counter",
];

/// Every `watch` label of `kubeflake_operator_watch_errors_total`: `controller` is any
/// watch of the IdSequence controller (its queue reports them together), the others the
/// sidecar-binding keeper's two watches ([`crate::rbac`]).
pub const WATCH_LABELS: [&str; 3] = ["controller", "rbac_idsequences", "rbac_rolebindings"];

pub struct Metrics {
    registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_duration: Histogram,
    pub assignments: IntCounter,
    pub reclaims: IntCounterVec,
    pub conflicts: IntCounter,
    pub passes_deferred: IntCounter,
    pub pod_to_slot: Histogram,
    pub webhook_requests: IntCounterVec,
    pub webhook_seconds: Histogram,
    pub sidecar_bindings: IntCounterVec,
    pub watch_errors: IntCounterVec,
    slots_assigned: IntGauge,
    slots_free: IntGauge,
    sequences: IntGauge,
    per_sequence: Mutex<HashMap<String, (u64, u64)>>,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let r = Registrar(&registry);
        let m = Metrics {
            reconciles: r.counter_vec(
                "kubeflake_operator_reconciles_total",
                "Reconcile passes by result (ok or an error kind).",
                &["result"],
            ),
            reconcile_duration: r.histogram(
                "kubeflake_operator_reconcile_duration_seconds",
                "Time one reconcile pass took.",
                vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
            ),
            assignments: r.counter(
                "kubeflake_operator_slot_assignments_total",
                "Slots written to a new holder.",
            ),
            reclaims: r.counter_vec(
                "kubeflake_operator_slot_reclaims_total",
                "Slots released, by reason (pod_gone, silent, duplicate).",
                &["reason"],
            ),
            conflicts: r.counter(
                "kubeflake_operator_write_conflicts_total",
                "Lease writes that lost a compare-and-swap race and were retried.",
            ),
            passes_deferred: r.counter(
                "kubeflake_operator_passes_deferred_total",
                "Snowflake passes put off because the cache did not show the last pass's own lease writes yet.",
            ),
            pod_to_slot: r.histogram(
                "kubeflake_operator_pod_to_slot_seconds",
                "Time from a pod's creation to its slot lease being written.",
                vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0],
            ),
            webhook_requests: r.counter_vec(
                "kubeflake_webhook_requests_total",
                "Admission reviews answered, by outcome (injected, skipped, denied, error).",
                &["outcome"],
            ),
            webhook_seconds: r.histogram(
                "kubeflake_webhook_duration_seconds",
                "Time to answer one admission review (includes reading the IdSequence).",
                vec![0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
            ),
            sidecar_bindings: r.counter_vec(
                "kubeflake_operator_sidecar_bindings_total",
                "Sidecar RoleBindings written, by action (created, deleted).",
                &["action"],
            ),
            watch_errors: r.counter_vec(
                "kubeflake_operator_watch_errors_total",
                "Failed list/watch calls, by watch (controller, rbac_idsequences, rbac_rolebindings); each is retried with back-off.",
                &["watch"],
            ),
            slots_assigned: r.int_gauge(
                "kubeflake_operator_slots_assigned",
                "Slots held by pods, summed over all sequences.",
            ),
            slots_free: r.int_gauge(
                "kubeflake_operator_slots_free",
                "Slots not held, summed over all sequences.",
            ),
            sequences: r.int_gauge("kubeflake_operator_sequences", "IdSequences reconciled."),
            per_sequence: Mutex::new(HashMap::new()),
            registry,
        };
        for result in RESULT_LABELS {
            m.reconciles.with_label_values(&[result]);
        }
        for reason in ["pod_gone", "silent", "duplicate"] {
            m.reclaims.with_label_values(&[reason]);
        }
        for outcome in ["injected", "skipped", "denied", "error"] {
            m.webhook_requests.with_label_values(&[outcome]);
        }
        for action in ["created", "deleted"] {
            m.sidecar_bindings.with_label_values(&[action]);
        }
        for watch in WATCH_LABELS {
            m.watch_errors.with_label_values(&[watch]);
        }
        m
    }

    /// Records one sequence's slot figures and refreshes the totals.
    pub fn set_slots(&self, ns: &str, name: &str, assigned: u64, capacity: u64) {
        let mut all = self.per_sequence.lock().unwrap_or_else(|p| p.into_inner());
        all.insert(
            format!("{ns}/{name}"),
            (assigned, capacity.saturating_sub(assigned)),
        );
        self.refresh(&all);
    }

    /// Drops a deleted sequence from the totals.
    pub fn forget(&self, ns: &str, name: &str) {
        let mut all = self.per_sequence.lock().unwrap_or_else(|p| p.into_inner());
        all.remove(&format!("{ns}/{name}"));
        self.refresh(&all);
    }

    fn refresh(&self, all: &HashMap<String, (u64, u64)>) {
        self.slots_assigned
            .set(all.values().map(|v| v.0 as i64).sum());
        self.slots_free.set(all.values().map(|v| v.1 as i64).sum());
        self.sequences.set(all.len() as i64);
    }

    pub fn render(&self) -> String {
        kubeflake_runtime::metrics::render(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
