//! Rule 21's fence raise (docs/design/2026-11-29-multicluster.md, "A member's etcd restored
//! from an older snapshot while its pods run"): the pure plan, and the writes against the
//! scripted fake API server.

use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kubeflake_crds::id_space::membership::{
    GrantRecord, IdSpaceMembership, IdSpaceMembershipSpec, IdSpaceMembershipStatus, SpaceRef,
};
use kubeflake_crds::id_space::{IdSpaceSpec, Space, SpaceSequenceSpec};
use kubeflake_crds::layout::{DatacenterId, Slot, Tick};
use kubeflake_crds::slot_lease::{Holder, SlotLease, vacant};
use kubeflake_crds::{IdSequence, IdSequenceSpec};
use kubeflake_runtime::fake_api::{FakeApi, failure};
use serde_json::json;

use super::{pending, plan, plan_missing, raise_if_pending, target};
use crate::hub::conditions::FENCES_RAISED;

const NS: &str = "shop";
const SEQ: &str = "orders";
const SEQ_PATH: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idsequences/orders";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases";
const STATUS: &str =
    "/apis/kubeflake.io/v1alpha1/namespaces/shop/idspacememberships/orders-space/status";

/// Default layout in blocks of 64: block 0 is slots 0..64, block 1 slots 64..128.
fn space() -> Space {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
        .space()
        .expect("test space")
}

fn sequence() -> IdSequence {
    let mut seq = IdSequence::new(SEQ, IdSequenceSpec::default());
    seq.metadata.namespace = Some(NS.into());
    seq.metadata.uid = Some("seq-uid".into());
    seq
}

/// The sequence's tick now.
fn now() -> Tick {
    let params = sequence().spec.params().expect("params");
    let ms = u64::try_from(chrono::Utc::now().timestamp_millis()).expect("after 1970");
    params.timebase.tick_at(ms).expect("after the epoch")
}

const HOUR: u64 = 3_600_000;

/// Slot `n`'s Lease with `fence`, held by pod `holder` or free.
fn lease(n: u32, fence: u64, holder: Option<&str>) -> Lease {
    let mut lease = vacant(&sequence(), Slot(n));
    lease.metadata.resource_version = Some("7".into());
    if let Some(pod) = holder {
        let uid = format!("uid-{pod}");
        let free = SlotLease::parse(&lease).expect("a slot lease");
        lease = free
            .assign(
                Holder { uid: &uid, pod },
                &IdSequenceSpec::default(),
                chrono::Utc::now(),
            )
            .expect("assigned");
    }
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kubeflake.io/fence".into(), fence.to_string());
    lease
}

/// The membership of this cluster holding block 0 up to `bound`, its copy behind the
/// hub's (FencesRaised=False).
fn went_back(bound: u64) -> IdSpaceMembership {
    let mut status = IdSpaceMembershipStatus {
        member_id: Some("cluster-a".into()),
        generation: 3,
        revision_seen: 9,
        grants: vec![GrantRecord {
            block: 0,
            term: 1,
            floor: 0,
            bound: i64::try_from(bound).expect("a tick"),
        }],
        ..Default::default()
    };
    status.keep_space(&space());
    super::mark_pending(
        &mut status,
        Some(1),
        Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let mut m = IdSpaceMembership::new(
        "orders-space",
        IdSpaceMembershipSpec {
            sequence: SEQ.into(),
            member_name: "prod".into(),
            space: SpaceRef {
                namespace: "kubeflake-space-orders".into(),
                name: "orders".into(),
            },
            hub_secret: "hub".into(),
        },
    );
    m.metadata.namespace = Some(NS.into());
    m.metadata.resource_version = Some("11".into());
    m.status = Some(status);
    m
}

fn list(leases: &[Lease]) -> serde_json::Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList", "metadata": {}, "items": leases})
}

