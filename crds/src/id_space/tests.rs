//! The multi-cluster rules (docs/design/2026-11-29-multicluster.md, rules 17-21, planned),
//! as specifications of the pure core. The model checker is in `model_tests.rs`.

use super::*;
use crate::layout::{DatacenterId, Slot, Tick};
use crate::sequence::LayoutSpec;
use crate::timebase::TimeUnit;

/// A space over the default layout (41/0/10/12, 1 ms ticks): 16 blocks of 64 slots.
pub(super) fn default_spec() -> IdSpaceSpec {
    IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
}

/// The member's sequence, as its IdSequence's spec gives it.
pub(super) fn sequence_of(spec: &SpaceSequenceSpec) -> SpaceSequence {
    IdSpaceSpec {
        sequence: spec.clone(),
        ..default_spec()
    }
    .space()
    .map(|s| *s.sequence())
    .unwrap_or_else(|e| panic!("test sequence: {e}"))
}

pub(super) fn id(n: u32) -> MemberId {
    MemberId::new(&format!("3f1b2c4d-0000-4000-8000-{n:012}")).unwrap()
}

pub(super) fn name(n: u32) -> MemberName {
    MemberName::new(&format!("cluster-{n}")).unwrap()
}

fn space() -> Space {
    default_spec().space().unwrap()
}

fn request(n: u32, used: Vec<SlotUse>, now: u64) -> JoinRequest {
    JoinRequest {
        id: id(n),
        name: name(n),
        sequence: *space().sequence(),
        datacenter: DatacenterId(0),
        used,
        now: Tick(now),
    }
}

fn joined(registry: &Registry, n: u32, now: u64) -> Registry {
    join(&space(), registry, &request(n, vec![], now))
        .unwrap()
        .registry
}

fn held(slot: u32, fence: u64) -> SlotUse {
    SlotUse {
        slot: Slot(slot),
        fence: Tick(fence),
        held: true,
    }
}

const T0: u64 = 10_000_000;
/// Tolerance plus one renewal period, in 1 ms ticks.
const AHEAD: u64 = 3_900_000;

// ---------------------------------------------------------------- rule 17: blocks before slots

#[test]
fn rule17_a_member_issues_only_in_its_own_blocks_above_the_floor_and_up_to_the_bound() {
    let s = space();
    let reg = joined(&joined(&Registry::default(), 1, T0), 2, T0);
    let (reg, a) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let (reg, b) = reg.claim(&s, &id(2), Tick(T0)).unwrap();
    assert_ne!(a.block, b.block, "two members never hold one block");
    let one = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    let (dc, slots) = s.slots_of(a.block);
    let (_, others) = s.slots_of(b.block);
    let slot = Slot(slots.start);
    assert!(one.may_issue(&s, dc, slot, Tick(T0)));
    assert!(one.may_issue(&s, dc, slot, a.bound));
    assert!(
        !one.may_issue(&s, dc, slot, Tick(a.bound.0 + 1)),
        "never above the bound"
    );
    assert!(!one.may_issue(&s, dc, slot, a.floor), "never at the floor");
    assert!(
        !one.may_issue(&s, dc, Slot(others.start), Tick(T0)),
        "never in another's block"
    );
    assert!(
        one.assignable(&s, dc, Tick(T0), 120_000)
            .iter()
            .all(|x| slots.contains(&x.0)),
        "the operator assigns only slots of its own blocks"
    );
}

