//! The Snowflake generator: hands out IDs that never repeat (docs/safety.md rules 2-8).
//!
//! All state that matters is one number, the *position* of the last ID issued:
//! `tick << sequenceBits | sequence`. Positions only grow, and each ID is a function of its
//! position and the worker's fixed datacenter and slot bits, so a growing position means
//! distinct, strictly increasing IDs. Taking the next position is one compare-and-swap:
//!
//! ```text
//! first = max(last + 1, now << sequenceBits)      // same tick: next sequence; later tick: 0
//! ```
//!
//! When a tick's sequence numbers run out, `last + 1` simply carries into the next tick:
//! the generator borrows a tick from the future instead of sleeping. When the wall clock
//! steps back, `now` is ignored until it catches up with `last`. Both keep the generator
//! ahead of the wall clock, which is allowed only up to the drift limit (rule 8). No tick
//! above the fence is ever used (rule 2), and a stopped generator never issues again.
//!
//! A batch of `n` IDs is one reservation of `n` consecutive positions.
//!
//! Measured (`cargo bench -p kubeflake-sidecar --bench generator`): this lock-free CAS beats a
//! `Mutex` around the same computation under contention; see docs/benchmarks.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kubeflake_crds::layout::NodeBits;
use kubeflake_crds::{DatacenterId, Id, Layout, Slot, Tick, Timebase};

use crate::clock::Clock;

/// Marks a stopped generator. Positions use at most 62 bits, so bit 63 is free.
const STOPPED: u64 = 1 << 63;

/// Why no ID can be issued right now. Every variant is temporary except `Stopped` and
/// `TimestampExhausted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the wall clock is {behind_ms} ms behind this generator, more than the {max_drift_ms} ms \
         drift limit (the clock stepped back, or demand outran the sequence bits); retry later"
    )]
    AheadOfClock {
        behind_ms: u64,
        max_drift_ms: u64,
        retry_after_ms: u64,
    },
    #[error("the fence (tick {fence}) is reached: it could not be raised in time; retry later")]
    FenceReached { fence: u64 },
    #[error("the wall clock reads before the sequence's epoch; fix the clock or the epoch")]
    ClockBeforeEpoch,
    #[error("this generator has stopped issuing IDs (shutting down or the slot was lost)")]
    Stopped,
    #[error("the timestamp bits of this layout are used up; create a new IdSequence")]
    TimestampExhausted,
    #[error("a batch of {requested} IDs cannot fit before the fence or drift limit")]
    BatchTooLarge { requested: u64 },
}

impl Refusal {
    /// A short stable name, used as a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::AheadOfClock { .. } => "ahead_of_clock",
            Refusal::FenceReached { .. } => "fence_reached",
            Refusal::ClockBeforeEpoch => "clock_before_epoch",
            Refusal::Stopped => "stopped",
            Refusal::TimestampExhausted => "timestamp_exhausted",
            Refusal::BatchTooLarge { .. } => "batch_too_large",
        }
    }

    /// Seconds a client should wait before trying again.
    pub fn retry_after_secs(&self) -> u64 {
        match self {
            Refusal::AheadOfClock { retry_after_ms, .. } => retry_after_ms.div_ceil(1000).max(1),
            _ => 1,
        }
    }
}

/// Consecutive positions reserved by one call; turn them into IDs with [`Generator::id_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub first: u64,
    pub count: u64,
}

/// What a worker needs to know to issue IDs.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    pub layout: Layout,
    pub timebase: Timebase,
    pub datacenter: DatacenterId,
    pub slot: Slot,
    pub max_drift_ms: u64,
}

/// Issues IDs for one worker slot. Shared by all request handlers (`Arc<Generator>`).
pub struct Generator {
    config: WorkerConfig,
    node: NodeBits,
    seq_bits: u8,
    max_drift_ticks: u64,
    clock: Arc<dyn Clock>,
    /// Position of the last ID issued, or'ed with `STOPPED` once stopped. Only grows.
    last: AtomicU64,
    /// The highest tick that may be used: a value already durably written (rule 2).
    fence: AtomicU64,
}

