//! `plan`: what a layout gives before anyone creates a sequence with it (a layout is
//! immutable once created): workers, throughput, lifetime, JavaScript safety, and warnings
//! when a workload would run out of slots or the timestamp bits are about to run out.

use kubeflake_crds::layout::JS_SAFE_TOTAL_BITS;
use kubeflake_crds::timebase::rfc3339;
use serde::Serialize;

use crate::output::{Report, fields, grouped};
use crate::plan_clusters::ClustersPlan;
use crate::source::{LayoutView, Resolved};

/// Milliseconds in an average Gregorian year.
const MS_PER_YEAR: f64 = 365.2425 * 86_400_000.0;
/// At or above this share of the slots, `--replicas` warns (pods replaced during a rolling
/// update or a surge need slots of their own until the old pods are gone).
const NEAR_FULL_PERCENT: u64 = 80;

/// What `plan` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    pub layout: LayoutView,
    /// Worker slots of one sequence: 2^workerBits.
    pub workers: u64,
    /// Datacenter IDs the layout can tell apart: 2^datacenterBits.
    pub datacenters: u64,
    pub ids_per_tick_per_worker: u64,
    pub ids_per_second_per_worker: u64,
    /// All workers of one sequence together.
    pub ids_per_second_total: u64,
    /// The first instant the timestamp bits cannot represent.
    pub exhausts_at: String,
    /// From now until `exhaustsAt` (negative once past), two decimals.
    pub years_left: f64,
    /// The largest ID the layout can produce, as a string.
    pub max_id: String,
    /// Whether every ID is below 2^53 (exact as a JavaScript number).
    pub javascript_safe: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u64>,
    /// `--clusters N`: the layout shared by N clusters through a hub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClustersPlan>,
    pub warnings: Vec<String>,
}

impl Report for PlanReport {
    fn table(&self) -> String {
        let l = &self.layout;
        let mut pairs = vec![
            (
                "LAYOUT",
                format!(
                    "{}/{}/{}/{} (timestamp/datacenter/worker/sequence bits{}, total {}){}",
                    l.timestamp_bits,
                    l.datacenter_bits,
                    l.worker_bits,
                    l.sequence_bits,
                    if l.shard_bits > 0 {
                        format!(" + {} shard bits", l.shard_bits)
                    } else {
                        String::new()
                    },
                    l.total_bits,
                    key_form_words(l),
                ),
            ),
            ("TIME UNIT", l.time_unit.to_string()),
            ("EPOCH", l.epoch.clone()),
            ("WORKERS", grouped(self.workers.into())),
            ("DATACENTERS", grouped(self.datacenters.into())),
            (
                "IDS/S PER WORKER",
                grouped(self.ids_per_second_per_worker.into()),
            ),
            ("IDS/S TOTAL", grouped(self.ids_per_second_total.into())),
            ("EXHAUSTS AT", self.exhausts_at.clone()),
            ("YEARS LEFT", format!("{:.1}", self.years_left)),
            ("MAX ID", self.max_id.clone()),
            (
                "JAVASCRIPT SAFE",
                if self.javascript_safe {
                    "yes (every ID < 2^53)".to_string()
                } else {
                    "no (IDs reach 2^63; send them as strings, or use totalBits 53)".to_string()
                },
            ),
        ];
        if let Some(r) = self.replicas {
            pairs.push(("REPLICAS", grouped(r.into())));
        }
        if let Some(c) = &self.clusters {
            pairs.extend(crate::plan_clusters::fields(c));
        }
        fields(&pairs)
    }
}

/// The key form (docs/layouts.md) as the table shows it after the bits; empty for the
/// default form.
fn key_form_words(l: &LayoutView) -> String {
    let mut words = Vec::new();
    if l.bit_reversed {
        words.push("bit-reversed");
    }
    if l.sequence_start != "Zero" {
        words.push("rotating sequence start");
    }
    if words.is_empty() {
        String::new()
    } else {
        format!("; {}", words.join(", "))
    }
}

