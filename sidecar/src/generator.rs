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
//! Two fences: the one in force (`fence`, durably written: rule 2) and the one a single
//! write of the local fence file could bring into force (`reachable`, the lease fence while
//! that file can be written: rule 6). The file is written when IDs are asked, not on a clock
//! ([`crate::fence::LocalFence`]): an ID that meets `fence` below `reachable` asks for that
//! write ([`Generator::fence_asked`]) and is refused `fence_reached` until it is done (the
//! HTTP API holds it meanwhile), while readiness counts `reachable`, so an idle sidecar
//! that writes nothing is still ready.
//!
//! One piece (over 400 lines): every check that decides whether a position may be issued
//! (fence, reachable fence, drift, `after`, batch fit) reads the same atomics in the same
//! compare-and-swap loop; split, the rules would be checked in two places.
//!
//! Measured (`cargo bench -p kubeflake-sidecar --bench generator`): this lock-free CAS beats a
//! `Mutex` around the same computation under contention; see docs/benchmarks.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use kubeflake_crds::layout::{LayoutError, NodeBits};
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
    FenceReached {
        fence: u64,
        /// The tick the refused reservation needed.
        needed: u64,
    },
    /// [`FenceReached`](Self::FenceReached) at the bound of the ID-space block the slot
    /// lies in (its Lease's fence cap, docs/safety.md rule 17): the lease fence stops there
    /// until the operator raises the cap, after the hub renewed the block.
    #[error(
        "the fence (tick {bound}) is the bound of this cluster's ID-space block: the cluster \
         could not renew its ID-space block on the hub in time; retry later (the operator's \
         IdSpaceMember status says why)"
    )]
    BlockBoundReached {
        bound: u64,
        /// The tick the refused reservation needed.
        needed: u64,
    },
    #[error("the wall clock reads before the sequence's epoch; fix the clock or the epoch")]
    ClockBeforeEpoch,
    #[error("this generator has stopped issuing IDs (shutting down or the slot was lost)")]
    Stopped,
    #[error("the timestamp bits of this layout are used up; create a new IdSequence")]
    TimestampExhausted,
    #[error(
        "a batch of {requested} IDs is longer than the drift limit lets this sidecar run ahead \
         of its clock; ask for fewer"
    )]
    BatchTooLarge { requested: u64 },
    #[error(
        "the `after` ID needs an answer in tick {tick}, {ahead_ms} ms ahead of this sidecar's \
         clock, more than the {max_drift_ms} ms drift limit allows; retry when the clock has \
         caught up"
    )]
    AfterAheadOfClock {
        tick: u64,
        ahead_ms: u64,
        max_drift_ms: u64,
        retry_after_ms: u64,
    },
}

/// Why an `after` value can never be answered by this sequence (HTTP 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AfterError {
    #[error(
        "after={after} is not an ID of this sequence: its layout has {total_bits} bits, so its \
         IDs are below 2^{total_bits}"
    )]
    NotInLayout { after: u64, total_bits: u32 },
    #[error(
        "after={after} is not an ID of this sequence: its top {shard_bits} bits (the shard) do \
         not match the rest of the ID; check it was copied whole"
    )]
    ShardMismatch { after: u64, shard_bits: u8 },
    #[error("after={after} is the largest ID this sequence's layout can hold: no ID is above it")]
    Largest { after: u64 },
}

