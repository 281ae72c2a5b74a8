//! Issue 55, rule 17: a sequence joined to an ID space (an `IdSpaceMembership` names it)
//! hands out only slots of the blocks its cluster holds, each new holder starting above the
//! block's floor with its fence capped at the grant's bound; held Leases follow the hub's
//! renewals; without a usable copy nothing is handed out and the sequence says why. Default
//! layout in blocks of 64: this cluster holds block 2, slots 128..192.

use kube::runtime::reflector::store::Writer;
use kubeflake_crds::id_space::membership::{GrantRecord, IdSpaceMembershipStatus, SpaceRef};
use kubeflake_crds::id_space::{
    IdSpaceMembership, IdSpaceMembershipSpec, IdSpaceSpec, MemberId, SpaceSequenceSpec,
};
use kubeflake_crds::slot_lease::{FENCE_ANNOTATION, FENCE_CAP_ANNOTATION};

use super::*;
use crate::controller::id_spaces::IdSpaces;

pub(super) const THIS: &str = "cluster-a";

/// The sequence's current tick, as a pass computes it.
fn now_tick() -> u64 {
    let params = IdSequenceSpec::default().params().expect("params");
    params
        .timebase
        .tick_at(chrono::Utc::now().timestamp_millis() as u64)
        .expect("epoch passed")
        .0
}

/// A membership of the fixture's sequence; its copy (made by `made_by`) holds `grants`
/// (block, floor, bound), or there is no copy yet.
pub(super) fn membership(made_by: &str, grants: Option<&[(i64, u64, u64)]>) -> IdSpaceMembership {
    let mut m = IdSpaceMembership::new(
        "orders-in-space",
        IdSpaceMembershipSpec {
            sequence: SEQ.into(),
            member_name: "prod".into(),
            space: SpaceRef {
                namespace: "kubeflake-space-orders".into(),
                name: "orders".into(),
            },
            hub_secret: "kubeflake-hub-orders".into(),
        },
    );
    m.metadata.namespace = Some(NS.into());
    m.status = grants.map(|grants| {
        let space = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
            .space()
            .expect("a space");
        let mut status = IdSpaceMembershipStatus {
            member_id: Some(made_by.into()),
            grants: grants
                .iter()
                .map(|&(block, floor, bound)| GrantRecord {
                    block,
                    term: 1,
                    floor: floor as i64,
                    bound: bound as i64,
                })
                .collect(),
            ..Default::default()
        };
        status.keep_space(&space);
        status
    });
    m
}

