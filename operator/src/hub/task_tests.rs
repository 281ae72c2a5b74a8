//! The membership task's contact against the fake API server: what it refuses before it
//! reads anything (docs/design/2026-11-29-multicluster.md, rule 21).

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
