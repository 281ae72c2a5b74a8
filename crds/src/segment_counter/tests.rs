use super::*;
use crate::slot_lease::SEQUENCE_LABEL;

#[test]
fn a_new_counter_round_trips_and_is_not_labelled_as_a_slot_lease() {
    let lease = new_counter("orders", "ns", 7);
    assert_eq!(
        lease.metadata.name.as_deref(),
        Some("orders-segment-counter")
    );
    let labels = lease.metadata.labels.clone().unwrap();
    assert!(
        !labels.contains_key(SEQUENCE_LABEL),
        "slot code selects on that label"
    );
    assert_eq!(
        labels.get(COUNTER_LABEL).map(String::as_str),
        Some("orders")
    );
    let c = Counter::parse(&lease).unwrap();
    assert_eq!((c.next, c.claims), (7, 0));
}

#[test]
fn claimants_are_written_sorted_without_repeats_and_read_back() {
    let value = claimants_value(["uid-b", "uid-a", "uid-b", ""]);
    assert_eq!(value, "uid-a,uid-b");
    let mut lease = new_counter("orders", "ns", 7);
    assert!(claimants(&lease).is_empty(), "a new counter lists nobody");
    lease
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(CLAIMANTS_ANNOTATION.into(), value);
    assert_eq!(claimants(&lease), ["uid-a", "uid-b"]);
    assert!(lists_claimant(&lease, "uid-a") && lists_claimant(&lease, "uid-b"));
    assert!(!lists_claimant(&lease, "uid") && !lists_claimant(&lease, ""));
}

#[test]
fn garbled_or_out_of_range_counters_are_errors_not_zero() {
    for bad in ["soon", "-1", "9223372036854775809"] {
        let mut lease = new_counter("orders", "ns", 7);
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NEXT_ANNOTATION.into(), bad.into());
        let err = Counter::parse(&lease).unwrap_err();
        assert!(err.to_string().contains("never lower"), "{bad}: {err}");
    }
    let mut lease = new_counter("orders", "ns", 7);
    lease.metadata.annotations = None;
    assert!(matches!(
        Counter::parse(&lease),
        Err(CounterError::Missing { .. })
    ));
}

fn with_format(mut lease: Lease, format: Option<&str>) -> Lease {
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.remove(FORMAT_ANNOTATION);
    if let Some(f) = format {
        annotations.insert(FORMAT_ANNOTATION.into(), f.into());
    }
    lease
}

#[test]
fn a_counter_without_a_format_is_format_1_and_a_new_one_writes_it() {
    let fresh = new_counter("orders", "ns", 7);
    assert_eq!(
        fresh
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(FORMAT_ANNOTATION),
        Some(&"1".to_string())
    );
    for (format, read) in [(None, 1), (Some("1"), 1), (Some("2"), 2)] {
        let c = Counter::parse(&with_format(fresh.clone(), format)).unwrap();
        assert_eq!((c.next, c.claims, c.format), (7, 0, read), "{format:?}");
    }
}

#[test]
fn a_counter_in_a_newer_format_is_refused_naming_it_and_what_to_do() {
    let newer = with_format(new_counter("orders", "ns", 7), Some("4"));
    let err = Counter::parse(&newer).unwrap_err();
    assert_eq!(
        err,
        CounterError::UnsupportedFormat {
            name: "orders-segment-counter".into(),
            found: 4,
            understood: 3,
        }
    );
    assert!(err.is_format());
    let message = err.to_string();
    for part in [
        "orders-segment-counter",
        "newer kubeflake",
        "format 4",
        "up to 3",
        "Upgrade this operator and its sidecars",
        "the Lease was not changed",
    ] {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
}

#[test]
fn a_counter_format_that_is_not_a_number_is_refused_not_guessed() {
    for bad in ["two", "", "0", "-1"] {
        let lease = with_format(new_counter("orders", "ns", 7), Some(bad));
        let err = Counter::parse(&lease).unwrap_err();
        assert!(
            matches!(err, CounterError::BadFormat { .. }),
            "{bad:?}: {err}"
        );
        assert!(err.is_format());
    }
    assert!(!CounterError::Missing { name: "x".into() }.is_format());
}

#[test]
fn writing_a_counter_keeps_the_format_it_was_read_in() {
    for format in [None, Some("1")] {
        let lease = with_format(new_counter("orders", "ns", 7), format);
        let mut counter = Counter::parse(&lease).unwrap();
        counter.next = 100;
        let written = counter.write_into(lease);
        assert_eq!(
            written
                .metadata
                .annotations
                .as_ref()
                .unwrap()
                .get(FORMAT_ANNOTATION)
                .map(String::as_str),
            format
        );
    }
}
