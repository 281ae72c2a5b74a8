//! The sequences' NetworkPolicies against the scripted fake API server: what the operator
//! creates, that it keeps only its own (by label and controller owner), that a foreign
//! same-named policy is never adopted and is reported once, and that nothing here stops a
//! pass.

use std::sync::Arc;

use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, store::Writer};
use kubeflake_crds::sequence::{IdSequenceSpec, SegmentSpec};
use serde_json::{Value, json};

use super::*;
use crate::index::{IndexWriter, index};
use crate::metrics::Metrics;
use kubeflake_runtime::fake_api::{FakeApi, failure};

const POLICIES: &str = "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies";
const POLICY: &str = "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/orders-kubeflake";

type Writers = (IndexWriter<Pod>, IndexWriter<Lease>, Writer<IdSequence>);

fn config(mode: Mode) -> Config {
    Config {
        mode,
        probe_port: 7071,
        oracle_port: 7072,
        probe_from: Vec::new(),
    }
}

fn context(api: &FakeApi, policies: Option<Config>) -> (Context, Writers) {
    let (pods, pod_writer) = index::<Pod>();
    let (leases, lease_writer) = index::<Lease>();
    let (sequences, sequence_writer) = reflector::store::<IdSequence>();
    let reporter = Reporter {
        controller: "kubeflake-operator".into(),
        instance: Some("test".into()),
    };
    let ctx = Context::new(
        api.client(),
        pods,
        leases,
        sequences,
        Arc::new(Metrics::new()),
        reporter,
    )
    .with_network_policies(policies.map(|c| Arc::new(SequencePolicies::new(c))));
    (ctx, (pod_writer, lease_writer, sequence_writer))
}