pub(super) fn id_spaces(
    memberships: Vec<IdSpaceMembership>,
) -> (Arc<IdSpaces>, Writer<IdSpaceMembership>) {
    let (store, mut writer) = reflector::store::<IdSpaceMembership>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for m in memberships {
        writer.apply_watcher_event(&watcher::Event::InitApply(m));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let this = MemberId::new(THIS).expect("a member ID");
    (Arc::new(IdSpaces::of_cluster(store, this)), writer)
}

/// Slot `slot`'s lease, held by `holder` or free, with `fence` and maybe a cap.
fn block_lease(slot: u32, holder: Option<&str>, fence: u64, cap: Option<u64>) -> Lease {
    let mut lease = slot_lease(holder, fence);
    let name = format!("{SEQ}-slot-{slot}");
    lease.metadata.name = Some(name);
    let mut labels =
        kubeflake_crds::slot_lease::lease_labels(SEQ, kubeflake_crds::Slot(slot), None);
    if let Some(h) = holder {
        labels.insert("kubeflake.io/holder".into(), format!("uid-{h}"));
    }
    lease.metadata.labels = Some(labels);
    if let Some(cap) = cap {
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(FENCE_CAP_ANNOTATION.into(), cap.to_string());
    }
    lease
}

fn annotation(body: &Value, key: &str) -> Value {
    body["metadata"]["annotations"][key].clone()
}

/// A pod the webhook of 0.1.0 injected (its sidecar knows no fence cap).
fn injected_by_0_1(name: &str) -> Pod {
    let mut old = pod(name);
    old.metadata.annotations = Some(
        [(
            kubeflake_crds::contract::INJECTED_ANNOTATION.to_string(),
            "0.1.0".to_string(),
        )]
        .into(),
    );
    old
}

/// One pass over a sequence whose pod `holder` holds slot 128 (`held`), which the pass
/// must rewrite (a PUT) before it patches the status: the Lease the pass wrote.
async fn pass_over_held(seq: IdSequence, holder: Pod, held: Lease, spaces: Arc<IdSpaces>) -> Value {
    let path = format!("{LEASES}/orders-slot-128");
    let api = FakeApi::new()
        .expect(Method::PUT, &path, 200, json!(held))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture_with(&api, vec![holder], vec![held.clone()], Some(spaces));
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("the pass succeeds");
    api.verify();
    api.requests(&Method::PUT, &path)[0].body.clone()
}

#[tokio::test]
async fn rule17_a_joined_sequence_creates_its_pods_slot_lease_in_its_block_from_the_floor_with_the_cap()
 {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let now = now_tick();
    let (floor, bound) = (now - 1_000, now + 3_600_000);
    let (spaces, _writer) = id_spaces(vec![membership(THIS, Some(&[(2, floor, bound)]))]);
    let api = FakeApi::new()
        .expect(
            Method::POST,
            LEASES,
            201,
            json!(block_lease(128, Some("a"), floor, Some(bound))),
        )
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    // Slot 0's free lease would be taken by a lone sequence: block 0 is not this cluster's.
    let f = fixture_with(
        &api,
        vec![pod("a")],
        vec![slot_lease(None, 0)],
        Some(spaces),
    );
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("the pass succeeds");
    api.verify();
    let created = &api.requests(&Method::POST, LEASES)[0].body;
    assert_eq!(created["metadata"]["name"], json!("orders-slot-128"));
    assert_eq!(created["spec"]["holderIdentity"], json!("uid-a"));
    assert_eq!(
        annotation(created, FENCE_ANNOTATION),
        json!(floor.to_string())
    );
    assert_eq!(
        annotation(created, FENCE_CAP_ANNOTATION),
        json!(bound.to_string())
    );
}

#[tokio::test]
async fn rule17_a_renewed_grant_raises_the_cap_of_a_held_slot_lease() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let now = now_tick();
    let (floor, old_bound, bound) = (now - 1_000, now + 1_000_000, now + 3_600_000);
    let (spaces, _writer) = id_spaces(vec![membership(THIS, Some(&[(2, floor, bound)]))]);
    let held = block_lease(128, Some("a"), now, Some(old_bound));
    let written = &pass_over_held(seq, pod("a"), held, spaces).await;
    assert_eq!(
        annotation(written, FENCE_CAP_ANNOTATION),
        json!(bound.to_string())
    );
    assert_eq!(
        written["spec"]["holderIdentity"],
        json!("uid-a"),
        "holder kept"
    );
    assert_eq!(
        annotation(written, FENCE_ANNOTATION),
        json!(now.to_string())
    );
}

#[tokio::test]
async fn rule17_a_membership_without_a_usable_copy_assigns_no_slot_and_the_sequence_says_why() {
    let now = now_tick();
    let cases = [
        (membership(THIS, None), "holds no copy"),
        (
            membership("cluster-b", Some(&[(2, now - 1_000, now + 3_600_000)])),
            "made by cluster cluster-b",
        ),
    ];
    for (m, says) in cases {
        let seq = sequence(IdSequenceSpec::default(), true, false);
        let (spaces, _writer) = id_spaces(vec![m]);
        let api = FakeApi::new().expect(Method::PATCH, STATUS, 200, echo(&seq));
        let f = fixture_with(&api, vec![pod("a")], vec![], Some(spaces));
        reconcile(Arc::new(seq), f.ctx.clone())
            .await
            .expect("the pass succeeds");
        api.verify();
        let status = &api.requests(&Method::PATCH, STATUS)[0].body["status"];
        let exhausted = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Exhausted"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(exhausted["status"], json!("True"), "{says}: {status}");
        let message = exhausted["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("1 pods wait") && message.contains(says),
            "{says}: {message}"
        );
    }
}

