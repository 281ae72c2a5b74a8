use super::*;

#[test]
fn the_waiting_for_slot_event_says_why_and_that_the_app_is_held() {
    let exhausted = waiting_for_slot_note(
        "orders",
        SLOT_WAIT_EVENT_AFTER,
        Some("2 pods wait for a free slot: all 4 slots are held"),
    );
    assert!(exhausted.contains("all 4 slots are held"), "{exhausted}");
    assert!(
        exhausted.contains("app containers start once"),
        "{exhausted}"
    );
    let slow = waiting_for_slot_note("orders", SLOT_WAIT_EVENT_AFTER, None);
    assert!(slow.contains("is kubeflake-operator running"), "{slow}");
    assert!(slow.contains("after 10 s"), "{slow}");
}
