use super::*;
use chrono::Timelike;

fn lease(labels: BTreeMap<String, String>, fence: Option<&str>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("orders-slot-3".into()),
            labels: Some(labels),
            annotations: fence
                .map(|f| BTreeMap::from([(FENCE_ANNOTATION.to_string(), f.to_string())])),
            resource_version: Some("42".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("uid-1".into()),
            lease_transitions: Some(4),
            ..Default::default()
        }),
    }
}

#[test]
fn parses_slot_holder_fence_and_acquisition() {
    let l = SlotLease::parse(&lease(
        lease_labels("orders", Slot(3), Some("uid-1")),
        Some("123"),
    ))
    .unwrap();
    assert_eq!(l.slot, Slot(3));
    assert_eq!(l.holder.as_deref(), Some("uid-1"));
    assert_eq!(l.fence, Tick(123));
    assert_eq!(l.acquisition(), "orders-slot-3#4");
    assert_eq!(lease_name("orders", Slot(3)), "orders-slot-3");
}

/// A sequence's spec with slot leases of `secs` seconds, the rest defaults.
fn lease_secs(secs: i32) -> IdSequenceSpec {
    let mut spec = IdSequenceSpec::default();
    spec.lease.duration_seconds = secs;
    spec
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 123_456_789).expect("a time")
}

fn vacant_orders_3() -> Lease {
    let mut seq = IdSequence::new("orders", Default::default());
    seq.metadata.namespace = Some("shop".into());
    seq.metadata.uid = Some("seq-uid".into());
    vacant(&seq, Slot(3))
}

const POD_A: Holder<'static> = Holder {
    uid: "uid-a",
    pod: "a",
};

#[test]
fn a_vacant_slot_lease_is_owned_by_its_sequence_and_has_fence_zero() {
    let lease = vacant_orders_3();
    let parsed = SlotLease::parse(&lease).unwrap();
    assert_eq!(
        (parsed.slot, parsed.fence, parsed.holder),
        (Slot(3), Tick(0), None)
    );
    assert_eq!(lease.metadata.name.as_deref(), Some("orders-slot-3"));
    assert_eq!(lease.metadata.namespace.as_deref(), Some("shop"));
    let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("seq-uid", Some(true))
    );
}

#[test]
fn assignment_keeps_the_fence_rule_9_and_counts_the_acquisition() {
    let mut lease = vacant_orders_3();
    lease = renew_unchecked(lease, Tick(500));
    let given = assign(&lease, POD_A, &lease_secs(15), at(0)).unwrap();
    let parsed = SlotLease::parse(&given).unwrap();
    assert_eq!(
        parsed.fence,
        Tick(500),
        "rule 9: the fence is never lowered by assignment"
    );
    assert_eq!(parsed.holder.as_deref(), Some("uid-a"));
    assert_eq!(parsed.holder_pod.as_deref(), Some("a"));
    assert_eq!(parsed.transitions, 1);
    assert_eq!(
        given
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .get(HOLDER_LABEL)
            .map(String::as_str),
        Some("uid-a")
    );
    let again = assign(
        &release(&given, Releaser::Operator { holder: "uid-a" }, at(1)).unwrap(),
        POD_A,
        &lease_secs(15),
        at(2),
    );
    assert_eq!(SlotLease::parse(&again.unwrap()).unwrap().transitions, 2);
}

fn renew_unchecked(mut lease: Lease, fence: Tick) -> Lease {
    lease
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(FENCE_ANNOTATION.to_string(), fence.0.to_string());
    lease
}

#[test]
fn only_the_holder_renews_and_the_fence_never_goes_down_rule_5() {
    let held = assign(&vacant_orders_3(), POD_A, &lease_secs(15), at(0)).unwrap();
    let up = renew(&held, "uid-a", Tick(900), at(1)).unwrap();
    assert_eq!(SlotLease::parse(&up).unwrap().fence, Tick(900));
    let not_down = renew(&up, "uid-a", Tick(100), at(2)).unwrap();
    assert_eq!(
        SlotLease::parse(&not_down).unwrap().fence,
        Tick(900),
        "rule 5"
    );
    assert!(matches!(
        renew(&up, "uid-b", Tick(1000), at(2)),
        Err(TransitionError::NotHolder { .. })
    ));
    let freed = release(&up, Releaser::Operator { holder: "uid-a" }, at(3)).unwrap();
    assert!(
        matches!(
            renew(&freed, "uid-a", Tick(1000), at(4)),
            Err(TransitionError::NotHolder { .. })
        ),
        "a freed slot is not renewed by its former holder"
    );
}

