//! docs/safety.md rule 17 on the slot Lease: a holder in an ID-space block starts above the
//! block's floor and never writes a fence above the block's bound.

use chrono::{DateTime, Utc};

use super::*;
use crate::IdSequence;
use crate::layout::Slot;
use crate::slot_lease::{Releaser, vacant};

const POD_A: Holder<'static> = Holder {
    uid: "uid-a",
    pod: "a",
};
const POD_B: Holder<'static> = Holder {
    uid: "uid-b",
    pod: "b",
};

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).expect("a time")
}

fn vacant_lease() -> SlotLease {
    let mut seq = IdSequence::new("orders", Default::default());
    seq.metadata.namespace = Some("shop".into());
    seq.metadata.uid = Some("seq-uid".into());
    SlotLease::parse(&vacant(&seq, Slot(3))).expect("a vacant slot lease parses")
}

fn parsed(lease: &Lease) -> SlotLease {
    SlotLease::parse(lease).expect("the written Lease parses")
}

fn limits(start_above: u64, cap: u64) -> BlockLimits {
    BlockLimits::new(Tick(start_above), Tick(cap)).expect("room for a tick")
}

fn given_in_block(start_above: u64, cap: u64) -> SlotLease {
    let lease = vacant_lease()
        .assign_in_block(
            POD_A,
            &IdSequenceSpec::default(),
            at(0),
            limits(start_above, cap),
        )
        .expect("a free slot is assigned");
    parsed(&lease)
}

#[test]
fn rule17_a_new_holder_in_a_block_starts_above_the_blocks_floor_and_is_capped_at_its_bound() {
    let held = given_in_block(1_000, 5_000);
    assert_eq!(held.fence, Tick(1_000), "the fence is raised to the floor");
    assert_eq!(held.fence_cap, Some(Tick(5_000)));
    assert_eq!(held.holder.as_deref(), Some("uid-a"));
}

#[test]
fn rule17_a_slot_fence_above_the_floor_is_kept_at_assignment_rule_9() {
    let used = parsed(
        &given_in_block(0, 9_000)
            .renew("uid-a", Tick(7_000), at(1))
            .expect("the holder renews"),
    );
    let freed = parsed(
        &used
            .release(Releaser::Operator { holder: "uid-a" }, at(2))
            .expect("the operator releases"),
    );
    let again = parsed(
        &freed
            .assign_in_block(
                POD_B,
                &IdSequenceSpec::default(),
                at(3),
                limits(2_000, 9_500),
            )
            .expect("a free slot is assigned"),
    );
    assert_eq!(again.fence, Tick(7_000), "never lowered to the floor");
    assert_eq!(again.fence_cap, Some(Tick(9_500)));
}

#[test]
fn rule17_the_holder_never_renews_its_fence_past_the_cap() {
    let held = given_in_block(0, 5_000);
    let renewed = parsed(&held.renew("uid-a", Tick(4_000), at(1)).expect("renews"));
    assert_eq!(renewed.fence, Tick(4_000), "below the cap: as asked");
    let capped = parsed(&renewed.renew("uid-a", Tick(6_000), at(2)).expect("renews"));
    assert_eq!(capped.fence, Tick(5_000), "asked past the cap: the cap");
    assert_eq!(
        capped.fence_cap,
        Some(Tick(5_000)),
        "the holder keeps the cap"
    );
}

#[test]
fn rule17_a_raised_cap_lets_the_holder_go_on_and_a_cap_never_goes_down() {
    let held = given_in_block(0, 5_000);
    let raised = parsed(
        &held
            .raise_cap(Tick(8_000))
            .expect("a higher cap is written"),
    );
    assert_eq!(raised.holder.as_deref(), Some("uid-a"), "holder unchanged");
    assert_eq!(raised.fence_cap, Some(Tick(8_000)));
    let renewed = parsed(&raised.renew("uid-a", Tick(7_500), at(1)).expect("renews"));
    assert_eq!(renewed.fence, Tick(7_500));
    assert!(matches!(
        renewed.raise_cap(Tick(7_800)),
        Err(CapError::Lower { .. })
    ));
}