impl Generator {
    /// A generator that will only use ticks above `found_fence` (rule 4), and none at all
    /// until [`raise_fence`](Self::raise_fence) is called with a higher, persisted fence.
    pub fn start_above(
        config: WorkerConfig,
        found_fence: Tick,
        clock: Arc<dyn Clock>,
    ) -> Generator {
        let seq_bits = config.layout.sequence_bits();
        // Pretend the whole fence tick is used up: the next position is (found_fence + 1, 0).
        let last = ((found_fence.0 + 1) << seq_bits) - 1;
        Generator {
            node: config.layout.node_bits(config.datacenter, config.slot),
            seq_bits,
            max_drift_ticks: config.max_drift_ms / config.timebase.unit().millis(),
            config,
            clock,
            last: AtomicU64::new(last),
            fence: AtomicU64::new(found_fence.0),
        }
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The current wall-clock tick.
    pub fn now_tick(&self) -> Result<Tick, Refusal> {
        self.config
            .timebase
            .tick_at(self.clock.wall_micros() / 1000)
            .ok_or(Refusal::ClockBeforeEpoch)
    }

    /// Reserves `count` (>= 1) consecutive positions.
    #[inline]
    pub fn reserve(&self, count: u64) -> Result<Reservation, Refusal> {
        debug_assert!(count >= 1);
        let now = self.now_tick()?;
        let now_position = now.0 << self.seq_bits;
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            let (first, end) = self.check(last, now, now_position, count)?;
            match self
                .last
                .compare_exchange_weak(last, end, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(Reservation { first, count }),
                Err(actual) => last = actual,
            }
        }
    }

    /// The ID at a reserved position.
    #[inline]
    pub fn id_at(&self, position: u64) -> Id {
        self.config.layout.id_at(position, self.node)
    }

    /// Issues one ID.
    pub fn next_id(&self) -> Result<Id, Refusal> {
        self.reserve(1).map(|r| self.id_at(r.first))
    }

    /// Whether an ID could be issued now (without issuing one): the readiness check.
    pub fn check_ready(&self) -> Result<(), Refusal> {
        let now = self.now_tick()?;
        self.check(
            self.last.load(Ordering::Acquire),
            now,
            now.0 << self.seq_bits,
            1,
        )
        .map(|_| ())
    }

    /// Decides the positions `[first, end]` for a reservation after `last`, or refuses.
    #[inline]
    fn check(
        &self,
        last: u64,
        now: Tick,
        now_position: u64,
        count: u64,
    ) -> Result<(u64, u64), Refusal> {
        if last & STOPPED != 0 {
            return Err(Refusal::Stopped);
        }
        let first = (last + 1).max(now_position);
        let end = first + (count - 1);
        let end_tick = end >> self.seq_bits;
        if end_tick > self.config.layout.max_tick().0 {
            return Err(Refusal::TimestampExhausted);
        }
        let fence = self.fence.load(Ordering::Acquire);
        if end_tick > fence {
            if count > 1 && (first >> self.seq_bits) <= fence {
                return Err(Refusal::BatchTooLarge { requested: count });
            }
            return Err(Refusal::FenceReached { fence });
        }
        if end_tick > now.0 + self.max_drift_ticks {
            if count > 1 && (first >> self.seq_bits) <= now.0 + self.max_drift_ticks {
                return Err(Refusal::BatchTooLarge { requested: count });
            }
            let unit = self.config.timebase.unit().millis();
            let behind_ticks = end_tick - now.0;
            return Err(Refusal::AheadOfClock {
                behind_ms: behind_ticks * unit,
                max_drift_ms: self.config.max_drift_ms,
                retry_after_ms: (behind_ticks - self.max_drift_ticks) * unit,
            });
        }
        Ok((first, end))
    }

    /// Allows ticks up to `fence`. Call only after `fence` was durably written (to the
    /// lease or the state file): that write is what makes the ticks safe to use. A lower
    /// value than the current fence is ignored (rule 5: the fence only goes up).
    pub fn raise_fence(&self, fence: Tick) {
        self.fence.fetch_max(fence.0, Ordering::AcqRel);
    }

