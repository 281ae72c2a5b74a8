//! Objects the previous release left in the API server read the same with this release's
//! types: the fixtures in `tests/fixtures` (see the README there) were serialised by the
//! 0.1.0 code itself. A renamed or retyped status field, a changed annotation or label, or
//! a parse that became stricter makes these fail.

use std::path::PathBuf;

use chrono::{TimeZone, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kubeflake_crds::conditions::{ConditionType, Reason, condition};
use kubeflake_crds::segment_counter::{self, Counter};
use kubeflake_crds::sequence::{IdSequence, Mode};
use kubeflake_crds::slot_lease::{self, LEASE_FORMAT, SlotLease};
use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Slot, Tick, TimeUnit};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The pod that holds slot 2 of "orders" in the fixtures.
const HOLDER_UID: &str = "0b6f1c3e-2a9d-4e85-b7c0-6d1e4f2a9b37";

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every path where `a` and `b` differ, e.g. `/status/segment/next: 5001 != (absent)`.
fn differences(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                differences(&format!("{path}/{k}"), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}/{i}"), Some(x), Some(y), out);
            }
        }
        (a, b) if a != b => {
            let show = |v: Option<&Value>| v.map_or("(absent)".to_string(), Value::to_string);
            out.push(format!("{path}: {} != {}", show(a), show(b)));
        }
        _ => {}
    }
}

/// Reads fixture `name` as `T` and checks that writing it back gives the same JSON: no
/// field of the stored object is dropped, renamed or reformatted by this release.
fn read_losslessly<T: DeserializeOwned + Serialize>(name: &str) -> T {
    let stored = fixture(name);
    let typed: T = serde_json::from_value(stored.clone())
        .unwrap_or_else(|e| panic!("this release cannot read {name}: {e}"));
    let written = serde_json::to_value(&typed).expect("serialises");
    let mut diff = Vec::new();
    differences("", Some(&stored), Some(&written), &mut diff);
    assert!(
        diff.is_empty(),
        "{name} (stored by 0.1.0) != what this release writes back after reading it (stored != written):\n  {}",
        diff.join("\n  ")
    );
    typed
}

fn lease(name: &str) -> Lease {
    read_losslessly::<Lease>(name)
}

#[test]
fn a_snowflake_idsequence_the_0_1_0_operator_left_reads_back_without_losing_a_field() {
    read_losslessly::<IdSequence>("idsequence-0.1.0.json");
}

#[test]
fn a_segment_idsequence_the_0_1_0_operator_left_reads_back_without_losing_a_field() {
    read_losslessly::<IdSequence>("idsequence-segment-0.1.0.json");
}

#[test]
fn the_spec_of_a_0_1_0_idsequence_validates_into_the_layout_its_status_reports() {
    let seq: IdSequence = read_losslessly("idsequence-0.1.0.json");
    assert_eq!(seq.spec.mode, Mode::Snowflake);
    let p = seq.spec.params().expect("a 0.1.0 spec still validates");
    let bits = (
        p.layout.timestamp_bits(),
        p.layout.datacenter_bits(),
        p.layout.worker_bits(),
        p.layout.sequence_bits(),
        p.layout.total_bits(),
    );
    assert_eq!(bits, (41, 0, 10, 12, 63));
    assert_eq!(p.timebase.unit(), TimeUnit::default());
    assert_eq!(p.timebase.epoch_unix_ms(), 1_735_689_600_000, "2025-01-01");
    assert_eq!((p.max_drift_ms, p.lease_duration_secs), (2000, 120));
    assert_eq!(seq.spec.segment_params(), Ok(None));
    // What the 0.1.0 operator computed from the same spec.
    let status = seq.status.as_ref().expect("status");
    assert_eq!(status.capacity, Some(p.layout.slot_count() as i64));
    assert_eq!(
        status.exhausts_at.as_deref(),
        Some(rfc3339(p.timebase.exhausts_at_ms(&p.layout)).as_str()),
        "the timestamp bits run out when 0.1.0 said they would"
    );
}

#[test]
fn the_segment_settings_of_a_0_1_0_idsequence_parse_into_the_same_blocks() {
    let seq: IdSequence = read_losslessly("idsequence-segment-0.1.0.json");
    let s = seq
        .spec
        .segment_params()
        .expect("a 0.1.0 segment spec still validates")
        .expect("segment mode");
    assert_eq!(
        (
            s.start,
            s.block_size,
            s.max_block_size,
            s.prefetch_percent,
            s.target_claim_interval_secs,
            s.strict
        ),
        (1, 500, 8000, 10, 60, false)
    );
    let segment = seq.status.and_then(|s| s.segment).expect("status.segment");
    assert_eq!(
        (
            segment.next,
            segment.blocks_claimed,
            segment.claims_per_minute,
            segment.observed_at.as_deref(),
            segment.claims_at_observed_at
        ),
        (
            Some(5001),
            Some(10),
            Some(2.5),
            Some("2026-11-24T08:02:24Z"),
            Some(10)
        )
    );
}

