//! The membership task's metrics: what each update sets, read back from the exposition.

use kubeflake_crds::id_space::{
    BlockIndex, IdSpaceSpec, JoinRequest, LocalRecord, MemberId, MemberName, Registry, Space,
    SpaceSequenceSpec, join,
};
use kubeflake_crds::layout::{DatacenterId, Tick};

use super::*;
use crate::metrics::Metrics;

/// Default layout, 1 ms ticks: 16 blocks of 64 slots, tolerance 1 h.
fn space() -> Space {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
        .space()
        .expect("test space")
}

fn id(n: u32) -> MemberId {
    MemberId::new(&format!("3f1b2c4d-0000-4000-8000-{n:012}")).expect("test id")
}

fn member() -> Member {
    Member {
        namespace: "shop".into(),
        name: "orders".into(),
        space: "kubeflake-space-orders/orders".into(),
    }
}

const LABELS_OF: &str =
    r#"membership_namespace="shop",membership="orders",space="kubeflake-space-orders/orders""#;

/// Member `n` joined into `registry` at tick `now`, then claiming `claims` blocks.
fn joined(registry: &Registry, n: u32, claims: usize, now: u64) -> Registry {
    let space = space();
    let request = JoinRequest {
        id: id(n),
        name: MemberName::new(&format!("member-{n}")).expect("test name"),
        sequence: *space.sequence(),
        datacenter: DatacenterId(0),
        used: vec![],
        now: Tick(now),
    };
    let mut registry = join(&space, registry, &request).expect("joins").registry;
    for _ in 0..claims {
        registry = registry.claim(&space, &id(n), Tick(now)).expect("claims").0;
    }
    registry
}

/// What member 1 holds in `registry` with `in_use` slots held by pods.
fn holding(registry: &Registry, in_use: u64) -> Holding {
    Holding::of(&copy(registry), &space(), in_use)
}

fn copy(registry: &Registry) -> LocalRecord {
    LocalRecord::from_view(&registry.view_of(&id(1)).expect("a member"))
}

/// The value of the series of `name` that has every `key="value"` pair of `labels` (comma
/// separated, in any order: the exposition sorts them).
fn value(rendered: &str, name: &str, labels: &str) -> Option<f64> {
    rendered.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('{')?;
        let (series_labels, v) = rest.split_once("} ")?;
        let pairs: Vec<&str> = series_labels.split(',').collect();
        labels
            .split(',')
            .all(|pair| pairs.contains(&pair))
            .then(|| v.parse().ok())?
    })
}

fn must(rendered: &str, name: &str, labels: &str) -> f64 {
    value(rendered, name, labels)
        .unwrap_or_else(|| panic!("no series {name}{{{labels}}} in:\n{rendered}"))
}

const HOUR: u64 = 3_600_000;
const NOW: u64 = 100 * HOUR;

