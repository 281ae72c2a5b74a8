use super::*;
use crate::clock::ManualClock;
use kubeflake_crds::{IdParts, TimeUnit};
use std::collections::HashSet;

const EPOCH_MS: u64 = 1_735_689_600_000;
const START_MS: u64 = EPOCH_MS + 1_000_000;

fn config(layout: Layout) -> WorkerConfig {
    WorkerConfig {
        layout,
        timebase: Timebase::new(EPOCH_MS, TimeUnit::Millisecond),
        datacenter: DatacenterId(0),
        slot: Slot(7),
        max_drift_ms: 2000,
    }
}

/// A generator at START_MS with a fence far ahead, and its clock.
fn generator_with(layout: Layout, found_fence: u64) -> (Generator, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(layout), Tick(found_fence), clock.clone()).unwrap();
    g.raise_fence(Tick(u64::MAX >> 2));
    (g, clock)
}

fn decode(g: &Generator, id: Id) -> IdParts {
    g.config().layout.decode(id).unwrap()
}

#[test]
fn rule7_ids_carry_wall_tick_slot_and_a_sequence_from_zero() {
    let (g, _) = generator_with(Layout::default(), 0);
    let a = decode(&g, g.next_id().unwrap());
    let b = decode(&g, g.next_id().unwrap());
    assert_eq!(a.tick, Tick(1_000_000));
    assert_eq!((a.slot, a.sequence), (Slot(7), 0));
    assert_eq!((b.tick, b.sequence), (Tick(1_000_000), 1));
}

#[test]
fn rule7_sequence_overflow_within_one_tick_borrows_the_next_tick_without_repeating() {
    // 8 IDs per tick: the 9th must move to the next tick, not wrap to sequence 0.
    let layout = Layout::new(44, 0, 16, 3, 63).unwrap();
    let (g, clock) = generator_with(layout, 0);
    let ids: Vec<Id> = (0..20).map(|_| g.next_id().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
    let parts: Vec<IdParts> = ids.iter().map(|&id| decode(&g, id)).collect();
    assert_eq!((parts[7].tick, parts[7].sequence), (Tick(1_000_000), 7));
    assert_eq!((parts[8].tick, parts[8].sequence), (Tick(1_000_001), 0));
    assert_eq!((parts[19].tick, parts[19].sequence), (Tick(1_000_002), 3));
    assert_eq!(
        g.ahead_of_clock_ms(),
        2,
        "ran ahead of the wall clock by two ticks"
    );
    // When the wall clock passes the borrowed ticks, IDs follow the clock again.
    clock.advance_millis(10);
    assert_eq!(decode(&g, g.next_id().unwrap()).tick, Tick(1_000_010));
}

#[test]
fn rule8_sequence_overflow_is_refused_beyond_the_drift_limit() {
    // 1 ID per tick and a 2000 ms drift limit: 2001 IDs fit in the frozen millisecond
    // (ticks now .. now+2000), the next is refused with a retry hint.
    let layout = Layout::new(47, 0, 16, 0, 63).unwrap();
    let (g, clock) = generator_with(layout, 0);
    for _ in 0..=2000 {
        g.next_id().unwrap();
    }
    let refusal = g.next_id().unwrap_err();
    assert!(
        matches!(
            refusal,
            Refusal::AheadOfClock {
                behind_ms: 2001,
                ..
            }
        ),
        "{refusal:?}"
    );
    assert_eq!(refusal.retry_after_secs(), 1);
    clock.advance_millis(1);
    assert!(g.next_id().is_ok(), "recovers as the wall clock moves on");
}

#[test]
fn rule8_small_rollback_is_ridden_out_without_a_duplicate() {
    let (g, clock) = generator_with(Layout::default(), 0);
    let before: Vec<Id> = (0..5000).map(|_| g.next_id().unwrap()).collect();
    let high_tick = decode(&g, *before.last().unwrap()).tick;
    clock.step_back_millis(5);
    let after: Vec<Id> = (0..5000).map(|_| g.next_id().unwrap()).collect();
    assert!(after[0] > *before.last().unwrap(), "never goes back");
    assert!(after.windows(2).all(|w| w[0] < w[1]));
    assert!(
        decode(&g, after[0]).tick >= high_tick,
        "keeps its own tick, not the wall's"
    );
    let unique: HashSet<Id> = before.iter().chain(&after).copied().collect();
    assert_eq!(unique.len(), 10_000);
}

#[test]
fn rule8_large_rollback_is_refused_then_recovers_by_itself() {
    let (g, clock) = generator_with(Layout::default(), 0);
    let last_before = g.next_id().unwrap();
    clock.step_back_millis(10_000);
    let refusal = g.next_id().unwrap_err();
    assert!(
        matches!(
            refusal,
            Refusal::AheadOfClock {
                behind_ms: 10_000,
                max_drift_ms: 2000,
                retry_after_ms: 8000
            }
        ),
        "{refusal:?}"
    );
    assert_eq!(refusal.retry_after_secs(), 8);
    assert!(g.check_ready().is_err(), "not ready while refusing");
    clock.advance_millis(7_999);
    assert!(g.next_id().is_err(), "still 2001 ms ahead");
    clock.advance_millis(1);
    assert!(
        g.next_id().is_ok(),
        "after exactly Retry-After, ahead by the drift limit: served"
    );
    clock.advance_millis(3_000);
    let id = g.next_id().unwrap();
    assert!(id > last_before);
    assert!(g.check_ready().is_ok());
}

#[test]
fn rule2_no_tick_above_the_fence_is_used() {
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(Layout::default()), Tick(0), clock.clone()).unwrap();
    assert!(
        matches!(g.next_id(), Err(Refusal::FenceReached { fence: 0, .. })),
        "no fence yet"
    );
    g.raise_fence(Tick(1_000_100));
    assert!(g.next_id().is_ok());
    clock.advance_millis(100);
    assert!(g.next_id().is_ok(), "the fence tick itself may be used");
    clock.advance_millis(1);
    let refused = Refusal::FenceReached {
        fence: 1_000_100,
        needed: 1_000_101,
    };
    assert_eq!(g.next_id(), Err(refused));
    assert_eq!(g.check_ready(), Err(refused));
}