impl Refusal {
    /// A short stable name, used as a metric label.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::AheadOfClock { .. } => "ahead_of_clock",
            Refusal::FenceReached { .. } => "fence_reached",
            Refusal::BlockBoundReached { .. } => "block_bound_reached",
            Refusal::ClockBeforeEpoch => "clock_before_epoch",
            Refusal::Stopped => "stopped",
            Refusal::TimestampExhausted => "timestamp_exhausted",
            Refusal::BatchTooLarge { .. } => "batch_too_large",
            Refusal::AfterAheadOfClock { .. } => "after_ahead_of_clock",
        }
    }

    /// Whether this refusal can clear with nothing done by the caller, and if so how long
    /// to wait before asking again: the fence is raised by the sidecar's own renewals (look
    /// again soon), a clock behind the generator catches up by `retry_after_ms`. The HTTP
    /// API holds a request that long, within a bound, instead of refusing it at once.
    pub(crate) fn clears_after(&self) -> Option<std::time::Duration> {
        match self {
            Refusal::FenceReached { .. } => Some(std::time::Duration::from_millis(5)),
            // Raised only by a renewal of the lease (every few seconds): looked at less often.
            Refusal::BlockBoundReached { .. } => Some(std::time::Duration::from_millis(50)),
            Refusal::AheadOfClock { retry_after_ms, .. }
            | Refusal::AfterAheadOfClock { retry_after_ms, .. } => {
                Some(std::time::Duration::from_millis((*retry_after_ms).max(1)))
            }
            Refusal::ClockBeforeEpoch
            | Refusal::Stopped
            | Refusal::TimestampExhausted
            | Refusal::BatchTooLarge { .. } => None,
        }
    }

    /// Seconds a client should wait before trying again.
    pub(crate) fn retry_after_secs(&self) -> u64 {
        match self {
            Refusal::AheadOfClock { retry_after_ms, .. }
            | Refusal::AfterAheadOfClock { retry_after_ms, .. } => {
                retry_after_ms.div_ceil(1000).max(1)
            }
            _ => 1,
        }
    }
}

/// Why a generator cannot start for a slot: the fence found is beyond the last tick the
/// sequence's layout holds, so no tick above it exists and the slot can issue no ID. Never
/// written by kubeflake's own renewals for a layout in use (they write the clock plus a
/// lease duration); a fence this high was written by hand, by another sequence's layout, or
/// by a compromised holder (docs/safety.md rule 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    #[error(
        "the fence to start above (tick {fence}) is beyond tick {max_tick}, the last this \
         sequence's layout can hold: no tick above it is left, so this slot can issue no ID \
         and is not served. Check the slot Lease's kubeflake.io/fence (or the fence file): \
         kubeflake never writes one beyond the layout, so it was written by hand or by \
         someone else; the slot stays unusable until its fence is within the layout"
    )]
    FenceBeyondLayout { fence: u64, max_tick: u64 },
}

/// Consecutive positions reserved by one call; turn them into IDs with [`Generator::id_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) first: u64,
    pub(crate) count: u64,
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
    /// The fence one write of the local fence file could bring into force (at or above
    /// `fence`; 0 means none beyond `fence`). Governs readiness and asking, never issuing.
    reachable: AtomicU64,
    /// The bound of the ID-space block the lease fence stopped at (its fence cap), or
    /// `u64::MAX` while it is not held there: names the refusal at that fence.
    block_bound: AtomicU64,
    /// The highest tick a refused reservation needed (asked of the local fence's writer).
    wanted: AtomicU64,
    /// Wakes the local fence's writer when a reservation meets the fence.
    asked: Arc<Notify>,
    /// Wakes requests held at the fence when it is raised.
    raised: Arc<Notify>,
}

impl Generator {
    /// A generator that will only use ticks above `found_fence` (rule 4), and none at all
    /// until [`raise_fence`](Self::raise_fence) is called with a higher, persisted fence.
    /// Refused when `found_fence` (read from the API server or a file) is beyond the
    /// layout's last tick: the start position would not fit (docs/safety.md rule 16).
    pub fn start_above(
        config: WorkerConfig,
        found_fence: Tick,
        clock: Arc<dyn Clock>,
    ) -> Result<Generator, StartError> {
        let seq_bits = config.layout.sequence_bits();
        // Pretend the whole fence tick is used up: the next position is (found_fence + 1, 0).
        // Within the layout that is at most 2^(timestampBits + sequenceBits) - 1 < 2^62;
        // checked all the same, so that no fence ever yields a wrapped position.
        let max_tick = config.layout.max_tick().0;
        let beyond = StartError::FenceBeyondLayout {
            fence: found_fence.0,
            max_tick,
        };
        if found_fence.0 > max_tick {
            return Err(beyond);
        }
        let last = found_fence
            .0
            .checked_add(1)
            .and_then(|next_tick| next_tick.checked_mul(1u64 << seq_bits))
            .map(|next_position| next_position - 1)
            .filter(|last| last & STOPPED == 0)
            .ok_or(beyond)?;
        Ok(Generator {
            node: config.layout.node_bits(config.datacenter, config.slot),
            seq_bits,
            max_drift_ticks: config.max_drift_ms / config.timebase.unit().millis(),
            config,
            clock,
            last: AtomicU64::new(last),
            fence: AtomicU64::new(found_fence.0),
            reachable: AtomicU64::new(0),
            block_bound: AtomicU64::new(u64::MAX),
            wanted: AtomicU64::new(0),
            asked: Arc::new(Notify::new()),
            raised: Arc::new(Notify::new()),
        })
    }

