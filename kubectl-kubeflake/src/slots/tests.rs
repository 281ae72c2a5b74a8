use super::*;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kubeflake_crds::sequence::IdSequenceSpec;
use kubeflake_crds::slot_lease::{FENCE_ANNOTATION, HOLDER_POD_ANNOTATION, lease_labels};
use std::collections::BTreeMap;

fn params(worker_bits: i32) -> SequenceParams {
    let mut spec = IdSequenceSpec::default();
    spec.layout.worker_bits = worker_bits;
    spec.layout.sequence_bits = 22 - worker_bits;
    spec.params().unwrap()
}

fn pod(name: &str, uid: &str, node: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_millisecond(1_767_225_600_000).unwrap(),
            )),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(str::to_string),
            ..Default::default()
        }),
        status: None,
    }
}

fn lease(slot: u32, holder: Option<(&str, &str)>, fence: u64) -> Lease {
    let mut annotations = BTreeMap::from([(FENCE_ANNOTATION.to_string(), fence.to_string())]);
    if let Some((_, name)) = holder {
        annotations.insert(HOLDER_POD_ANNOTATION.to_string(), name.to_string());
    }
    let renew =
        MicroTime(k8s_openapi::jiff::Timestamp::from_millisecond(1_767_225_660_000).unwrap());
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("orders", Slot(slot))),
            labels: Some(lease_labels("orders", Slot(slot), holder.map(|h| h.0))),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(|h| h.0.to_string()),
            renew_time: Some(renew.clone()),
            acquire_time: Some(renew),
            lease_transitions: Some(1),
            ..Default::default()
        }),
    }
}

#[test]
fn holders_are_joined_to_their_pods_and_nodes_and_pods_without_a_slot_wait() {
    let p = params(2);
    let pods = [
        pod("app-0", "u0", Some("node-a")),
        pod("app-1", "u1", None),
        pod("app-2", "u2", None),
    ];
    let leases = [
        lease(1, Some(("u0", "app-0")), 500),
        lease(0, Some(("u1", "app-1")), 0),
        lease(2, Some(("gone", "old-pod")), 7),
        lease(3, None, 9),
    ];
    let r = build(
        "orders",
        "shop",
        &p,
        &leases,
        &pods,
        false,
        1_767_225_700_000,
    );
    assert_eq!(r.capacity, 4);
    assert_eq!(r.held, 3);
    let by_slot: Vec<(u32, SlotStatus, Option<&str>, Option<&str>)> = r
        .slots
        .iter()
        .map(|s| (s.slot, s.status, s.holder_pod.as_deref(), s.node.as_deref()))
        .collect();
    assert_eq!(
        by_slot,
        vec![
            (0, SlotStatus::Held, Some("app-1"), None),
            (1, SlotStatus::Held, Some("app-0"), Some("node-a")),
            (2, SlotStatus::Orphaned, Some("old-pod"), None),
            (3, SlotStatus::Free, None, None),
        ]
    );
    assert_eq!(
        r.slots[1].fence_time,
        Some(rfc3339(p.timebase.start_of(Tick(500))))
    );
    assert_eq!(r.slots[0].fence_time, None, "fence 0 has no time");
    let waiting: Vec<&str> = r.waiting.iter().map(|w| w.pod.as_str()).collect();
    assert_eq!(waiting, vec!["app-2"]);
    let text = r.table();
    assert!(text.contains("4 slots, 3 held, 1 pod waiting"), "{text}");
    assert!(text.contains("Waiting for a slot:"), "{text}");
}