#[test]
fn rule3_stop_at_the_fence_then_resume_when_it_is_raised() {
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(Layout::default()), Tick(0), clock.clone()).unwrap();
    g.raise_fence(Tick(1_000_010));
    clock.advance_millis(20);
    assert!(
        g.next_id().is_err(),
        "renewals failed: serving stops at the fence"
    );
    g.raise_fence(Tick(1_000_500));
    assert!(g.next_id().is_ok());
}

#[test]
fn rule4_a_new_holder_starts_strictly_above_the_fence_it_found() {
    // The previous holder's clock ran 30 s ahead; its IDs reached tick START+30000.
    let found = 1_000_000 + 30_000;
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(Layout::default()), Tick(found), clock.clone()).unwrap();
    g.raise_fence(Tick(found + 120_000));
    assert!(
        matches!(g.next_id(), Err(Refusal::AheadOfClock { .. })),
        "waits for its clock"
    );
    clock.advance_millis(28_001);
    let first = decode(&g, g.next_id().unwrap());
    assert_eq!(
        first.tick,
        Tick(found + 1),
        "first tick is just above the fence"
    );
}

#[test]
fn rule5_stop_returns_the_exact_highest_tick_and_nothing_is_issued_after() {
    let (g, clock) = generator_with(Layout::default(), 0);
    g.next_id().unwrap();
    clock.advance_millis(3);
    let last = g.next_id().unwrap();
    assert_eq!(g.stop(), decode(&g, last).tick);
    assert_eq!(g.next_id(), Err(Refusal::Stopped));
    assert_eq!(g.reserve(10), Err(Refusal::Stopped));
    assert!(g.is_stopped());
}