    /// The fence in force.
    pub fn fence(&self) -> Tick {
        Tick(self.fence.load(Ordering::Acquire))
    }

    /// The tick of the last position issued (or the found fence, before the first ID).
    pub fn high_water_tick(&self) -> Tick {
        Tick((self.last.load(Ordering::Acquire) & !STOPPED) >> self.seq_bits)
    }

    /// Stops issuing for good and returns the highest tick ever used: the exact value a
    /// graceful shutdown may lower the fence to (rule 5). Also used when the slot is lost.
    /// A reservation racing with this either completed before (and is counted) or fails.
    pub fn stop(&self) -> Tick {
        let last = self.last.fetch_or(STOPPED, Ordering::AcqRel);
        Tick((last & !STOPPED) >> self.seq_bits)
    }

    pub fn is_stopped(&self) -> bool {
        self.last.load(Ordering::Acquire) & STOPPED != 0
    }

    /// How far (ms) the generator runs ahead of the wall clock; 0 when it is not ahead.
    pub fn ahead_of_clock_ms(&self) -> u64 {
        let Ok(now) = self.now_tick() else { return 0 };
        self.high_water_tick().0.saturating_sub(now.0) * self.config.timebase.unit().millis()
    }

    /// How far (ms) the fence lies beyond the wall clock; 0 when it has run out.
    pub fn fence_headroom_ms(&self) -> u64 {
        let Ok(now) = self.now_tick() else { return 0 };
        self.fence().0.saturating_sub(now.0) * self.config.timebase.unit().millis()
    }
}

#[cfg(test)]
mod tests {
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
        let g = Generator::start_above(config(layout), Tick(found_fence), clock.clone());
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
        let g = Generator::start_above(config(Layout::default()), Tick(0), clock.clone());
        assert!(
            matches!(g.next_id(), Err(Refusal::FenceReached { fence: 0 })),
            "no fence yet"
        );
        g.raise_fence(Tick(1_000_100));
        assert!(g.next_id().is_ok());
        clock.advance_millis(100);
        assert!(g.next_id().is_ok(), "the fence tick itself may be used");
        clock.advance_millis(1);
        assert_eq!(g.next_id(), Err(Refusal::FenceReached { fence: 1_000_100 }));
        assert_eq!(
            g.check_ready(),
            Err(Refusal::FenceReached { fence: 1_000_100 })
        );
    }

    #[test]
    fn rule3_stop_at_the_fence_then_resume_when_it_is_raised() {
        let clock = Arc::new(ManualClock::at_millis(START_MS));
        let g = Generator::start_above(config(Layout::default()), Tick(0), clock.clone());
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
        let g = Generator::start_above(config(Layout::default()), Tick(found), clock.clone());
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
        let g = Generator::start_above(config(layout), Tick(0), clock.clone());
        g.raise_fence(Tick(1_000_001)); // two ticks: 16 positions
        let r = g.reserve(10).unwrap();
        assert_eq!(r.count, 10);
        assert_eq!(g.reserve(7), Err(Refusal::BatchTooLarge { requested: 7 }));
        assert!(g.reserve(6).is_ok(), "the refused batch consumed nothing");
        assert_eq!(
            g.reserve(1),
            Err(Refusal::FenceReached { fence: 1_000_001 })
        );
    }

    #[test]
    fn clock_before_the_epoch_is_refused() {
        let clock = Arc::new(ManualClock::at_millis(EPOCH_MS - 1));
        let g = Generator::start_above(config(Layout::default()), Tick(0), clock);
        g.raise_fence(Tick(1 << 40));
        assert_eq!(g.next_id(), Err(Refusal::ClockBeforeEpoch));
    }

    #[test]
    fn timestamp_exhaustion_is_refused() {
        let layout = Layout::new(30, 0, 11, 22, 63).unwrap();
        let max = layout.max_tick().0;
        let clock = Arc::new(ManualClock::at_millis(EPOCH_MS + max + 5));
        let g = Generator::start_above(config(layout), Tick(0), clock);
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
}