fn fence_of(body: &serde_json::Value) -> u64 {
    body["metadata"]["annotations"]["kubeflake.io/fence"]
        .as_str()
        .and_then(|f| f.parse().ok())
        .expect("a fence")
}

#[test]
fn rule21_the_raise_covers_every_lease_of_the_blocks_held_free_or_held_and_no_other() {
    let parsed: Vec<SlotLease> = [
        lease(0, 1_000, None),
        lease(1, 2_000, Some("a")),
        lease(63, 45_000, None),
        lease(64, 1_000, None),
    ]
    .iter()
    .map(|l| SlotLease::parse(l).expect("a slot lease"))
    .collect();
    let status = went_back(40_000).status.expect("a status");
    let copy = status.local_record(&space()).expect("a copy");
    let writes = plan(&parsed, &copy, &space(), DatacenterId(0), Tick(30_000));
    let raised: Vec<(String, Tick)> = writes
        .iter()
        .map(|(name, l)| (name.clone(), SlotLease::parse(l).expect("parses").fence))
        .collect();
    assert_eq!(
        raised,
        vec![
            ("orders-slot-0".to_string(), Tick(30_000)),
            ("orders-slot-1".to_string(), Tick(30_000)),
        ],
        "slot 63's fence is above the bound already; slot 64 is in a block not held"
    );
    let near_bound = plan(&parsed, &copy, &space(), DatacenterId(0), Tick(90_000));
    for (_, l) in &near_bound {
        let l = SlotLease::parse(l).expect("parses");
        assert!(l.fence <= Tick(40_000), "never past the bound: {l:?}");
        assert!(
            l.fence_cap >= Some(l.fence),
            "the fence stays at or below its cap"
        );
    }
    assert_eq!(
        target(Tick(1_000), 15, |ms| ms),
        Tick(1_000 + 15_000 + 20_000),
        "now + lease duration + the skew bound"
    );
}

/// A slot first used after the snapshot has no Lease in the restored store, while its pod
/// may still issue there: the raise creates it, free, at the raised fence.
#[test]
fn rule21_a_slot_of_the_blocks_held_with_no_lease_gets_one_at_the_raised_fence() {
    let parsed: Vec<SlotLease> = [lease(0, 1_000, Some("a")), lease(64, 1_000, None)]
        .iter()
        .map(|l| SlotLease::parse(l).expect("a slot lease"))
        .collect();
    let status = went_back(40_000).status.expect("a status");
    let copy = status.local_record(&space()).expect("a copy");
    let created = plan_missing(
        &parsed,
        &copy,
        &space(),
        &sequence(),
        DatacenterId(0),
        Tick(30_000),
    )
    .expect("a plan");
    let slots: Vec<(u32, Tick, Option<Tick>, bool)> = created
        .iter()
        .map(|l| {
            let l = SlotLease::parse(l).expect("parses");
            (l.slot.0, l.fence, l.fence_cap, l.holder.is_some())
        })
        .collect();
    let want: Vec<(u32, Tick, Option<Tick>, bool)> = (1..64)
        .map(|s| (s, Tick(30_000), Some(Tick(40_000)), false))
        .collect();
    assert_eq!(slots, want, "slots 1..64 of block 0, none of block 1");
    let near_bound = plan_missing(
        &parsed,
        &copy,
        &space(),
        &sequence(),
        DatacenterId(0),
        Tick(90_000),
    )
    .expect("a plan");
    assert!(
        near_bound
            .iter()
            .all(|l| SlotLease::parse(l).expect("parses").fence == Tick(40_000)),
        "never past the bound"
    );
}