#[test]
fn the_conditions_a_0_1_0_operator_set_are_found_by_their_current_names() {
    let seq: IdSequence = read_losslessly("idsequence-0.1.0.json");
    let status = seq.status.as_ref();
    let expect = [
        (ConditionType::Ready, "True", Reason::Reconciled),
        (ConditionType::Exhausted, "False", Reason::SlotsAvailable),
        (ConditionType::Expiring, "False", Reason::TimestampBitsLast),
    ];
    for (type_, value, reason) in expect {
        let c = condition(status, type_)
            .unwrap_or_else(|| panic!("no {} condition found by its name", type_.as_str()));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            (value, reason.as_str())
        );
        assert_eq!(c.observed_generation, Some(1));
    }
    let segment: IdSequence = read_losslessly("idsequence-segment-0.1.0.json");
    let ready = condition(segment.status.as_ref(), ConditionType::Ready).expect("Ready");
    assert_eq!(ready.reason, Reason::CounterReady.as_str());
    let exhausted =
        condition(segment.status.as_ref(), ConditionType::Exhausted).expect("Exhausted");
    assert_eq!(exhausted.reason, Reason::ValuesLeft.as_str());
}

#[test]
fn a_slot_lease_0_1_0_assigned_and_renewed_parses_with_the_same_holder_and_fence() {
    let lease = lease("slot-lease-0.1.0.json");
    let parsed = SlotLease::parse(&lease).expect("a 0.1.0 slot lease parses");
    assert_eq!(parsed.name, "orders-slot-2");
    assert_eq!(parsed.slot, Slot(2));
    assert_eq!(parsed.holder.as_deref(), Some(HOLDER_UID));
    assert_eq!(parsed.holder_pod.as_deref(), Some("app-0"));
    assert_eq!(
        parsed.fence,
        Tick(59_817_760_000),
        "the fence 0.1.0 wrote is not read: a new holder of the slot could repeat its IDs"
    );
    assert_eq!(parsed.transitions, 1);
    assert_eq!(parsed.resource_version.as_deref(), Some("51873"));
    assert_eq!(parsed.released_at, None);
    assert_eq!(parsed.format, 1, "0.1.0 wrote no format: it is format 1");
    assert!(parsed.format <= LEASE_FORMAT);
    // Its holder, upgraded, may go on renewing it; the fence never goes down.
    let at = Utc
        .with_ymd_and_hms(2026, 11, 24, 8, 1, 20)
        .single()
        .expect("a time");
    let renewed = slot_lease::renew(&lease, HOLDER_UID, Tick(59_817_800_000), at)
        .expect("the holder renews a 0.1.0 lease");
    let renewed = SlotLease::parse(&renewed).expect("parses");
    assert_eq!(
        (renewed.fence, renewed.transitions),
        (Tick(59_817_800_000), 1)
    );
}

#[test]
fn a_slot_lease_its_0_1_0_sidecar_released_parses_as_free_with_the_lowered_fence() {
    let parsed = SlotLease::parse(&lease("slot-lease-released-0.1.0.json"))
        .expect("a released 0.1.0 slot lease parses");
    assert_eq!((parsed.slot, parsed.holder.as_deref()), (Slot(2), None));
    assert_eq!(parsed.holder_pod, None);
    assert_eq!(
        parsed.fence,
        Tick(59_817_641_234),
        "the fence 0.1.0 lowered on release is not read: a new holder of the slot could repeat its IDs"
    );
    assert_eq!(parsed.transitions, 1);
    assert_eq!(
        parsed.released_time(),
        Utc.with_ymd_and_hms(2026, 11, 24, 8, 0, 41).single()
    );
    assert_eq!(parsed.format, 1);
}

#[test]
fn a_segment_counter_0_1_0_wrote_parses_with_the_same_next_value_and_claims() {
    let lease = lease("segment-counter-0.1.0.json");
    let counter = Counter::parse(&lease).expect("a 0.1.0 counter parses");
    assert_eq!((counter.next, counter.claims), (5001, 10));
    assert_eq!(counter.resource_version.as_deref(), Some("49102"));
    assert_eq!(
        lease.metadata.name.as_deref(),
        Some(segment_counter::counter_name("invoices").as_str())
    );
    assert!(
        segment_counter::claimants(&lease).is_empty(),
        "0.1.0 wrote no claimants: the operator of this release must add them before sidecars under the Lease policy can claim"
    );
}
