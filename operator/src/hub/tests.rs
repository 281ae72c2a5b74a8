//! The membership task's decisions as specifications (docs/design/2026-11-29-multicluster.md,
//! rules 17-21), and the hub client's refusals, against the fake API server.

use http::Method;
use kubeflake_crds::id_space::join::SlotUse;
use kubeflake_crds::id_space::membership::IdSpaceMembershipStatus;
use kubeflake_crds::id_space::{
    IdSpaceSpec, LocalRecord, MemberId, MemberName, Registry, Space, SpaceSequenceSpec,
};
use kubeflake_crds::layout::{DatacenterId, Slot, Tick};
use kubeflake_runtime::fake_api::FakeApi;
use serde_json::json;

use super::conditions::Reason;
use super::step::{Contact, Decision, Refusal, decide};
use super::task::{Kept, keep_copy};
use super::{cluster_id, connect};

/// Default layout, 1 ms ticks: 16 blocks of 64 slots, tolerance 1 h, renewal 5 min.
fn space() -> Space {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
        .space()
        .expect("test space")
}

fn id(n: u32) -> MemberId {
    MemberId::new(&format!("3f1b2c4d-0000-4000-8000-{n:012}")).expect("test id")
}

fn name(text: &str) -> MemberName {
    MemberName::new(text).expect("test name")
}

const HOUR: u64 = 3_600_000;
const NOW: u64 = 100 * HOUR;

/// One contact of member `n` named `member`, its copy `copy`, at tick `now`.
fn contact(
    registry: &Registry,
    n: u32,
    member: &str,
    copy: &IdSpaceMembershipStatus,
    in_use: u64,
    now: u64,
) -> Result<Decision, Refusal> {
    let space = space();
    let this = id(n);
    let name = name(member);
    decide(&Contact {
        this: &this,
        name: &name,
        copy,
        space_uid: "space-uid-1",
        space: &space,
        registry,
        sequence: *space.sequence(),
        datacenter: DatacenterId(0),
        used: vec![],
        in_use,
        now: Tick(now),
        reclaim_grace: 60_000,
    })
}

/// Contacts until nothing is left to write, as the task does: each write one transition
/// (the revision counted up by exactly 1, as the hub's policy admits), the copy kept after
/// it. Returns the registry, the copy and the last decision.
fn settle(
    registry: &Registry,
    n: u32,
    member: &str,
    status: &IdSpaceMembershipStatus,
    in_use: u64,
    now: u64,
) -> (Registry, IdSpaceMembershipStatus, Decision) {
    let (mut registry, mut status) = (registry.clone(), status.clone());
    for _ in 0..super::step::MAX_WRITES_PER_CONTACT {
        let decision = contact(&registry, n, member, &status, in_use, now).expect("admitted");
        let Some(next) = decision.write.clone() else {
            keep_copy(
                &mut status,
                &id(n),
                &Kept {
                    copy: decision.copy.clone(),
                    space_uid: "space-uid-1".into(),
                    space: space(),
                    blocks_low: None,
                    in_use,
                    local_went_back: decision.local_went_back,
                },
            );
            return (registry, status, decision);
        };
        assert_eq!(
            next.revision(),
            registry.revision() + 1,
            "one transition per write"
        );
        registry = next;
        status.keep(&decision.copy);
    }
    panic!("a contact kept writing");
}

/// The registry and copy after member `n` first contacted the hub.
fn joined(
    registry: &Registry,
    n: u32,
    member: &str,
    in_use: u64,
    now: u64,
) -> (Registry, IdSpaceMembershipStatus) {
    let (registry, status, _) = settle(
        registry,
        n,
        member,
        &IdSpaceMembershipStatus::default(),
        in_use,
        now,
    );
    (registry, status)
}