    pub(crate) fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The current wall-clock tick.
    pub(crate) fn now_tick(&self) -> Result<Tick, Refusal> {
        self.config
            .timebase
            .tick_at(self.clock.wall_micros() / 1000)
            .ok_or(Refusal::ClockBeforeEpoch)
    }

    /// The first position of `tick`; a tick past the layout's last has none (its shift
    /// could wrap), and every ID from then on is refused.
    #[inline]
    fn position_of(&self, tick: Tick) -> Result<u64, Refusal> {
        if tick > self.config.layout.max_tick() {
            return Err(Refusal::TimestampExhausted);
        }
        Ok(tick.0 << self.seq_bits)
    }

    /// Reserves `count` (>= 1) consecutive positions.
    #[inline]
    pub(crate) fn reserve(&self, count: u64) -> Result<Reservation, Refusal> {
        self.reserve_from(count, 0)
    }

    /// Reserves `count` (>= 1) consecutive positions, none below `floor` (a position from
    /// [`position_after`](Self::position_after); 0 for none). The floor only takes part in
    /// choosing `first` inside the same compare-and-swap as every reservation, so the
    /// position still only grows, and the fence and drift checks apply to it unchanged
    /// (docs/safety.md rule 12).
    #[inline]
    pub(crate) fn reserve_from(&self, count: u64, floor: u64) -> Result<Reservation, Refusal> {
        debug_assert!(count >= 1);
        let now = self.now_tick()?;
        let now_position = self.position_of(now)?;
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            let fence = self.fence.load(Ordering::Acquire);
            let (first, end) = match self.check(last, now, now_position, count, floor, fence) {
                Ok(reserved) => reserved,
                Err(refusal @ Refusal::FenceReached { needed, .. }) => {
                    self.ask_for_fence(needed);
                    return Err(self.at_block_bound(refusal));
                }
                Err(refusal) => return Err(refusal),
            };
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
    pub(crate) fn id_at(&self, position: u64) -> Id {
        self.config.layout.id_at(position, self.node)
    }

    /// Issues one ID.
    pub fn next_id(&self) -> Result<Id, Refusal> {
        self.reserve(1).map(|r| self.id_at(r.first))
    }

    /// The lowest position whose ID (with this worker's datacenter and slot) comes after
    /// `after`, an ID of this sequence's layout from any worker of any datacenter. IDs order
    /// by tick, then datacenter and worker, then sequence number (the issue order within the
    /// tick, which is what `decode` returns), whatever key form the layout stores them in
    /// (docs/layouts.md: for time-ordered layouts this is plain numeric order), so:
    /// - same datacenter and worker as this one: the position just after `after`'s;
    /// - this worker's field is larger: `after`'s tick, sequence 0;
    /// - this worker's field is smaller: the next tick, sequence 0.
    ///
    /// Refuses values with bits above the layout and the layout's largest ID (nothing is
    /// above it). The result may lie beyond the layout's last tick; reserving then refuses.
    pub(crate) fn position_after(&self, after: u64) -> Result<u64, AfterError> {
        let layout = &self.config.layout;
        let total_bits = layout.total_bits();
        let parts = Id::new(after)
            .and_then(|id| layout.decode(id))
            .map_err(|e| match e {
                LayoutError::ShardMismatch { shard_bits, .. } => {
                    AfterError::ShardMismatch { after, shard_bits }
                }
                _ => AfterError::NotInLayout { after, total_bits },
            })?;
        let worker_bits = layout.worker_bits();
        let theirs = (u64::from(parts.datacenter.0) << worker_bits) | u64::from(parts.slot.0);
        let last_node = (1u64 << (worker_bits + layout.datacenter_bits())) - 1;
        if parts.tick == layout.max_tick()
            && theirs == last_node
            && u64::from(parts.sequence) == layout.ids_per_tick() - 1
        {
            return Err(AfterError::Largest { after });
        }
        let ours =
            (u64::from(self.config.datacenter.0) << worker_bits) | u64::from(self.config.slot.0);
        let tick_start = parts.tick.0 << self.seq_bits;
        Ok(match ours.cmp(&theirs) {
            std::cmp::Ordering::Greater => tick_start,
            std::cmp::Ordering::Equal => (tick_start | u64::from(parts.sequence)) + 1,
            std::cmp::Ordering::Less => (parts.tick.0 + 1) << self.seq_bits,
        })
    }

    /// Whether an ID asked now would be issued (without issuing one): the readiness check.
    /// It counts the fence one local write could bring into force, since an ID that needs
    /// that write asks for it and is held until it is done.
    pub(crate) fn check_ready(&self) -> Result<(), Refusal> {
        let now = self.now_tick()?;
        self.check(
            self.last.load(Ordering::Acquire),
            now,
            self.position_of(now)?,
            1,
            0,
            self.reachable(),
        )
        .map(|_| ())
        .map_err(|r| self.at_block_bound(r))
    }

    /// Notes that the lease fence stopped at `bound`, its block's bound (`Some`), or is no
    /// longer held there (`None`). Returns the bound noted before.
    pub(crate) fn set_block_bound(&self, bound: Option<Tick>) -> Option<Tick> {
        let before = self
            .block_bound
            .swap(bound.map_or(u64::MAX, |b| b.0), Ordering::AcqRel);
        (before != u64::MAX).then_some(Tick(before))
    }

    /// A refusal at a fence that is the block's bound, named as such.
    fn at_block_bound(&self, refusal: Refusal) -> Refusal {
        match refusal {
            Refusal::FenceReached { fence, needed }
                if fence >= self.block_bound.load(Ordering::Acquire) =>
            {
                Refusal::BlockBoundReached {
                    bound: fence,
                    needed,
                }
            }
            other => other,
        }
    }

    /// Records the tick a reservation refused at the fence needed and wakes the local
    /// fence's writer, which writes if that brings the tick into force (rule 6).
    #[cold]
    fn ask_for_fence(&self, needed: u64) {
        self.wanted.fetch_max(needed, Ordering::AcqRel);
        self.asked.notify_one();
    }

    /// The highest tick a reservation refused at the fence needed (0 if none was).
    pub(crate) fn wanted_tick(&self) -> Tick {
        Tick(self.wanted.load(Ordering::Acquire))
    }

    /// Notified whenever a reservation meets the fence: the local fence's writer waits on it.
    pub(crate) fn fence_asked(&self) -> Arc<Notify> {
        self.asked.clone()
    }

    /// Sets the fence one local write could bring into force: the lease fence while the
    /// local fence can be written, the fence in force when it cannot. Not a safety value
    /// (nothing is issued above [`fence`](Self::fence)): it may go down.
    pub(crate) fn set_reachable(&self, reachable: Tick) {
        self.reachable.store(reachable.0, Ordering::Release);
    }

    /// How many positions the drift window holds: the ticks from now to the drift limit,
    /// both included. A batch longer than that never fits ([`Refusal::BatchTooLarge`]).
    fn drift_window_positions(&self) -> u64 {
        self.max_drift_ticks
            .saturating_add(1)
            .saturating_mul(1 << self.seq_bits)
    }

    /// The fence one local write could bring into force (never below the fence in force).
    pub(crate) fn reachable(&self) -> u64 {
        self.reachable
            .load(Ordering::Acquire)
            .max(self.fence.load(Ordering::Acquire))
    }

    /// Decides the positions `[first, end]` for a reservation after `last` and at or above
    /// `floor`, under `fence`, or refuses.
    #[inline]
    fn check(
        &self,
        last: u64,
        now: Tick,
        now_position: u64,
        count: u64,
        floor: u64,
        fence: u64,
    ) -> Result<(u64, u64), Refusal> {
        if last & STOPPED != 0 {
            return Err(Refusal::Stopped);
        }
        let unforced = (last + 1).max(now_position);
        let first = unforced.max(floor);
        if first > unforced {
            // An `after` moves the position. Beyond the drift limit that is the caller's
            // value running ahead of this clock, not this sidecar failing: say so, with
            // when it could be served (the fence and drift checks below still apply).
            let first_tick = first >> self.seq_bits;
            let limit = now.0.saturating_add(self.max_drift_ticks);
            if first_tick > limit {
                let unit = self.config.timebase.unit().millis();
                return Err(Refusal::AfterAheadOfClock {
                    tick: first_tick,
                    ahead_ms: (first_tick - now.0).saturating_mul(unit),
                    max_drift_ms: self.config.max_drift_ms,
                    retry_after_ms: (first_tick - limit).saturating_mul(unit),
                });
            }
        }
        // `count` comes from a request: a sum past 2^64 cannot fit anywhere.
        let end = first
            .checked_add(count.saturating_sub(1))
            .ok_or(Refusal::BatchTooLarge { requested: count })?;
        let end_tick = end >> self.seq_bits;
        if end_tick > self.config.layout.max_tick().0 {
            return Err(Refusal::TimestampExhausted);
        }
        // A batch longer than the drift window can never fit, however long it waits: the
        // one refusal that asks for a smaller batch. Any other batch that does not fit yet
        // is refused like a single ID at the same bound (below), so the HTTP API holds it
        // until the fence rises or the clock catches up, and a client that asked for a
        // batch a few ticks too long waits those ticks, not a second.
        if count > self.drift_window_positions() {
            return Err(Refusal::BatchTooLarge { requested: count });
        }
        if end_tick > fence {
            // Whether one local write brings it into force (asked for, and it clears) or
            // the next renewal does: the same refusal, held the same way.
            return Err(Refusal::FenceReached {
                fence,
                needed: end_tick,
            });
        }
        let drift_limit = now.0.saturating_add(self.max_drift_ticks);
        if end_tick > drift_limit {
            let unit = self.config.timebase.unit().millis();
            let behind_ticks = end_tick - now.0;
            return Err(Refusal::AheadOfClock {
                behind_ms: behind_ticks.saturating_mul(unit),
                max_drift_ms: self.config.max_drift_ms,
                retry_after_ms: (behind_ticks - self.max_drift_ticks).saturating_mul(unit),
            });
        }
        Ok((first, end))
    }

    /// Allows ticks up to `fence`. Call only after `fence` was durably written (to the
    /// lease or the state file): that write is what makes the ticks safe to use. A lower
    /// value than the current fence is ignored (rule 5: the fence only goes up).
    pub fn raise_fence(&self, fence: Tick) {
        if self.fence.fetch_max(fence.0, Ordering::AcqRel) < fence.0 {
            self.raised.notify_waiters();
        }
    }

    /// Notified (all waiters) whenever the fence in force goes up: a request held at the
    /// fence waits on it instead of only looking again after a pause.
    pub(crate) fn fence_raised(&self) -> Arc<Notify> {
        self.raised.clone()
    }

    /// The fence in force.
    pub(crate) fn fence(&self) -> Tick {
        Tick(self.fence.load(Ordering::Acquire))
    }

    /// The tick of the last position issued (or the found fence, before the first ID).
    pub(crate) fn high_water_tick(&self) -> Tick {
        Tick((self.last.load(Ordering::Acquire) & !STOPPED) >> self.seq_bits)
    }

    /// Stops issuing for good and returns the highest tick ever used: the exact value a
    /// graceful shutdown may lower the fence to (rule 5). Also used when the slot is lost.
    /// A reservation racing with this either completed before (and is counted) or fails.
    pub(crate) fn stop(&self) -> Tick {
        let last = self.last.fetch_or(STOPPED, Ordering::AcqRel);
        Tick((last & !STOPPED) >> self.seq_bits)
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.last.load(Ordering::Acquire) & STOPPED != 0
    }

    /// How far (ms) the generator runs ahead of the wall clock; 0 when it is not ahead.
    pub(crate) fn ahead_of_clock_ms(&self) -> u64 {
        let Ok(now) = self.now_tick() else { return 0 };
        self.high_water_tick().0.saturating_sub(now.0) * self.config.timebase.unit().millis()
    }

    /// How far (ms) the fence this sidecar can serve up to without the API server lies
    /// beyond the wall clock ([`reachable`](Self::reachable): the lease fence while the
    /// local fence can be written); 0 when it has run out. `None` when nothing but the
    /// local fence bounds it (standalone, while its file can be written): no limit.
    pub(crate) fn fence_headroom_ms(&self) -> Option<u64> {
        let Ok(now) = self.now_tick() else {
            return Some(0);
        };
        let reachable = self.reachable();
        (reachable != u64::MAX).then(|| {
            reachable
                .saturating_sub(now.0)
                .saturating_mul(self.config.timebase.unit().millis())
        })
    }
}

#[cfg(test)]
mod tests;