#[test]
fn rule17_a_slot_fence_is_capped_at_its_blocks_bound_and_a_holder_starts_above_the_floor() {
    let s = IdSpaceSpec {
        block_slots: 1024,
        ..default_spec()
    }
    .space()
    .unwrap();
    let join_as = |reg: &Registry, n| join(&s, reg, &request(n, vec![], T0)).unwrap().registry;
    let reg = join_as(&Registry::default(), 1);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let reg = join_as(&reg.forget(&id(1)).unwrap(), 2);
    let floor = reg.block(g.block).floor();
    assert_eq!(floor, g.bound);
    let (reg, again) = reg.claim(&s, &id(2), Tick(T0)).unwrap();
    assert_eq!(again.block, g.block, "the one block of this space");
    let two = LocalRecord::from_view(&reg.view_of(&id(2)).unwrap());
    let (dc, slots) = s.slots_of(g.block);
    let slot = Slot(slots.start);
    assert_eq!(two.start_above(&s, dc, slot, Tick(5)), Some(floor));
    assert_eq!(
        two.start_above(&s, dc, slot, Tick(floor.0 + 9)),
        Some(Tick(floor.0 + 9))
    );
    assert_eq!(two.fence_cap(&s, dc, slot), Some(again.bound));
    assert!(
        two.assignable(&s, dc, Tick(T0), 0).is_empty(),
        "floor not passed: no slot yet"
    );
    assert_eq!(two.assignable(&s, dc, Tick(floor.0 + 1), 0).len(), 1024);
    assert!(!two.may_issue(&s, dc, slot, floor));
    assert!(two.may_issue(&s, dc, slot, Tick(floor.0 + 1)));
}

#[test]
fn rule17_an_existing_sequence_with_the_default_layout_joins_keeping_its_pods_slots() {
    let s = space();
    let used = vec![
        held(0, T0 + 120_000),
        held(1, T0 + 90_000),
        SlotUse {
            slot: Slot(700),
            fence: Tick(T0 - 5),
            held: false,
        },
    ];
    let out = join(&s, &Registry::default(), &request(1, used, T0)).unwrap();
    assert_eq!(
        out.grants.len(),
        1,
        "slots 0 and 1 are in block 0, claimed at join"
    );
    let g = out.grants[0];
    assert_eq!(g.block, s.block(0).unwrap());
    assert!(g.bound >= Tick(T0 + AHEAD));
    let past = s.block_of(DatacenterId(0), Slot(700)).unwrap();
    assert_eq!(
        out.registry.block(past).floor(),
        Tick(T0 - 5),
        "used before: floor raised"
    );
    let local = LocalRecord::from_view(&out.registry.view_of(&id(1)).unwrap());
    assert!(local.may_issue(&s, DatacenterId(0), Slot(1), Tick(T0 + 1)));
}

#[test]
fn rule17_with_datacenter_bits_a_block_can_be_a_whole_datacenter_id() {
    let mut spec = default_spec();
    spec.sequence.layout = LayoutSpec {
        datacenter_bits: 2,
        worker_bits: 8,
        ..LayoutSpec::default()
    };
    spec.block_slots = 256;
    let s = spec.space().unwrap();
    assert_eq!(s.block_count(), 4);
    assert_eq!(s.reach(DatacenterId(2)), 2..3);
    let (dc, slots) = s.slots_of(s.block(3).unwrap());
    assert_eq!((dc, slots), (DatacenterId(3), 0..256));
    let mut req = request(1, vec![], T0);
    req.sequence = *s.sequence();
    req.datacenter = DatacenterId(2);
    let reg = join(&s, &Registry::default(), &req).unwrap().registry;
    let (_, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    assert_eq!(
        g.block,
        s.block(2).unwrap(),
        "a member claims only in its own datacenter"
    );
}

// ---------------------------------------------------------------- rule 18: hand-over above the bound

#[test]
fn rule18_a_reclaimed_block_starts_above_the_bound_the_hub_recorded_for_its_last_owner() {
    let s = space();
    let reg = joined(&joined(&Registry::default(), 1, T0), 2, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let after = Tick(g.bound.0 + 1);
    let reg = reg.reclaim(g.block, after).unwrap();
    assert_eq!(
        reg.block(g.block),
        &BlockState::Free {
            term: g.term,
            floor: g.bound
        }
    );
    let (_, next) = reg.claim(&s, &id(2), after).unwrap();
    let (_, first) = reg.claim(&s, &id(2), after).unwrap();
    assert!(next.block != g.block || next.floor >= g.bound);
    assert!(first.floor >= Tick(0));
    // Every block but g's is never used: g's is chosen only when its floor has passed, and
    // then its new owner starts above the old bound.
    let mut reg = reg;
    loop {
        let (r, claimed) = reg.claim(&s, &id(2), after).unwrap();
        reg = r;
        if claimed.block == g.block {
            assert_eq!(
                claimed.floor, g.bound,
                "the new owner starts above the old bound"
            );
            assert_eq!(claimed.term, g.term + 1);
            break;
        }
    }
}

#[test]
fn rule18_a_released_block_starts_above_its_bound_whatever_the_member_issued() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let reg = reg.release(&id(1), g.block, g.term).unwrap();
    assert_eq!(reg.block(g.block).floor(), g.bound);
}

#[test]
fn rule18_forgetting_a_member_hands_back_every_block_above_its_bound_even_while_it_runs() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, a) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let (reg, b) = reg.claim(&s, &id(1), Tick(T0 + 7)).unwrap();
    let gone = reg.forget(&id(1)).unwrap();
    assert!(gone.member(&id(1)).is_none());
    assert_eq!(gone.block(a.block).floor(), a.bound);
    assert_eq!(gone.block(b.block).floor(), b.bound);
    assert_eq!(
        gone.renew(&s, &id(1), a.block, a.term, Tick(T0 + 9)),
        Err(RegistryError::UnknownMember(id(1))),
        "a forgotten member that still runs cannot extend its bound"
    );
}

