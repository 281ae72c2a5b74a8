//! Rule 17, the pure side: what a joined sequence's plan hands out, with which limits, and
//! when it hands out nothing. The default layout (1,024 slots, no datacenter bits) in
//! blocks of 64: block 2 is slots 128..192.

use std::collections::BTreeSet;

use kubeflake_crds::id_space::membership::SpaceRef;
use kubeflake_crds::id_space::membership::{GrantRecord, IdSpaceMembershipStatus};
use kubeflake_crds::id_space::{IdSpaceMembershipSpec, IdSpaceSpec, SpaceSequenceSpec};

use kubeflake_crds::id_space::{IdSpaceMembership, MemberId, Space};
use kubeflake_crds::layout::DatacenterId;
use kubeflake_crds::slot_lease::{BlockLimits, SlotLease};
use kubeflake_crds::{Slot, Tick};

use super::{Observed, Plan, PodInfo, ReleaseReason, Step, plan};
use crate::controller::id_spaces::blocks::{Blocks, Membership, Waiting, blocks};

const NOW: u64 = 100_000;
const LEASE_TICKS: u64 = 15_000;
/// [`NOW`] and [`LEASE_TICKS`] as a stored grant writes them.
const NOW_I: i64 = NOW as i64;
const LEASE_TICKS_I: i64 = LEASE_TICKS as i64;

fn space() -> Space {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
        .space()
        .expect("test space")
}

fn cluster(id: &str) -> MemberId {
    MemberId::new(id).expect("a member ID")
}

/// A membership whose copy, made by `made_by`, holds `grants` (block, floor, bound).
fn membership(name: &str, made_by: &str, grants: &[(i64, i64, i64)]) -> IdSpaceMembership {
    let mut status = IdSpaceMembershipStatus {
        member_id: Some(made_by.into()),
        grants: grants
            .iter()
            .map(|&(block, floor, bound)| GrantRecord {
                block,
                term: 1,
                floor,
                bound,
            })
            .collect(),
        ..Default::default()
    };
    status.keep_space(&space());
    let mut m = IdSpaceMembership::new(
        name,
        IdSpaceMembershipSpec {
            sequence: "s".into(),
            member_name: "prod".into(),
            space: SpaceRef {
                namespace: "hub".into(),
                name: "orders".into(),
            },
            hub_secret: "hub".into(),
        },
    );
    m.status = Some(status);
    m
}

fn decide(found: &[&IdSpaceMembership], this: &MemberId) -> Blocks {
    decide_with(found, found, Ok(this), true, LEASE_TICKS)
}

/// What `blocks` decides for the memberships `found` that name the sequence, among `all`
/// of this cluster (`this`), every copy compared with the hub or none (`checked`), a slot
/// lease `min_ahead` ticks long.
fn decide_with(
    found: &[&IdSpaceMembership],
    all: &[&IdSpaceMembership],
    this: Result<&MemberId, String>,
    checked: bool,
    min_ahead: u64,
) -> Blocks {
    blocks(&Membership {
        found,
        all,
        hub_checked: &|_| checked,
        this,
        sequence: *space().sequence(),
        datacenter: DatacenterId(0),
        now: Tick(NOW),
        min_ahead,
    })
}

/// This cluster ("a") holding block 2 from tick 50,000 to 200,000.
fn joined() -> Blocks {
    decide(
        &[&membership("m", "a", &[(2, 50_000, 200_000)])],
        &cluster("a"),
    )
}

fn pod(name: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: chrono::DateTime::from_timestamp(i64::from(name.as_bytes()[0]), 0),
        leaving: false,
    }
}

fn lease(slot: u32, holder: Option<&str>, fence: u64, cap: Option<u64>) -> SlotLease {
    SlotLease {
        name: format!("s-slot-{slot}"),
        slot: Slot(slot),
        holder: holder.map(|h| format!("uid-{h}")),
        holder_pod: holder.map(String::from),
        fence: Tick(fence),
        fence_cap: cap.map(Tick),
        transitions: 1,
        resource_version: Some("1".into()),
        released_at: None,
        format: 1,
        read: Default::default(),
    }
}