#[test]
fn rule5_fence_never_goes_down_while_running() {
    let (g, _) = generator_with(Layout::default(), 0);
    g.raise_fence(Tick(5));
    assert_eq!(g.fence(), Tick(u64::MAX >> 2));
}

#[test]
fn batches_are_consecutive_and_refused_whole_when_they_cannot_fit() {
    let layout = Layout::new(44, 0, 16, 3, 63).unwrap();
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(layout), Tick(0), clock.clone()).unwrap();
    g.raise_fence(Tick(1_000_001)); // two ticks: 16 positions
    let r = g.reserve(10).unwrap();
    assert_eq!(r.count, 10);
    // A batch that starts below the fence and ends above it waits for the fence, as a
    // single ID at the fence does (held by the HTTP API, not refused for a second).
    let straddling = g.reserve(7);
    assert!(
        matches!(
            straddling,
            Err(Refusal::FenceReached {
                fence: 1_000_001,
                needed: 1_000_002
            })
        ),
        "{straddling:?}"
    );
    assert!(straddling.unwrap_err().clears_after().is_some());
    assert!(g.reserve(6).is_ok(), "the refused batch consumed nothing");
    assert!(matches!(
        g.reserve(1),
        Err(Refusal::FenceReached {
            fence: 1_000_001,
            ..
        })
    ));
}

#[test]
fn clock_before_the_epoch_is_refused() {
    let clock = Arc::new(ManualClock::at_millis(EPOCH_MS - 1));
    let g = Generator::start_above(config(Layout::default()), Tick(0), clock).unwrap();
    g.raise_fence(Tick(1 << 40));
    assert_eq!(g.next_id(), Err(Refusal::ClockBeforeEpoch));
}

#[test]
fn timestamp_exhaustion_is_refused() {
    let layout = Layout::new(30, 0, 11, 22, 63).unwrap();
    let max = layout.max_tick().0;
    let clock = Arc::new(ManualClock::at_millis(EPOCH_MS + max + 5));
    let g = Generator::start_above(config(layout), Tick(0), clock).unwrap();
    g.raise_fence(Tick(u64::MAX >> 2));
    assert_eq!(g.next_id(), Err(Refusal::TimestampExhausted));
}

#[test]
fn rule7_unique_and_increasing_per_caller_across_threads() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 150_000;
    let (g, clock) = generator_with(Layout::default(), 0);
    let g = Arc::new(g);
    let ticker = {
        let clock = clock.clone();
        std::thread::spawn(move || {
            for _ in 0..2000 {
                clock.advance_millis(1);
                std::thread::yield_now();
            }
        })
    };
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let g = g.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(PER_THREAD);
                let mut i = 0;
                while ids.len() < PER_THREAD {
                    // Mix single IDs and batches, as HTTP callers do.
                    if (i + t) % 10 == 0 {
                        if let Ok(r) = g.reserve(100) {
                            ids.extend((r.first..r.first + r.count).map(|p| g.id_at(p)));
                        }
                    } else if let Ok(id) = g.next_id() {
                        ids.push(id);
                    }
                    i += 1;
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for h in handles {
        let ids = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "each caller sees increasing IDs"
        );
        for id in ids {
            assert!(all.insert(id), "duplicate {id}");
        }
    }
    ticker.join().unwrap();
    assert!(all.len() >= THREADS * PER_THREAD);
    assert!(all.len() >= 1_000_000);
}

// docs/safety.md rule 12: an ID issued for `after = x` is greater than x, or refused;
// the fence and drift limit still hold, and nothing goes down.

/// The ID of another worker (`dc`, `slot`) at `tick`, sequence `seq`.
fn foreign(layout: Layout, tick: u64, dc: u32, slot: u32, seq: u32) -> u64 {
    layout
        .encode(IdParts {
            tick: Tick(tick),
            datacenter: DatacenterId(dc),
            slot: Slot(slot),
            sequence: seq,
        })
        .unwrap()
        .get()
}

fn after(g: &Generator, x: u64) -> Result<Id, Refusal> {
    let floor = g.position_after(x).unwrap();
    g.reserve_from(1, floor).map(|r| g.id_at(r.first))
}

