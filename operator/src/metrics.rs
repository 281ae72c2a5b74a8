//! Prometheus metrics of the operator. Labels take values from small fixed sets only (results,
//! reasons); per-sequence figures are in each IdSequence's status, not in labels, so the
//! series count does not grow with the number of objects. The one exception is [`hub`]:
//! an ID space shared across clusters is watched per IdSpaceMembership (one per shared
//! sequence), since its alerts must name the membership. The slot
//! gauges are kept per sequence in memory and exported summed (or, for the oldest wait,
//! the maximum) over all sequences; [`Metrics::forget`] drops a deleted sequence and
//! [`Metrics::retain`] those the IdSequence cache no longer has.

use std::collections::HashMap;
use std::sync::Mutex;

pub mod foreign;
pub mod hub;

pub use self::foreign::{ForeignBook, ForeignLease, Source};

use kubeflake_runtime::metrics::Registrar;
use prometheus::{Gauge, Histogram, IntCounter, IntCounterVec, IntGauge, Registry};

/// Every `result` label of `kubeflake_operator_reconciles_total` (`ok` or an error's `metric_label()`),
/// pre-registered; a test in `controller/tests.rs` checks it against every error variant.
pub const RESULT_LABELS: [&str; 8] = [
    "ok",
    "kube",
    "no_namespace",
    "bad_lease",
    "invalid_spec",
    "bad_counter",
    "bad_oracle",
    "fence_above_cap",
];

/// Every `watch` label of `kubeflake_operator_watch_errors_total`: `controller` is any
/// watch of the IdSequence controller (its queue reports them together), the others the
/// sidecar-binding keeper's two watches ([`crate::rbac`]), and the webhook's watch of the
/// IdSequences ([`crate::webhook::watch_sequences`]).
pub const WATCH_LABELS: [&str; 4] = [
    "controller",
    "rbac_idsequences",
    "rbac_rolebindings",
    "webhook_idsequences",
];

