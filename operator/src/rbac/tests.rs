//! Tests of [`super`].
use std::time::Duration;

use super::*;
use crate::http::Health;
use crate::metrics::Metrics;
use http::Method;
use kubeflake_runtime::fake_api::{FakeApi, failure};

/// A watch the operator may not make (403) must not leave the binding keeper stuck
/// in silence: each failure is counted and logged, retried with back-off.
#[tokio::test]
async fn a_forbidden_watch_is_counted_and_retried_with_back_off_not_swallowed() {
    let forbidden = failure(403, "Forbidden", "rolebindings is forbidden");
    let api = FakeApi::new()
        .always(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/rolebindings",
            403,
            forbidden.clone(),
        )
        .always(
            Method::GET,
            "/apis/kubeflake.io/v1alpha1/idsequences",
            403,
            forbidden.clone(),
        )
        .always(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/roles",
            403,
            forbidden,
        );
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    // The controller's pod cache; its writer lives on (a dropped writer ends the keeper).
    let (pods, _pod_writer) = kube::runtime::reflector::store::<Pod>();
    let keeper = keep_sidecar_bindings(
        api.client(),
        None,
        "sidecar".into(),
        pods,
        metrics.clone(),
        health.clone(),
    );
    let _ = tokio::time::timeout(Duration::from_millis(1500), keeper).await;
    api.verify();
    let rendered = metrics.render();
    let errors: f64 = rendered
        .lines()
        .find_map(|l| {
            l.strip_prefix("kubeflake_operator_watch_errors_total{watch=\"rbac_rolebindings\"} ")
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(errors >= 2.0, "watch errors not counted: {rendered}");
    let lists = api
        .requests(
            &Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/rolebindings",
        )
        .len();
    assert!(
        (2..=12).contains(&lists),
        "retried, but with back-off: {lists} lists in 1.5 s"
    );
    let failing = health.failing_watches();
    let why = failing
        .get("rbac_rolebindings")
        .expect("/readyz says which watch fails");
    assert!(why.contains("forbidden"), "and why: {why}");
}

fn owner() -> Owner {
    Owner {
        name: "sidecar".into(),
        uid: "role-uid".into(),
    }
}

fn sequence(ns: &str, name: &str, spec: serde_json::Value) -> Arc<IdSequence> {
    let mut seq = IdSequence::new(name, serde_json::from_value(spec).expect("a spec"));
    seq.metadata.namespace = Some(ns.into());
    Arc::new(seq)
}

fn snowflake(ns: &str, name: &str, worker_bits: u8) -> Arc<IdSequence> {
    sequence(
        ns,
        name,
        serde_json::json!({"layout": {"timestampBits": 41, "workerBits": worker_bits, "sequenceBits": 22 - worker_bits}}),
    )
}

fn pod(ns: &str, sequence: Option<&str>, account: Option<&str>) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": ns,
                         "labels": sequence.map(|s| serde_json::json!({SEQUENCE_LABEL: s})).unwrap_or_default()},
            "spec": {"serviceAccountName": account, "containers": []},
        }))
        .expect("a pod"),
    )
}

fn needs_of(accounts: &[&str]) -> Needs {
    Needs {
        sequences: ["orders".to_string()].into(),
        leases: Some(["orders-slot-0".to_string(), "orders-slot-1".to_string()].into()),
        accounts: accounts.iter().map(|a| a.to_string()).collect(),
    }
}

/// The Role and binding as the operator would have written them for `need`.
fn in_place(ns: &str, need: &Needs) -> Vec<Observed> {
    let observed = |content| Observed {
        namespace: ns.into(),
        uid: format!("uid-{ns}"),
        version: "7".into(),
        owner_uid: Some("role-uid".into()),
        content,
    };
    vec![
        observed(Content::Rules(rules(need))),
        observed(Content::Binding {
            subjects: binding(ns, &need.accounts, &owner())
                .subjects
                .unwrap_or_default(),
            refers_to_role: true,
        }),
    ]
}

/// Deletes of the Role and the binding of `ns` (as [`in_place`] names their uids).
fn both_deleted(ns: &str) -> Vec<Change> {
    [Object::Role, Object::Binding]
        .map(|object| Change::Delete {
            namespace: ns.into(),
            object,
            uid: format!("uid-{ns}"),
        })
        .to_vec()
}

fn only(ns: &str, need: Needs) -> BTreeMap<String, Needs> {
    BTreeMap::from([(ns.to_string(), need)])
}

