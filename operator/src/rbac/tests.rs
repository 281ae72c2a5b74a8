//! Tests of [`super`].
use super::*;
use crate::fake_api::{FakeApi, failure};
use http::Method;

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
            forbidden,
        );
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let keeper = keep_sidecar_bindings(
        api.client(),
        None,
        "sidecar".into(),
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

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn role() -> Role {
    Role {
        name: "sidecar".into(),
        uid: "role-uid".into(),
    }
}

/// A binding of `role_name` in `ns`, owned by the current sidecar role.
fn bound(ns: &str, role_name: &str) -> Observed {
    Observed {
        namespace: ns.into(),
        uid: format!("uid-{ns}"),
        role: role_name.into(),
        owner_uid: Some("role-uid".into()),
    }
}

#[test]
fn every_namespace_with_a_sequence_gets_one_binding() {
    let changes = plan(
        &set(&["a", "b"]),
        &[bound("a", "sidecar")],
        "sidecar",
        Some(&role()),
    );
    assert_eq!(
        changes,
        vec![Change::Create {
            namespace: "b".into()
        }]
    );
}

#[test]
fn a_namespace_whose_last_sequence_is_gone_loses_its_binding() {
    let changes = plan(
        &set(&[]),
        &[bound("a", "sidecar")],
        "sidecar",
        Some(&role()),
    );
    assert_eq!(
        changes,
        vec![Change::Delete {
            namespace: "a".into(),
            uid: "uid-a".into()
        }]
    );
}

#[test]
fn a_binding_to_another_role_is_deleted_first_and_recreated_on_the_next_pass() {
    let changes = plan(
        &set(&["a"]),
        &[bound("a", "old-role")],
        "sidecar",
        Some(&role()),
    );
    assert_eq!(
        changes,
        vec![Change::Delete {
            namespace: "a".into(),
            uid: "uid-a".into()
        }]
    );
    assert_eq!(
        plan(&set(&["a"]), &[], "sidecar", Some(&role())),
        vec![Change::Create {
            namespace: "a".into()
        }]
    );
}

#[test]
fn a_binding_not_owned_by_the_current_role_is_replaced_so_uninstall_removes_it() {
    for owner in [None, Some("uid-of-a-deleted-role".to_string())] {
        let mut old = bound("a", "sidecar");
        old.owner_uid = owner.clone();
        assert_eq!(
            plan(&set(&["a"]), &[old], "sidecar", Some(&role())),
            vec![Change::Delete {
                namespace: "a".into(),
                uid: "uid-a".into()
            }],
            "owner {owner:?}"
        );
    }
}

#[test]
fn without_the_cluster_role_nothing_is_created_and_unneeded_bindings_still_go() {
    assert!(plan(&set(&["a"]), &[], "sidecar", None).is_empty());
    let mut unowned = bound("a", "sidecar");
    unowned.owner_uid = None;
    assert!(
        plan(&set(&["a"]), &[unowned], "sidecar", None).is_empty(),
        "a binding is not churned while the role cannot be read"
    );
    assert_eq!(
        plan(&set(&[]), &[bound("b", "sidecar")], "sidecar", None),
        vec![Change::Delete {
            namespace: "b".into(),
            uid: "uid-b".into()
        }]
    );
}

#[test]
fn when_all_is_in_place_nothing_is_written() {
    assert!(
        plan(
            &set(&["a"]),
            &[bound("a", "sidecar")],
            "sidecar",
            Some(&role())
        )
        .is_empty()
    );
}

#[test]
fn the_binding_grants_only_the_namespace_s_own_service_accounts() {
    let b = binding("shop", &role());
    let subjects = b.subjects.expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "Group");
    assert_eq!(subjects[0].name, "system:serviceaccounts:shop");
    assert_eq!(b.role_ref.kind, "ClusterRole");
    assert_eq!(b.role_ref.name, "sidecar");
    assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
}

#[test]
fn the_binding_is_owned_by_the_cluster_role_so_the_garbage_collector_removes_it_with_the_role() {
    let b = binding("shop", &role());
    let owners = b.metadata.owner_references.expect("owner references");
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].api_version, "rbac.authorization.k8s.io/v1");
    assert_eq!(owners[0].kind, "ClusterRole");
    assert_eq!(owners[0].name, "sidecar");
    assert_eq!(owners[0].uid, "role-uid");
    assert_eq!(owners[0].block_owner_deletion, None);
}
