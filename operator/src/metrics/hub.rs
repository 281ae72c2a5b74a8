//! Metrics of the membership task (one ID space across clusters, issue 55;
//! docs/multicluster.md, "Metrics and alerts"): per `IdSpaceMembership`, what it holds
//! (blocks, the spare, the nearest bound), how its hub calls go, what its last contact
//! found (the Ready reason), the reclaims it made and the records it found gone back. A
//! membership of a Segment space holds ranges of values, not blocks: its `segment_*`
//! families say what its counter holds and how fast it is claimed (docs/safety.md rule 22);
//! the blocks' gauges stay empty for it, the other families are shared.
//!
//! Labels: `membership_namespace`, `membership` (the IdSpaceMembership) and `space` (the hub
//! IdSpace, `namespace/name`), plus small fixed sets (`reason`, `outcome`, `record`). A
//! cluster has one membership per shared sequence, so the series grow with those objects,
//! never with traffic; [`HubMetrics::retain`] drops a deleted membership's series at the
//! next round. `namespace` is not used as a label name: Prometheus's own target label
//! (the operator's namespace, which the alerts group by) would rename it.
//!
//! The task calls in here with a few lines (`hub/task.rs`, through `hub/task/observe.rs`, which
//! maps the task's own types onto these: this module knows nothing of `crate::hub`, so the
//! two do not depend on each other).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use kubeflake_runtime::metrics::Registrar;
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

mod inputs;

pub use self::inputs::{CallError, CallOutcome, Holding, Member, RangesHeld, WentBack, reclaims};

/// The labels naming one membership.
pub const LABELS: [&str; 3] = ["membership_namespace", "membership", "space"];

/// What is kept of one membership between contacts.
#[derive(Debug, Clone, Copy, Default)]
struct Known {
    /// When its nearest bound passes (Unix ms): the gauge is computed from it at scrape
    /// time, so that it keeps falling while the hub is away.
    bound_ms: Option<u64>,
    /// The Ready reason of its one `ready_reason` series.
    reason: Option<&'static str>,
}

pub struct HubMetrics {
    blocks_held: IntGaugeVec,
    spare_blocks: IntGaugeVec,
    nearest_bound: GaugeVec,
    tolerance: IntGaugeVec,
    ready_reason: IntGaugeVec,
    calls: IntCounterVec,
    call_seconds: HistogramVec,
    reclaims: IntCounterVec,
    went_back: IntCounterVec,
    values_left: IntGaugeVec,
    spare_ranges: IntGaugeVec,
    claim_rate: GaugeVec,
    ranges_taken: IntCounterVec,
    known: Mutex<BTreeMap<Member, Known>>,
}

impl std::fmt::Debug for HubMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubMetrics").finish_non_exhaustive()
    }
}

impl HubMetrics {
    /// Metrics registered nowhere (a task run without the operator's: tests).
    pub fn unexported() -> HubMetrics {
        HubMetrics::new(Registrar(&prometheus::Registry::new()))
    }

