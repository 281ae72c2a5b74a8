//! Rules 14 and 16 (docs/safety.md): the Lease policy the chart ships and the parsers read
//! numbers up to the same bound, so a value the API server lets anyone write is one every
//! operator and sidecar can read, and nothing the parsers accept is refused by the policy.
//! The bounds are read from the generated file in the chart, the one the API server gets.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use kubeflake_crds::layout::MAX_TICK;
use kubeflake_crds::segment_counter::{self, Counter, NEXT_ANNOTATION, new_counter};
use kubeflake_crds::slot_lease::{FENCE_ANNOTATION, MAX_FENCE, SlotLease, SlotLeaseError, vacant};
use kubeflake_crds::{IdSequence, Slot};

fn chart_policy() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/kubeflake/files/lease-policy-spec.yaml"
    );
    std::fs::read_to_string(path).expect("charts/kubeflake/files/lease-policy-spec.yaml exists")
}

/// The number the policy compares annotation `a` with: `...['a'] <= 'N'`.
fn policy_bound(policy: &str, a: &str) -> u64 {
    let marker = format!("variables.newAnnotations['{a}'] <= '");
    let mut found = policy.match_indices(&marker).map(|(at, _)| {
        let rest = &policy[at + marker.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().expect("the bound is a number")
    });
    let bound = found
        .next()
        .unwrap_or_else(|| panic!("no range check of {a} in the policy"));
    assert!(
        found.all(|b| b == bound),
        "{a} is checked against two bounds"
    );
    bound
}

fn with_annotation(mut lease: Lease, key: &str, value: &str) -> Lease {
    lease
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    lease
}

fn orders() -> IdSequence {
    let mut seq = IdSequence::new("orders", Default::default());
    seq.metadata.namespace = Some("shop".into());
    seq.metadata.uid = Some("seq-uid".into());
    seq
}

#[test]
fn rule14_the_policy_and_the_fence_parser_bound_a_fence_at_the_same_tick() {
    let bound = policy_bound(&chart_policy(), FENCE_ANNOTATION);
    assert_eq!(
        bound, MAX_TICK.0,
        "the policy's fence bound is not the last tick"
    );
    assert_eq!(
        bound, MAX_FENCE.0,
        "the policy's fence bound is not the parser's"
    );
    assert_eq!(bound, (1 << 55) - 1);
    let slot = |fence: u64| {
        with_annotation(
            vacant(&orders(), Slot(3)),
            FENCE_ANNOTATION,
            &fence.to_string(),
        )
    };
    let at = SlotLease::parse(&slot(bound)).expect("the policy's bound is read");
    assert_eq!(at.fence.0, bound);
    let err = SlotLease::parse(&slot(bound + 1)).expect_err("one above the bound is refused");
    assert!(matches!(err, SlotLeaseError::BadFence { .. }), "{err}");
    assert!(err.to_string().contains("2^55-1"), "{err}");
}

#[test]
fn rule14_the_policy_and_the_counter_parser_bound_next_at_the_same_value() {
    let bound = policy_bound(&chart_policy(), NEXT_ANNOTATION);
    assert_eq!(bound, segment_counter::LIMIT);
    let counter = |next: u64| {
        with_annotation(
            new_counter("orders", "shop", 1),
            NEXT_ANNOTATION,
            &next.to_string(),
        )
    };
    assert_eq!(
        Counter::parse(&counter(bound))
            .expect("the bound is read")
            .next,
        bound
    );
    assert!(Counter::parse(&counter(bound + 1)).is_err());
}

/// Rule 17: the cap the policy lets the operator write is one every parser reads, and the
/// fence-within-cap check compares numbers only in that range (so `uint()` never fails).
#[test]
fn rule17_the_policy_and_the_parser_bound_a_fence_cap_at_the_same_tick() {
    use kubeflake_crds::slot_lease::FENCE_CAP_ANNOTATION;
    let policy = chart_policy();
    let bound = policy_bound(&policy, FENCE_CAP_ANNOTATION);
    assert_eq!(
        bound, MAX_FENCE.0,
        "the policy's cap bound is not the parser's"
    );
    assert!(
        policy.contains(&format!(
            "uint(variables.newAnnotations[?'{FENCE_ANNOTATION}'].orValue('0')) <= \
             uint(variables.newAnnotations['{FENCE_CAP_ANNOTATION}'])"
        )),
        "the policy compares the fence with the cap"
    );
    assert!(
        bound.to_string().len() < 20,
        "uint() holds every value in range"
    );
    let slot = |cap: u64| {
        with_annotation(
            vacant(&orders(), Slot(3)),
            FENCE_CAP_ANNOTATION,
            &cap.to_string(),
        )
    };
    let at = SlotLease::parse(&slot(bound)).expect("the policy's bound is read");
    assert_eq!(at.fence_cap.map(|c| c.0), Some(bound));
    let err = SlotLease::parse(&slot(bound + 1)).expect_err("one above the bound is refused");
    assert!(matches!(err, SlotLeaseError::BadFenceCap { .. }), "{err}");
}