#[test]
fn a_successful_contact_sets_the_blocks_the_spare_the_tolerance_and_the_ready_reason() {
    let m = Metrics::new();
    let registry = joined(&Registry::default(), 1, 3, NOW);
    // 70 slots in use need 2 blocks of 64: of 3 held, 1 is spare.
    m.hub.joined(&member(), holding(&registry, 70));
    let r = m.render_at(NOW as i64);
    assert_eq!(
        must(&r, "kubeflake_operator_id_space_blocks_held", LABELS_OF),
        3.0
    );
    assert_eq!(
        must(&r, "kubeflake_operator_id_space_spare_blocks", LABELS_OF),
        1.0
    );
    assert_eq!(
        must(
            &r,
            "kubeflake_operator_id_space_tolerance_seconds",
            LABELS_OF
        ),
        3600.0
    );
    let reason = |reason: &str| {
        must(
            &r,
            "kubeflake_operator_id_space_ready_reason",
            &format!(r#"{LABELS_OF},reason="{reason}""#),
        )
    };
    assert_eq!(reason("Joined"), 1.0);
    let series = r
        .matches("kubeflake_operator_id_space_ready_reason{")
        .count();
    assert_eq!(series, 1, "one Ready series per membership:\n{r}");
    // Every counter exists from the first contact, at 0.
    for outcome in ["ok", "conflict", "unreachable", "refused"] {
        let labels = format!(r#"{LABELS_OF},outcome="{outcome}""#);
        assert_eq!(
            must(&r, "kubeflake_operator_id_space_hub_calls_total", &labels),
            0.0
        );
    }
    for record in ["copy", "registry"] {
        let labels = format!(r#"{LABELS_OF},record="{record}""#);
        assert_eq!(
            must(&r, "kubeflake_operator_id_space_went_back_total", &labels),
            0.0
        );
    }
    assert_eq!(
        must(&r, "kubeflake_operator_id_space_reclaims_total", LABELS_OF),
        0.0
    );
}

#[test]
fn the_nearest_bound_is_counted_down_by_the_operators_clock_at_scrape_time() {
    let m = Metrics::new();
    let registry = joined(&Registry::default(), 1, 2, NOW);
    let nearest = copy(&registry).grants().map(|g| g.bound.0).min();
    m.hub.joined(&member(), holding(&registry, 0));
    let nearest = nearest.expect("a grant");
    let bound = "kubeflake_operator_id_space_nearest_bound_seconds";
    // The bound passes at the start of the tick after it.
    let passes_ms = space().sequence().timebase.start_of(Tick(nearest + 1));
    let at = |now_ms: u64| must(&m.render_at(now_ms as i64), bound, LABELS_OF);
    assert_eq!(at(passes_ms - 90_000), 90.0);
    // No contact in between (the hub away): it keeps falling, and goes below 0 once passed.
    assert_eq!(at(passes_ms - 30_500), 30.5);
    assert_eq!(at(passes_ms + 2_000), -2.0);
}

#[test]
fn a_refusal_sets_its_reason_and_keeps_what_the_last_successful_contact_held() {
    let m = Metrics::new();
    let registry = joined(&Registry::default(), 1, 2, NOW);
    m.hub.joined(&member(), holding(&registry, 0));
    m.hub.refused(&member(), "HubUnreachable");
    let r = m.render_at(NOW as i64);
    let reason = |reason: &str| {
        value(
            &r,
            "kubeflake_operator_id_space_ready_reason",
            &format!(r#"{LABELS_OF},reason="{reason}""#),
        )
    };
    assert_eq!(reason("HubUnreachable"), Some(1.0));
    assert_eq!(reason("Joined"), None, "the old reason's series is gone");
    assert_eq!(
        must(&r, "kubeflake_operator_id_space_blocks_held", LABELS_OF),
        2.0
    );
    assert!(
        value(
            &r,
            "kubeflake_operator_id_space_nearest_bound_seconds",
            LABELS_OF
        )
        .is_some()
    );
}

#[test]
fn records_gone_back_are_counted_by_record() {
    let m = Metrics::new();
    m.hub.went_back(&member(), WentBack::Registry);
    m.hub.refused(&member(), "HubWentBack");
    m.hub.went_back(&member(), WentBack::Registry);
    m.hub.went_back(&member(), WentBack::Copy);
    let r = m.render_at(NOW as i64);
    let count = |record: &str| {
        must(
            &r,
            "kubeflake_operator_id_space_went_back_total",
            &format!(r#"{LABELS_OF},record="{record}""#),
        )
    };
    assert_eq!(count("registry"), 2.0);
    assert_eq!(count("copy"), 1.0);
    // Never held a block: no bound to count down, so no series an alert could misread.
    assert_eq!(
        value(
            &r,
            "kubeflake_operator_id_space_nearest_bound_seconds",
            LABELS_OF
        ),
        None
    );
}

#[test]
fn hub_calls_are_counted_by_outcome_and_timed() {
    let m = Metrics::new();
    m.hub.called(&member(), CallOutcome::Ok, 0.02);
    m.hub.called(&member(), CallOutcome::Ok, 0.3);
    m.hub.called(&member(), CallOutcome::Conflict, 0.04);
    let r = m.render_at(NOW as i64);
    let calls = |outcome: &str| {
        must(
            &r,
            "kubeflake_operator_id_space_hub_calls_total",
            &format!(r#"{LABELS_OF},outcome="{outcome}""#),
        )
    };
    assert_eq!(calls("ok"), 2.0);
    assert_eq!(calls("conflict"), 1.0);
    assert_eq!(calls("refused"), 0.0);
    let seconds = "kubeflake_operator_id_space_hub_call_duration_seconds";
    assert_eq!(must(&r, &format!("{seconds}_count"), LABELS_OF), 3.0);
    assert_eq!(
        must(
            &r,
            &format!("{seconds}_bucket"),
            &format!(r#"{LABELS_OF},le="0.05""#)
        ),
        2.0
    );
}

#[test]
fn the_call_wrapper_counts_what_the_call_returned() {
    let m = Metrics::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    struct Forbidden;
    impl CallError for Forbidden {
        fn outcome(&self) -> CallOutcome {
            CallOutcome::Refused
        }
    }
    let answer = rt.block_on(m.hub.call(&member(), async { Err::<(), _>(Forbidden) }));
    assert!(answer.is_err(), "the error is handed back, not swallowed");
    let r = m.render_at(NOW as i64);
    let labels = format!(r#"{LABELS_OF},outcome="refused""#);
    assert_eq!(
        must(&r, "kubeflake_operator_id_space_hub_calls_total", &labels),
        1.0
    );
}

#[test]
fn reclaims_are_the_blocks_of_other_members_a_write_hands_back() {
    let space = space();
    let registry = joined(&joined(&Registry::default(), 2, 2, NOW), 1, 1, NOW);
    let others: Vec<BlockIndex> = registry
        .view_of(&id(2))
        .expect("member 2")
        .grants
        .iter()
        .map(|g| g.block)
        .collect();
    let later = Tick(NOW + 3 * HOUR);
    let reclaimed = registry.reclaim(others[0], later).expect("lapsed");
    assert_eq!(reclaims(&space, &registry, &reclaimed, &id(1)), 1);
    let twice = reclaimed.reclaim(others[1], later).expect("lapsed");
    assert_eq!(reclaims(&space, &registry, &twice, &id(1)), 2);
    // A claim of this member's own is no reclaim.
    let claimed = registry.claim(&space, &id(1), Tick(NOW)).expect("claims").0;
    assert_eq!(reclaims(&space, &registry, &claimed, &id(1)), 0);

    let m = Metrics::new();
    m.hub.reclaimed(&member(), 2);
    let r = m.render_at(NOW as i64);
    assert_eq!(
        must(&r, "kubeflake_operator_id_space_reclaims_total", LABELS_OF),
        2.0
    );
}

#[test]
fn a_deleted_membership_leaves_no_series() {
    let m = Metrics::new();
    let registry = joined(&Registry::default(), 1, 1, NOW);
    m.hub.joined(&member(), holding(&registry, 0));
    m.hub.called(&member(), CallOutcome::Ok, 0.01);
    let other = Member {
        name: "carts".into(),
        ..member()
    };
    m.hub.joined(&other, holding(&registry, 0));
    m.hub.retain(&BTreeSet::from([other]));
    let r = m.render_at(NOW as i64);
    assert!(
        !r.contains(r#"membership="orders""#),
        "orders' series are gone:\n{r}"
    );
    assert!(r.contains(r#"membership="carts""#), "{r}");
    // The task stopped (leadership lost): nothing of any membership is left to age.
    m.hub.clear();
    let r = m.render_at(NOW as i64);
    assert!(!r.contains("membership="), "{r}");
}

/// A Segment membership's figures (docs/safety.md rule 22): the values its counter can
/// still hand out, whether a spare range is queued, the ranges taken; gone with the
/// membership.
#[test]
fn rule22_a_segment_counter_shows_its_values_left_and_spare_until_the_membership_goes() {
    use kubeflake_crds::segment_counter::range::{Queued, Ranged};
    use kubeflake_crds::segment_counter::{Counter, new_counter};
    let m = Metrics::new();
    let plain = Counter::parse(&new_counter("orders", "shop", 500)).expect("a counter");
    assert_eq!(RangesHeld::of(&plain), None, "no range, no figure");
    // 500 claimed of the range ending at 800, and 1,000..3,000 queued.
    let ranged = Counter {
        range: Some(Ranged {
            limit: 800,
            queued: Some(Queued {
                start: 1_000,
                limit: 3_000,
            }),
        }),
        ..plain.clone()
    };
    let held = RangesHeld::of(&ranged);
    assert_eq!(
        held,
        Some(RangesHeld {
            values_left: 300 + 2_000,
            spare: true
        })
    );
    m.hub.ranges_held(&member(), held);
    m.hub.range_taken(&member());
    let r = m.render_at(NOW as i64);
    let left = "kubeflake_operator_id_space_segment_values_left";
    assert_eq!(must(&r, left, LABELS_OF), 2_300.0);
    let spare = "kubeflake_operator_id_space_segment_spare_ranges";
    assert_eq!(must(&r, spare, LABELS_OF), 1.0);
    let taken = "kubeflake_operator_id_space_segment_ranges_taken_total";
    assert_eq!(must(&r, taken, LABELS_OF), 1.0);
    // Claims moved into the queued range, at 2,500: 500 left, no spare.
    let moved = Counter {
        next: 2_500,
        ..ranged
    };
    m.hub.ranges_held(&member(), RangesHeld::of(&moved));
    let r = m.render_at(NOW as i64);
    assert_eq!(must(&r, left, LABELS_OF), 500.0);
    assert_eq!(must(&r, spare, LABELS_OF), 0.0);
    m.hub.retain(&BTreeSet::new());
    let r = m.render_at(NOW as i64);
    assert!(!r.contains(r#"membership="orders""#), "{r}");
}