#[test]
fn a_namespace_needs_the_leases_of_its_sequences_by_name_and_the_accounts_of_its_labelled_pods() {
    let all = needs(
        &[
            snowflake("shop", "orders", 2),
            sequence("shop", "invoices", serde_json::json!({"mode": "Segment"})),
        ],
        &[
            pod("shop", Some("orders"), Some("web")),
            pod("shop", Some("invoices"), None),
            pod("shop", None, Some("unlabelled-app")),
            pod("elsewhere", Some("orders"), Some("other")),
        ],
    );
    assert_eq!(
        all.keys().collect::<Vec<_>>(),
        ["shop"],
        "only namespaces with sequences"
    );
    let shop = &all["shop"];
    let leases: Vec<&str> = shop.leases.iter().flatten().map(String::as_str).collect();
    assert_eq!(
        leases,
        [
            "invoices-segment-counter",
            "orders-slot-0",
            "orders-slot-1",
            "orders-slot-2",
            "orders-slot-3"
        ]
    );
    assert_eq!(
        shop.accounts.iter().map(String::as_str).collect::<Vec<_>>(),
        ["default", "web"],
        "a pod without serviceAccountName runs as default; unlabelled pods get nothing"
    );
}

/// Issue 24: a strict sequence's sidecars take, renew and release its oracle Lease
/// (update, patch), which the operator creates; a non-strict one's never see it.
#[test]
fn rule14_a_strict_sequences_sidecars_may_write_its_oracle_lease_by_name_and_create_nothing() {
    let all = needs(
        &[
            sequence(
                "shop",
                "tokens",
                serde_json::json!({"mode": "Segment", "segment": {"strict": true}}),
            ),
            sequence("shop", "invoices", serde_json::json!({"mode": "Segment"})),
        ],
        &[pod("shop", Some("tokens"), Some("web"))],
    );
    let leases: Vec<&str> = all["shop"]
        .leases
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert_eq!(
        leases,
        [
            "invoices-segment-counter",
            "tokens-segment-counter",
            "tokens-strict-oracle"
        ],
        "the oracle Lease of the strict sequence only"
    );
    let rules = rules(&all["shop"]);
    let writes = rules
        .iter()
        .find(|r| r.verbs.contains(&"update".to_string()))
        .expect("a write rule");
    assert_eq!(writes.verbs, ["update", "patch"]);
    assert!(
        writes
            .resource_names
            .iter()
            .flatten()
            .any(|n| n == "tokens-strict-oracle"),
        "{writes:?}"
    );
    assert!(
        !rules.iter().any(
            |r| r.resources.as_deref() == Some(&["leases".to_string()][..])
                && r.verbs.iter().any(|v| v == "create" || v == "delete")
        ),
        "sidecars never create or delete a Lease"
    );
}

#[test]
fn a_namespace_with_more_slot_leases_than_a_role_can_name_gets_lease_writes_without_names() {
    let all = needs(&[snowflake("shop", "wide", 14)], &[]);
    const { assert!(1 << 14 > MAX_NAMED_LEASES) };
    assert_eq!(all["shop"].leases, None);
    let writes = &rules(&all["shop"])[1];
    assert_eq!(writes.resource_names, None);
}

#[test]
fn the_role_lets_sidecars_write_only_their_sequences_leases_and_read_only_their_sequences() {
    let r = role("shop", &needs_of(&["web"]), &owner());
    let rules = r.rules.expect("rules");
    let verbs: Vec<&str> = rules
        .iter()
        .flat_map(|r| r.verbs.iter().map(String::as_str))
        .collect();
    let creates: Vec<_> = rules
        .iter()
        .filter(|r| r.verbs.iter().any(|v| v == "create"))
        .flat_map(|r| r.api_groups.clone().unwrap_or_default())
        .collect();
    assert_eq!(creates, ["events.k8s.io"], "nothing is created but Events");
    assert!(!verbs.contains(&"delete"), "no deletes");
    let writes = rules
        .iter()
        .find(|r| r.verbs.contains(&"update".to_string()))
        .expect("a write rule");
    assert_eq!(
        writes.resource_names.as_deref(),
        Some(&["orders-slot-0".to_string(), "orders-slot-1".to_string()][..])
    );
    let reads = rules
        .iter()
        .find(|r| r.resources.as_deref() == Some(&["idsequences".to_string()][..]))
        .expect("a sequence rule");
    assert_eq!(reads.verbs, ["get"]);
    assert_eq!(
        reads.resource_names.as_deref(),
        Some(&["orders".to_string()][..])
    );
}

