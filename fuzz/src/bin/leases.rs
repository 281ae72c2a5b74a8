//! Fuzz target: the Lease parsers. Every input is one Lease (the text format of
//! `kubeflake_fuzz::LeaseInput`), read by every parser kubeflake has for a Lease: the slot
//! Lease's (and its sequence-spec note), the segment counter's and the strict oracle's.
//!
//! No Lease may panic a parser, and what a parser accepts is in range: a format it
//! understands, a counter at most 2^63, a fence and a slot that are the numbers written,
//! an oracle Lease whose timing is positive. What kubeflake writes it reads back: a counter
//! written over a Lease, a slot Lease assigned, renewed or released, and the slot, counter
//! and oracle Leases it makes for a new sequence.
#![no_main]

use std::time::Duration;

use chrono::{Datelike, SubsecRound};
use k8s_openapi::api::coordination::v1::Lease;
use kubeflake_crds::segment_counter::{
    self, CLAIMS_ANNOTATION, COUNTER_FORMAT, Counter, LIMIT, NEXT_ANNOTATION,
};
use kubeflake_crds::slot_lease::sequence_spec::assigned_sequence_spec;
use kubeflake_crds::slot_lease::{
    self, FENCE_ANNOTATION, Holder, LEASE_FORMAT, Releaser, SLOT_LABEL, SlotLease, lease_format,
};
use kubeflake_crds::strict_oracle::{self, OracleLease};
use kubeflake_crds::{IdSequence, IdSequenceSpec, Slot};
use kubeflake_fuzz::{LeaseInput, dns_label};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = LeaseInput::parse(data);
    let lease = &input.lease;
    if let Ok(format) = lease_format(lease) {
        assert!((1..=LEASE_FORMAT).contains(&format), "format {format}");
    }
    slot(lease);
    counter(lease);
    oracle(lease);
    times(lease);
    if let Some(sequence) = &input.sequence {
        made_by_kubeflake(sequence, input.start);
    }
});

fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn slot(lease: &Lease) {
    let _ = assigned_sequence_spec(lease);
    let Ok(read) = SlotLease::parse(lease) else {
        return;
    };
    assert!(
        (1..=LEASE_FORMAT).contains(&read.format),
        "format {}",
        read.format
    );
    let label = lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SLOT_LABEL));
    assert_eq!(
        label.and_then(|l| l.parse::<u32>().ok()),
        Some(read.slot.0),
        "slot {} from label {label:?}",
        read.slot.0
    );
    match annotation(lease, FENCE_ANNOTATION) {
        Some(text) => assert_eq!(
            text.parse::<u64>().ok(),
            Some(read.fence.0),
            "fence {text:?}"
        ),
        None => assert_eq!(read.fence.0, 0, "a fence from no annotation"),
    }
    assert_ne!(read.holder.as_deref(), Some(""), "an empty holder");
    let _ = read.released_time();
    let _ = read.acquisition();
    assert_eq!(
        SlotLease::parse(&read.read).as_ref(),
        Ok(&read),
        "read twice"
    );
    slot_transitions(&read);
}

/// What the operator and the holder write from a slot Lease they read, read back: the
/// assignment to a new holder (if free), the holder's renewal and the operator's release
/// (if held). A transition may refuse; what it writes must parse, with the fence kept.
fn slot_transitions(read: &SlotLease) {
    let now = chrono::DateTime::from_timestamp(1_795_000_000, 123_456_789).expect("a time");
    let holder = Holder {
        uid: "0b7e-fuzz",
        pod: "fuzz-pod",
    };
    if let Ok(lease) = read.assign(holder, &IdSequenceSpec::default(), now) {
        let next = SlotLease::parse(&lease).expect("an assignment that does not read back");
        assert_eq!(
            next.holder.as_deref(),
            Some(holder.uid),
            "assigned to another"
        );
        assert_eq!(next.fence, read.fence, "the fence moved on assignment");
        assert_eq!(
            next.transitions,
            read.transitions + 1,
            "not one assignment more"
        );
    }
    let Some(uid) = read.holder.as_deref() else {
        return;
    };
    if let Ok(lease) = read.renew(uid, read.fence, now) {
        let next = SlotLease::parse(&lease).expect("a renewal that does not read back");
        assert_eq!(
            (next.holder.as_deref(), next.fence),
            (Some(uid), read.fence),
            "renewed"
        );
    }
    if let Ok(lease) = read.release(Releaser::Operator { holder: uid }, now) {
        let next = SlotLease::parse(&lease).expect("a release that does not read back");
        assert_eq!(
            (next.holder.as_deref(), next.fence),
            (None, read.fence),
            "released"
        );
        assert_eq!(
            next.released_time(),
            Some(now.trunc_subsecs(6)),
            "released when"
        );
    }
}

