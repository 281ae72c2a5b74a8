//! Releasing a deleted membership's blocks (docs/design/2026-11-29-multicluster.md, rule 18:
//! a block changes hands only above its last bound): the pure decision, and the writes on
//! the hub and the membership against the scripted fake API server.

use http::Method;
use kubeflake_crds::id_space::membership::{
    IdSpaceMembership, IdSpaceMembershipSpec, IdSpaceMembershipStatus, SpaceRef,
};
use kubeflake_crds::id_space::{
    IdSpace, IdSpaceSpec, JoinRequest, MemberId, MemberName, Registry, Space, SpaceSequenceSpec,
    join,
};
use kubeflake_crds::layout::{DatacenterId, Tick};
use kubeflake_runtime::fake_api::{FakeApi, failure};
use serde_json::json;

use super::{FINALIZER, next_release, release_all, releases_here, set_finalizer};
use crate::hub::conditions::Reason;
use crate::hub::connect::Hub;

fn space() -> Space {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
        .space()
        .expect("test space")
}

fn id(n: u32) -> MemberId {
    MemberId::new(&format!("cluster-{n}")).expect("an ID")
}

/// Member 1 holding `blocks_of_1` blocks and member 2 one.
fn registry(blocks_of_1: usize) -> Registry {
    let space = space();
    let mut registry = Registry::default();
    for (n, blocks) in [(1, blocks_of_1), (2, 1)] {
        let request = JoinRequest {
            id: id(n),
            name: MemberName::new(&format!("m{n}")).expect("a name"),
            sequence: *space.sequence(),
            datacenter: DatacenterId(0),
            used: vec![],
            now: Tick(1_000),
        };
        registry = join(&space, &registry, &request).expect("joins").registry;
        for _ in 0..blocks {
            registry = registry
                .claim(&space, &id(n), Tick(1_000))
                .expect("claims")
                .0;
        }
    }
    registry
}

const HUB_SPACE: &str =
    "/apis/kubeflake.io/v1alpha1/namespaces/kubeflake-space-orders/idspaces/orders";
const MEMBERSHIP: &str =
    "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/orders-space";

fn idspace(registry: &Registry) -> serde_json::Value {
    let mut spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64);
    spec.registry = registry.to_record();
    let mut object = IdSpace::new("orders", spec);
    object.metadata.namespace = Some("kubeflake-space-orders".into());
    object.metadata.resource_version = Some("3".into());
    json!(object)
}