#[test]
fn the_operator_keeps_the_fence_on_release_only_the_holder_lowers_it_to_its_high_water() {
    let held = assign(&vacant_orders_3(), POD_A, &lease_secs(15), at(0)).unwrap();
    let held = renew(&held, "uid-a", Tick(900), at(1)).unwrap();
    let by_operator =
        SlotLease::parse(&release(&held, Releaser::Operator { holder: "uid-a" }, at(2)).unwrap());
    let by_holder = SlotLease::parse(
        &release(
            &held,
            Releaser::Holder {
                uid: "uid-a",
                high_water: Tick(640),
            },
            at(2),
        )
        .unwrap(),
    );
    for freed in [&by_operator, &by_holder] {
        let freed = freed.as_ref().unwrap();
        assert_eq!(freed.holder, None);
        assert_eq!(freed.holder_pod, None);
        assert_eq!(
            freed.released_time(),
            Some(at(2).with_nanosecond(123_456_000).unwrap())
        );
        assert_eq!(freed.transitions, 1, "the acquisition count stays");
    }
    assert_eq!(by_operator.unwrap().fence, Tick(900), "rule 9");
    assert_eq!(by_holder.unwrap().fence, Tick(640), "rule 5's exception");
}

#[test]
fn a_parsed_slot_lease_keeps_the_lease_as_read_and_compares_by_what_it_says() {
    let held = assign(&vacant_orders_3(), POD_A, &lease_secs(15), at(0)).unwrap();
    let parsed = SlotLease::parse(&held).unwrap();
    assert_eq!(*parsed.read, held, "the Lease exactly as read");
    let shared = Arc::new(held.clone());
    assert!(
        Arc::ptr_eq(
            &SlotLease::parse_shared(shared.clone()).unwrap().read,
            &shared
        ),
        "a cached Lease is shared, not copied"
    );
    // A cache that drops fields nobody reads (managed fields) parses the same.
    let mut slim = held;
    slim.metadata.managed_fields = Some(Vec::new());
    assert_eq!(SlotLease::parse(&slim).unwrap(), parsed);
}

#[test]
fn released_at_times_compare_as_times_whatever_precision_wrote_them() {
    // An older operator wrote whole seconds, an older sidecar nanoseconds: as text,
    // "…:00Z" sorts after "…:00.5Z" although it is earlier.
    let seconds = "2026-11-23T08:00:00Z";
    let later = "2026-11-23T08:00:00.500000000Z";
    assert!(seconds > later, "the texts sort the wrong way round");
    assert!(parse_lease_time(seconds) < parse_lease_time(later));
    assert_eq!(
        lease_time(parse_lease_time(later).unwrap()),
        "2026-11-23T08:00:00.500000Z"
    );
    assert_eq!(parse_lease_time("yesterday"), None);
}

#[test]
fn a_missing_fence_is_zero_but_a_garbled_one_is_an_error() {
    let labels = lease_labels("orders", Slot(3), None);
    assert_eq!(
        SlotLease::parse(&lease(labels.clone(), None))
            .unwrap()
            .fence,
        Tick(0)
    );
    assert!(matches!(
        SlotLease::parse(&lease(labels, Some("soon"))),
        Err(SlotLeaseError::BadFence { .. })
    ));
    assert!(SlotLease::parse(&lease(BTreeMap::new(), None)).is_err());
}

fn with_format(mut lease: Lease, format: &str) -> Lease {
    lease
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(FORMAT_ANNOTATION.to_string(), format.to_string());
    lease
}

#[test]
fn a_lease_without_a_format_is_format_1_as_0_1_0_wrote_it() {
    let labels = lease_labels("orders", Slot(3), Some("uid-1"));
    let parsed = SlotLease::parse(&lease(labels, Some("123"))).unwrap();
    assert_eq!((parsed.format, parsed.fence), (1, Tick(123)));
}

#[test]
fn format_1_is_read() {
    let labels = lease_labels("orders", Slot(3), Some("uid-1"));
    let parsed = SlotLease::parse(&with_format(lease(labels, Some("123")), "1")).unwrap();
    assert_eq!((parsed.format, parsed.fence), (1, Tick(123)));
}