#[test]
fn rule17_a_new_member_joins_and_holds_a_block_it_may_assign_from_at_once() {
    let (registry, status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let view = registry.view_of(&id(1)).expect("a member");
    assert_eq!(view.grants.len(), 1, "one block, no pod yet: {view:?}");
    let copy = status.local_record(&space()).expect("readable copy");
    assert_eq!(copy, LocalRecord::from_view(&view), "the copy is the hub's");
    let slots = copy.assignable(&space(), DatacenterId(0), Tick(NOW + 1), 15_000);
    assert_eq!(slots.len(), 64);
    assert_eq!(status.member_id.as_deref(), Some(id(1).as_str()));
    assert_eq!(status.id_space_uid.as_deref(), Some("space-uid-1"));
}

#[test]
fn rule19_a_member_with_pods_in_its_block_claims_a_spare_before_the_slots_run_out() {
    let (registry, status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let (next, status, _) = settle(&registry, 1, "prod", &status, 2, NOW + 1000);
    assert_eq!(next.view_of(&id(1)).expect("member").grants.len(), 2);
    assert_eq!(status.grants.len(), 2);
}

#[test]
fn rule19_a_contact_with_nothing_due_writes_nothing() {
    let (registry, status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let decision = contact(&registry, 1, "prod", &status, 0, NOW + 1000).expect("contact");
    assert_eq!(decision.write, None);
}

#[test]
fn rule19_a_block_is_renewed_one_renewal_period_after_its_claim() {
    let (registry, status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let bound = registry.view_of(&id(1)).expect("member").grants[0].bound;
    let later = NOW + 301_000;
    let decision = contact(&registry, 1, "prod", &status, 0, later).expect("contact");
    let next = decision.write.expect("the renewal is written");
    let renewed = next.view_of(&id(1)).expect("member").grants[0].bound;
    assert!(renewed > bound, "{renewed:?} > {bound:?}");
    assert_eq!(renewed, space().bound_from(Tick(later)));
}

#[test]
fn rule18_a_lapsed_block_of_another_member_is_reclaimed_with_its_floor_at_its_bound() {
    let (registry, _) = joined(&Registry::default(), 1, "gone", 0, NOW);
    let grant = registry.view_of(&id(1)).expect("member").grants[0];
    let (registry, status) = joined(&registry, 2, "prod", 0, NOW);
    let after = grant.bound.0 + 120_000;
    let (next, _, _) = settle(&registry, 2, "prod", &status, 0, after);
    assert!(
        next.view_of(&id(1))
            .expect("still a member")
            .grants
            .is_empty()
    );
    assert!(
        next.block(grant.block).floor() >= grant.bound,
        "floor at least the last bound"
    );
}

#[test]
fn rule20_a_second_membership_of_this_cluster_under_another_name_is_refused_saying_what_to_fix() {
    let (registry, _) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let refusal = contact(
        &registry,
        1,
        "prod-copy",
        &IdSpaceMembershipStatus::default(),
        0,
        NOW,
    )
    .expect_err("refused");
    assert_eq!(refusal.reason, Reason::JoinRefused);
    assert!(
        refusal.message.contains("join with that name"),
        "{}",
        refusal.message
    );
}

#[test]
fn rule21_a_copy_made_by_another_cluster_is_refused_and_nothing_is_written() {
    let (registry, status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let refusal = contact(&registry, 2, "restored", &status, 0, NOW).expect_err("refused");
    assert_eq!(refusal.reason, Reason::MembershipOfAnotherCluster);
    assert!(
        refusal.message.contains("kubectl kubeflake hub join"),
        "{}",
        refusal.message
    );
}

#[test]
fn rule21_a_hub_registry_behind_the_copy_is_refused_and_nothing_is_written() {
    let (registry, status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let mut ahead = status.clone();
    ahead.revision_seen += 5;
    let refusal = contact(&registry, 1, "prod", &ahead, 0, NOW).expect_err("refused");
    assert_eq!(refusal.reason, Reason::HubWentBack);
    assert!(
        refusal.message.contains("hub recover"),
        "{}",
        refusal.message
    );
}

#[test]
fn rule21_a_re_created_idspace_is_refused_until_the_copys_uid_is_cleared() {
    let (registry, mut status) = joined(&Registry::default(), 1, "prod", 0, NOW);
    status.id_space_uid = Some("space-uid-0".into());
    let refusal = contact(&registry, 1, "prod", &status, 0, NOW).expect_err("refused");
    assert_eq!(refusal.reason, Reason::HubWentBack);
    assert!(
        refusal.message.contains("remove status.idSpaceUid"),
        "{}",
        refusal.message
    );
}

#[test]
fn rule21_a_copy_behind_the_hub_takes_the_hubs_view_and_says_the_fences_must_be_raised() {
    let (registry, old) = joined(&Registry::default(), 1, "prod", 0, NOW);
    let (registry, _, _) = settle(&registry, 1, "prod", &old, 2, NOW + 1000);
    let decision = contact(&registry, 1, "prod", &old, 2, NOW + 2000).expect("contact");
    assert!(decision.local_went_back);
    assert_eq!(decision.copy.grants().count(), 2, "the hub's view");
}

#[test]
fn rule20_no_free_block_is_blocks_low_and_the_member_keeps_what_it_holds() {
    let mut registry = Registry::default();
    for n in 1..=16 {
        registry = joined(&registry, n, &format!("m{n}"), 0, NOW).0;
    }
    let (_, status, last) = settle(
        &registry,
        17,
        "late",
        &IdSpaceMembershipStatus::default(),
        0,
        NOW,
    );
    let low = last.blocks_low.expect("no block was free");
    assert!(low.contains("no free block"), "{low}");
    assert!(status.grants.is_empty());
}

#[test]
fn the_join_carries_the_sequences_held_slots_as_first_claims() {
    let space = space();
    let this = id(1);
    let name = name("prod");
    let decision = decide(&Contact {
        this: &this,
        name: &name,
        copy: &IdSpaceMembershipStatus::default(),
        space_uid: "space-uid-1",
        space: &space,
        registry: &Registry::default(),
        sequence: *space.sequence(),
        datacenter: DatacenterId(0),
        used: vec![SlotUse {
            slot: Slot(200),
            fence: Tick(NOW + 30_000),
            held: true,
        }],
        in_use: 1,
        now: Tick(NOW),
        reclaim_grace: 60_000,
    })
    .expect("joins");
    let blocks: Vec<u32> = decision.copy.grants().map(|g| g.block.get()).collect();
    assert!(blocks.contains(&3), "slot 200 is in block 3: {blocks:?}");
}

// The hub client.

fn secret(data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kubeflake-hub-orders", "namespace": "kubeflake-system"}, "data": data})
}

fn not_found() -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

const SECRET_PATH: &str = "/api/v1/namespaces/kubeflake-system/secrets/kubeflake-hub-orders";

async fn connect_with(fake: FakeApi) -> Result<connect::Hub, connect::HubError> {
    connect::connect(&fake.client(), "kubeflake-system", "kubeflake-hub-orders").await
}

#[tokio::test]
async fn a_missing_hub_secret_is_an_error_naming_the_secret() {
    let fake = FakeApi::new().expect(Method::GET, SECRET_PATH, 404, not_found());
    let err = connect_with(fake.clone()).await.expect_err("an error");
    let text = err.to_string();
    assert!(
        text.contains("kubeflake-system/kubeflake-hub-orders") && text.contains("does not exist"),
        "{text}"
    );
    fake.verify();
}

#[tokio::test]
async fn a_hub_secret_without_the_kubeconfig_key_says_which_key() {
    let fake = FakeApi::new().expect(
        Method::GET,
        SECRET_PATH,
        200,
        secret(json!({"config": "eA=="})),
    );
    let text = connect_with(fake).await.expect_err("an error").to_string();
    assert!(text.contains("no key kubeconfig"), "{text}");
}

/// `text` in base64, as a Secret's data holds it (k8s-openapi's ByteString encodes it).
fn b64(text: &str) -> serde_json::Value {
    serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec())).expect("base64")
}

const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\nusers:\n- name: member\n  user:\n    token: abc\ncontexts:\n- name: hub\n  context:\n    cluster: hub\n    user: member\ncurrent-context: hub\n";

#[tokio::test]
async fn a_kubeconfig_that_runs_a_program_or_reads_a_file_is_refused() {
    let exec = KUBECONFIG.replace(
        "    token: abc\n",
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n",
    );
    let file = KUBECONFIG.replace("    token: abc\n", "    tokenFile: /etc/passwd\n");
    for (bad, field) in [(exec, "exec"), (file, "tokenFile")] {
        let fake = FakeApi::new().expect(
            Method::GET,
            SECRET_PATH,
            200,
            secret(json!({"kubeconfig": b64(&bad)})),
        );
        let text = connect_with(fake).await.expect_err("an error").to_string();
        assert!(text.contains(field) && text.contains("inline"), "{text}");
    }
    let fake = FakeApi::new().expect(
        Method::GET,
        SECRET_PATH,
        200,
        secret(json!({"kubeconfig": b64("not: [a kubeconfig")})),
    );
    let text = connect_with(fake).await.expect_err("an error").to_string();
    assert!(text.contains("cannot be used"), "{text}");
}

#[tokio::test]
async fn an_inline_kubeconfig_makes_a_client_of_its_server() {
    let fake = FakeApi::new().expect(
        Method::GET,
        SECRET_PATH,
        200,
        secret(json!({"kubeconfig": b64(KUBECONFIG)})),
    );
    let hub = connect_with(fake).await.expect("a client");
    assert!(hub.server.contains("127.0.0.1:6443"), "{}", hub.server);
}

#[tokio::test]
async fn the_cluster_id_is_the_clusterproperty_when_present_else_the_kube_system_uid() {
    const PROPERTY: &str =
        "/apis/about.k8s.io/v1alpha1/clusterproperties/cluster.clusterset.k8s.io";
    let fake = FakeApi::new()
        .expect(Method::GET, PROPERTY, 404, not_found())
        .expect(Method::GET, "/api/v1/namespaces/kube-system", 200, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "uid": "0b6f6a3e-1f2a-4c5d-9e8f-0123456789ab"}}));
    let id = cluster_id::this_cluster(&fake.client())
        .await
        .expect("an ID");
    assert_eq!(id.as_str(), "0b6f6a3e-1f2a-4c5d-9e8f-0123456789ab");
    fake.verify();
    let fake = FakeApi::new().expect(Method::GET, PROPERTY, 200, json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty", "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "prod-eu.example"}}));
    let id = cluster_id::this_cluster(&fake.client())
        .await
        .expect("an ID");
    assert_eq!(id.as_str(), "prod-eu.example");
    fake.verify();
}
