//! The slot gauges: sums over sequences, the oldest wait at scrape time.

use super::*;

/// The value of an unlabelled series in `rendered`.
fn value(rendered: &str, name: &str) -> f64 {
    rendered
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in:\n{rendered}"))
}

fn waiting(waiting: u64, since_ms: Option<i64>) -> SlotFigures {
    SlotFigures {
        assigned: 4,
        capacity: 4,
        waiting,
        oldest_waiting_since_ms: since_ms,
    }
}

#[test]
fn the_waiting_gauges_are_exported_at_zero_before_any_pass() {
    let rendered = Metrics::new().render_at(1_000_000);
    assert_eq!(
        value(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        0.0
    );
    assert_eq!(
        value(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        0.0
    );
}

#[test]
fn waiting_pods_are_summed_and_the_oldest_wait_is_the_longest_of_any_sequence_at_scrape_time() {
    let m = Metrics::new();
    m.set_slots("shop", "orders", waiting(2, Some(100_000)));
    m.set_slots("shop", "carts", waiting(1, Some(40_000)));
    m.set_slots("ops", "jobs", waiting(0, None));
    let rendered = m.render_at(160_000);
    assert_eq!(
        value(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        3.0
    );
    assert_eq!(
        value(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        120.0,
        "carts' pod, created at 40 s, has waited 120 s at 160 s"
    );
    // No pass in between: the wait keeps growing with the clock.
    let later = m.render_at(190_500);
    assert_eq!(
        value(&later, "kubeflake_operator_oldest_slot_wait_seconds"),
        150.5
    );
}

#[test]
fn a_pod_created_after_now_by_the_operators_clock_has_waited_zero_seconds() {
    let m = Metrics::new();
    m.set_slots("shop", "orders", waiting(1, Some(200_000)));
    assert_eq!(m.oldest_slot_wait_seconds(150_000), 0.0);
}

#[test]
fn a_pass_that_leaves_no_pod_waiting_sets_both_gauges_back_to_zero() {
    let m = Metrics::new();
    m.set_slots("shop", "orders", waiting(1, Some(0)));
    assert_eq!(m.oldest_slot_wait_seconds(60_000), 60.0);
    m.set_slots("shop", "orders", waiting(0, None));
    let rendered = m.render_at(60_000);
    assert_eq!(
        value(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        0.0
    );
    assert_eq!(
        value(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        0.0
    );
}

#[test]
fn a_deleted_sequence_no_longer_counts_in_any_slot_gauge() {
    let m = Metrics::new();
    m.set_slots("shop", "orders", waiting(2, Some(0)));
    m.set_slots(
        "shop",
        "carts",
        SlotFigures {
            assigned: 1,
            capacity: 8,
            waiting: 0,
            oldest_waiting_since_ms: None,
        },
    );
    m.forget("shop", "orders");
    let rendered = m.render_at(60_000);
    assert_eq!(
        value(&rendered, "kubeflake_operator_pods_waiting_for_slot"),
        0.0
    );
    assert_eq!(
        value(&rendered, "kubeflake_operator_oldest_slot_wait_seconds"),
        0.0
    );
    assert_eq!(value(&rendered, "kubeflake_operator_slots_assigned"), 1.0);
    assert_eq!(value(&rendered, "kubeflake_operator_slots_free"), 7.0);
    assert_eq!(value(&rendered, "kubeflake_operator_sequences"), 1.0);
}