#[tokio::test]
async fn rule21_every_lease_is_raised_before_the_condition_lets_slots_be_assigned_again() {
    let bound = now().0 + HOUR;
    let m = went_back(bound);
    let fake = FakeApi::new()
        .expect(Method::GET, SEQ_PATH, 200, json!(sequence()))
        .expect(
            Method::GET,
            LEASES,
            200,
            list(&[
                lease(0, 1_000, None),
                lease(1, 2_000, Some("a")),
                lease(64, 0, None),
            ]),
        )
        .expect(
            Method::PUT,
            &format!("{LEASES}/orders-slot-0"),
            200,
            json!(lease(0, 0, None)),
        )
        .expect(
            Method::PUT,
            &format!("{LEASES}/orders-slot-1"),
            200,
            json!(lease(1, 0, None)),
        )
        .always(Method::POST, LEASES, 201, json!(lease(2, 0, None)))
        .expect(Method::PUT, STATUS, 200, json!(m));
    let before = now().0;
    let written = raise_if_pending(&fake.client(), &m).await.expect("raised");
    assert_eq!(
        written,
        Some(64),
        "2 raised, 62 created (slots 2..64 had none)"
    );
    fake.verify();
    let seen = fake.seen();
    let order: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    let status_at = order.iter().position(|p| *p == STATUS).expect("status");
    assert_eq!(status_at, order.len() - 1, "the condition last: {order:#?}");
    let created = fake.requests(&Method::POST, LEASES).len();
    assert_eq!(
        created, 62,
        "a Lease for every slot of block 0 that had none"
    );
    for s in seen
        .iter()
        .filter(|s| (s.method == Method::PUT || s.method == Method::POST) && s.path != STATUS)
    {
        let fence = fence_of(&s.body);
        assert!(
            fence >= before + 15_000 + 20_000 && fence <= bound,
            "fence {fence}: now + lease duration + skew bound, at most the bound {bound}"
        );
    }
    let stored: IdSpaceMembership =
        serde_json::from_value(seen[status_at].body.clone()).expect("a membership");
    let status = stored.status.expect("a status");
    assert!(
        !pending(&status),
        "FencesRaised=True once every Lease is raised"
    );
    let raised = status
        .conditions
        .iter()
        .find(|c| c.type_ == FENCES_RAISED)
        .expect("the condition");
    assert_eq!(
        (raised.status.as_str(), raised.reason.as_str()),
        ("True", "Raised")
    );
}

#[tokio::test]
async fn rule21_a_failed_raise_leaves_the_condition_false_so_nothing_is_assigned() {
    let m = went_back(now().0 + HOUR);
    let fake = FakeApi::new()
        .expect(Method::GET, SEQ_PATH, 200, json!(sequence()))
        .expect(
            Method::GET,
            LEASES,
            200,
            list(&[lease(0, 1_000, None), lease(1, 2_000, None)]),
        )
        .always(Method::POST, LEASES, 201, json!(lease(2, 0, None)))
        .always(
            Method::PUT,
            &format!("{LEASES}/orders-slot-0"),
            409,
            failure(409, "Conflict", "the object has been modified"),
        )
        .always(
            Method::PUT,
            &format!("{LEASES}/orders-slot-1"),
            409,
            failure(409, "Conflict", "the object has been modified"),
        );
    let err = raise_if_pending(&fake.client(), &m)
        .await
        .expect_err("not raised");
    assert!(
        err.to_string()
            .contains("no slot of the sequence is assigned"),
        "{err}"
    );
    fake.verify();
    assert!(
        fake.requests(&Method::PUT, STATUS).is_empty(),
        "FencesRaised stays False"
    );
    assert!(pending(m.status.as_ref().expect("a status")));
}

#[tokio::test]
async fn a_membership_whose_fences_never_went_back_reads_and_writes_nothing() {
    let mut m = went_back(now().0 + HOUR);
    if let Some(s) = m.status.as_mut() {
        s.conditions.clear();
    }
    let fake = FakeApi::new();
    assert_eq!(
        raise_if_pending(&fake.client(), &m).await.expect("nothing"),
        None
    );
    assert!(fake.seen().is_empty());
    assert_eq!(m.name_any(), "orders-space");
}
