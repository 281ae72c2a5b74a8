use std::collections::BTreeMap;

use chrono::TimeZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kubeflake_crds::sequence::{IdSequenceSpec, IdSequenceStatus};

use super::*;
use crate::check::model::Mark;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// shop/orders as the operator reports a healthy one: Ready, 3 of 1024 slots held,
/// 69 years of timestamp bits.
fn healthy() -> IdSequence {
    let mut seq = IdSequence::new("orders", IdSequenceSpec::default());
    seq.metadata.namespace = Some("shop".into());
    seq.status = Some(IdSequenceStatus {
        conditions: vec![
            cond("Ready", "True", "Reconciled", "slots assigned"),
            cond("Exhausted", "False", "SlotsAvailable", "1021 slots free"),
        ],
        capacity: Some(1024),
        assigned: Some(3),
        exhausts_at: Some("2094-09-07T15:47:35.551Z".into()),
        ..IdSequenceStatus::default()
    });
    seq
}

fn marks(findings: &[Finding]) -> Vec<(String, Mark)> {
    findings.iter().map(|f| (f.check.clone(), f.mark)).collect()
}

fn find<'a>(findings: &'a [Finding], check: &str) -> &'a Finding {
    findings.iter().find(|f| f.check == check).unwrap()
}

#[test]
fn a_healthy_sequence_is_ready_with_slots_free_nobody_waiting_and_decades_left() {
    let findings = judge_sequence(&healthy(), &[], now());
    assert_eq!(
        marks(&findings),
        [
            ("ready".to_string(), Mark::Ok),
            ("slots".to_string(), Mark::Ok),
            ("waiting pods".to_string(), Mark::Ok),
            ("lifetime".to_string(), Mark::Ok),
        ]
    );
    assert!(findings.iter().all(|f| f.group == "sequence shop/orders"));
    assert_eq!(find(&findings, "slots").detail, "1021 of 1024 free");
}

#[test]
fn a_sequence_not_ready_fails_with_the_operator_s_reason_and_message() {
    let mut seq = healthy();
    seq.status.as_mut().unwrap().conditions[0] = cond(
        "Ready",
        "False",
        "LeasePolicyMissing",
        "the Lease policy is missing",
    );
    let ready = judge_sequence(&seq, &[], now()).remove(0);
    assert_eq!(ready.mark, Mark::Fail);
    assert_eq!(
        ready.detail,
        "not Ready (LeasePolicyMissing): the Lease policy is missing"
    );
    assert!(ready.hint.unwrap().contains("kubeflakeleasepolicymissing"));
    seq.status = None;
    assert_eq!(judge_sequence(&seq, &[], now())[0].mark, Mark::Warn);
}

#[test]
fn an_exhausted_sequence_fails_and_one_80_percent_held_warns() {
    let mut seq = healthy();
    let status = seq.status.as_mut().unwrap();
    status.assigned = Some(1024);
    status.conditions[1] = cond("Exhausted", "True", "PodsWaiting", "2 pods wait for a slot");
    let slots = find(&judge_sequence(&seq, &[], now()), "slots").clone();
    assert_eq!(slots.mark, Mark::Fail);
    assert_eq!(
        slots.detail,
        "0 of 1024 free; exhausted: 2 pods wait for a slot"
    );
    assert!(
        slots
            .hint
            .unwrap()
            .contains("kubectl kubeflake slots orders -n shop")
    );
    let mut busy = healthy();
    busy.status.as_mut().unwrap().assigned = Some(820);
    assert_eq!(
        find(&judge_sequence(&busy, &[], now()), "slots").mark,
        Mark::Warn
    );
    busy.status.as_mut().unwrap().assigned = Some(819);
    assert_eq!(
        find(&judge_sequence(&busy, &[], now()), "slots").mark,
        Mark::Ok
    );
}