#[test]
fn rule18_only_the_owner_in_its_term_renews_or_releases() {
    let s = space();
    let reg = joined(&joined(&Registry::default(), 1, T0), 2, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let not_owner = RegistryError::NotOwner {
        block: g.block.get(),
        term: g.term,
    };
    assert_eq!(
        reg.renew(&s, &id(2), g.block, g.term, Tick(T0)),
        Err(not_owner.clone())
    );
    assert_eq!(reg.release(&id(2), g.block, g.term), Err(not_owner));
    let old_term = reg.reclaim(g.block, Tick(g.bound.0 + 1)).unwrap().renew(
        &s,
        &id(1),
        g.block,
        g.term,
        Tick(g.bound.0 + 2),
    );
    assert!(
        matches!(old_term, Err(RegistryError::NotOwner { .. })),
        "{old_term:?}"
    );
    let one = joined(&Registry::default(), 1, T0);
    let (one, first) = one.claim(&s, &id(1), Tick(T0)).unwrap();
    let one = one.release(&id(1), first.block, first.term).unwrap();
    let one = (0..16).fold(one, |r, _| r.claim(&s, &id(1), Tick(T0)).unwrap().0);
    assert!(
        matches!(
            one.renew(&s, &id(1), first.block, first.term, Tick(T0)),
            Err(RegistryError::NotOwner { .. })
        ),
        "the same member holding the block again, in a later term, cannot renew the old one"
    );
}

#[test]
fn rule18_a_block_is_reclaimed_only_once_its_bound_has_passed() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let err = reg.reclaim(g.block, g.bound).unwrap_err();
    assert!(
        err.to_string().contains("can be reclaimed only once"),
        "{err}"
    );
    assert_eq!(
        reg.reclaim(s.block(15).unwrap(), g.bound),
        Err(RegistryError::NotHeld(15))
    );
}

#[test]
fn rule18_the_floor_never_goes_down_and_a_bound_never_goes_down_in_a_term() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let (reg, earlier) = reg
        .renew(&s, &id(1), g.block, g.term, Tick(T0 - 1000))
        .unwrap();
    assert_eq!(
        earlier.bound, g.bound,
        "a renewal by a clock behind keeps the bound"
    );
    let (reg, later) = reg
        .renew(&s, &id(1), g.block, g.term, Tick(T0 + 1000))
        .unwrap();
    assert_eq!(later.bound, Tick(g.bound.0 + 1000));
    let reg = reg.release(&id(1), g.block, g.term).unwrap();
    let (reg, again) = reg.claim(&s, &id(1), Tick(T0 + 2000)).unwrap();
    assert_ne!(
        again.block, g.block,
        "a block whose floor is ahead is taken last"
    );
    let mut local = LocalRecord::default();
    local.learn(later, 3, 3);
    local.learn(earlier, 2, 2);
    assert_eq!(local.grants().next().map(|g| g.bound), Some(later.bound));
    assert!(reg.block(g.block).floor() >= later.bound);
}