fn membership(made_by: Option<&str>, finalizer: bool) -> IdSpaceMembership {
    let mut m = IdSpaceMembership::new(
        "orders-space",
        IdSpaceMembershipSpec {
            sequence: "orders".into(),
            member_name: "m1".into(),
            space: SpaceRef {
                namespace: "kubeflake-space-orders".into(),
                name: "orders".into(),
            },
            hub_secret: "hub".into(),
        },
    );
    m.metadata.namespace = Some("shop".into());
    m.metadata.resource_version = Some("11".into());
    if finalizer {
        m.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    m.status = Some(IdSpaceMembershipStatus {
        member_id: made_by.map(String::from),
        ..Default::default()
    });
    m
}

#[test]
fn rule18_a_leaving_member_releases_each_of_its_blocks_with_the_floor_at_the_bound() {
    let start = registry(2);
    let held = start.view_of(&id(1)).expect("member").grants;
    assert_eq!(held.len(), 2);
    let mut now = start.clone();
    let mut writes = 0;
    while let Some(next) = next_release(&now, &id(1)).expect("released") {
        assert_eq!(
            next.revision(),
            now.revision() + 1,
            "one transition per write"
        );
        now = next;
        writes += 1;
        assert!(writes <= 2, "it stops once nothing is held");
    }
    assert_eq!(writes, 2);
    assert!(
        now.view_of(&id(1))
            .expect("still a member")
            .grants
            .is_empty()
    );
    for grant in held {
        assert!(
            now.block(grant.block).floor() >= grant.bound,
            "floor = bound"
        );
    }
    assert_eq!(
        now.view_of(&id(2)).expect("member").grants,
        start.view_of(&id(2)).expect("member").grants,
        "another member's blocks are untouched"
    );
    assert_eq!(
        next_release(&start, &id(9)).expect("nothing"),
        None,
        "a cluster the hub does not list has nothing to release"
    );
}

#[test]
fn rule18_only_a_copy_made_by_this_cluster_releases_blocks() {
    assert!(releases_here(&membership(Some("cluster-1"), true), &id(1)));
    assert!(!releases_here(&membership(Some("cluster-2"), true), &id(1)));
    assert!(!releases_here(&membership(None, true), &id(1)));
}

#[tokio::test]
async fn rule18_a_deleted_membership_releases_its_blocks_on_the_hub_one_write_each() {
    let start = registry(2);
    let once = next_release(&start, &id(1)).expect("ok").expect("one");
    let twice = next_release(&once, &id(1)).expect("ok").expect("two");
    let hub = FakeApi::new()
        .expect(Method::GET, HUB_SPACE, 200, idspace(&start))
        .expect(Method::PUT, HUB_SPACE, 200, idspace(&once))
        .expect(Method::GET, HUB_SPACE, 200, idspace(&once))
        .expect(Method::PUT, HUB_SPACE, 200, idspace(&twice))
        .expect(Method::GET, HUB_SPACE, 200, idspace(&twice));
    let client = Hub {
        client: hub.client(),
        server: "https://hub.example".into(),
    };
    let released = release_all(&client, &membership(Some("cluster-1"), true), &id(1))
        .await
        .expect("released");
    assert_eq!(released, 2);
    hub.verify();
    let written: Vec<i64> = hub
        .requests(&Method::PUT, HUB_SPACE)
        .iter()
        .map(|s| {
            s.body["spec"]["registry"]["revision"]
                .as_i64()
                .expect("a revision")
        })
        .collect();
    let base = i64::try_from(start.revision()).expect("small");
    assert_eq!(
        written,
        vec![base + 1, base + 2],
        "each write one transition"
    );
}

#[tokio::test]
async fn rule18_an_unreachable_hub_keeps_the_finalizer_and_says_the_way_out() {
    let hub = FakeApi::new().always(
        Method::GET,
        HUB_SPACE,
        503,
        failure(503, "ServiceUnavailable", "the hub is down"),
    );
    let client = Hub {
        client: hub.client(),
        server: "https://hub.example".into(),
    };
    let refusal = release_all(&client, &membership(Some("cluster-1"), true), &id(1))
        .await
        .expect_err("not released");
    assert_eq!(refusal.reason, Reason::HubUnreachable);
    assert!(
        refusal.message.contains("remove the finalizer") && refusal.message.contains(FINALIZER),
        "{}",
        refusal.message
    );
    assert!(hub.requests(&Method::PUT, HUB_SPACE).is_empty());
}

#[tokio::test]
async fn the_finalizer_is_added_and_removed_by_compare_and_swap_and_only_when_needed() {
    let without = membership(Some("cluster-1"), false);
    let with = membership(Some("cluster-1"), true);
    let api = FakeApi::new()
        .expect(Method::PUT, MEMBERSHIP, 200, json!(with))
        .expect(Method::PUT, MEMBERSHIP, 200, json!(without));
    let added = set_finalizer(&api.client(), &without, true)
        .await
        .expect("written")
        .expect("added");
    assert_eq!(added.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
    set_finalizer(&api.client(), &with, false)
        .await
        .expect("written")
        .expect("removed");
    assert!(
        set_finalizer(&api.client(), &with, true)
            .await
            .expect("nothing")
            .is_none(),
        "already there: nothing written"
    );
    api.verify();
    let puts = api.requests(&Method::PUT, MEMBERSHIP);
    assert_eq!(puts[0].body["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(puts[0].body["metadata"]["resourceVersion"], json!("11"));
    assert_eq!(puts[1].body["metadata"]["finalizers"], json!([]));
}