#[test]
fn a_newer_format_is_refused_naming_the_lease_the_formats_and_what_to_do() {
    let labels = lease_labels("orders", Slot(3), Some("uid-1"));
    let newer = with_format(lease(labels, Some("123")), "2");
    let err = SlotLease::parse(&newer).unwrap_err();
    assert_eq!(
        err,
        SlotLeaseError::UnsupportedFormat {
            name: "orders-slot-3".into(),
            found: 2,
            understood: 1,
        }
    );
    assert!(err.is_format());
    let message = err.to_string();
    for part in [
        "orders-slot-3",
        "newer kubeflake",
        "format 2",
        "up to 1",
        "Upgrade this operator and its sidecars",
        "roll the newer release back",
        "the Lease was not changed",
    ] {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
    // No transition is built on a Lease this release cannot read.
    assert!(matches!(
        assign(&newer, POD_A, &lease_secs(15), at(0)),
        Err(TransitionError::BadLease(
            SlotLeaseError::UnsupportedFormat { .. }
        ))
    ));
    assert!(matches!(
        renew(&newer, "uid-1", Tick(900), at(0)),
        Err(TransitionError::BadLease(
            SlotLeaseError::UnsupportedFormat { .. }
        ))
    ));
    assert!(matches!(
        release(&newer, Releaser::Operator { holder: "uid-1" }, at(0)),
        Err(TransitionError::BadLease(
            SlotLeaseError::UnsupportedFormat { .. }
        ))
    ));
}

#[test]
fn a_format_that_is_not_a_format_number_is_refused_not_guessed() {
    let labels = lease_labels("orders", Slot(3), Some("uid-1"));
    for bad in [
        "two",
        "",
        "0",
        "-1",
        "+1",
        "1.0",
        " 1",
        "99999999999999999999999",
    ] {
        let err =
            SlotLease::parse(&with_format(lease(labels.clone(), Some("1")), bad)).unwrap_err();
        assert_eq!(
            err,
            SlotLeaseError::BadFormat {
                name: "orders-slot-3".into(),
                value: bad.into(),
            },
            "{bad:?}"
        );
        assert!(err.is_format());
        assert!(
            err.to_string().contains("the Lease was not changed"),
            "{err}"
        );
    }
    assert!(
        !SlotLeaseError::BadFence {
            name: "x".into(),
            value: "y".into()
        }
        .is_format()
    );
}

#[test]
fn new_leases_write_the_format_and_every_transition_keeps_what_it_read() {
    let fresh = vacant_orders_3();
    assert_eq!(
        fresh
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(FORMAT_ANNOTATION),
        Some(&LEASE_FORMAT.to_string()),
        "the operator writes the format of the Leases it creates"
    );
    let format_of = |l: &Lease| {
        l.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(FORMAT_ANNOTATION))
            .cloned()
    };
    // A 0.1.0 Lease (no format) and one written out, each with an annotation no
    // transition owns: renew and release must keep both (the Lease policy lets a holder
    // change only the fence, holder-pod and released-at).
    for format in [None, Some("1")] {
        let mut start = vacant_orders_3();
        let annotations = start.metadata.annotations.as_mut().unwrap();
        annotations.remove(FORMAT_ANNOTATION);
        if let Some(f) = format {
            annotations.insert(FORMAT_ANNOTATION.into(), f.into());
        }
        annotations.insert("example.com/note".into(), "kept".into());
        let held = assign(&start, POD_A, &lease_secs(15), at(0)).unwrap();
        let renewed = renew(&held, "uid-a", Tick(900), at(1)).unwrap();
        let freed = release(
            &renewed,
            Releaser::Holder {
                uid: "uid-a",
                high_water: Tick(640),
            },
            at(2),
        )
        .unwrap();
        for written in [&held, &renewed, &freed] {
            assert_eq!(format_of(written).as_deref(), format, "{written:?}");
            assert_eq!(
                written
                    .metadata
                    .annotations
                    .as_ref()
                    .unwrap()
                    .get("example.com/note"),
                Some(&"kept".to_string())
            );
        }
    }
}

// Issue 27: every transition starts from the Lease as read and checks its holder there.

const POD_B: Holder<'static> = Holder {
    uid: "uid-b",
    pod: "b",
};
const NOTE: &str = "example.com/note";
const TEAM: &str = "example.com/team";

