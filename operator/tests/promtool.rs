//! `promtool check metrics` over the operator's `/metrics`, served by its HTTP endpoint
//! (`http::serve`), with no accepted finding, after figures from passes were recorded.

use std::io::{Read, Write};
use std::sync::Arc;

use kubeflake_operator::http::{Health, serve};
use kubeflake_operator::metrics::hub::{CallOutcome, Holding, Member, RangesHeld, WentBack};
use kubeflake_operator::metrics::{Metrics, SlotFigures};
use kubeflake_runtime::metrics::assert_promtool_clean;

#[test]
fn the_operators_metrics_pass_promtool() {
    let metrics = Metrics::new();
    metrics.set_slots(
        "shop",
        "orders",
        SlotFigures {
            assigned: 3,
            capacity: 4,
            waiting: 1,
            oldest_waiting_since_ms: Some(0),
        },
    );
    metrics.reconciles.with_label_values(&["ok"]).inc();
    metrics.reconcile_duration.observe(0.01);
    metrics.assignments.inc();
    metrics.pod_to_slot.observe(0.3);
    metrics.webhook_seconds.observe(0.002);
    // One membership of a shared ID space, with every family of the membership task set.
    let member = Member {
        namespace: "shop".into(),
        name: "orders".into(),
        space: "kubeflake-space-orders/orders".into(),
    };
    metrics.hub.joined(
        &member,
        Holding {
            blocks: 2,
            spare: 1,
            nearest_bound_ms: Some(4_000_000_000_000),
            tolerance_secs: 3600,
        },
    );
    metrics.hub.refused(&member, "HubUnreachable");
    metrics.hub.called(&member, CallOutcome::Ok, 0.02);
    metrics.hub.reclaimed(&member, 1);
    metrics.hub.went_back(&member, WentBack::Copy);
    // And one membership of a Segment space.
    let segment = Member {
        name: "invoices".into(),
        ..member.clone()
    };
    metrics.hub.segment_joined(&segment, 3600, 1250.5);
    metrics.hub.ranges_held(
        &segment,
        Some(RangesHeld {
            values_left: 1 << 24,
            spare: true,
        }),
    );
    metrics.hub.range_taken(&segment);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(serve(
        listener,
        Arc::new(Health::default()),
        Arc::new(metrics),
    ));
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: operator\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        body.contains("kubeflake_operator_slots_assigned 3"),
        "{body}"
    );
    for family in [
        "kubeflake_operator_id_space_blocks_held",
        "kubeflake_operator_id_space_spare_blocks",
        "kubeflake_operator_id_space_nearest_bound_seconds",
        "kubeflake_operator_id_space_tolerance_seconds",
        "kubeflake_operator_id_space_ready_reason",
        "kubeflake_operator_id_space_hub_calls_total",
        "kubeflake_operator_id_space_hub_call_duration_seconds",
        "kubeflake_operator_id_space_reclaims_total",
        "kubeflake_operator_id_space_went_back_total",
    ] {
        assert!(
            body.lines()
                .any(|l| l.starts_with(family) && l.contains(r#"membership="orders""#)),
            "no series of {family} to check:\n{body}"
        );
    }
    for family in [
        "kubeflake_operator_id_space_segment_values_left",
        "kubeflake_operator_id_space_segment_spare_ranges",
        "kubeflake_operator_id_space_segment_claim_rate",
        "kubeflake_operator_id_space_segment_ranges_taken_total",
    ] {
        assert!(
            body.lines()
                .any(|l| l.starts_with(family) && l.contains(r#"membership="invoices""#)),
            "no series of {family} to check:\n{body}"
        );
    }
    assert_promtool_clean(body, "the operator's /metrics");
}