/// Plans a layout as of `now_unix_ms`, warning about `replicas` if given.
pub fn plan(source: &Resolved, replicas: Option<u64>, now_unix_ms: i64) -> PlanReport {
    let p = &source.params;
    let workers = p.layout.slot_count();
    let per_worker = p.timebase.ids_per_second_per_worker(&p.layout);
    let exhausts_ms = p.timebase.exhausts_at_ms(&p.layout);
    let years_left = (exhausts_ms as f64 - now_unix_ms as f64) / MS_PER_YEAR;
    // Every ID is below 2^totalBits; time-ordered layouts reach that bound in their last
    // tick, key forms (docs/layouts.md) stay below it.
    let max_id = ((1u64 << p.layout.total_bits()) - 1).to_string();
    let mut warnings = Vec::new();
    if let Some(n) = replicas {
        if n > workers {
            warnings.push(format!(
                "{n} replicas exceed the {workers} worker slots: {} pods would wait without a slot \
                 and serve no IDs; raise workerBits (taking bits from timestampBits or sequenceBits)",
                n - workers
            ));
        } else if n * 100 >= workers * NEAR_FULL_PERCENT {
            warnings.push(format!(
                "{n} replicas use {}% of the {workers} worker slots: new pods of a rolling update \
                 or replacements of failed pods may wait for a slot; consider more workerBits",
                n * 100 / workers
            ));
        }
    }
    if years_left <= 0.0 {
        warnings.push(format!(
            "the timestamp bits ran out at {}: this layout can no longer issue IDs",
            rfc3339(exhausts_ms)
        ));
    } else if years_left < 1.0 {
        warnings.push(format!(
            "the timestamp bits run out at {}, less than a year from now",
            rfc3339(exhausts_ms)
        ));
    }
    if i64::try_from(p.timebase.epoch_unix_ms()).is_ok_and(|e| e > now_unix_ms) {
        warnings.push(format!(
            "the epoch {} is in the future: no ID can be issued before it",
            rfc3339(p.timebase.epoch_unix_ms())
        ));
    }
    PlanReport {
        layout: source.view(),
        workers,
        datacenters: 1 << p.layout.datacenter_bits(),
        ids_per_tick_per_worker: p.layout.ids_per_tick(),
        ids_per_second_per_worker: per_worker,
        ids_per_second_total: per_worker.saturating_mul(workers),
        exhausts_at: rfc3339(exhausts_ms),
        years_left: (years_left * 100.0).round() / 100.0,
        max_id,
        javascript_safe: p.layout.total_bits() <= u32::from(JS_SAFE_TOTAL_BITS),
        replicas,
        clusters: None,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::LayoutArgs;
    use crate::source::from_flags;

    fn source(args: LayoutArgs) -> Resolved {
        from_flags(&args).unwrap()
    }

    /// 2026-01-01T00:00:00Z, a fixed "now" for the tests.
    const NOW: i64 = 1_767_225_600_000;

    #[test]
    fn the_default_layout_has_1024_workers_at_4096_ids_per_ms_each() {
        let r = plan(&source(LayoutArgs::default()), None, NOW);
        // 2^10 workers; 2^12 IDs per 1 ms tick = 4,096,000 per second each.
        assert_eq!(r.workers, 1024);
        assert_eq!(r.ids_per_second_per_worker, 4_096_000);
        assert_eq!(r.ids_per_second_total, 4_096_000 * 1024);
        assert!(!r.javascript_safe);
        assert_eq!(r.max_id, i64::MAX.to_string());
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // The defaults last about 69 years from 2025, so about 68 from 2026.
        assert!((68.0..69.0).contains(&r.years_left), "{}", r.years_left);
    }

    #[test]
    fn a_53_bit_layout_is_javascript_safe() {
        let r = plan(
            &source(LayoutArgs {
                timestamp_bits: Some(36),
                worker_bits: Some(7),
                sequence_bits: Some(10),
                total_bits: Some(53),
                time_unit: Some(kubeflake_crds::TimeUnit::TenMilliseconds),
                ..Default::default()
            }),
            None,
            NOW,
        );
        assert!(r.javascript_safe);
        assert_eq!(r.max_id, ((1u64 << 53) - 1).to_string());
        // 2^10 IDs per 10 ms tick.
        assert_eq!(r.ids_per_second_per_worker, 102_400);
    }

    #[test]
    fn replicas_above_the_slots_or_at_80_percent_warn_and_below_do_not() {
        let s = source(LayoutArgs::default());
        let over = plan(&s, Some(1025), NOW).warnings;
        assert!(
            over.iter()
                .any(|w| w.contains("exceed the 1024 worker slots")),
            "{over:?}"
        );
        // 80% of 1024 is 819.2: 820 warns, 819 does not.
        let near = plan(&s, Some(820), NOW).warnings;
        assert!(
            near.iter().any(|w| w.contains("use 80% of the 1024")),
            "{near:?}"
        );
        assert!(plan(&s, Some(819), NOW).warnings.is_empty());
    }

    #[test]
    fn a_layout_about_to_run_out_or_with_a_future_epoch_warns() {
        let s = source(LayoutArgs {
            timestamp_bits: Some(30),
            sequence_bits: Some(23 - 1),
            worker_bits: Some(11),
            ..Default::default()
        });
        // 2^30 ms is about 12.4 days after the 2025 epoch: long past in 2026.
        let r = plan(&s, None, NOW);
        assert!(r.years_left < 0.0);
        assert!(
            r.warnings.iter().any(|w| w.contains("ran out")),
            "{:?}",
            r.warnings
        );
        let future = source(LayoutArgs {
            epoch: Some("2030-01-01T00:00:00Z".into()),
            ..Default::default()
        });
        let r = plan(&future, None, NOW);
        assert!(
            r.warnings.iter().any(|w| w.contains("in the future")),
            "{:?}",
            r.warnings
        );
    }
}
