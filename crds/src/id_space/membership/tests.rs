//! The membership's copy and the rules on it: rule 20 (one cluster, one member of a space)
//! and rule 21 (a re-created IdSpace refused).

use super::*;
use crate::id_space::tests::default_spec;
use crate::id_space::{JoinRequest, MemberId};
use crate::id_space::{MemberName, Registry, join};
use crate::layout::DatacenterId;

#[test]
fn rule21_a_re_created_idspace_is_refused_until_the_copys_uid_is_cleared() {
    assert_eq!(
        check_space_uid(None, "uid-2"),
        Ok(()),
        "a new copy takes the hub's"
    );
    assert_eq!(check_space_uid(Some("uid-1"), "uid-1"), Ok(()));
    let err = check_space_uid(Some("uid-1"), "uid-2")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("re-created") && err.contains("remove status.idSpaceUid"),
        "{err}"
    );
}

#[test]
fn the_copy_round_trips_through_the_membership_status() {
    let space = default_spec().space().unwrap();
    let id = MemberId::new("cluster-a").unwrap();
    let request = JoinRequest {
        id: id.clone(),
        name: MemberName::new("prod").unwrap(),
        sequence: *space.sequence(),
        datacenter: DatacenterId(0),
        used: vec![],
        now: Tick(1_000),
    };
    let registry = join(&space, &Registry::default(), &request)
        .unwrap()
        .registry;
    let (registry, _) = registry.claim(&space, &id, Tick(1_000)).unwrap();
    let (registry, _) = registry.claim(&space, &id, Tick(2_000)).unwrap();
    let copy = LocalRecord::from_view(&registry.view_of(&id).unwrap());
    let mut status = IdSpaceMembershipStatus {
        member_id: Some(id.to_string()),
        ..Default::default()
    };
    status.keep(&copy);
    assert_eq!(status.grants.len(), 2);
    assert_eq!(status.local_record(&space).unwrap(), copy);
    assert_eq!(status.member_id.as_deref(), Some("cluster-a"), "kept");
    assert_eq!(status.space(*space.sequence()), None, "not kept yet");
    status.keep_space(&space);
    assert_eq!(status.space(*space.sequence()), Some(Ok(space)));
}

#[test]
fn a_stored_grant_outside_the_space_or_with_its_bound_at_its_floor_is_refused() {
    let space = default_spec().space().unwrap();
    let grant = |block, floor, bound| GrantRecord {
        block,
        term: 1,
        floor,
        bound,
    };
    for bad in [grant(16, 0, 10), grant(0, 10, 10), grant(-1, 0, 10)] {
        let status = IdSpaceMembershipStatus {
            grants: vec![bad.clone()],
            ..Default::default()
        };
        let err = status.local_record(&space).unwrap_err();
        assert_eq!(err.block, bad.block);
        assert!(err.to_string().contains("remove status.grants"), "{err}");
    }
}

/// A membership `name` in `namespace` for `sequence`, joining `space` through `secret`,
/// created at `created`, whose copy names the IdSpace UID `uid`.
fn joining(
    (namespace, name, sequence): (&str, &str, &str),
    (space, secret, uid): (&str, &str, Option<&str>),
    created: &str,
) -> IdSpaceMembership {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": {"sequence": sequence, "memberName": "prod",
                 "space": {"namespace": "kubeflake-space", "name": space},
                 "hubSecret": secret},
        "status": {"idSpaceUid": uid},
    }))
    .unwrap()
}

/// `namespace/name` of a membership.
fn key(m: &IdSpaceMembership) -> String {
    use kube::ResourceExt;
    format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any())
}

/// `namespace/name` of the earlier membership `m` yields to, if any.
fn earlier(m: &IdSpaceMembership, all: &[&IdSpaceMembership]) -> Option<String> {
    m.earlier_of_same_space(all).map(key)
}

#[test]
fn rule20_the_earlier_membership_of_another_sequence_joining_the_same_space_keeps_it() {
    const T1: &str = "2026-11-30T10:00:00Z";
    const T2: &str = "2026-11-30T11:00:00Z";
    let first = joining(("shop", "orders", "orders"), ("ids", "hub", None), T1);
    let later = joining(("shop", "payments", "payments"), ("ids", "hub", None), T2);
    let all = [&first, &later];
    assert_eq!(earlier(&later, &all), Some(key(&first)));
    assert_eq!(earlier(&first, &all), None, "the earlier keeps it");

    // Two Secrets for one hub: the same IdSpace UID in both copies is the same space.
    let first = joining(
        ("shop", "orders", "orders"),
        ("ids", "hub-a", Some("u1")),
        T1,
    );
    let later = joining(("bank", "pay", "pay"), ("ids", "hub-b", Some("u1")), T2);
    assert_eq!(earlier(&later, &[&first, &later]), Some(key(&first)));

    // Same creation time: namespace, then name, decide, so both sides agree.
    let a = joining(("a", "x", "x"), ("ids", "hub", None), T1);
    let b = joining(("b", "x", "x"), ("ids", "hub", None), T1);
    assert_eq!(earlier(&b, &[&a, &b]), Some(key(&a)));
    assert_eq!(earlier(&a, &[&a, &b]), None);
}

#[test]
fn rule20_other_spaces_and_the_same_sequence_are_not_joined_twice() {
    const T1: &str = "2026-11-30T10:00:00Z";
    const T2: &str = "2026-11-30T11:00:00Z";
    let first = joining(("shop", "orders", "orders"), ("ids", "hub", Some("u1")), T1);
    for (case, later) in [
        (
            "another space on the same hub",
            joining(("shop", "pay", "pay"), ("other", "hub", Some("u2")), T2),
        ),
        (
            "the same space name through another hub's Secret, another UID",
            joining(("shop", "pay", "pay"), ("ids", "hub-b", Some("u2")), T2),
        ),
        (
            "a second membership of the same sequence (TwoMemberships says so)",
            joining(
                ("shop", "orders-2", "orders"),
                ("ids", "hub", Some("u1")),
                T2,
            ),
        ),
    ] {
        assert_eq!(earlier(&later, &[&first, &later]), None, "{case}");
    }
}