#[test]
fn rule18_join_raises_the_floor_of_blocks_the_joiner_used_before_and_held_by_nobody() {
    let s = space();
    let used = vec![SlotUse {
        slot: Slot(130),
        fence: Tick(T0 + 50),
        held: false,
    }];
    let reg = join(&s, &Registry::default(), &request(1, used, T0))
        .unwrap()
        .registry;
    let block = s.block_of(DatacenterId(0), Slot(130)).unwrap();
    assert_eq!(reg.block(block).floor(), Tick(T0 + 50));
}

// ---------------------------------------------------------------- rule 19: the hub off the path

#[test]
fn rule19_a_member_cut_off_right_before_a_renewal_still_issues_for_the_whole_tolerance() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let mut local = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    let renew_every = 300_000;
    assert!(local.due(&s, Tick(T0 + renew_every - 1)).is_empty());
    assert_eq!(
        local.due(&s, Tick(T0 + renew_every + 1)),
        vec![(g.block, g.term)]
    );
    let (_, renewed) = reg
        .renew(&s, &id(1), g.block, g.term, Tick(T0 + renew_every))
        .unwrap();
    local.learn(renewed, 3, 3);
    // Cut off just before the next renewal would have run: still an hour to go.
    let cut = T0 + 2 * renew_every - 1;
    let (dc, slots) = s.slots_of(g.block);
    assert!(local.may_issue(&s, dc, Slot(slots.start), Tick(cut + 3_600_000)));
}

#[test]
fn rule19_a_spare_block_is_wanted_before_the_slots_run_out() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let local = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    assert!(
        local.wants_spare(&s, DatacenterId(0), Tick(T0 + 1), 1),
        "one block, one pod: claim a spare"
    );
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let local = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    assert!(!local.wants_spare(&s, DatacenterId(0), Tick(T0 + 1), 64));
    assert!(local.wants_spare(&s, DatacenterId(0), Tick(T0 + 1), 65));
}

#[test]
fn rule19_a_claim_of_a_block_whose_floor_is_ahead_gets_a_full_tolerance_above_that_floor() {
    let s = space();
    let used = (0..16).map(|b| SlotUse {
        slot: Slot(b * 64),
        fence: Tick(T0 + 1_000_000),
        held: false,
    });
    let reg = join(&s, &Registry::default(), &request(1, used.collect(), T0))
        .unwrap()
        .registry;
    let (_, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    assert_eq!(g.floor, Tick(T0 + 1_000_000));
    assert_eq!(g.bound, Tick(T0 + 1_000_000 + AHEAD));
}

// ---------------------------------------------------------------- rule 20: one identity, one sequence

#[test]
fn rule20_a_second_cluster_with_the_same_identity_is_refused_and_told_what_to_fix() {
    let reg = joined(&Registry::default(), 1, T0);
    let mut twin = request(1, vec![], T0);
    twin.name = name(2);
    let err = join(&space(), &reg, &twin).unwrap_err();
    assert!(matches!(err, JoinError::DuplicateIdentity { .. }));
    let text = err.to_string();
    assert!(
        text.contains("etcd backup") && text.contains("cluster.clusterset.k8s.io"),
        "{text}"
    );
}

#[test]
fn rule20_a_name_taken_by_another_identity_is_refused() {
    let reg = joined(&Registry::default(), 1, T0);
    let mut other = request(2, vec![], T0);
    other.name = name(1);
    let err = join(&space(), &reg, &other).unwrap_err();
    assert!(matches!(err, JoinError::NameTaken { .. }));
    assert!(
        err.to_string().contains("kubectl kubeflake hub forget"),
        "{err}"
    );
}

#[test]
fn rule20_the_same_cluster_joining_again_changes_nothing() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let again = join(&s, &reg, &request(1, vec![held(0, T0)], T0 + 5)).unwrap();
    assert!(again.already);
    assert_eq!(again.registry, reg);
    assert_eq!(again.grants, vec![g]);
}