#[tokio::test]
async fn rule17_a_pod_injected_by_0_1_gets_no_slot_of_a_joined_sequence() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let now = now_tick();
    let grant = [(2, now - 1_000, now + 3_600_000)];
    let (spaces, _writer) = id_spaces(vec![membership(THIS, Some(&grant))]);
    let api = FakeApi::new().expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture_with(&api, vec![injected_by_0_1("old")], vec![], Some(spaces));
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("the pass succeeds");
    api.verify();
    assert!(api.requests(&Method::POST, LEASES).is_empty());
}

/// An install upgraded from 0.1.0 joins with its pods as they are (e2e `upgrade_join`): a
/// 0.1.0 pod that holds a slot keeps it, and its Lease gets the cap like any held one, so
/// the Lease policy holds the old sidecar (which knows no cap) to the block's bound.
/// Before, the pod was left out of the pass: its slot was planned as its pod's gone, the
/// direct read found the pod and skipped the release, and no cap was ever written.
#[tokio::test]
async fn rule15_17_a_slot_held_by_a_pod_injected_by_0_1_stays_its_own_and_its_lease_gets_the_cap() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let now = now_tick();
    let bound = now + 3_600_000;
    let (spaces, _writer) = id_spaces(vec![membership(THIS, Some(&[(2, now - 1_000, bound)]))]);
    let held = block_lease(128, Some("old"), now, None);
    let written = &pass_over_held(seq, injected_by_0_1("old"), held, spaces).await;
    assert_eq!(
        written["spec"]["holderIdentity"],
        json!("uid-old"),
        "holder kept"
    );
    assert_eq!(
        annotation(written, FENCE_CAP_ANNOTATION),
        json!(bound.to_string())
    );
}

#[tokio::test]
async fn rule17_a_sequence_no_membership_names_assigns_as_before_without_a_cap() {
    let seq = sequence(IdSequenceSpec::default(), true, false);
    let mut other = membership(THIS, None);
    other.spec.sequence = "payments".into();
    let (spaces, _writer) = id_spaces(vec![other]);
    let api = FakeApi::new()
        .expect(Method::POST, LEASES, 201, json!(slot_lease(Some("a"), 0)))
        .expect(Method::PATCH, STATUS, 200, echo(&seq));
    let f = fixture_with(&api, vec![pod("a")], vec![], Some(spaces));
    reconcile(Arc::new(seq), f.ctx.clone())
        .await
        .expect("the pass succeeds");
    api.verify();
    let created = &api.requests(&Method::POST, LEASES)[0].body;
    assert_eq!(created["metadata"]["name"], json!("orders-slot-0"));
    assert_eq!(annotation(created, FENCE_CAP_ANNOTATION), Value::Null);
}

/// Rule 21, a member's etcd restored from an older snapshot: the restore reaches the
/// controller's watches one by one, so a pass may see a new pod from the restored store
/// while its membership cache still holds the copy of before the restore, the one the
/// membership task compared with the hub. The pass reads the membership from the API
/// server, which has the restored copy: what each case's read answers decides it.
mod restored_copy {
    use super::*;
    use crate::hub::checks::HubChecks;

    const MEMBERSHIP: &str =
        "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/orders-in-space";