#[test]
fn the_binding_names_only_the_service_accounts_of_labelled_pods() {
    let b = binding(
        "shop",
        &["web".to_string(), "worker".to_string()].into(),
        &owner(),
    );
    let subjects = b.subjects.expect("subjects");
    assert_eq!(
        subjects
            .iter()
            .map(|s| (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("ServiceAccount", "web", Some("shop")),
            ("ServiceAccount", "worker", Some("shop"))
        ]
    );
    assert_eq!(
        (b.role_ref.kind.as_str(), b.role_ref.name.as_str()),
        ("Role", BINDING)
    );
}

#[test]
fn both_are_owned_by_the_cluster_role_so_the_garbage_collector_removes_them_with_it() {
    let r = role("shop", &needs_of(&[]), &owner());
    let b = binding("shop", &BTreeSet::new(), &owner());
    for owners in [r.metadata.owner_references, b.metadata.owner_references] {
        let owners = owners.expect("owner references");
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].api_version, "rbac.authorization.k8s.io/v1");
        assert_eq!(owners[0].kind, "ClusterRole");
        assert_eq!(owners[0].name, "sidecar");
        assert_eq!(owners[0].uid, "role-uid");
        assert_eq!(owners[0].block_owner_deletion, None);
    }
}

#[test]
fn every_namespace_with_a_sequence_gets_a_role_and_a_binding() {
    let changes = plan(&only("b", needs_of(&["web"])), &[], Some(&owner()));
    assert_eq!(
        changes,
        vec![
            Change::Create {
                namespace: "b".into(),
                object: Object::Role
            },
            Change::Create {
                namespace: "b".into(),
                object: Object::Binding
            },
        ]
    );
}

#[test]
fn when_all_is_in_place_nothing_is_written() {
    let need = needs_of(&["web"]);
    assert!(
        plan(
            &only("a", need.clone()),
            &in_place("a", &need),
            Some(&owner())
        )
        .is_empty()
    );
}

#[test]
fn a_new_service_account_or_sequence_updates_the_binding_or_role_in_place() {
    let before = needs_of(&["web"]);
    let observed = in_place("a", &before);
    let new_account = plan(
        &only("a", needs_of(&["web", "batch"])),
        &observed,
        Some(&owner()),
    );
    assert_eq!(
        new_account,
        vec![Change::Update {
            namespace: "a".into(),
            object: Object::Binding,
            version: "7".into()
        }]
    );
    let mut more = before.clone();
    more.sequences.insert("invoices".into());
    let new_sequence = plan(&only("a", more), &observed, Some(&owner()));
    assert_eq!(
        new_sequence,
        vec![Change::Update {
            namespace: "a".into(),
            object: Object::Role,
            version: "7".into()
        }]
    );
}

#[test]
fn a_namespace_whose_last_sequence_is_gone_loses_both() {
    let observed = in_place("a", &needs_of(&["web"]));
    assert_eq!(
        plan(&BTreeMap::new(), &observed, Some(&owner())),
        both_deleted("a")
    );
}

#[test]
fn an_older_binding_of_the_cluster_role_to_the_namespace_group_is_deleted_then_created_anew() {
    let need = needs_of(&["web"]);
    let mut observed = in_place("a", &need);
    observed[1].content = Content::Binding {
        subjects: vec![],
        refers_to_role: false,
    };
    assert_eq!(
        plan(&only("a", need.clone()), &observed, Some(&owner())),
        vec![Change::Delete {
            namespace: "a".into(),
            object: Object::Binding,
            uid: "uid-a".into()
        }],
        "roleRef cannot be changed in place"
    );
    assert_eq!(
        plan(&only("a", need), &observed[..1], Some(&owner())),
        vec![Change::Create {
            namespace: "a".into(),
            object: Object::Binding
        }]
    );
}

#[test]
fn objects_not_owned_by_the_current_cluster_role_are_replaced_so_uninstall_removes_them() {
    let need = needs_of(&["web"]);
    for owner_uid in [None, Some("uid-of-a-deleted-role".to_string())] {
        let mut observed = in_place("a", &need);
        for o in &mut observed {
            o.owner_uid = owner_uid.clone();
        }
        assert_eq!(
            plan(&only("a", need.clone()), &observed, Some(&owner())),
            both_deleted("a"),
            "owner {owner_uid:?}"
        );
    }
}

#[test]
fn without_the_cluster_role_nothing_is_created_or_changed_and_unneeded_objects_still_go() {
    let need = needs_of(&["web"]);
    assert!(plan(&only("a", need.clone()), &[], None).is_empty());
    let mut stale = in_place("a", &needs_of(&["someone-else"]));
    for o in &mut stale {
        o.owner_uid = None;
    }
    assert!(
        plan(&only("a", need.clone()), &stale, None).is_empty(),
        "nothing is churned while the role cannot be read"
    );
    assert_eq!(plan(&BTreeMap::new(), &in_place("b", &need), None).len(), 2);
}