#[test]
fn waiting_pods_are_named_with_how_long_they_waited() {
    let waiting = vec![WaitingPod {
        pod: "app-7".into(),
        uid: "u7".into(),
        node: None,
        created: None,
        waiting_seconds: Some(42),
    }];
    let f = find(&judge_sequence(&healthy(), &waiting, now()), "waiting pods").clone();
    assert_eq!(f.mark, Mark::Warn);
    assert_eq!(f.detail, "1 waiting for a slot: app-7 (42s)");
    assert!(f.hint.unwrap().contains("kubeflakepodswaitingforslot"));
}

#[test]
fn timestamp_bits_run_out_within_a_year_warn_and_past_their_end_fail() {
    let mut seq = healthy();
    seq.status.as_mut().unwrap().exhausts_at = Some("2027-03-01T00:00:00Z".into());
    let soon = find(&judge_sequence(&seq, &[], now()), "lifetime").clone();
    assert_eq!(soon.mark, Mark::Warn);
    assert!(soon.detail.contains("in 91 days"), "{}", soon.detail);
    seq.status.as_mut().unwrap().exhausts_at = Some("2026-11-01T00:00:00Z".into());
    assert_eq!(
        find(&judge_sequence(&seq, &[], now()), "lifetime").mark,
        Mark::Fail
    );
}

#[test]
fn foreign_leases_are_shown_only_while_the_condition_is_true() {
    let mut seq = healthy();
    seq.status.as_mut().unwrap().conditions.push(cond(
        "ForeignLeases",
        "True",
        "ForeignLease",
        "lease orders-slot-3 was not made by kubeflake",
    ));
    let f = find(&judge_sequence(&seq, &[], now()), "foreign leases").clone();
    assert_eq!(f.mark, Mark::Warn);
    assert!(f.detail.contains("orders-slot-3"));
    seq.status.as_mut().unwrap().conditions[2].status = "False".into();
    assert!(
        judge_sequence(&seq, &[], now())
            .iter()
            .all(|f| f.check != "foreign leases")
    );
}

#[test]
fn a_segment_sequence_is_judged_by_its_counter_not_by_slots() {
    let mut seq = healthy();
    seq.spec.mode = Mode::Segment;
    seq.status.as_mut().unwrap().conditions[1] = cond(
        "Exhausted",
        "True",
        "CounterExhausted",
        "the counter reached 2^63-1",
    );
    let checks = marks(&judge_sequence(&seq, &[], now()));
    assert_eq!(
        checks,
        [
            ("ready".to_string(), Mark::Ok),
            ("counter".to_string(), Mark::Fail)
        ]
    );
}

fn pod(name: &str, injected: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            annotations: injected
                .map(|v| BTreeMap::from([(INJECTED_ANNOTATION.to_string(), v.to_string())])),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

#[test]
fn sidecars_of_this_release_and_one_release_either_side_are_supported() {
    assert!(supported("0.2.0", "0.2.0"));
    assert!(supported("0.2.3", "0.2.0"));
    assert!(supported("0.1.0", "0.2.0"));
    assert!(supported("0.3.0-rc.1", "0.2.0"));
    assert!(!supported("0.0.9", "0.2.0"));
    assert!(!supported("1.2.0", "0.2.0"));
    assert!(!supported("dev", "0.2.0"));
}

#[test]
fn pods_with_a_sidecar_outside_the_skew_policy_fail_and_are_named() {
    let pods = [
        pod("a", Some("0.2.0")),
        pod("b", Some("0.1.0")),
        pod("c", None),
    ];
    let fine = judge_sidecar_versions(&pods, "0.2.0");
    assert_eq!(fine.mark, Mark::Ok);
    assert_eq!(fine.detail, "2 injected pods within one release of 0.2.0");
    let old = [pod("a", Some("0.2.0")), pod("legacy", Some("0.0.1"))];
    let f = judge_sidecar_versions(&old, "0.2.0");
    assert_eq!(f.mark, Mark::Fail);
    assert!(f.detail.contains("1 of 2 injected pods"), "{}", f.detail);
    assert!(f.detail.contains("shop/legacy (0.0.1)"), "{}", f.detail);
    assert!(f.hint.unwrap().contains("rollout restart"));
}