fn plan_with(blocks: &Blocks, leases: &[SlotLease], pods: &[PodInfo]) -> Plan {
    plan(&Observed {
        capacity: 1024,
        leases,
        pods,
        silent: &BTreeSet::new(),
        now: Tick(NOW),
        assign: true,
        taken: &BTreeSet::new(),
        blocks,
    })
}

fn assigned(plan: &Plan) -> Vec<(u32, Option<BlockLimits>)> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            Step::Assign { slot, limits, .. } => Some((slot.0, *limits)),
            _ => None,
        })
        .collect()
}

fn limits(start_above: u64, cap: u64) -> Option<BlockLimits> {
    Some(BlockLimits::new(Tick(start_above), Tick(cap)).expect("room"))
}

#[test]
fn rule17_a_joined_sequence_assigns_only_inside_its_blocks_never_in_another_members() {
    // Slot 0's free lease (fence passed) would come first for a lone sequence; block 0 is
    // another member's.
    let leases = [lease(0, None, 10, None)];
    let pods: Vec<PodInfo> = ["a", "b", "c"].into_iter().map(pod).collect();
    let slots: Vec<u32> = assigned(&plan_with(&joined(), &leases, &pods))
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(slots, [128, 129, 130]);
    // More pods than the block has slots: the rest wait; none goes outside the block.
    let many: Vec<PodInfo> = (0..70).map(|i| pod(&format!("p{i:02}"))).collect();
    let planned = plan_with(&joined(), &leases, &many);
    let slots: BTreeSet<u32> = assigned(&planned).into_iter().map(|(s, _)| s).collect();
    assert_eq!(slots, (128..192).collect());
    assert_eq!(planned.still_waiting, 6);
}

#[test]
fn rule17_a_new_holders_fence_starts_at_the_blocks_floor_and_carries_the_cap() {
    let pods = [pod("a"), pod("b")];
    // Slot 128's free lease has a fence above the floor: the new holder starts above it.
    let leases = [lease(128, None, 70_000, None)];
    assert_eq!(
        assigned(&plan_with(&joined(), &leases, &pods)),
        [
            (128, limits(70_000, 200_000)),
            (129, limits(50_000, 200_000))
        ]
    );
    // A lone sequence carries no limits.
    assert_eq!(
        assigned(&plan_with(&Blocks::Lone, &[], &pods)),
        [(0, None), (1, None)]
    );
}

#[test]
fn rule17_a_grant_with_no_room_or_too_near_its_bound_gives_no_slot() {
    // Slot 128's fence is at the bound: no tick left for a new holder (NoRoom).
    let leases = [lease(128, None, 200_000, None)];
    let slots: Vec<u32> = assigned(&plan_with(&joined(), &leases, &[pod("a")]))
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(slots, [129]);
    // A bound less than a lease duration away: the block is not used at all.
    let near = decide(
        &[&membership(
            "m",
            "a",
            &[(2, 50_000, NOW_I + LEASE_TICKS_I - 1)],
        )],
        &cluster("a"),
    );
    let planned = plan_with(&near, &[], &[pod("a")]);
    assert_eq!((assigned(&planned).len(), planned.still_waiting), (0, 1));
    // A floor not passed yet: not used either.
    let early = decide(
        &[&membership("m", "a", &[(2, NOW_I, 200_000)])],
        &cluster("a"),
    );
    assert_eq!(assigned(&plan_with(&early, &[], &[pod("a")])), []);
}