/// Slot 3 held by pod a, as the API server returns it: with a version, a lease duration,
/// the sequence as owner, and a label and an annotation kubeflake does not model.
fn held_with_foreign_fields() -> Lease {
    let mut lease = assign(&vacant_orders_3(), POD_A, &lease_secs(15), at(0)).unwrap();
    lease = renew(&lease, "uid-a", Tick(900), at(1)).unwrap();
    lease.metadata.resource_version = Some("77".into());
    lease
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(TEAM.into(), "payments".into());
    lease
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(NOTE.into(), "kept".into());
    lease
}

/// What a transition does not own and must write back as read.
fn foreign_fields(lease: &Lease) -> impl std::fmt::Debug + PartialEq + use<> {
    let meta = &lease.metadata;
    (
        meta.name.clone(),
        meta.namespace.clone(),
        meta.resource_version.clone(),
        meta.owner_references.clone(),
        meta.labels.as_ref().and_then(|l| l.get(TEAM)).cloned(),
        meta.labels
            .as_ref()
            .and_then(|l| l.get(SEQUENCE_LABEL))
            .cloned(),
        meta.labels
            .as_ref()
            .and_then(|l| l.get(SLOT_LABEL))
            .cloned(),
        meta.annotations.as_ref().and_then(|a| a.get(NOTE)).cloned(),
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(FORMAT_ANNOTATION))
            .cloned(),
        lease.spec.as_ref().and_then(|s| s.lease_transitions),
    )
}

fn lease_duration(lease: &Lease) -> Option<i32> {
    lease.spec.as_ref().and_then(|s| s.lease_duration_seconds)
}

#[test]
fn an_operator_release_keeps_lease_duration_unknown_labels_and_annotations() {
    let held = held_with_foreign_fields();
    let slot = SlotLease::parse(&held).unwrap();
    let freed = slot
        .release(Releaser::Operator { holder: "uid-a" }, at(2))
        .unwrap();
    assert_eq!(foreign_fields(&freed), foreign_fields(&held));
    assert!(held.metadata.owner_references.is_some());
    assert_eq!(
        lease_duration(&freed),
        Some(15),
        "release keeps the lease duration"
    );
    let parsed = SlotLease::parse(&freed).unwrap();
    assert_eq!((parsed.holder, parsed.fence), (None, Tick(900)), "rule 9");
}

#[test]
fn an_assignment_of_an_existing_lease_keeps_unknown_labels_annotations_and_the_owner() {
    let held = held_with_foreign_fields();
    let freed = release(&held, Releaser::Operator { holder: "uid-a" }, at(2)).unwrap();
    let given = SlotLease::parse(&freed)
        .unwrap()
        .assign(POD_B, &lease_secs(30), at(3))
        .unwrap();
    // The acquisition count is the assignment's own to change; the rest is as read.
    let without_count = |l: &Lease| {
        let mut l = l.clone();
        l.spec
            .get_or_insert_with(LeaseSpec::default)
            .lease_transitions = None;
        foreign_fields(&l)
    };
    assert_eq!(without_count(&given), without_count(&freed));
    assert_eq!(SlotLease::parse(&given).unwrap().transitions, 2);
    assert_eq!(
        lease_duration(&given),
        Some(30),
        "the sequence's duration now"
    );
    assert_eq!(
        given.metadata.labels.as_ref().unwrap().get(HOLDER_LABEL),
        Some(&"uid-b".to_string())
    );
}

#[test]
fn a_renewal_and_a_holder_release_keep_every_field_they_do_not_own() {
    let held = held_with_foreign_fields();
    let renewed = SlotLease::parse(&held)
        .unwrap()
        .renew("uid-a", Tick(1000), at(2))
        .unwrap();
    let freed = SlotLease::parse(&held)
        .unwrap()
        .release(
            Releaser::Holder {
                uid: "uid-a",
                high_water: Tick(640),
            },
            at(2),
        )
        .unwrap();
    for written in [&renewed, &freed] {
        assert_eq!(foreign_fields(written), foreign_fields(&held));
        assert_eq!(lease_duration(written), Some(15));
    }
}