#[test]
fn rule12_an_after_in_the_past_changes_nothing() {
    let (g, clock) = generator_with(Layout::default(), 0);
    let old = g.next_id().unwrap();
    clock.advance_millis(5);
    let id = after(&g, old.get()).unwrap();
    let p = decode(&g, id);
    assert_eq!(
        (p.tick, p.sequence),
        (Tick(1_000_005), 0),
        "the clock's tick, as without after"
    );
    let from_another_worker = foreign(Layout::default(), 1_000_001, 0, 1000, 4095);
    let id2 = after(&g, from_another_worker).unwrap();
    assert_eq!(decode(&g, id2).sequence, 1, "just the next position");
    assert_eq!(g.ahead_of_clock_ms(), 0);
}

#[test]
fn rule12_an_after_in_the_current_tick_with_a_larger_low_part_is_still_exceeded() {
    let layout = Layout::default();
    let (g, _) = generator_with(layout, 0);
    let mine = g.next_id().unwrap(); // tick 1_000_000, sequence 0
    // Same tick, a higher worker: no ID of worker 7 in this tick is above it.
    let x = foreign(layout, 1_000_000, 0, 8, 0);
    let id = after(&g, x).unwrap();
    assert!(id.get() > x && id > mine);
    assert_eq!(
        decode(&g, id).tick,
        Tick(1_000_001),
        "borrowed the next tick"
    );
    // Same tick and worker, a larger sequence (an ID of this worker seen elsewhere).
    let x = foreign(layout, 1_000_001, 0, 7, 4000);
    let id = after(&g, x).unwrap();
    assert_eq!(id.get(), x + 1, "the very next position");
    // The last sequence of a tick carries into the next tick.
    let x = foreign(layout, 1_000_001, 0, 7, 4095);
    let id = after(&g, x).unwrap();
    assert_eq!(
        (decode(&g, id).tick, decode(&g, id).sequence),
        (Tick(1_000_002), 0)
    );
    assert!(id.get() > x);
    // A lower worker, later sequence, same tick: sequence 0 of this worker is above it,
    // but the position never goes back, so the answer is simply the next one.
    let x = foreign(layout, 1_000_002, 0, 6, 4095);
    let before = decode(&g, id);
    let id = after(&g, x).unwrap();
    assert!(id.get() > x);
    assert_eq!(decode(&g, id).sequence, before.sequence + 1);
}

#[test]
fn rule12_every_position_after_is_the_lowest_position_above_the_after() {
    // Every (tick, datacenter, worker, sequence) around this worker's own fields.
    let layout = Layout::new(44, 2, 14, 3, 63).unwrap();
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let cfg = WorkerConfig {
        datacenter: DatacenterId(2),
        ..config(layout)
    };
    let g = Generator::start_above(cfg, Tick(0), clock).unwrap();
    for tick in [0, 1, 1_000_000] {
        for dc in 0..4 {
            for slot in [0, 6, 7, 8, (1 << 14) - 1] {
                for seq in 0..8 {
                    let x = foreign(layout, tick, dc, slot, seq);
                    let p = g.position_after(x).unwrap();
                    assert!(g.id_at(p).get() > x, "{tick}/{dc}/{slot}/{seq}");
                    assert!(
                        p == 0 || g.id_at(p - 1).get() <= x,
                        "lowest: {tick}/{dc}/{slot}/{seq}"
                    );
                }
            }
        }
    }
}