#[test]
fn waiting_pods_are_listed_oldest_first_with_when_they_started_waiting_and_for_how_long() {
    let p = params(1);
    let created_at = |name: &str, uid: &str, ms: i64| {
        let mut pod = pod(name, uid, Some("node-b"));
        pod.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_millisecond(ms).unwrap(),
        ));
        pod
    };
    let t0 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let pods = [
        pod("app-0", "u0", Some("node-a")),
        pod("app-1", "u1", Some("node-a")),
        created_at("app-3", "u3", t0 + 240_000),
        created_at("app-2", "u2", t0),
    ];
    let leases = [
        lease(0, Some(("u0", "app-0")), 0),
        lease(1, Some(("u1", "app-1")), 0),
    ];
    let now = t0 + 300_000;
    let r = build("orders", "shop", &p, &leases, &pods, false, now);
    let waiting: Vec<(&str, Option<&str>, Option<i64>)> = r
        .waiting
        .iter()
        .map(|w| (w.pod.as_str(), w.created.as_deref(), w.waiting_seconds))
        .collect();
    assert_eq!(
        waiting,
        vec![
            ("app-2", Some("2026-01-01T00:00:00.000Z"), Some(300)),
            ("app-3", Some("2026-01-01T00:04:00.000Z"), Some(60)),
        ]
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["waiting"][0]["waitingSeconds"], 300, "{json}");

    let text = r.table();
    assert!(text.contains("2 slots, 2 held, 2 pods waiting"), "{text}");
    let section = text
        .split("Waiting for a slot:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no waiting section in:\n{text}"));
    let rows: Vec<Vec<&str>> = section
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["POD", "NODE", "SINCE", "WAITING"],
            vec!["app-2", "node-b", "2026-01-01T00:00:00.000Z", "5m"],
            vec!["app-3", "node-b", "2026-01-01T00:04:00.000Z", "60s"],
        ]
    );
}

#[test]
fn a_waiting_pod_created_after_the_report_by_its_clock_has_waited_zero_seconds() {
    let r = build(
        "orders",
        "shop",
        &params(1),
        &[],
        &[pod("app-0", "u0", None)],
        false,
        1_767_225_600_000 - 5_000,
    );
    assert_eq!(r.waiting[0].waiting_seconds, Some(0));
}

#[test]
fn leaving_pods_do_not_wait_and_all_lists_unused_slots() {
    let p = params(2);
    let mut done = pod("done", "u9", None);
    done.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    let r = build("orders", "shop", &p, &[lease(2, None, 0)], &[done], true, 0);
    assert!(r.waiting.is_empty());
    let statuses: Vec<SlotStatus> = r.slots.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        vec![
            SlotStatus::Unused,
            SlotStatus::Unused,
            SlotStatus::Free,
            SlotStatus::Unused
        ]
    );
}

#[test]
fn a_garbled_lease_is_skipped_with_a_warning() {
    let mut bad = lease(1, None, 0);
    bad.metadata.labels = Some(BTreeMap::new());
    let r = build("orders", "shop", &params(2), &[bad], &[], false, 0);
    assert!(r.slots.is_empty());
    assert_eq!(r.warnings.len(), 1);
}

#[test]
fn a_segment_sequence_has_no_slots_nobody_waits_and_the_counter_is_shown() {
    let seq: IdSequence = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
        "metadata": {"name": "invoices"},
        "spec": {"mode": "Segment", "segment": {"blockSize": 500, "maxBlockSize": 8000}},
        "status": {"segment": {"next": 4001, "claimsPerMinute": 2.5}},
    }))
    .unwrap();
    let params = seq.spec.segment_params().unwrap().unwrap();
    let mut counter = kubeflake_crds::segment_counter::new_counter("invoices", "shop", 1);
    counter = Counter {
        next: 5001,
        claims: 10,
        format: 1,
        resource_version: None,
        range: None,
    }
    .write_into(counter);
    let pods = [pod("app-0", "u0", None), pod("app-1", "u1", None)];
    let r = build_segment(&seq, "shop", &params, Some(&counter), &pods, 0);
    assert_eq!((r.mode, r.capacity, r.held), (Mode::Segment, 0, 0));
    assert!(r.slots.is_empty() && r.waiting.is_empty(), "{r:?}");
    let seg = r.segment.clone().unwrap();
    assert_eq!(seg.counter_lease, "invoices-segment-counter");
    assert_eq!(
        (seg.next, seg.blocks_claimed),
        (Some(5001), Some(10)),
        "the live counter, not the status"
    );
    assert_eq!(seg.claims_per_minute, Some(2.5));
    assert_eq!(
        (seg.block_size, seg.max_block_size, seg.pods),
        (500, 8000, 2)
    );
    let text = r.table();
    assert!(
        text.starts_with("idsequence shop/invoices is a Segment sequence: it has no worker slots"),
        "{text}"
    );
    assert!(text.contains("NEXT VALUE       5001"), "{text}");
    assert!(text.contains("500 (adaptive, up to 8000)"), "{text}");
    assert!(!text.contains("Waiting for a slot"), "{text}");

    let missing = build_segment(&seq, "shop", &params, None, &pods, 0);
    assert_eq!(missing.segment.unwrap().next, None);
    assert!(missing.warnings.is_empty());
    counter.metadata.annotations = None;
    let garbled = build_segment(&seq, "shop", &params, Some(&counter), &pods, 0);
    assert_eq!(garbled.warnings.len(), 1, "{:?}", garbled.warnings);
}

