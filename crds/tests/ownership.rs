//! Rule 16 (docs/safety.md): which Leases are kubeflake's, as every parser, the operator and
//! the sidecar recognise them (`kubeflake_crds::ownership`); and the parsers' ranges.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;

use kubeflake_crds::ownership::*;
use kubeflake_crds::segment_counter::{Counter, CounterError, new_counter};
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, SlotLease, SlotLeaseError, TransitionError, lease_labels, vacant,
};
use kubeflake_crds::strict_oracle::{OracleLease, OracleLeaseError, new_oracle_lease};
use kubeflake_crds::{IdSequence, Slot};

fn orders() -> IdSequence {
    let mut seq = IdSequence::new("orders", Default::default());
    seq.metadata.namespace = Some("shop".into());
    seq.metadata.uid = Some("seq-uid".into());
    seq
}

/// What a tenant with Lease `create` rights makes: kubeflake's name, no kubeflake label.
fn unlabelled(mut lease: Lease) -> Lease {
    lease.metadata.labels = None;
    lease
}

fn with_label(mut lease: Lease, key: &str, value: &str) -> Lease {
    lease
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    lease
}

fn fixture(name: &str) -> Lease {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn assert_says_what_to_do(message: &str, name: &str) {
    for part in [
        format!("Lease {name} has the name of a kubeflake"),
        "not made by kubeflake".to_string(),
        format!("Delete Lease {name}"),
        "rule 16".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} missing: {message}");
    }
}

#[test]
fn rule16_an_unlabelled_counter_lease_is_foreign_and_its_next_is_never_read() {
    let mut forged = unlabelled(new_counter("orders", "shop", 1));
    // Whatever it says: a tenant's "counter" that would make values repeat.
    forged
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            kubeflake_crds::segment_counter::NEXT_ANNOTATION.into(),
            "1".into(),
        );
    let err = Counter::parse(&forged).unwrap_err();
    let CounterError::Foreign(foreign) = &err else {
        panic!("not refused as foreign: {err}");
    };
    assert_eq!(foreign.kind, LeaseKind::SegmentCounter);
    assert_eq!(foreign.mismatch, Mismatch::NoLabel);
    assert!(!err.is_format());
    assert_says_what_to_do(&err.to_string(), "orders-segment-counter");
    // Labelled for another sequence: not this name's counter either.
    let other = with_label(forged, COUNTER_LABEL, "carts");
    assert!(matches!(
        Counter::parse(&other),
        Err(CounterError::Foreign(Foreign {
            mismatch: Mismatch::Label { .. },
            ..
        }))
    ));
}

#[test]
fn rule16_an_unlabelled_oracle_lease_is_foreign_and_its_address_is_never_believed() {
    let mut forged = unlabelled(new_oracle_lease("orders", "shop"));
    forged
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            kubeflake_crds::strict_oracle::ADDRESS_ANNOTATION.into(),
            "10.9.9.9:7072".into(),
        );
    let err = OracleLease::parse(forged).unwrap_err();
    assert!(
        matches!(
            &err,
            OracleLeaseError::Foreign(Foreign {
                kind: LeaseKind::StrictOracle,
                mismatch: Mismatch::NoLabel,
                ..
            })
        ),
        "{err}"
    );
    assert_says_what_to_do(&err.to_string(), "orders-strict-oracle");
}

#[test]
fn rule16_a_slot_lease_whose_name_its_labels_do_not_give_is_foreign() {
    let seq = orders();
    let unlabelled_slot = unlabelled(vacant(&seq, Slot(3)));
    assert!(matches!(
        SlotLease::parse(&unlabelled_slot),
        Err(SlotLeaseError::Foreign(Foreign {
            mismatch: Mismatch::NoLabel,
            ..
        }))
    ));
    // Labelled, but as another slot (or another sequence) than its name says.
    for (key, value) in [
        (SLOT_LABEL, "4"),
        (SLOT_LABEL, "03"),
        (SEQUENCE_LABEL, "carts"),
    ] {
        let mislabelled = with_label(vacant(&seq, Slot(3)), key, value);
        assert!(
            matches!(
                SlotLease::parse(&mislabelled),
                Err(SlotLeaseError::Foreign(Foreign {
                    mismatch: Mismatch::Label { .. },
                    ..
                }))
            ),
            "{key}={value}"
        );
    }
    // The transitions refuse it too: nothing is built on it.
    assert!(matches!(
        kubeflake_crds::slot_lease::renew(
            &unlabelled_slot,
            "uid-a",
            kubeflake_crds::Tick(5),
            chrono::Utc::now()
        ),
        Err(TransitionError::BadLease(SlotLeaseError::Foreign(_)))
    ));
}