/// A slot lease longer than the space keeps a bound ahead could never be assigned: said,
/// with what to change, instead of waiting for ever without a reason.
#[test]
fn a_slot_lease_longer_than_the_spaces_bound_distance_waits_and_says_which_setting_to_change() {
    let reach_ms = (space().tolerance_secs() + space().renew_every_secs()) * 1000;
    let member = membership("m", "a", &[(2, 50_000, 200_000)]);
    let with_lease = |lease_ticks: u64| {
        decide_with(&[&member], &[&member], Ok(&cluster("a")), true, lease_ticks)
    };
    let Blocks::Waiting(waiting) = with_lease(reach_ms + 1) else {
        panic!("a lease longer than the bound distance must wait");
    };
    let message = waiting.to_string();
    assert!(
        message.contains("spec.lease.durationSeconds") && message.contains("3900 s"),
        "{message}"
    );
    assert!(
        matches!(with_lease(reach_ms), Blocks::Joined(_)),
        "a lease as long as the bound distance may still be assigned right after a renewal"
    );
}

#[test]
fn rule17_a_renewed_grant_raises_the_cap_of_held_leases() {
    let leases = [
        lease(128, Some("a"), 90_000, Some(150_000)), // cap below the bound: raised
        lease(129, Some("b"), 90_000, None),          // held since before the join: capped
        lease(130, Some("c"), 90_000, Some(200_000)), // already at the bound
        lease(131, Some("gone"), 90_000, Some(150_000)), // released this pass instead
        lease(5, Some("d"), 90_000, None),            // outside the blocks held
    ];
    let pods = [pod("a"), pod("b"), pod("c"), pod("d")];
    let raised: Vec<(u32, u64)> = plan_with(&joined(), &leases, &pods)
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::RaiseCap { lease, cap } => Some((lease.slot.0, cap.0)),
            _ => None,
        })
        .collect();
    assert_eq!(raised, [(128, 200_000), (129, 200_000)]);
    // A lone sequence raises nothing.
    let planned = plan_with(&Blocks::Lone, &leases, &pods);
    assert!(
        !planned
            .steps
            .iter()
            .any(|s| matches!(s, Step::RaiseCap { .. }))
    );
}

#[test]
fn rule17_a_holder_outside_the_blocks_held_now_is_released_so_its_pod_gets_a_slot_inside() {
    // Block 2 (slots 128-191) is held from tick 50,000 to 200,000.
    let leases = [
        // Block 0 was reclaimed while this member was cut off: its holder stopped at its
        // cap and would refuse for ever.
        lease(5, Some("d"), 90_000, Some(100_000)),
        // Block 2 was lost and is held again in a later term (floor 50,000): a cap from
        // the earlier term must not be raised, or the holder would issue below the floor.
        lease(130, Some("e"), 40_000, Some(45_000)),
        // Held in this term: kept, its cap raised.
        lease(131, Some("f"), 60_000, Some(150_000)),
    ];
    let pods = [pod("d"), pod("e"), pod("f")];
    let planned = plan_with(&joined(), &leases, &pods);
    assert_eq!(
        super::tests::released(&planned),
        [
            (5, ReleaseReason::OutsideBlocks),
            (130, ReleaseReason::OutsideBlocks)
        ]
    );
    let raised: Vec<u32> = planned
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::RaiseCap { lease, .. } => Some(lease.slot.0),
            _ => None,
        })
        .collect();
    assert_eq!(raised, [131]);
    // Released, their pods wait and get slots inside block 2, above its floor.
    let freed = [
        lease(5, None, 90_000, Some(100_000)),
        lease(130, None, 40_000, Some(45_000)),
        leases[2].clone(),
    ];
    let next = assigned(&plan_with(&joined(), &freed, &pods));
    assert_eq!(next.len(), 2, "{next:?}");
    for (slot, limits) in next {
        assert!((128..192).contains(&slot), "slot {slot} is outside block 2");
        let limits = limits.expect("a joined sequence's slot carries its limits");
        assert!(limits.start_above() >= Tick(50_000), "{limits:?}");
    }
    // A lone sequence releases none of them.
    assert!(
        !plan_with(&Blocks::Lone, &leases, &pods)
            .steps
            .iter()
            .any(|s| matches!(s, Step::Release { .. }))
    );
}