#[test]
fn rule20_members_that_disagree_on_layout_epoch_time_unit_or_mode_are_refused() {
    let s = space();
    let base = SpaceSequenceSpec::default();
    let cases: Vec<(SpaceSequenceSpec, &str)> = vec![
        (
            SpaceSequenceSpec {
                layout: LayoutSpec {
                    worker_bits: 11,
                    sequence_bits: 11,
                    ..LayoutSpec::default()
                },
                ..base.clone()
            },
            "workerBits 11",
        ),
        (
            SpaceSequenceSpec {
                epoch: "2024-01-01T00:00:00Z".into(),
                ..base.clone()
            },
            "epoch 2024-01-01",
        ),
        (
            SpaceSequenceSpec {
                time_unit: TimeUnit::TenMilliseconds,
                ..base.clone()
            },
            "10ms",
        ),
    ];
    for (member, says) in cases {
        let mut req = request(1, vec![], T0);
        req.sequence = sequence_of(&member);
        let err = join(&s, &Registry::default(), &req).unwrap_err();
        assert!(err.to_string().contains(says), "{err} should say {says}");
    }
    let mut req = request(1, vec![], T0);
    req.sequence.mode = crate::sequence::Mode::Segment;
    let err = join(&s, &Registry::default(), &req).unwrap_err();
    assert!(matches!(err, JoinError::ModeDiffers { .. }), "{err}");
}

#[test]
fn rule20_strict_sequences_neither_join_nor_make_a_space() {
    let mut req = request(1, vec![], T0);
    req.sequence.strict = true;
    assert_eq!(
        join(&space(), &Registry::default(), &req),
        Err(JoinError::Strict)
    );
    let mut spec = default_spec();
    spec.sequence.strict = true;
    assert_eq!(
        spec.space(),
        Err(RecordError::Space(SpaceError::StrictCannotSpan))
    );
}

#[test]
fn rule20_a_block_larger_than_the_slot_space_and_other_bad_parameters_are_refused() {
    let with = |f: &dyn Fn(&mut IdSpaceSpec)| {
        let mut spec = default_spec();
        f(&mut spec);
        spec.space().unwrap_err().to_string()
    };
    let text = with(&|s| s.block_slots = 2048);
    assert!(
        text.contains("larger than the slot space") && text.contains("at most 1024"),
        "{text}"
    );
    assert!(with(&|s| s.block_slots = 48).contains("power of two"));
    assert!(with(&|s| s.block_slots = 0).contains("power of two"));
    assert!(with(&|s| s.block_slots = -64).contains("power of two"));
    let text = with(&|s| {
        s.sequence.layout = LayoutSpec {
            datacenter_bits: 10,
            worker_bits: 16,
            sequence_bits: 0,
            timestamp_bits: 37,
            ..LayoutSpec::default()
        };
        s.block_slots = 1;
    });
    assert!(
        text.contains("raise blockSlots to at least 16384"),
        "{text}"
    );
    assert!(with(&|s| s.tolerance_seconds = 59).contains("between 60 and 2592000"));
    assert!(with(&|s| s.renew_every_seconds = 1900).contains("half of toleranceSeconds"));
    let err = space().check_want(DatacenterId(0), 17).unwrap_err();
    assert!(err.to_string().contains("has only 16"), "{err}");
}

#[test]
fn rule20_a_held_slot_in_another_members_block_is_refused_saying_how_to_join() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, g) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let slot = s.slots_of(g.block).1.start + 3;
    let err = join(&s, &reg, &request(2, vec![held(slot, T0)], T0)).unwrap_err();
    assert!(matches!(err, JoinError::HeldSlotInOthersBlock { .. }));
    assert!(err.to_string().contains(&format!("slot {slot}")), "{err}");
    let fenced = SlotUse {
        slot: Slot(slot),
        fence: Tick(T0 + 10),
        held: false,
    };
    let err = join(&s, &reg, &request(2, vec![fenced], T0)).unwrap_err();
    assert!(
        matches!(err, JoinError::FencedSlotInOthersBlock { .. }),
        "{err}"
    );
    let reg = reg.forget(&id(1)).unwrap();
    let err = join(&s, &reg, &request(2, vec![held(slot, T0)], T0)).unwrap_err();
    assert!(
        matches!(err, JoinError::HeldSlotBlockFenced { .. }),
        "{err}"
    );
}