#[test]
fn rule12_ids_of_other_datacenters_order_by_tick_then_datacenter_and_worker() {
    let layout = Layout::new(41, 2, 8, 12, 63).unwrap();
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let cfg = WorkerConfig {
        datacenter: DatacenterId(1),
        ..config(layout)
    };
    let g = Generator::start_above(cfg, Tick(0), clock).unwrap();
    g.raise_fence(Tick(u64::MAX >> 2));
    // Datacenter 0, even its highest worker, sorts below datacenter 1 in the same tick.
    let x = foreign(layout, 1_000_500, 0, 255, 4095);
    let id = after(&g, x).unwrap();
    assert!(id.get() > x);
    let p = decode(&g, id);
    assert_eq!(
        (p.tick, p.datacenter, p.sequence),
        (Tick(1_000_500), DatacenterId(1), 0)
    );
    // Datacenter 2, even worker 0, sorts above: the next tick.
    let x = foreign(layout, 1_000_600, 2, 0, 0);
    let id = after(&g, x).unwrap();
    assert!(id.get() > x);
    assert_eq!(decode(&g, id).tick, Tick(1_000_601));
}

#[test]
fn rule12_an_after_moves_the_position_up_to_the_edge_of_the_drift_limit_and_no_further() {
    let layout = Layout::default();
    let (g, clock) = generator_with(layout, 0);
    let now = 1_000_000;
    // At the edge: tick now + 2000 (the drift limit) is served ...
    let edge = foreign(layout, now + 2000, 0, 3, 9);
    let id = after(&g, edge).unwrap();
    assert_eq!(decode(&g, id).tick, Tick(now + 2000));
    assert_eq!(g.ahead_of_clock_ms(), 2000);
    // ... one tick further is refused, with when it could be served.
    let beyond = foreign(layout, now + 2000, 0, 9, 0);
    let refusal = after(&g, beyond).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::AfterAheadOfClock {
            tick: now + 2001,
            ahead_ms: 2001,
            max_drift_ms: 2000,
            retry_after_ms: 1
        }
    );
    assert_eq!(refusal.reason(), "after_ahead_of_clock");
    assert_eq!(refusal.retry_after_secs(), 1);
    assert!(
        g.check_ready().is_ok(),
        "a refused after does not make the sidecar unready"
    );
    let far = foreign(layout, now + 10_000, 0, 0, 0);
    let refusal = after(&g, far).unwrap_err();
    assert!(
        matches!(
            refusal,
            Refusal::AfterAheadOfClock {
                retry_after_ms: 8000,
                ..
            }
        ),
        "{refusal:?}"
    );
    assert_eq!(refusal.retry_after_secs(), 8);
    // Nothing was consumed by the refusals: plain IDs continue after the edge ID.
    let next = g.next_id().unwrap();
    assert_eq!(next.get(), id.get() + 1);
    // After Retry-After, it is served.
    clock.advance_millis(1);
    assert!(after(&g, beyond).unwrap().get() > beyond);
    clock.advance_millis(7_999);
    assert!(after(&g, far).unwrap().get() > far);
}

#[test]
fn rule12_an_after_never_takes_the_generator_past_its_fence() {
    let layout = Layout::default();
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(layout), Tick(0), clock.clone()).unwrap();
    g.raise_fence(Tick(1_000_100));
    let at_fence = foreign(layout, 1_000_100, 0, 3, 0);
    let id = after(&g, at_fence).unwrap();
    assert_eq!(
        decode(&g, id).tick,
        Tick(1_000_100),
        "the fence tick itself may be used"
    );
    let past_fence = foreign(layout, 1_000_100, 0, 8, 0);
    assert_eq!(
        after(&g, past_fence),
        Err(Refusal::FenceReached {
            fence: 1_000_100,
            needed: 1_000_101
        })
    );
    assert_eq!(
        g.reserve_from(5, g.position_after(past_fence).unwrap()),
        Err(Refusal::FenceReached {
            fence: 1_000_100,
            needed: 1_000_101
        })
    );
    assert_eq!(
        g.high_water_tick(),
        Tick(1_000_100),
        "nothing above the fence was taken"
    );
    g.raise_fence(Tick(1_000_500));
    assert!(after(&g, past_fence).unwrap().get() > past_fence);
}