    /// The membership with its copy at `generation` and maybe `FencesRaised=False`.
    fn copy_at(generation: i64, fences_pending: bool) -> IdSpaceMembership {
        let now = now_tick();
        let mut m = membership(THIS, Some(&[(2, now - 1_000, now + 3_600_000)]));
        let status = m.status.as_mut().expect("a copy");
        status.generation = generation;
        if fences_pending {
            let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            );
            crate::hub::fences::mark_pending(status, Some(1), at);
        }
        m
    }

    /// The cache holds the copy at generation 5, which the membership task compared with
    /// the hub; the API server answers `read` (or nothing). One pass over pod `a`.
    async fn pass_when_the_api_server_has(read: Option<IdSpaceMembership>) -> FakeApi {
        let seq = sequence(IdSequenceSpec::default(), true, false);
        let (store, mut writer) = reflector::store::<IdSpaceMembership>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(copy_at(5, false)));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let checks = Arc::new(HubChecks::default());
        checks.listing();
        let began = checks.epoch();
        checks.compared(NS, "orders-in-space", began, 5);
        let this = MemberId::new(THIS).expect("a member ID");
        let spaces =
            Arc::new(IdSpaces::of_cluster(store, this).with_hub_checks(Some(checks.clone())));
        let api = match &read {
            Some(m) => FakeApi::new().expect(Method::GET, MEMBERSHIP, 200, json!(m.clone())),
            None => FakeApi::new().expect(
                Method::GET,
                MEMBERSHIP,
                500,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": "etcdserver: request timed out", "reason": "InternalError",
                       "code": 500}),
            ),
        };
        let now = now_tick();
        let api = if read.as_ref().is_some_and(|m| {
            m.status.as_ref().is_some_and(|s| s.generation >= 5)
                && !crate::hub::fences::pending(m.status.as_ref().expect("status"))
        }) {
            api.expect(
                Method::POST,
                LEASES,
                201,
                json!(block_lease(
                    128,
                    Some("a"),
                    now - 1_000,
                    Some(now + 3_600_000)
                )),
            )
        } else {
            api
        };
        let api = api.expect(Method::PATCH, STATUS, 200, echo(&seq));
        let f = fixture_with(&api, vec![pod("a")], vec![], Some(spaces));
        reconcile(Arc::new(seq), f.ctx.clone())
            .await
            .expect("the pass succeeds");
        api.verify();
        api
    }

    fn id_space_message(api: &FakeApi) -> String {
        let status = &api.requests(&Method::PATCH, STATUS)[0].body["status"];
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "IdSpace"))
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    #[tokio::test]
    async fn rule21_a_restored_copy_older_than_the_one_compared_with_the_hub_assigns_no_slot() {
        let api = pass_when_the_api_server_has(Some(copy_at(3, false))).await;
        assert!(api.requests(&Method::POST, LEASES).is_empty());
        let message = id_space_message(&api);
        assert!(message.contains("has not compared"), "{message}");
    }

    #[tokio::test]
    async fn rule21_fences_pending_in_the_api_servers_copy_assign_no_slot_though_the_cache_shows_none()
     {
        let api = pass_when_the_api_server_has(Some(copy_at(5, true))).await;
        assert!(api.requests(&Method::POST, LEASES).is_empty());
        let message = id_space_message(&api);
        assert!(message.contains("fences"), "{message}");
    }

    #[tokio::test]
    async fn rule21_an_unreadable_membership_assigns_no_slot_and_the_sequence_says_why() {
        let api = pass_when_the_api_server_has(None).await;
        assert!(api.requests(&Method::POST, LEASES).is_empty());
        let message = id_space_message(&api);
        assert!(message.contains("could not be read"), "{message}");
    }

    /// A routine re-list of the pods' or Leases' watch changes no generation: the pass
    /// assigns without the hub (a pod's start never waits on it).
    #[tokio::test]
    async fn rule21_the_same_copy_as_compared_assigns_a_slot_without_the_hub() {
        let api = pass_when_the_api_server_has(Some(copy_at(5, false))).await;
        let created = &api.requests(&Method::POST, LEASES)[0].body;
        assert_eq!(created["metadata"]["name"], json!("orders-slot-128"));
    }
}