fn counter(lease: &Lease) {
    let _ = segment_counter::claimants(lease);
    let Ok(read) = Counter::parse(lease) else {
        return;
    };
    assert!(read.next <= LIMIT, "next {} above 2^63", read.next);
    assert!(read.claims <= LIMIT, "claims {} above 2^63", read.claims);
    assert!(
        (1..=COUNTER_FORMAT).contains(&read.format),
        "format {}",
        read.format
    );
    let next = annotation(lease, NEXT_ANNOTATION).and_then(|t| t.parse::<u64>().ok());
    assert_eq!(next, Some(read.next), "next from {next:?}");
    let claims = annotation(lease, CLAIMS_ANNOTATION).map_or(Some(0), |t| t.parse::<u64>().ok());
    assert_eq!(claims, Some(read.claims), "claims from {claims:?}");
    // What a claim writes back (the same values here) reads as written.
    let written = read.write_into(lease.clone());
    assert_eq!(
        Counter::parse(&written).as_ref(),
        Ok(&read),
        "written and read back"
    );
}

fn oracle(lease: &Lease) {
    let Ok(read) = OracleLease::parse(lease.clone()) else {
        return;
    };
    let timing = read.timing;
    assert!(
        timing.lease >= Duration::from_secs(1),
        "lease {:?}",
        timing.lease
    );
    assert!(
        timing.serve_for() < timing.lease,
        "serves past the lease: {timing:?}"
    );
    assert!(
        timing.take_over_after() > timing.lease,
        "taken over early: {timing:?}"
    );
    assert!(
        timing.renew_every() > Duration::ZERO,
        "renews at once: {timing:?}"
    );
    assert!(
        timing.poll_every() > Duration::ZERO,
        "polls at once: {timing:?}"
    );
    assert_ne!(read.holder.as_deref(), Some(""), "an empty holder");
    assert_ne!(read.address.as_deref(), Some(""), "an empty address");
    let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
    assert_eq!(
        read.term,
        transitions.unwrap_or(0),
        "term from {transitions:?}"
    );
}

/// Every annotation read as a time, and a time read written the one way kubeflake writes
/// times, then read again. Within the years 0 to 9999 only: a time with an offset late on
/// 9999-12-31 (early on 0000-01-01) reads as a UTC time in the year 10000 (-1), which
/// `lease_time` writes as `+10000-...` (`-0001-...`), and RFC 3339, so `parse_lease_time`,
/// has four-digit years. Harmless while kubeflake writes only times from its own clock.
fn times(lease: &Lease) {
    for text in lease.metadata.annotations.iter().flat_map(|a| a.values()) {
        if let Some(t) = slot_lease::parse_lease_time(text)
            && (0..=9999).contains(&t.year())
        {
            let written = slot_lease::lease_time(t);
            assert_eq!(
                slot_lease::parse_lease_time(&written),
                Some(t.trunc_subsecs(6)),
                "{text:?} written as {written:?}"
            );
        }
    }
}

/// The slot, counter and oracle Leases the operator makes for a new sequence: read back as
/// made, whenever the sequence's name is one Kubernetes accepts.
fn made_by_kubeflake(sequence: &str, start: u64) {
    let number = (start % (1 << 20)) as u32;
    let vacant = slot_lease::vacant(
        &IdSequence::new(sequence, IdSequenceSpec::default()),
        Slot(number),
    );
    let slot = SlotLease::parse(&vacant);
    let made = segment_counter::new_counter(sequence, "fuzz", start);
    let counter = Counter::parse(&made);
    let oracle = OracleLease::parse(strict_oracle::new_oracle_lease(sequence, "fuzz"));
    if !dns_label(sequence) {
        return;
    }
    let slot = slot.expect("the operator's new slot Lease refused");
    assert_eq!(
        (slot.slot, slot.fence.0, slot.holder),
        (Slot(number), 0, None),
        "a new slot"
    );
    let counter = counter.expect("the operator's new counter refused");
    assert_eq!(counter.next, start.min(LIMIT), "a new counter from {start}");
    let oracle = oracle.expect("the operator's new oracle Lease refused");
    assert_eq!(
        (oracle.holder, oracle.term),
        (None, 0),
        "a new oracle Lease held"
    );
}