#[test]
fn rule16_the_operator_also_checks_that_the_sequence_owns_its_slot_and_oracle_leases() {
    let seq = orders();
    let slot = vacant(&seq, Slot(3));
    assert_eq!(check(&slot, LeaseKind::Slot, "orders", "seq-uid"), Ok(()));
    assert_eq!(
        check(&slot, LeaseKind::Slot, "orders", "another-uid").map_err(|f| f.mismatch),
        Err(Mismatch::OtherOwner {
            uid: "seq-uid".into()
        }),
        "a leftover of an earlier sequence of the same name"
    );
    let mut unowned = slot.clone();
    unowned.metadata.owner_references = None;
    assert_eq!(
        check(&unowned, LeaseKind::Slot, "orders", "seq-uid").map_err(|f| f.mismatch),
        Err(Mismatch::NoOwner)
    );
    let mut oracle = new_oracle_lease("orders", "shop");
    assert_eq!(
        check(&oracle, LeaseKind::StrictOracle, "orders", "seq-uid").map_err(|f| f.mismatch),
        Err(Mismatch::NoOwner)
    );
    oracle.metadata.owner_references = slot.metadata.owner_references.clone();
    assert_eq!(
        check(&oracle, LeaseKind::StrictOracle, "orders", "seq-uid"),
        Ok(())
    );
    // The counter has no owner on purpose (it outlives its sequence): the label decides.
    let counter = new_counter("orders", "shop", 1);
    assert_eq!(
        check(&counter, LeaseKind::SegmentCounter, "orders", "seq-uid"),
        Ok(())
    );
    assert_eq!(
        check(&counter, LeaseKind::SegmentCounter, "carts", "seq-uid").map_err(|f| f.mismatch),
        Err(Mismatch::Label {
            sequence: "orders".into()
        })
    );
}

/// Rule 15: what 0.1.0 left (its own objects, tests/fixtures) is kubeflake's to this
/// release: counters were labelled from the start, slot Leases labelled and owned.
#[test]
fn rule16_and_rule15_the_leases_0_1_0_made_are_recognised_as_kubeflakes() {
    let sequence_uid = "5f0d6a3c-8e2b-4d7a-9c41-2b7e0f9a1c55";
    for name in ["slot-lease-0.1.0.json", "slot-lease-released-0.1.0.json"] {
        let lease = fixture(name);
        assert_eq!(
            check(&lease, LeaseKind::Slot, "orders", sequence_uid),
            Ok(()),
            "{name}"
        );
        SlotLease::parse(&lease).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let counter = fixture("segment-counter-0.1.0.json");
    let segment_uid = "a3c9e1f0-4b6d-4c2e-8f17-9d05b2e6c7a8";
    assert_eq!(
        check(&counter, LeaseKind::SegmentCounter, "invoices", segment_uid),
        Ok(())
    );
    assert_eq!(Counter::parse(&counter).map(|c| c.next), Ok(5001));
}

#[test]
fn a_slot_number_is_read_from_a_name_only_as_lease_name_writes_it() {
    assert_eq!(slot_of_name("orders", "orders-slot-3"), Some(Slot(3)));
    assert_eq!(slot_of_name("a-slot", "a-slot-slot-0"), Some(Slot(0)));
    for name in [
        "orders-slot-03",
        "orders-slot-+3",
        "orders-slot-",
        "orders-segment-counter",
        "carts-slot-3",
        "orders-slot-4294967296",
    ] {
        assert_eq!(slot_of_name("orders", name), None, "{name}");
    }
}

#[test]
fn rule16_values_out_of_range_are_refused_not_wrapped() {
    let labels = lease_labels("orders", Slot(3), None);
    let mut slot = vacant(&orders(), Slot(3));
    slot.metadata.labels = Some(labels);
    for (fence, ok) in [
        // The last tick any layout holds (layout::MAX_TICK, 2^55-1), the policy's bound too.
        ("36028797018963967", true),
        ("36028797018963968", false),
        ("9223372036854775807", false),
        ("18446744073709551615", false),
    ] {
        let mut lease = slot.clone();
        lease
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(FENCE_ANNOTATION.into(), fence.into());
        assert_eq!(SlotLease::parse(&lease).is_ok(), ok, "fence {fence}");
    }
    for (transitions, ok) in [
        (0, true),
        (i32::MAX - 1, true),
        (i32::MAX, false),
        (-1, false),
    ] {
        let mut lease = slot.clone();
        lease
            .spec
            .get_or_insert_with(Default::default)
            .lease_transitions = Some(transitions);
        assert_eq!(
            SlotLease::parse(&lease).is_ok(),
            ok,
            "leaseTransitions {transitions}"
        );
    }
    for (term, ok) in [(i32::MAX - 1, true), (i32::MAX, false), (-1, false)] {
        let mut lease = new_oracle_lease("orders", "shop");
        lease
            .spec
            .get_or_insert_with(Default::default)
            .lease_transitions = Some(term);
        assert_eq!(OracleLease::parse(lease).is_ok(), ok, "term {term}");
    }
    for (seconds, ok) in [(3600, true), (3601, false), (i32::MAX, false)] {
        let mut lease = new_oracle_lease("orders", "shop");
        lease
            .spec
            .get_or_insert_with(Default::default)
            .lease_duration_seconds = Some(seconds);
        assert_eq!(OracleLease::parse(lease).is_ok(), ok, "D = {seconds} s");
    }
}