/// An object release 0.1.0 left in the API server (`crds/tests/fixtures`, serialised
/// by that release's own code), read as the plugin reads it from the cluster.
fn released_fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crds/tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "{} does not read as this release's type: {e}",
            path.display()
        )
    })
}

#[test]
fn the_slots_a_0_1_0_operator_and_sidecar_wrote_render_with_holder_node_and_fence() {
    use chrono::TimeZone;
    let seq: IdSequence = released_fixture("idsequence-0.1.0.json");
    let params = seq.spec.params().unwrap();
    let held: Lease = released_fixture("slot-lease-0.1.0.json");
    let pods = [pod(
        "app-0",
        "0b6f1c3e-2a9d-4e85-b7c0-6d1e4f2a9b37",
        Some("node-a"),
    )];
    let now = chrono::Utc
        .with_ymd_and_hms(2026, 11, 24, 8, 1, 0)
        .unwrap()
        .timestamp_millis();
    let r = build("orders", "shop", &params, &[held], &pods, false, now);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!((r.capacity, r.held), (1024, 1));
    let row = &r.slots[0];
    assert_eq!(
        (
            row.slot,
            row.status,
            row.holder_pod.as_deref(),
            row.node.as_deref()
        ),
        (2, SlotStatus::Held, Some("app-0"), Some("node-a"))
    );
    assert_eq!((row.fence, row.transitions), (59_817_760_000, 1));
    assert_eq!(
        row.fence_time.as_deref(),
        Some("2026-11-24T08:02:40.000Z"),
        "the renewal at 08:00:40 raised the fence one lease duration ahead"
    );
    assert_eq!(row.renew_time.as_deref(), Some("2026-11-24T08:00:40.000Z"));
    let text = r.table();
    assert!(
        text.starts_with("idsequence shop/orders: 1024 slots, 1 held, 0 pods waiting"),
        "{text}"
    );
    assert!(text.contains("2026-11-24T08:02:40.000Z"), "{text}");

    let released: Lease = released_fixture("slot-lease-released-0.1.0.json");
    let r = build("orders", "shop", &params, &[released], &[], false, now);
    let row = &r.slots[0];
    assert_eq!(
        (row.status, row.holder_pod.as_deref()),
        (SlotStatus::Free, None)
    );
    assert_eq!(
        row.released_at.as_deref(),
        Some("2026-11-24T08:00:41.000000Z")
    );
    assert!(r.waiting.is_empty() && r.warnings.is_empty(), "{r:?}");
}

#[test]
fn a_segment_sequence_and_counter_0_1_0_wrote_render_with_its_counter_and_claim_rate() {
    let seq: IdSequence = released_fixture("idsequence-segment-0.1.0.json");
    let params = seq.spec.segment_params().unwrap().unwrap();
    let counter: Lease = released_fixture("segment-counter-0.1.0.json");
    let r = build_segment(&seq, "shop", &params, Some(&counter), &[], 0);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let seg = r.segment.clone().unwrap();
    assert_eq!(
        (seg.next, seg.blocks_claimed, seg.claims_per_minute),
        (Some(5001), Some(10), Some(2.5))
    );
    assert_eq!((seg.block_size, seg.max_block_size), (500, 8000));
    let text = r.table();
    assert!(text.contains("NEXT VALUE       5001"), "{text}");
    assert!(text.contains("2.5"), "{text}");
}