#[test]
fn rule12_a_batch_after_x_is_all_above_x_and_refused_whole_when_it_cannot_fit() {
    let layout = Layout::new(44, 0, 16, 3, 63).unwrap(); // 8 IDs per tick
    let (g, _) = generator_with(layout, 0);
    let x = foreign(layout, 1_000_010, 0, 9, 2);
    let r = g.reserve_from(20, g.position_after(x).unwrap()).unwrap();
    let ids: Vec<u64> = (r.first..r.first + r.count)
        .map(|p| g.id_at(p).get())
        .collect();
    assert!(ids.iter().all(|&id| id > x));
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(decode(&g, Id::new(ids[0]).unwrap()).tick, Tick(1_000_011));
    // 8 per tick, drift 2000 ticks: from tick now+1999 only 16 positions fit.
    let high = foreign(layout, 1_001_998, 0, 9, 0);
    let floor = g.position_after(high).unwrap();
    let past_the_limit = g.reserve_from(17, floor);
    assert!(
        matches!(
            past_the_limit,
            Err(Refusal::AheadOfClock {
                retry_after_ms: 1,
                ..
            })
        ),
        "one position past the drift limit clears in one tick: {past_the_limit:?}"
    );
    let r = g.reserve_from(16, floor).unwrap();
    assert!(g.id_at(r.first).get() > high);
}

/// Rule 8 (drift limit) with batches: a batch that does not fit under the drift limit yet
/// is refused as ahead of the clock, with the wait until it fits, so the HTTP API holds it
/// those few milliseconds; only a batch longer than the whole drift window, which can
/// never fit, is `batch_too_large` (ask for fewer). Neither consumes a position.
#[test]
fn rule8_a_batch_past_the_drift_limit_waits_for_the_clock_and_only_one_longer_than_the_window_is_too_large()
 {
    let layout = Layout::new(44, 0, 16, 3, 63).unwrap(); // 8 IDs per tick
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let mut cfg = config(layout);
    cfg.max_drift_ms = 3; // the window: now and 3 ticks ahead, 32 positions
    let g = Generator::start_above(cfg, Tick(0), clock.clone()).unwrap();
    g.raise_fence(Tick(u64::MAX >> 2));
    assert_eq!(g.reserve(33), Err(Refusal::BatchTooLarge { requested: 33 }));
    assert_eq!(
        Refusal::BatchTooLarge { requested: 33 }.clears_after(),
        None
    );
    let r = g.reserve(20).unwrap(); // positions 0-19: ticks now .. now+2
    assert_eq!(r.count, 20);
    // 20 more (positions 20-39) would end in tick now+4, one past the limit (now+3).
    let refused = g.reserve(20);
    assert!(
        matches!(
            refused,
            Err(Refusal::AheadOfClock {
                retry_after_ms: 1,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.unwrap_err().clears_after(),
        Some(std::time::Duration::from_millis(1))
    );
    clock.advance_millis(1);
    let later = g.reserve(20).unwrap();
    assert_eq!(
        later.first,
        r.first + 20,
        "the refused batch consumed nothing"
    );
}

#[test]
fn rule12_values_outside_the_layout_and_its_largest_id_are_refused_as_bad_input() {
    let (g, _) = generator_with(Layout::default(), 0);
    assert_eq!(
        g.position_after(1 << 63),
        Err(AfterError::NotInLayout {
            after: 1 << 63,
            total_bits: 63
        })
    );
    assert_eq!(
        g.position_after(u64::MAX >> 1),
        Err(AfterError::Largest {
            after: u64::MAX >> 1
        })
    );
    let js = Layout::new(41, 0, 3, 9, 53).unwrap();
    let (g, _) = generator_with(js, 0);
    let err = g.position_after(1 << 53).unwrap_err();
    assert!(err.to_string().contains("below 2^53"), "{err}");
    assert_eq!(
        g.position_after((1 << 53) - 1),
        Err(AfterError::Largest {
            after: (1 << 53) - 1
        })
    );
    assert!(g.position_after((1 << 53) - 2).is_ok());
    assert!(g.position_after(0).is_ok());
}

#[test]
fn rule12_after_stops_with_the_generator() {
    let (g, _) = generator_with(Layout::default(), 0);
    g.stop();
    let x = foreign(Layout::default(), 1_000_001, 0, 1, 1);
    assert_eq!(after(&g, x), Err(Refusal::Stopped));
}

#[test]
fn rule12_concurrent_callers_passing_ids_around_always_get_an_id_above_what_they_passed() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 25_000;
    let layout = Layout::new(44, 0, 16, 3, 63).unwrap(); // 8 per tick: ticks are borrowed
    let (g, clock) = generator_with(layout, 0);
    let g = Arc::new(g);
    // The highest ID any caller has seen, including IDs of "other workers" made up
    // from it; every caller passes it (or its own last ID) as `after`.
    let seen = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (g, seen, clock) = (g.clone(), seen.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::with_capacity(PER_THREAD);
                let mut i = 0u64;
                while mine.len() < PER_THREAD {
                    i += 1;
                    let x = match i % 3 {
                        0 => seen.load(Ordering::Acquire),
                        // An ID of worker 9 in the tick of the latest seen ID.
                        1 => {
                            let s = seen.load(Ordering::Acquire);
                            let tick = if s == 0 {
                                0
                            } else {
                                layout.decode(Id::new(s).unwrap()).unwrap().tick.0
                            };
                            foreign(layout, tick, 0, 9, (t % 8) as u32)
                        }
                        _ => mine.last().copied().unwrap_or(0),
                    };
                    let floor = g.position_after(x).unwrap();
                    let count = if i.is_multiple_of(10) { 5 } else { 1 };
                    let Ok(r) = g.reserve_from(count, floor) else {
                        // Refused (drift limit): time passes, as it would for a retry.
                        clock.advance_millis(1);
                        continue;
                    };
                    for p in r.first..r.first + r.count {
                        let id = g.id_at(p).get();
                        assert!(id > x, "{id} is not above after={x}");
                        mine.push(id);
                    }
                    seen.fetch_max(*mine.last().unwrap(), Ordering::AcqRel);
                }
                mine
            })
        })
        .collect();
    let mut all = HashSet::new();
    for h in handles {
        let ids = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "each caller's IDs increase"
        );
        for id in ids {
            assert!(all.insert(id), "duplicate {id}");
        }
    }
    assert!(all.len() >= THREADS * PER_THREAD);
}