#[test]
fn rule17_a_membership_without_a_usable_copy_assigns_no_slot_and_says_why() {
    let a = cluster("a");
    let mut no_status = membership("m", "a", &[]);
    no_status.status = None;
    let mut no_space = membership("m", "a", &[(2, 50_000, 200_000)]);
    if let Some(s) = no_space.status.as_mut() {
        s.block_slots = None;
    }
    let mut unjoined = membership("m", "a", &[]);
    if let Some(s) = unjoined.status.as_mut() {
        s.member_id = None;
    }
    let other = membership("m", "b", &[(2, 50_000, 200_000)]);
    let bad = membership("m", "a", &[(99, 50_000, 200_000)]);
    let second = membership("n", "a", &[(3, 50_000, 200_000)]);
    let good = membership("m", "a", &[(2, 50_000, 200_000)]);
    let cases: Vec<(Blocks, &str)> = vec![
        (decide(&[&no_status], &a), "holds no copy"),
        (decide(&[&no_space], &a), "holds no copy"),
        (decide(&[&unjoined], &a), "holds no copy"),
        (decide(&[&other], &a), "made by cluster b"),
        (decide(&[&bad], &a), "remove status.grants"),
        (decide(&[&good, &second], &a), "both name this sequence"),
        (
            decide_with(
                &[&good],
                &[&good],
                Err("forbidden".into()),
                true,
                LEASE_TICKS,
            ),
            "cannot read its cluster's ID",
        ),
    ];
    for (blocks, says) in cases {
        let Blocks::Waiting(why) = &blocks else {
            panic!("{says}: expected no usable copy, got {blocks:?}")
        };
        assert!(why.to_string().contains(says), "{why}");
        let planned = plan_with(&blocks, &[lease(128, None, 0, None)], &[pod("a")]);
        assert_eq!(
            (planned.steps.len(), planned.still_waiting),
            (0, 1),
            "{says}"
        );
        assert!(blocks.needs_current_sidecars());
    }
}

/// Two sequences of one cluster joined to one space: the hub sees one member (the cluster),
/// so both would take the same blocks and repeat each other's IDs. The earlier membership
/// keeps the blocks; the later one's sequence assigns nothing and says why.
#[test]
fn rule20_a_second_sequence_of_the_cluster_joined_to_the_same_space_assigns_no_slot() {
    let at = |secs: i64| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(secs).expect("a time"),
        )
    };
    let of = |ns: &str, sequence: &str, made: i64| {
        let mut m = membership(sequence, "a", &[(2, 50_000, 200_000)]);
        m.metadata.namespace = Some(ns.into());
        m.metadata.creation_timestamp = Some(at(made));
        m.spec.sequence = sequence.into();
        m
    };
    let shop = of("shop", "orders", 100);
    let billing = of("billing", "invoices", 200);
    let all = [&shop, &billing];
    let decide_in =
        |m: &IdSpaceMembership| decide_with(&[m], &all, Ok(&cluster("a")), true, LEASE_TICKS);
    assert!(
        matches!(decide_in(&shop), Blocks::Joined(_)),
        "the earlier keeps its blocks"
    );
    let Blocks::Waiting(waiting) = decide_in(&billing) else {
        panic!("the later membership must give no slot");
    };
    assert!(
        matches!(waiting, Waiting::SpaceJoinedTwice { .. }),
        "{waiting:?}"
    );
    assert!(waiting.to_string().contains("shop/orders"), "{waiting}");
    // Another space (its own hub Secret and IdSpace UID) is no conflict.
    let mut elsewhere = of("billing", "invoices", 200);
    elsewhere.spec.hub_secret = "other-hub".into();
    elsewhere.status.as_mut().expect("status").id_space_uid = Some("uid-other".into());
    let all = [&shop, &elsewhere];
    let own = decide_with(&[&elsewhere], &all, Ok(&cluster("a")), true, LEASE_TICKS);
    assert!(matches!(own, Blocks::Joined(_)), "{own:?}");
}