#[test]
fn rule20_bad_identities_and_names_are_refused_with_what_to_use() {
    for bad in ["", "Prod", "a_b", "-a", "a.", &"x".repeat(129)] {
        let err = MemberId::new(bad).unwrap_err();
        assert!(err.to_string().contains("kube-system"), "{err}");
    }
    assert!(MemberId::new("prod-eu.example.com").is_ok());
    for bad in ["", "a.b", "Prod", &"x".repeat(64)] {
        assert!(
            MemberName::new(bad)
                .unwrap_err()
                .to_string()
                .contains("DNS label")
        );
    }
}

// ---------------------------------------------------------------- rule 21: records that went back

#[test]
fn rule21_a_member_whose_copy_went_back_is_told_to_take_the_hubs_view() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let old = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let now = reg.view_of(&id(1)).unwrap();
    assert_eq!(
        check_hub(&LocalRecord::from_view(&now), &now),
        HubCheck::Current
    );
    assert_eq!(
        check_hub(&old, &now),
        HubCheck::LocalBehind { local: 1, hub: 2 }
    );
}

/// A member forgotten on the hub (`hub forget`) while it still ran joins again; its etcd
/// restored later to a snapshot from before the forget holds a copy of the old entry. That
/// copy went back: it must never match the new entry, whatever the old one's generation
/// was. The new entry starts at the registry's new revision, above every generation an
/// earlier entry reached (had it started at 1, a copy of an entry that never wrote after
/// its join, at generation 1, would pass as current).
#[test]
fn rule21_a_copy_from_before_the_member_was_forgotten_never_matches_its_new_entry() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let quiet = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let busy = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    let again = joined(&reg.forget(&id(1)).unwrap(), 1, T0);
    let now = again.view_of(&id(1)).unwrap();
    for before_forget in [quiet, busy] {
        assert!(
            before_forget.generation < now.generation,
            "{before_forget:?} {now:?}"
        );
        assert_eq!(
            check_hub(&before_forget, &now),
            HubCheck::LocalBehind {
                local: before_forget.generation,
                hub: now.generation
            }
        );
    }
}

/// A copy ahead of the hub's entry, with no `hub recover` since it, is not the hub's
/// either: taken as gone back (defence in depth: the member writes the hub before its
/// copy, and a new entry starts above every earlier generation).
#[test]
fn rule21_a_copy_ahead_of_its_entry_is_told_to_take_the_hubs_view() {
    let s = space();
    let reg = joined(&Registry::default(), 1, T0);
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let view = reg.view_of(&id(1)).unwrap();
    let mut ahead = LocalRecord::from_view(&view);
    ahead.generation += 3;
    assert_eq!(
        check_hub(&ahead, &view),
        HubCheck::LocalBehind {
            local: view.generation + 3,
            hub: view.generation
        }
    );
}

#[test]
fn rule21_a_hub_registry_restored_from_a_backup_is_caught_by_members() {
    let s = space();
    let backup = joined(&Registry::default(), 1, T0);
    let (reg, _) = backup.claim(&s, &id(1), Tick(T0)).unwrap();
    let local = LocalRecord::from_view(&reg.view_of(&id(1)).unwrap());
    let restored = backup.view_of(&id(1)).unwrap();
    assert_eq!(
        check_hub(&local, &restored),
        HubCheck::HubWentBack { seen: 2, hub: 1 }
    );
}

#[test]
fn rule21_a_stored_registry_that_breaks_an_invariant_is_refused_whole() {
    let s = space();
    let reg = joined(&joined(&Registry::default(), 1, T0), 2, T0);
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let good = reg.to_record();
    type Break = fn(&mut RegistryRecord);
    let broken: Vec<(Break, &str)> = vec![
        (
            |r| r.blocks[0].owner = Some("3f1b2c4d-0000-4000-8000-000000000009".into()),
            "not a member",
        ),
        (
            |r| r.blocks[0].bound = Some(r.blocks[0].floor),
            "at or below its floor",
        ),
        (|r| r.blocks[0].bound = None, "owner without a bound"),
        (|r| r.blocks[0].floor = -1, "floor is -1"),
        (|r| r.blocks[0].index = 16, "block index is 16"),
        (|r| r.blocks.push(r.blocks[0].clone()), "block 0 twice"),
        (
            |r| r.members[1].name = r.members[0].name.clone(),
            "member name cluster-1 twice",
        ),
        (|r| r.members[1].id = r.members[0].id.clone(), "twice"),
        (|r| r.members[0].id = "Not An ID".into(), "not a cluster ID"),
    ];
    for (breaks, says) in broken {
        let mut record = good.clone();
        breaks(&mut record);
        let spec = IdSpaceSpec {
            registry: record,
            ..default_spec()
        };
        let err = spec.registry(&s).unwrap_err().to_string();
        assert!(err.contains(says), "{err} should say {says}");
    }
}