/// Every key form of docs/layouts.md on the default field split (shard bits take 4 bits
/// from the timestamp).
fn formed_layouts() -> Vec<Layout> {
    use kubeflake_crds::layout::{SequenceStart, Spread};
    let mut out = Vec::new();
    for start in [SequenceStart::Zero, SequenceStart::Rotating] {
        for (ts, spread) in [
            (41, Spread::TimeOrdered),
            (41, Spread::BitReversed),
            (37, Spread::ShardBits { bits: 4 }),
        ] {
            out.push(Layout::with_form([ts, 0, 10, 12], 63, spread, start).unwrap());
        }
    }
    out
}

#[test]
fn rule7_every_key_form_issues_distinct_ids_in_the_sequence_order_through_bursts() {
    // One worker's IDs increase in the sequence's order (tick, then issue order: what
    // `decode` returns), the raw numbers only for time-ordered layouts (docs/layouts.md).
    for layout in formed_layouts() {
        let (g, clock) = generator_with(layout, 0);
        let mut seen = HashSet::new();
        let mut last = None;
        for round in 0..5 {
            // 10,000 IDs in one millisecond: the burst borrows ticks from the future.
            let r = g.reserve(10_000).unwrap();
            for p in r.first..r.first + r.count {
                let id = g.id_at(p);
                assert!(seen.insert(id), "{layout:?} round {round}");
                let parts = decode(&g, id);
                let order = (parts.tick, parts.sequence);
                assert!(last < Some(order), "{layout:?}: {order:?} after {last:?}");
                last = Some(order);
            }
            clock.advance_millis(3);
        }
    }
}