    pub fn new(r: Registrar<'_>) -> HubMetrics {
        let with = |extra: &'static str| [LABELS[0], LABELS[1], LABELS[2], extra];
        HubMetrics {
            blocks_held: r.int_gauge_vec(
                "kubeflake_operator_id_space_blocks_held",
                "Blocks of the shared ID space this membership holds: its last successful hub contact's, or, before this operator's first one, the copy stored in its status.",
                &LABELS,
            ),
            spare_blocks: r.int_gauge_vec(
                "kubeflake_operator_id_space_spare_blocks",
                "Blocks held beyond those the slots in use need (held minus in-use slots over the block size, rounded up), after the last successful hub contact.",
                &LABELS,
            ),
            nearest_bound: r.register(
                GaugeVec::new(
                    Opts::new(
                        "kubeflake_operator_id_space_nearest_bound_seconds",
                        "Seconds until the nearest bound of the blocks held passes, by the operator's clock at scrape time; negative once passed. Past it the member's pods stop issuing in that block until a renewal reaches the hub.",
                    ),
                    &LABELS,
                )
                .expect("a valid metric definition"),
            ),
            tolerance: r.int_gauge_vec(
                "kubeflake_operator_id_space_tolerance_seconds",
                "The ID space's toleranceSeconds: how long a member runs on its bounds without the hub.",
                &LABELS,
            ),
            ready_reason: r.int_gauge_vec(
                "kubeflake_operator_id_space_ready_reason",
                "1, with the reason of the membership's Ready condition after its last hub contact (Joined is Ready=True, every other reason Ready=False); one series per membership.",
                &with("reason"),
            ),
            calls: r.counter_vec(
                "kubeflake_operator_id_space_hub_calls_total",
                "Calls to the hub's API server (reading and writing the IdSpace), by outcome: ok, conflict (a compare-and-swap lost, read again), unreachable (no answer in time, no connection, a 5xx), refused (another 4xx).",
                &with("outcome"),
            ),
            call_seconds: r.register(
                HistogramVec::new(
                    HistogramOpts::new(
                        "kubeflake_operator_id_space_hub_call_duration_seconds",
                        "Time one call to the hub's API server took, whatever its outcome (bounded at 10 s).",
                    )
                    .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
                    &LABELS,
                )
                .expect("a valid metric definition"),
            ),
            reclaims: r.counter_vec(
                "kubeflake_operator_id_space_reclaims_total",
                "Blocks of other members whose bound had passed that this membership handed back on the hub (each with its floor raised to that bound).",
                &LABELS,
            ),
            went_back: r.counter_vec(
                "kubeflake_operator_id_space_went_back_total",
                "Hub contacts that found a record gone back, by record: copy (this cluster's copy behind the hub's generation: its etcd restored; counted once, then the hub's view is taken) or registry (the hub's registry behind a revision this cluster saw, or its IdSpace re-created; counted at every contact until the hub is recovered).",
                &with("record"),
            ),
            values_left: r.int_gauge_vec(
                "kubeflake_operator_id_space_segment_values_left",
                "Segment spaces: values the sequence's counter can still hand out from the ranges it took from the hub (the rest of the range in use and the queued range), read from the counter at each contact, also while the hub is unreachable. At 0 its pods answer 503 until a range is queued.",
                &LABELS,
            ),
            spare_ranges: r.int_gauge_vec(
                "kubeflake_operator_id_space_segment_spare_ranges",
                "Segment spaces: 1 while a range taken from the hub is queued behind the range in use (claims move on to it without waiting on the hub), else 0.",
                &LABELS,
            ),
            claim_rate: r.register(
                GaugeVec::new(
                    Opts::new(
                        "kubeflake_operator_id_space_segment_claim_rate",
                        "Segment spaces: values per second claimed from the sequence's counter, as measured between hub contacts (it sizes the ranges taken: a range lasts the space's toleranceSeconds at this rate).",
                    ),
                    &LABELS,
                )
                .expect("a valid metric definition"),
            ),
            ranges_taken: r.counter_vec(
                "kubeflake_operator_id_space_segment_ranges_taken_total",
                "Segment spaces: ranges of values this membership took from the hub's counter.",
                &LABELS,
            ),
            known: Mutex::new(BTreeMap::new()),
        }
    }

    fn known(&self) -> MutexGuard<'_, BTreeMap<Member, Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `member`'s counters exist at 0 (so that `increase()` sees the first count),
    /// once.
    fn note(&self, member: &Member) {
        if self.known().contains_key(member) {
            return;
        }
        for outcome in CallOutcome::ALL {
            self.calls.with_label_values(&member.with(outcome.label()));
        }
        self.call_seconds.with_label_values(&member.labels());
        self.reclaims.with_label_values(&member.labels());
        for record in [WentBack::Copy, WentBack::Registry] {
            self.went_back
                .with_label_values(&member.with(record.label()));
        }
        self.known().insert(member.clone(), Known::default());
    }

    /// Records a successful contact: Ready `Joined`, and what `member` holds now.
    pub fn joined(&self, member: &Member, holding: Holding) {
        self.held(member, holding);
        self.ready(member, "Joined");
    }

    /// Records what `member` holds, its Ready reason unchanged: after a successful contact,
    /// or read from the copy stored in its status before the contact (so an operator that
    /// starts while its hub is away shows its nearest bound falling, not nothing).
    pub fn held(&self, member: &Member, holding: Holding) {
        self.note(member);
        let labels = member.labels();
        self.blocks_held
            .with_label_values(&labels)
            .set(i64::try_from(holding.blocks).unwrap_or(i64::MAX));
        self.spare_blocks
            .with_label_values(&labels)
            .set(holding.spare);
        self.tolerance
            .with_label_values(&labels)
            .set(i64::try_from(holding.tolerance_secs).unwrap_or(i64::MAX));
        if holding.nearest_bound_ms.is_none() {
            // No block, no bound: no series (absent, not an old value an alert could read).
            drop_series(self.nearest_bound.remove_label_values(&labels));
        }
        self.known().entry(member.clone()).or_default().bound_ms = holding.nearest_bound_ms;
    }

    /// Records a successful contact of a Segment membership: Ready `Joined`, the space's
    /// tolerance and the claim rate measured.
    pub fn segment_joined(&self, member: &Member, tolerance_secs: u64, claim_rate: f64) {
        self.note(member);
        let labels = member.labels();
        self.ranges_taken.with_label_values(&labels);
        self.tolerance
            .with_label_values(&labels)
            .set(i64::try_from(tolerance_secs).unwrap_or(i64::MAX));
        self.claim_rate.with_label_values(&labels).set(claim_rate);
        self.ready(member, "Joined");
    }