/// What the last Snowflake pass of one sequence saw, after its own writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotFigures {
    /// Slots held.
    pub assigned: u64,
    /// Slots in the layout (2^workerBits).
    pub capacity: u64,
    /// Labelled pods that hold no slot and are not leaving.
    pub waiting: u64,
    /// Creation time (Unix ms) of the pod that has waited longest, if one waits.
    pub oldest_waiting_since_ms: Option<i64>,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_duration: Histogram,
    pub pass_cpu: Histogram,
    pub assignments: IntCounter,
    pub reclaims: IntCounterVec,
    pub conflicts: IntCounter,
    pub passes_deferred: IntCounter,
    pub pod_to_slot: Histogram,
    pub webhook_requests: IntCounterVec,
    pub webhook_seconds: Histogram,
    pub webhook_sequence_lookups: IntCounterVec,
    pub sidecar_bindings: IntCounterVec,
    /// The sequences' NetworkPolicies written or refused, by outcome.
    pub network_policies: IntCounterVec,
    pub watch_errors: IntCounterVec,
    /// 1 while the operator hands out no slot and lists no claimant for want of the Lease
    /// policy (`lease_policy_guard.rs`).
    pub lease_policy_missing: IntGauge,
    /// Foreign Leases (docs/safety.md rule 16) when first noted, by kind.
    pub foreign_found: IntCounterVec,
    /// The foreign Leases known now, per sequence: exported summed, at scrape time.
    pub foreign: ForeignBook,
    /// The membership task's metrics, per IdSpaceMembership ([`hub`]).
    pub hub: std::sync::Arc<hub::HubMetrics>,
    foreign_leases: IntGauge,
    slots_assigned: IntGauge,
    slots_free: IntGauge,
    sequences: IntGauge,
    pods_waiting: IntGauge,
    oldest_slot_wait: Gauge,
    per_sequence: Mutex<HashMap<String, SlotFigures>>,
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
            pass_cpu: r.histogram(
                "kubeflake_operator_pass_cpu_seconds",
                "CPU time of the computing part of one Snowflake pass (its sequence's Pods and Leases read from the cache, silence, the plan), API writes not included.",
                vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1],
            ),
            assignments: r.counter(
                "kubeflake_operator_slot_assignments_total",
                "Slots written to a new holder.",
            ),
            reclaims: r.counter_vec(
                "kubeflake_operator_slot_reclaims_total",
                "Slots released, by reason (pod_gone, silent, duplicate, outside_blocks).",
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
            webhook_sequence_lookups: r.counter_vec(
                "kubeflake_webhook_sequence_lookups_total",
                "How the webhook found an injected pod's IdSequence: in its watch cache, or by a GET from the API server (not cached yet, or not there).",
                &["source"],
            ),
            sidecar_bindings: r.counter_vec(
                "kubeflake_operator_sidecar_bindings_total",
                "Sidecar Roles and RoleBindings written, by action (created, updated, deleted).",
                &["action"],
            ),
            network_policies: r.counter_vec(
                "kubeflake_operator_network_policies_total",
                "The IdSequences' NetworkPolicies (made only with --sequence-network-policy), by outcome: created, updated, conflict (another writer was first; read again next pass), error (logged), foreign (a same-named policy kubeflake did not make, never adopted; counted when first found).",
                &["outcome"],
            ),
            watch_errors: r.counter_vec(
                "kubeflake_operator_watch_errors_total",
                "Failed list/watch calls, by watch (controller, rbac_idsequences, rbac_roles, rbac_rolebindings, webhook_idsequences); each is retried with back-off.",
                &["watch"],
            ),
            lease_policy_missing: r.int_gauge(
                "kubeflake_operator_lease_policy_missing",
                "1 while the Lease policy or its binding is missing, not as the chart installs it, or unreadable, so that the operator assigns no slot and lists no claimant (docs/safety.md rule 14); 0 when it is in force or the operator runs with --unsafe-without-lease-policy.",
            ),
            foreign_found: r.counter_vec(
                "kubeflake_operator_foreign_leases_found_total",
                "Leases found with the name of a sequence's slot Lease, segment counter or strict oracle Lease that kubeflake did not make (no kubeflake label, or not owned by the sequence), by kind (slot, segment_counter, strict_oracle); each counted when first found. Never used, changed or deleted: see the sequence's ForeignLeases condition.",
                &["kind"],
            ),
            foreign: ForeignBook::default(),
            hub: std::sync::Arc::new(hub::HubMetrics::new(r)),
            foreign_leases: r.int_gauge(
                "kubeflake_operator_foreign_leases",
                "Foreign Leases known now (a kubeflake name, not made by kubeflake), over all sequences; 0 once each was deleted.",
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
            pods_waiting: r.int_gauge(
                "kubeflake_operator_pods_waiting_for_slot",
                "Labelled pods that hold no slot (and are not leaving) after the last pass, summed over all Snowflake sequences.",
            ),
            oldest_slot_wait: r.gauge(
                "kubeflake_operator_oldest_slot_wait_seconds",
                "How long the pod that has waited longest for a slot has waited (now minus its creation), over all sequences; 0 when no pod waits.",
            ),
            per_sequence: Mutex::new(HashMap::new()),
            registry,
        };
        for result in RESULT_LABELS {
            m.reconciles.with_label_values(&[result]);
        }
        for reason in ["pod_gone", "silent", "duplicate", "outside_blocks"] {
            m.reclaims.with_label_values(&[reason]);
        }
        for outcome in ["injected", "skipped", "denied", "error"] {
            m.webhook_requests.with_label_values(&[outcome]);
        }
        for source in ["cache", "api"] {
            m.webhook_sequence_lookups.with_label_values(&[source]);
        }
        for action in ["created", "deleted"] {
            m.sidecar_bindings.with_label_values(&[action]);
        }
        for watch in WATCH_LABELS {
            m.watch_errors.with_label_values(&[watch]);
        }
        for kind in kubeflake_crds::ownership::LeaseKind::ALL {
            m.foreign_found.with_label_values(&[kind.metric_label()]);
        }
        m
    }

    /// Records what the last pass of one sequence saw and refreshes the totals.
    pub fn set_slots(&self, ns: &str, name: &str, figures: SlotFigures) {
        let mut all = self.per_sequence.lock().unwrap_or_else(|p| p.into_inner());
        all.insert(format!("{ns}/{name}"), figures);
        self.refresh(&all);
    }

    /// Drops a deleted sequence from the totals.
    pub fn forget(&self, ns: &str, name: &str) {
        let mut all = self.per_sequence.lock().unwrap_or_else(|p| p.into_inner());
        all.remove(&format!("{ns}/{name}"));
        self.refresh(&all);
        self.foreign.forget(ns, name);
    }

    /// Keeps the figures of the sequences (`namespace/name`) for which `exists` holds only
    /// (a sequence that vanished without a last pass of its own).
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        let mut all = self.per_sequence.lock().unwrap_or_else(|p| p.into_inner());
        let before = all.len();
        all.retain(|key, _| exists(key));
        self.foreign.retain(&exists);
        if all.len() != before {
            self.refresh(&all);
        }
    }

    fn refresh(&self, all: &HashMap<String, SlotFigures>) {
        let sum = |f: fn(&SlotFigures) -> u64| all.values().map(f).sum::<u64>() as i64;
        self.slots_assigned.set(sum(|f| f.assigned));
        self.slots_free
            .set(sum(|f| f.capacity.saturating_sub(f.assigned)));
        self.pods_waiting.set(sum(|f| f.waiting));
        self.sequences.set(all.len() as i64);
    }

    /// Seconds the longest-waiting pod of any sequence has waited at `now_ms` (Unix ms);
    /// 0 when no pod waits. A creation time ahead of `now_ms` (clock skew) counts as 0.
    pub fn oldest_slot_wait_seconds(&self, now_ms: i64) -> f64 {
        let all = self.per_sequence.lock().unwrap_or_else(|p| p.into_inner());
        all.values()
            .filter(|f| f.waiting > 0)
            .filter_map(|f| f.oldest_waiting_since_ms)
            .min()
            .map_or(0.0, |since| {
                now_ms.saturating_sub(since).max(0) as f64 / 1000.0
            })
    }

    /// The metrics in the text format. The oldest wait is computed here, at scrape time,
    /// from the creation times the passes recorded: it keeps growing between passes.
    pub fn render(&self) -> String {
        self.render_at(chrono::Utc::now().timestamp_millis())
    }

    /// [`Metrics::render`] with the wall clock at `now_ms` (Unix ms).
    pub fn render_at(&self, now_ms: i64) -> String {
        self.oldest_slot_wait
            .set(self.oldest_slot_wait_seconds(now_ms));
        self.foreign_leases
            .set(i64::try_from(self.foreign.total()).unwrap_or(i64::MAX));
        self.hub.refresh(now_ms);
        kubeflake_runtime::metrics::render(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests;