#[test]
fn rule12_after_orders_by_time_worker_and_issue_order_in_every_key_form() {
    // An `after` from another worker of the same tick: a larger slot answers in the same
    // tick, a smaller one in the next; the same worker answers just after it. The answer
    // comes after `after` in the sequence's order (tick, datacenter and worker, sequence),
    // whatever the stored ID's number is.
    let order = |l: &Layout, id: Id| {
        let p = l.decode(id).unwrap();
        (p.tick, p.datacenter, p.slot, p.sequence)
    };
    for layout in formed_layouts() {
        let (g, _) = generator_with(layout, 0);
        let ours = g.config().slot.0;
        let tick = START_MS - EPOCH_MS + 50;
        for (their_slot, seq) in [(ours + 1, 7), (ours.saturating_sub(1), 7), (ours, 4094)] {
            let after = layout
                .encode(IdParts {
                    tick: Tick(tick),
                    datacenter: DatacenterId(0),
                    slot: Slot(their_slot),
                    sequence: seq,
                })
                .unwrap();
            let position = g.position_after(after.get()).unwrap();
            let answer = g.id_at(position);
            assert!(
                order(&layout, answer) > order(&layout, after),
                "{layout:?}: {answer} after {after}"
            );
            let just_before = g.id_at(position - 1);
            assert!(
                order(&layout, just_before) <= order(&layout, after) || position - 1 < tick << 12,
                "{layout:?}: the answer is the lowest such position"
            );
        }
    }
}

/// Issue 54, finding 4: `((fence + 1) << sequenceBits) - 1` on a fence read from the API
/// server or a file. Before the check, fence 2^60 wrapped to position 4,095 (tick 0, so the
/// first ID came at the wall clock, far below the fence: rule 4 broken) and `u64::MAX`
/// panicked in a debug build; now both are refused, naming the fence and the layout's end.
#[test]
fn rule16_a_fence_beyond_the_layouts_last_tick_is_refused_never_wrapped() {
    let layout = Layout::new(41, 0, 10, 12, 63).unwrap();
    let max_tick = layout.max_tick().0;
    for fence in [max_tick + 1, 1 << 60, u64::MAX] {
        let clock = Arc::new(ManualClock::at_millis(START_MS));
        match Generator::start_above(config(layout), Tick(fence), clock) {
            Ok(g) => panic!(
                "fence {fence} started a generator whose next tick is {}",
                g.high_water_tick().0 + 1
            ),
            Err(e) => {
                assert_eq!(e, StartError::FenceBeyondLayout { fence, max_tick });
                let message = e.to_string();
                for part in [
                    fence.to_string(),
                    max_tick.to_string(),
                    "can issue no ID".to_string(),
                ] {
                    assert!(message.contains(&part), "{part:?} missing: {message}");
                }
            }
        }
    }
}

/// The layout's last tick itself is a fence like any other: the generator starts, and
/// every ID is refused as the end of the timestamp bits, never wrapped into a low one.
#[test]
fn rule16_a_fence_at_the_layouts_last_tick_starts_and_issues_nothing() {
    let layout = Layout::new(30, 0, 11, 22, 63).unwrap();
    let max_tick = layout.max_tick();
    let clock = Arc::new(ManualClock::at_millis(START_MS));
    let g = Generator::start_above(config(layout), max_tick, clock).unwrap();
    g.raise_fence(Tick(u64::MAX));
    assert_eq!(g.high_water_tick(), max_tick);
    assert_eq!(g.next_id(), Err(Refusal::TimestampExhausted));
    assert_eq!(g.check_ready(), Err(Refusal::TimestampExhausted));
}

/// A batch whose last position would pass 2^64 is refused whole, not wrapped (a debug
/// build panicked on the sum before).
#[test]
fn rule16_a_batch_whose_end_would_pass_2_64_is_refused_not_wrapped() {
    let (g, _) = generator_with(Layout::default(), 0);
    assert_eq!(
        g.reserve(u64::MAX),
        Err(Refusal::BatchTooLarge {
            requested: u64::MAX
        })
    );
    assert!(g.next_id().is_ok(), "and it keeps serving");
}