#[test]
fn rule17_a_sequence_no_membership_names_is_lone() {
    let lone = decide(&[], &cluster("a"));
    assert_eq!(lone, Blocks::Lone);
    assert!(!lone.needs_current_sidecars());
    assert!(joined().needs_current_sidecars());
}

/// A sequence whose membership was deleted is not lone again: its former blocks may be
/// another member's now, and a lone plan would assign any slot with no cap.
#[test]
fn rule17_a_sequence_that_left_its_id_space_assigns_no_slot_until_it_joins_again_or_is_made_again()
{
    use crate::controller::id_spaces::blocks::{Waiting, unnamed};
    use crate::controller::snowflake::status::set_id_space;
    use kubeflake_crds::IdSequenceSpec;
    use kubeflake_crds::sequence::IdSequence;
    let mut seq = IdSequence::new("s", IdSequenceSpec::default());
    assert_eq!(unnamed(&seq), Blocks::Lone, "never shared: lone, as before");
    let mut status = Default::default();
    set_id_space(&mut status, &seq, &Blocks::Waiting(Waiting::NotListed));
    seq.status = Some(status.clone());
    assert_eq!(
        unnamed(&seq),
        Blocks::Lone,
        "a pass before the memberships are listed marks nothing"
    );
    set_id_space(&mut status, &seq, &joined());
    seq.status = Some(status);
    let left = unnamed(&seq);
    assert_eq!(left, Blocks::Waiting(Waiting::LeftIdSpace));
    let plan = plan_with(&left, &[lease(0, None, 0, None)], &[pod("p")]);
    assert!(assigned(&plan).is_empty(), "no slot: {plan:?}");
    let message = Waiting::LeftIdSpace.to_string();
    assert!(
        message.contains("Join again") && message.contains("create it again"),
        "{message}"
    );
}

/// Rule 21 (docs/design/2026-11-29-multicluster.md): a copy that went back holds the
/// sequence's slots until the membership task has raised the slot fences.
#[test]
fn rule21_a_copy_that_went_back_assigns_no_slot_until_the_fences_are_raised() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = || Time(k8s_openapi::jiff::Timestamp::now());
    let mut behind = membership("m", "a", &[(2, 50_000, 200_000)]);
    let status = behind.status.as_mut().expect("a status");
    crate::hub::fences::mark_pending(status, None, at());
    let waiting = decide(&[&behind], &cluster("a"));
    let Blocks::Waiting(why) = &waiting else {
        panic!("expected no slot while the fences are not raised, got {waiting:?}")
    };
    assert!(
        why.to_string().contains("FencesRaised=False RaisePending"),
        "{why}"
    );
    let planned = plan_with(&waiting, &[lease(128, None, 0, None)], &[pod("a")]);
    assert_eq!((planned.steps.len(), planned.still_waiting), (0, 1));

    let status = behind.status.as_mut().expect("a status");
    crate::hub::conditions::set(
        &mut status.conditions,
        crate::hub::conditions::FENCES_RAISED,
        true,
        crate::hub::conditions::Reason::Raised,
        "raised",
        None,
        at(),
    );
    let raised = decide(&[&behind], &cluster("a"));
    assert_eq!(raised, joined(), "raised: the copy is used again");
}

/// After an operator start or a re-list, a copy the membership task has not compared with
/// the hub yet may be a restored one: no slot until it has (`hub/checks.rs`).
#[test]
fn rule21_a_copy_not_compared_with_the_hub_since_the_start_assigns_no_slot() {
    let member = membership("m", "a", &[(2, 50_000, 200_000)]);
    let with = |checked: bool| {
        decide_with(
            &[&member],
            &[&member],
            Ok(&cluster("a")),
            checked,
            LEASE_TICKS,
        )
    };
    let waiting = with(false);
    let Blocks::Waiting(why) = &waiting else {
        panic!("expected no slot before the hub check, got {waiting:?}")
    };
    assert!(why.to_string().contains("not compared"), "{why}");
    let planned = plan_with(&waiting, &[lease(128, None, 0, None)], &[pod("a")]);
    assert_eq!((planned.steps.len(), planned.still_waiting), (0, 1));
    assert_eq!(with(true), joined(), "compared: the copy is used");
}