#[test]
fn a_holder_cannot_release_a_slot_another_pod_holds_or_nobody_holds() {
    let held = held_with_foreign_fields();
    let by_b = Releaser::Holder {
        uid: "uid-b",
        high_water: Tick(0),
    };
    assert_eq!(
        release(&held, by_b, at(2)),
        Err(TransitionError::NotHolder {
            name: "orders-slot-3".into(),
            expected: "uid-b".into(),
            found: Some("uid-a".into()),
        }),
        "pod b would lower pod a's fence (rule 5 is the holder's own exception)"
    );
    let freed = release(&held, Releaser::Operator { holder: "uid-a" }, at(2)).unwrap();
    let by_a = Releaser::Holder {
        uid: "uid-a",
        high_water: Tick(0),
    };
    assert_eq!(
        release(&freed, by_a, at(3)),
        Err(TransitionError::NotHolder {
            name: "orders-slot-3".into(),
            expected: "uid-a".into(),
            found: None,
        }),
        "a former holder does not release (and lower the fence of) a freed slot"
    );
}

#[test]
fn the_operator_releases_only_the_holder_its_plan_saw() {
    let held = held_with_foreign_fields();
    assert!(matches!(
        release(&held, Releaser::Operator { holder: "uid-b" }, at(2)),
        Err(TransitionError::NotHolder { found: Some(ref a), .. }) if a == "uid-a"
    ));
    let freed = release(&held, Releaser::Operator { holder: "uid-a" }, at(2)).unwrap();
    assert!(
        matches!(
            release(&freed, Releaser::Operator { holder: "uid-a" }, at(3)),
            Err(TransitionError::NotHolder { found: None, .. })
        ),
        "a slot already freed is not released again"
    );
}

#[test]
fn the_operator_cannot_assign_a_held_slot() {
    let held = held_with_foreign_fields();
    for to in [POD_B, POD_A] {
        assert_eq!(
            assign(&held, to, &lease_secs(15), at(2)),
            Err(TransitionError::Held {
                name: "orders-slot-3".into(),
                holder: "uid-a".into(),
            })
        );
    }
}

#[test]
fn a_refused_transition_says_which_lease_whom_it_names_and_that_nothing_was_written() {
    let held = held_with_foreign_fields();
    let not_holder = renew(&held, "uid-b", Tick(1), at(2))
        .unwrap_err()
        .to_string();
    for part in ["orders-slot-3", "pod uid-a", "not pod uid-b", "not written"] {
        assert!(not_holder.contains(part), "{part:?}: {not_holder}");
    }
    let freed = release(&held, Releaser::Operator { holder: "uid-a" }, at(2)).unwrap();
    let nobody = renew(&freed, "uid-a", Tick(1), at(3))
        .unwrap_err()
        .to_string();
    assert!(nobody.contains("names no pod"), "{nobody}");
    let held_err = assign(&held, POD_B, &lease_secs(15), at(2))
        .unwrap_err()
        .to_string();
    for part in [
        "orders-slot-3",
        "held by pod uid-a",
        "released",
        "not written",
    ] {
        assert!(held_err.contains(part), "{part:?}: {held_err}");
    }
}

#[test]
fn an_assignment_notes_the_sequence_spec_for_that_assignment_only() {
    let mut spec = lease_secs(20);
    spec.datacenter_id = 3;
    let first = assign(&vacant_orders_3(), POD_A, &spec, at(0)).unwrap();
    assert_eq!(
        assigned_sequence_spec(&first),
        Ok(Some(spec.clone())),
        "the holder's sidecar finds the sequence's settings on its Lease"
    );
    // A renewal keeps the note: it is still the same assignment.
    let renewed = renew(&first, "uid-a", Tick(5), at(1)).unwrap();
    assert_eq!(assigned_sequence_spec(&renewed), Ok(Some(spec.clone())));
    // Freed and given again: the note is the new assignment's.
    let freed = release(&renewed, Releaser::Operator { holder: "uid-a" }, at(2)).unwrap();
    let mut later = spec.clone();
    later.clock.max_drift_millis = 100;
    let second = assign(&freed, POD_B, &later, at(3)).unwrap();
    assert_eq!(assigned_sequence_spec(&second), Ok(Some(later)));
    // An operator that writes no note (an earlier release) leaves the old one behind,
    // which no longer names the assignment: not used.
    let mut by_older_operator = second.clone();
    by_older_operator
        .spec
        .get_or_insert_with(LeaseSpec::default)
        .lease_transitions = Some(3);
    assert_eq!(assigned_sequence_spec(&by_older_operator), Ok(None));
}