fn sequence(strict: Option<bool>) -> IdSequence {
    let spec = match strict {
        None => IdSequenceSpec::default(),
        Some(strict) => IdSequenceSpec {
            mode: SequenceMode::Segment,
            segment: Some(SegmentSpec {
                strict,
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    let mut seq = IdSequence::new("orders", spec);
    seq.metadata.namespace = Some("shop".into());
    seq.metadata.uid = Some("seq-uid".into());
    seq
}

/// The policy as the API server returns it: what the operator would create, stored.
fn stored(seq: &IdSequence, mode: Mode) -> Value {
    let mut policy = serde_json::to_value(desired(seq, &config(mode))).unwrap();
    policy["metadata"]["resourceVersion"] = json!("7");
    policy["metadata"]["uid"] = json!("policy-uid");
    policy
}

fn warnings(api: &FakeApi) -> usize {
    api.seen()
        .iter()
        .filter(|s| s.path.contains("/events") && s.body["reason"] == FOREIGN_REASON)
        .count()
}

fn counted(ctx: &Context, outcome: &str) -> u64 {
    ctx.metrics
        .network_policies
        .with_label_values(&[outcome])
        .get()
}

/// `(protocol, port, endPort)` of a rule's ports.
fn ports(rule: &Value) -> Vec<(String, Value, Value)> {
    rule["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["protocol"].as_str().unwrap().to_string(),
                p["port"].clone(),
                p["endPort"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_sequence_gets_a_policy_it_owns_that_selects_its_pods_and_leaves_the_app_ports_open() {
    let api = FakeApi::new()
        .expect(
            Method::GET,
            POLICY,
            404,
            failure(404, "NotFound", "not found"),
        )
        .expect(Method::POST, POLICIES, 201, json!({}));
    let (ctx, _w) = context(&api, Some(config(Mode::AllowOtherPorts)));
    assert_eq!(keep(&sequence(None), &ctx).await, Some(Outcome::Created));
    api.verify();
    let made = &api.requests(&Method::POST, POLICIES)[0].body;
    assert_eq!(made["metadata"]["name"], "orders-kubeflake");
    assert_eq!(made["metadata"]["labels"][POLICY_LABEL], "orders");
    let owner = &made["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["uid"], &owner["controller"]),
        (&json!("IdSequence"), &json!("seq-uid"), &json!(true))
    );
    assert_eq!(
        made["spec"]["podSelector"],
        json!({"matchLabels": {"kubeflake.io/sequence": "orders"}})
    );
    assert_eq!(made["spec"]["policyTypes"], json!(["Ingress"]));
    let rules = made["spec"]["ingress"].as_array().unwrap();
    // Not strict: no oracle rule; the probe port from anywhere; every other port.
    assert_eq!(rules.len(), 2, "{rules:#?}");
    assert_eq!(rules[0]["from"], Value::Null);
    assert_eq!(ports(&rules[0]), [("TCP".into(), json!(7071), Value::Null)]);
    assert_eq!(rules[1]["from"], Value::Null);
    assert_eq!(
        ports(&rules[1]),
        [
            ("TCP".into(), json!(1), json!(7070)),
            ("TCP".into(), json!(7073), json!(65535)),
            ("UDP".into(), Value::Null, Value::Null),
            ("SCTP".into(), Value::Null, Value::Null),
        ],
        "the oracle port must not be open to everyone through the app's ports"
    );
    assert_eq!(counted(&ctx, "created"), 1);
}

#[test]
fn a_strict_sequences_oracle_port_is_open_only_to_the_sequences_own_pods() {
    let mut only_ours = config(Mode::KubeflakePortsOnly);
    let monitoring: NetworkPolicyPeer = serde_json::from_value(json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }))
    .unwrap();
    only_ours.probe_from = vec![monitoring.clone()];
    let policy = serde_json::to_value(desired(&sequence(Some(true)), &only_ours)).unwrap();
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "only kubeflake's two ports: {rules:#?}");
    assert_eq!(
        rules[0]["from"],
        json!([{"podSelector": {"matchLabels": {"kubeflake.io/sequence": "orders"}}}])
    );
    assert_eq!(ports(&rules[0]), [("TCP".into(), json!(7072), Value::Null)]);
    assert_eq!(
        rules[1]["from"],
        serde_json::to_value(vec![monitoring]).unwrap()
    );
    assert_eq!(ports(&rules[1]), [("TCP".into(), json!(7071), Value::Null)]);
    // A segment sequence that is not strict has no oracle: no rule for its port.
    let plain = serde_json::to_value(desired(&sequence(Some(false)), &only_ours)).unwrap();
    assert_eq!(plain["spec"]["ingress"].as_array().unwrap().len(), 1);
}

#[test]
fn the_other_ports_are_every_tcp_port_around_the_sidecars_whatever_their_numbers() {
    let spans = |holes: &[u16]| -> Vec<(i32, Option<i32>)> {
        tcp_around(holes)
            .into_iter()
            .map(|p| match p.port {
                Some(IntOrString::Int(n)) => (n, p.end_port),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(spans(&[7072, 7071]), [(1, Some(7070)), (7073, Some(65535))]);
    assert_eq!(spans(&[1, 65535]), [(2, Some(65534))]);
    assert_eq!(
        spans(&[80, 82]),
        [(1, Some(79)), (81, None), (83, Some(65535))]
    );
    assert_eq!(spans(&[]), [(1, Some(65535))]);
}

#[tokio::test]
async fn rule16_a_same_named_policy_kubeflake_did_not_make_is_never_adopted_and_reported_once() {
    let seq = sequence(Some(true));
    let mut unlabelled = stored(&seq, Mode::AllowOtherPorts);
    unlabelled["metadata"]["labels"] = json!({"team": "shop"});
    unlabelled["spec"]["ingress"] = json!([{}]);
    let api = FakeApi::new().always(Method::GET, POLICY, 200, unlabelled);
    let (ctx, _w) = context(&api, Some(config(Mode::AllowOtherPorts)));
    for _ in 0..2 {
        assert_eq!(keep(&seq, &ctx).await, Some(Outcome::Foreign));
    }
    api.verify();
    assert!(
        api.seen()
            .iter()
            .all(|s| s.method == Method::GET || s.path.contains("/events")),
        "a foreign policy was written: {:#?}",
        api.seen()
    );
    assert_eq!(warnings(&api), 1, "reported once over two passes");
    let note = api
        .seen()
        .into_iter()
        .find(|s| s.body["reason"] == FOREIGN_REASON)
        .map(|s| s.body["note"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    for part in [
        "NetworkPolicy orders-kubeflake",
        "not made by kubeflake",
        "no kubeflake.io/network-policy label",
        "kubectl delete networkpolicy -n shop orders-kubeflake",
    ] {
        assert!(note.contains(part), "{part:?} missing: {note}");
    }
    assert_eq!(counted(&ctx, "foreign"), 1);
}

#[tokio::test]
async fn rule16_a_labelled_policy_another_owner_controls_is_foreign_too() {
    let seq = sequence(None);
    let mut other = stored(&seq, Mode::AllowOtherPorts);
    other["metadata"]["ownerReferences"][0]["uid"] = json!("another-sequence-uid");
    let api = FakeApi::new().always(Method::GET, POLICY, 200, other);
    let (ctx, _w) = context(&api, Some(config(Mode::AllowOtherPorts)));
    assert_eq!(keep(&seq, &ctx).await, Some(Outcome::Foreign));
    api.verify();
    assert_eq!(warnings(&api), 1);
}

#[tokio::test]
async fn an_own_policy_that_differs_is_replaced_with_the_version_read_and_an_equal_one_left_alone()
{
    let seq = sequence(Some(true));
    // Made in the other mode: every other port open. Now only kubeflake's are wanted.
    let api = FakeApi::new()
        .expect(
            Method::GET,
            POLICY,
            200,
            stored(&seq, Mode::AllowOtherPorts),
        )
        .expect(Method::PUT, POLICY, 200, json!({}));
    let (ctx, _w) = context(&api, Some(config(Mode::KubeflakePortsOnly)));
    assert_eq!(keep(&seq, &ctx).await, Some(Outcome::Updated));
    api.verify();
    let put = &api.requests(&Method::PUT, POLICY)[0].body;
    assert_eq!(
        put["metadata"]["resourceVersion"], "7",
        "a compare-and-swap"
    );
    assert_eq!(put["metadata"]["uid"], "policy-uid");
    assert_eq!(put["spec"]["ingress"].as_array().unwrap().len(), 2);

    let api = FakeApi::new().expect(
        Method::GET,
        POLICY,
        200,
        stored(&seq, Mode::KubeflakePortsOnly),
    );
    let (ctx, _w) = context(&api, Some(config(Mode::KubeflakePortsOnly)));
    assert_eq!(keep(&seq, &ctx).await, Some(Outcome::Unchanged));
    api.verify();
}

#[tokio::test]
async fn a_refused_read_or_a_lost_race_is_counted_and_never_fails_the_pass() {
    let seq = sequence(None);
    let api = FakeApi::new().expect(
        Method::GET,
        POLICY,
        403,
        failure(403, "Forbidden", "networkpolicies is forbidden"),
    );
    let (ctx, _w) = context(&api, Some(config(Mode::AllowOtherPorts)));
    assert_eq!(keep(&seq, &ctx).await, Some(Outcome::Error));
    api.verify();
    assert_eq!(counted(&ctx, "error"), 1);

    let api = FakeApi::new()
        .expect(
            Method::GET,
            POLICY,
            404,
            failure(404, "NotFound", "not found"),
        )
        .expect(
            Method::POST,
            POLICIES,
            409,
            failure(409, "AlreadyExists", "exists"),
        );
    let (ctx, _w) = context(&api, Some(config(Mode::AllowOtherPorts)));
    assert_eq!(keep(&seq, &ctx).await, Some(Outcome::Conflict));
    api.verify();
}

#[tokio::test]
async fn without_the_flag_the_operator_sends_no_networkpolicy_request() {
    let api = FakeApi::new();
    let (ctx, _w) = context(&api, None);
    assert_eq!(keep(&sequence(Some(true)), &ctx).await, None);
    api.verify();
    assert!(api.seen().is_empty());
}