#[test]
fn rule17_a_cap_below_the_fence_is_never_written() {
    let held = given_in_block(0, 5_000);
    let renewed = parsed(&held.renew("uid-a", Tick(4_000), at(1)).expect("renews"));
    let mut uncapped = renewed.clone();
    uncapped.fence_cap = None;
    assert!(matches!(
        uncapped.raise_cap(Tick(3_999)),
        Err(CapError::BelowFence { .. })
    ));
    assert!(
        uncapped.raise_cap(Tick(4_000)).is_ok(),
        "at the fence: allowed"
    );
}

#[test]
fn rule17_a_grant_with_no_tick_left_gives_no_limits() {
    assert_eq!(
        BlockLimits::new(Tick(5_000), Tick(5_000)),
        Err(NoRoom {
            start_above: Tick(5_000),
            cap: Tick(5_000)
        })
    );
    assert!(BlockLimits::new(Tick(4_999), Tick(5_000)).is_ok());
}

#[test]
fn a_slot_assigned_outside_any_block_carries_no_cap_from_an_earlier_assignment() {
    let held = given_in_block(0, 5_000);
    let freed = parsed(
        &held
            .release(Releaser::Operator { holder: "uid-a" }, at(1))
            .expect("released"),
    );
    let plain = parsed(
        &freed
            .assign(POD_B, &IdSequenceSpec::default(), at(2))
            .expect("assigned"),
    );
    assert_eq!(plain.fence_cap, None);
}

#[test]
fn rule11_an_unreadable_cap_makes_the_lease_unreadable() {
    let mut lease = Lease::clone(&given_in_block(0, 5_000).read);
    for bad in ["", "-1", "12abc", "36028797018963968"] {
        lease
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(FENCE_CAP_ANNOTATION.into(), bad.into());
        assert!(
            matches!(
                SlotLease::parse(&lease),
                Err(SlotLeaseError::BadFenceCap { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn rule21_after_a_restore_a_leases_fence_is_raised_to_the_target_but_never_past_the_bound() {
    let free = parsed(
        &given_in_block(0, 5_000)
            .release(Releaser::Operator { holder: "uid-a" }, at(1))
            .expect("released"),
    );
    let raised = parsed(
        &free
            .raise_after_restore(Tick(3_000), Tick(6_000))
            .expect("raised"),
    );
    assert_eq!(raised.fence, Tick(3_000));
    assert_eq!(
        raised.fence_cap,
        Some(Tick(6_000)),
        "the cap follows the hub's bound"
    );
    assert_eq!(raised.holder, None);
    let at_bound = parsed(
        &free
            .raise_after_restore(Tick(9_000), Tick(6_000))
            .expect("raised"),
    );
    assert_eq!(at_bound.fence, Tick(6_000), "never past the bound");
    assert_eq!(
        raised.raise_after_restore(Tick(2_000), Tick(6_000)),
        None,
        "never lowered"
    );
    let held = parsed(
        &given_in_block(0, 5_000)
            .renew("uid-a", Tick(4_000), at(1))
            .expect("renews"),
    );
    let raised = parsed(
        &held
            .raise_after_restore(Tick(4_500), Tick(5_000))
            .expect("raised"),
    );
    assert_eq!(
        (raised.fence, raised.holder.as_deref()),
        (Tick(4_500), Some("uid-a"))
    );
    assert_eq!(
        raised.raise_after_restore(Tick(4_400), Tick(4_000)),
        None,
        "neither the fence nor the cap goes down"
    );
    assert_eq!(
        free.raise_after_restore(Tick(9_000), Tick(0)),
        None,
        "a fence at or above the bound is left alone (a cap is never written below it)"
    );
}
