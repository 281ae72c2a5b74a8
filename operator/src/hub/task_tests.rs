//! The membership task's contact against the fake API server: what it refuses before it
//! reads anything (docs/design/2026-11-29-multicluster.md, rule 21), and which memberships
//! it never contacts (rule 20).

use kubeflake_crds::id_space::MemberId;
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_runtime::fake_api::FakeApi;
use serde_json::json;

use super::conditions::Reason;
use super::task::{Config, contact};

/// A membership whose copy was made by cluster `copy_of` (its status restored with it).
fn restored(copy_of: &str) -> IdSpaceMembership {
    serde_json::from_value(json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {"sequence": "orders", "memberName": "prod",
                 "space": {"namespace": "kubeflake-space-orders", "name": "orders"},
                 "hubSecret": "kubeflake-hub-orders"},
        "status": {"memberId": copy_of, "generation": 1, "revisionSeen": 3},
    }))
    .expect("a valid membership")
}

#[tokio::test]
async fn rule21_a_copy_made_by_another_cluster_is_refused_before_the_hub_is_read_so_an_unreachable_hub_does_not_hide_it()
 {
    // No request is scripted: any read (the sequence, the Leases, the hub Secret, the hub)
    // would be an unexpected request.
    let fake = FakeApi::new();
    let this = MemberId::new("cluster-b").expect("an ID");
    let config = Config::new("kubeflake-system".into(), None);
    let refusal = contact(&fake.client(), &config, &this, &restored("cluster-a"))
        .await
        .expect_err("refused");
    assert_eq!(refusal.reason, Reason::MembershipOfAnotherCluster);
    assert!(
        refusal.message.contains("restored or copied"),
        "{}",
        refusal.message
    );
    fake.verify();
    assert!(
        fake.seen().is_empty(),
        "nothing was read: {:?}",
        fake.seen()
    );
}

/// A membership of sequence `sequence` in namespace `shop`, joining space `orders` through
/// the Secret `kubeflake-hub-orders`, created at `created`.
fn joining(name: &str, sequence: &str, created: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembership",
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created,
                     "resourceVersion": "7", "finalizers": [super::leave::FINALIZER]},
        "spec": {"sequence": sequence, "memberName": "prod",
                 "space": {"namespace": "kubeflake-space-orders", "name": "orders"},
                 "hubSecret": "kubeflake-hub-orders"},
    })
}

/// A fake API server whose membership list holds `items`.
fn listing(items: &[serde_json::Value]) -> FakeApi {
    FakeApi::new().expect(
        http::Method::GET,
        "/apis/kubeflake.io/v1alpha1/idspacememberships",
        200,
        json!({"apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSpaceMembershipList",
               "metadata": {"resourceVersion": "9"}, "items": items}),
    )
}

/// One round of the membership task as cluster `cluster-a` against `fake`, then its check
/// that every scripted request came and nothing else did.
async fn one_round(fake: &FakeApi) {
    let config = Config::new("kubeflake-system".into(), None);
    let reporter = kube::runtime::events::Reporter {
        controller: "kubeflake-operator".into(),
        instance: Some("test".into()),
    };
    let recorder = kube::runtime::events::Recorder::new(fake.client(), reporter);
    let mut cluster = Some(MemberId::new("cluster-a").expect("an ID"));
    super::task::round(&fake.client(), &config, &recorder, &mut cluster).await;
    fake.verify();
}

#[tokio::test]
async fn rule20_a_second_membership_of_this_cluster_joining_the_same_space_is_never_contacted_and_is_not_ready()
 {
    const LATER_STATUS: &str =
        "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/payments/status";
    // The earlier membership is being deleted by a person who did not wait for the hub: its
    // own blocks are released by its own step (here: it releases nothing, no copy), and
    // the later one is still refused while it exists, never contacted.
    let mut earlier = joining("orders", "orders", "2026-11-30T10:00:00Z");
    earlier["metadata"]["deletionTimestamp"] = json!("2026-11-30T12:00:00Z");
    earlier["metadata"]["finalizers"] = json!([]);
    let later = joining("payments", "payments", "2026-11-30T11:00:00Z");
    let mut stored = later.clone();
    stored["status"] = json!({});
    // Only the list and the later one's status (and its Warning Event): no read of a sequence,
    // a Lease, a hub Secret or a hub.
    let fake = listing(&[earlier, later]).expect(http::Method::PUT, LATER_STATUS, 200, stored);
    one_round(&fake).await;
    let written = &fake.requests(&http::Method::PUT, LATER_STATUS)[0].body;
    let ready = written["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .unwrap_or_else(|| panic!("a Ready condition: {written:#}"));
    assert_eq!(ready["status"], "False", "{ready:#}");
    assert_eq!(ready["reason"], "SpaceJoinedTwice", "{ready:#}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("shop/orders") && message.contains("delete one of the two"),
        "the message names the earlier membership and what to do: {message}"
    );
    let events: Vec<_> = fake
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/apis/events.k8s.io/"))
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.body["reason"] == "SpaceJoinedTwice"),
        "a Warning Event says so: {events:?}"
    );
}

#[tokio::test]
async fn rule20_a_deleted_second_membership_of_the_same_space_releases_none_of_the_earlier_ones_blocks()
 {
    const LATER: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/payments";
    let mut earlier = joining("orders", "orders", "2026-11-30T10:00:00Z");
    earlier["metadata"]["deletionTimestamp"] = json!("2026-11-30T12:00:00Z");
    earlier["metadata"]["finalizers"] = json!([]);
    // The later one was contacted by an operator before this rule (its copy is this
    // cluster's, its finalizer set): deleting it must not give the hub back the blocks
    // this cluster holds for the earlier one.
    let mut later = joining("payments", "payments", "2026-11-30T11:00:00Z");
    later["metadata"]["deletionTimestamp"] = json!("2026-11-30T12:30:00Z");
    later["status"] = json!({"memberId": "cluster-a", "generation": 2, "revisionSeen": 4});
    let mut released = later.clone();
    released["metadata"]["finalizers"] = json!([]);
    // Only the list and the finalizer's removal: no hub Secret read, so no hub write.
    let fake = listing(&[earlier, later]).expect(http::Method::PUT, LATER, 200, released);
    one_round(&fake).await;
}