#[test]
fn the_registry_round_trips_through_its_stored_record() {
    let s = space();
    let reg = joined(&joined(&Registry::default(), 1, T0), 2, T0);
    let (reg, _) = reg.claim(&s, &id(1), Tick(T0)).unwrap();
    let (reg, g) = reg.claim(&s, &id(2), Tick(T0)).unwrap();
    let reg = reg.release(&id(2), g.block, g.term).unwrap();
    let spec = IdSpaceSpec {
        registry: reg.to_record(),
        ..default_spec()
    };
    let text = serde_json::to_string(&spec).unwrap();
    let back: IdSpaceSpec = serde_json::from_str(&text).unwrap();
    assert_eq!(back.registry(&s).unwrap(), reg);
}

#[test]
fn the_idspace_resource_has_a_schema_and_a_minimal_spec_takes_the_defaults() {
    use kube::CustomResourceExt;
    let crd = IdSpace::crd();
    assert_eq!(crd.spec.names.kind, "IdSpace");
    let spec: IdSpaceSpec = serde_json::from_str(r#"{"sequence": {}, "blockSlots": 64}"#).unwrap();
    assert_eq!(spec, default_spec());
    assert_eq!(spec.space().unwrap().block_count(), 16);
}

#[test]
fn rule21_a_copy_restored_into_another_cluster_is_refused_until_that_cluster_joins() {
    assert_eq!(check_cluster(&id(1), &id(1)), Ok(()));
    let err = check_cluster(&id(1), &id(2)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("restored or copied") && text.contains("hub join"),
        "{text}"
    );
}

#[test]
fn rule21_recovering_a_restored_hub_puts_every_floor_above_any_bound_a_member_can_hold() {
    let s = space();
    let backup = joined(&joined(&Registry::default(), 1, T0), 2, T0);
    let (backup, early) = backup.claim(&s, &id(1), Tick(T0)).unwrap();
    // After the backup: more claims and renewals, up to T1.
    let t1 = T0 + 5_000_000;
    let (live, _) = backup
        .renew(&s, &id(1), early.block, early.term, Tick(t1))
        .unwrap();
    let (live, late) = live.claim(&s, &id(2), Tick(t1)).unwrap();
    let highest = live
        .view_of(&id(1))
        .unwrap()
        .grants
        .into_iter()
        .chain([late])
        .map(|g| g.bound)
        .max()
        .unwrap();
    // The hub is restored to the backup, which knows nothing of `late`, and recovered at T1.
    let recovered = backup.recover_after_restore(&s, Tick(t1), 0);
    assert!(recovered.revision() > backup.revision());
    for block in s.blocks() {
        assert!(
            matches!(recovered.block(block), BlockState::Free { floor, .. } if *floor >= highest),
            "block {} must start above {highest:?}: {:?}",
            block.get(),
            recovered.block(block)
        );
    }
    assert!(recovered.member(&id(2)).is_some(), "memberships are kept");
    // Member 2 saw the revision of its claim after the backup; the recovered registry
    // must not look older to it, or it would never claim again (`HubWentBack` for ever).
    let seen_after_backup = LocalRecord::from_view(&live.view_of(&id(2)).unwrap());
    assert_eq!(
        check_hub(&seen_after_backup, &recovered.view_of(&id(2)).unwrap()),
        HubCheck::Current,
        "a member that saw revision {} must take the recovered registry (revision {}) as newer",
        live.revision(),
        recovered.revision()
    );
}