/// The IdSequence's `IdSpace` condition repeats its membership's state with the hub.
#[test]
fn a_joined_sequence_shows_its_memberships_hub_state_in_its_id_space_condition() {
    use crate::controller::snowflake::status::{id_space, set_id_space};
    use crate::hub::conditions::{self, BLOCKS_LOW, READY, Reason as Hub};
    use kubeflake_crds::conditions::{ConditionStatus, Reason};
    use kubeflake_crds::sequence::{IdSequence, IdSequenceSpec};
    let at = || {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now())
    };
    let with = |ready: Option<(bool, Hub, &str)>, low: Option<&str>| {
        let mut m = membership("m", "a", &[(2, 50_000, 200_000)]);
        let status = m.status.as_mut().expect("a status");
        if let Some((value, reason, message)) = ready {
            conditions::set(
                &mut status.conditions,
                READY,
                value,
                reason,
                message,
                None,
                at(),
            );
        }
        if let Some(message) = low {
            conditions::set(
                &mut status.conditions,
                BLOCKS_LOW,
                true,
                Hub::NoFreeBlock,
                message,
                None,
                at(),
            );
        }
        decide(&[&m], &cluster("a"))
    };
    let joined_ok = Some((true, Hub::Joined, "the copy is the hub's"));
    let cases = [
        (
            with(joined_ok, None),
            Some((
                ConditionStatus::True,
                Reason::Joined,
                "the copy is the hub's",
            )),
        ),
        (
            with(joined_ok, Some("no free block")),
            Some((
                ConditionStatus::True,
                Reason::BlocksLow,
                "BlocksLow: no free block",
            )),
        ),
        (
            with(Some((false, Hub::HubUnreachable, "the hub is down")), None),
            Some((
                ConditionStatus::False,
                Reason::HubUnreachable,
                "the hub is down",
            )),
        ),
        (
            with(Some((false, Hub::JoinRefused, "taken name")), None),
            Some((ConditionStatus::False, Reason::JoinRefused, "taken name")),
        ),
        (
            with(None, None),
            Some((
                ConditionStatus::False,
                Reason::HubCheckPending,
                "has not reached the hub",
            )),
        ),
        (
            decide(&[&membership("m", "b", &[])], &cluster("a")),
            Some((
                ConditionStatus::False,
                Reason::NoUsableCopy,
                "made by cluster b",
            )),
        ),
        (decide(&[], &cluster("a")), None),
    ];
    for (blocks, expected) in cases {
        let got = id_space(&blocks);
        match (got, expected) {
            (None, None) => {}
            (Some((value, reason, message)), Some((v, r, says))) => {
                assert_eq!((value, reason), (v, r), "{message}");
                assert!(message.contains(says), "{message}");
            }
            (got, expected) => panic!("{got:?} != {expected:?}"),
        }
    }
    // A sequence that was joined and no longer is says so; one never joined shows nothing.
    let seq = IdSequence::new("s", IdSequenceSpec::default());
    let mut status = Default::default();
    set_id_space(&mut status, &seq, &Blocks::Lone);
    assert!(
        status.conditions.is_empty(),
        "a lone sequence gets no IdSpace condition"
    );
    set_id_space(&mut status, &seq, &with(joined_ok, None));
    assert_eq!(status.conditions[0].reason, "Joined");
    set_id_space(&mut status, &seq, &Blocks::Lone);
    assert_eq!(
        (
            status.conditions[0].status.as_str(),
            status.conditions[0].reason.as_str()
        ),
        ("False", "NotJoined")
    );
}