    /// Records what a Segment membership's counter holds; `None` (a counter not ranged yet)
    /// leaves no series.
    pub fn ranges_held(&self, member: &Member, held: Option<RangesHeld>) {
        self.note(member);
        let labels = member.labels();
        self.ranges_taken.with_label_values(&labels);
        let Some(held) = held else {
            drop_series(self.values_left.remove_label_values(&labels));
            drop_series(self.spare_ranges.remove_label_values(&labels));
            return;
        };
        self.values_left
            .with_label_values(&labels)
            .set(i64::try_from(held.values_left).unwrap_or(i64::MAX));
        self.spare_ranges
            .with_label_values(&labels)
            .set(i64::from(held.spare));
    }

    /// Counts a range a Segment membership took from the hub's counter.
    pub fn range_taken(&self, member: &Member) {
        self.note(member);
        self.ranges_taken.with_label_values(&member.labels()).inc();
    }

    /// Records a contact refused with Ready reason `reason`; what `member` holds is kept as
    /// the last successful contact left it (nothing changes hands without a hub write).
    pub fn refused(&self, member: &Member, reason: &'static str) {
        self.note(member);
        self.ready(member, reason);
    }

    /// Moves `member`'s one `ready_reason` series to `reason`.
    fn ready(&self, member: &Member, reason: &'static str) {
        let before = self
            .known()
            .entry(member.clone())
            .or_default()
            .reason
            .replace(reason);
        if let Some(before) = before.filter(|b| *b != reason) {
            drop_series(self.ready_reason.remove_label_values(&member.with(before)));
        }
        self.ready_reason
            .with_label_values(&member.with(reason))
            .set(1);
    }

    /// Times `call`, a call to the hub, and counts its outcome.
    pub async fn call<T, E: CallError>(
        &self,
        member: &Member,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = call.await;
        let outcome = match &result {
            Ok(_) => CallOutcome::Ok,
            Err(e) => e.outcome(),
        };
        self.called(member, outcome, started.elapsed().as_secs_f64());
        result
    }

    /// Counts one hub call of `member` that took `seconds`.
    pub fn called(&self, member: &Member, outcome: CallOutcome, seconds: f64) {
        self.note(member);
        self.calls
            .with_label_values(&member.with(outcome.label()))
            .inc();
        self.call_seconds
            .with_label_values(&member.labels())
            .observe(seconds);
    }

    /// Counts `n` reclaims written by `member`.
    pub fn reclaimed(&self, member: &Member, n: u64) {
        self.note(member);
        self.reclaims.with_label_values(&member.labels()).inc_by(n);
    }

    /// Counts a record of `member` found gone back.
    pub fn went_back(&self, member: &Member, record: WentBack) {
        self.note(member);
        self.went_back
            .with_label_values(&member.with(record.label()))
            .inc();
    }

    /// Drops the series of every membership not in `members` (deleted).
    pub fn retain(&self, members: &BTreeSet<Member>) {
        let gone: Vec<(Member, Known)> = self
            .known()
            .iter()
            .filter(|(m, _)| !members.contains(*m))
            .map(|(m, k)| (m.clone(), *k))
            .collect();
        for (member, known) in gone {
            let labels = member.labels();
            let gauges = [
                &self.blocks_held,
                &self.spare_blocks,
                &self.tolerance,
                &self.values_left,
                &self.spare_ranges,
            ];
            for family in gauges {
                drop_series(family.remove_label_values(&labels));
            }
            drop_series(self.nearest_bound.remove_label_values(&labels));
            drop_series(self.claim_rate.remove_label_values(&labels));
            drop_series(self.ranges_taken.remove_label_values(&labels));
            drop_series(self.call_seconds.remove_label_values(&labels));
            drop_series(self.reclaims.remove_label_values(&labels));
            if let Some(reason) = known.reason {
                drop_series(self.ready_reason.remove_label_values(&member.with(reason)));
            }
            for outcome in CallOutcome::ALL {
                drop_series(
                    self.calls
                        .remove_label_values(&member.with(outcome.label())),
                );
            }
            for record in [WentBack::Copy, WentBack::Registry] {
                drop_series(
                    self.went_back
                        .remove_label_values(&member.with(record.label())),
                );
            }
            self.known().remove(&member);
        }
    }

    /// Drops every membership's series: the task stopped (this replica no longer leads), and
    /// figures it no longer updates must not be read as current.
    pub fn clear(&self) {
        self.retain(&BTreeSet::new());
    }

    /// Sets the nearest-bound gauges for the wall clock at `now_ms` (Unix ms): at scrape
    /// time.
    pub fn refresh(&self, now_ms: i64) {
        for (member, known) in self.known().iter() {
            if let Some(bound) = known.bound_ms {
                let bound = i64::try_from(bound).unwrap_or(i64::MAX);
                self.nearest_bound
                    .with_label_values(&member.labels())
                    .set(bound.saturating_sub(now_ms) as f64 / 1000.0);
            }
        }
    }
}

/// The answer of removing a series that may never have been set (a membership that never
/// had a successful contact has no holdings): absent is what was wanted either way.
fn drop_series(removed: prometheus::Result<()>) {
    if let Err(e) = removed {
        tracing::trace!(error = %e, "no such series to remove");
    }
}

#[cfg(test)]
mod tests;
