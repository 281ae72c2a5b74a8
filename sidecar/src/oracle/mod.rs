//! Strict sequences in a cluster: one sidecar of the sequence, the **oracle**, serves
//! every strict value from a window it reserved on the counter; the others forward their
//! requests to it (docs/strict.md, docs/safety.md rule 13, `kubeflake_crds::strict_oracle`
//! for the protocol and its timing).
//!
//! Three tasks share one [`Shared`] (a plain mutex, never held across an await):
//! - the **elector** ([`Oracle::elect`]) renews the oracle Lease while this sidecar holds
//!   it; otherwise it follows the Lease through a watch ([`follow`]) and takes it over when
//!   it is free or was left unchanged for `D·(1+ρ)`; a take-over reserves the first window
//!   before the term serves;
//! - the **dispatcher** ([`Oracle::dispatch`]) takes every local request queued so far and
//!   serves the group from the term (this sidecar is the oracle) or forwards it as one
//!   request (another is); a request joins only a group formed after it arrived, so the
//!   value it gets is taken at a moment inside its call;
//! - the **listener** ([`listen::listen`]) serves other sidecars' forwarded groups from
//!   the term.
//!
//! The role is a state enum ([`Role`]): only `Oracle` holds a [`Term`], so only the
//! holder of the Lease has values to serve, and a term lost is dropped with its window
//! (a gap, never served).
//!
//! A sidecar restarted in its pod takes its own Lease back at once when it can tell that
//! the process before it has ended ([`pod_lock`]); otherwise it waits like any other.
//!
//! A room of its own beside [`crate::segment`] (blocks, and strict standalone) and
//! [`crate::generator`] (Snowflake): it builds on the segment counter (the claim loop,
//! [`group`] commit, the raise check) and nothing in `segment` reads it;
//! [`crate::source`] chooses between them.
//!
//! One piece (over 400 lines): the three tasks act on one role and are read together.

mod admit;
mod follow;
pub(crate) mod forward;
pub(crate) mod listen;
pub(crate) mod pod_lock;
pub(crate) mod store;
pub(crate) mod term;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::Utc;
use kubeflake_crds::segment_counter::lists_claimant;
use kubeflake_crds::strict_oracle::{
    COUNTER_FORMAT_ORACLE, ForwardReply, ForwardRequest, OracleLease,
};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use self::follow::Follow;
use self::forward::Forwarder;
use self::pod_lock::PodLock;
use self::store::{OracleStore, OracleStoreError};
use self::term::{Need, Term, TermRefusal};
use crate::metrics::SegmentMetrics;
use crate::peer_token::PeerAuth;
use crate::segment::buffer::{Runs, SegmentRefusal, check_raise};
use crate::segment::claim::{Backoff, Block, ClaimError, CounterStore, claim_counted};
use crate::segment::group;

/// Values reserved by one window write (the next write starts when half is used).
pub(crate) const WINDOW: u64 = 1 << 16;

/// What this sidecar is in the sequence's strict service.
#[derive(Debug)]
pub(crate) enum Role {
    /// No oracle known: starting, or a hand-over under way.
    Unknown { why: String },
    /// Another sidecar serves, at `address`, in `term` (the oracle Lease's, as this
    /// sidecar last saw it): a reply from any other term is not used, nor one from a
    /// connection whose welcome shows a token of another pod than `holder` (its UID).
    Follower {
        address: String,
        term: i32,
        holder: String,
    },
    /// This sidecar holds the oracle Lease and serves.
    Oracle { term: Term, lease: OracleLease },
}

/// What [`Oracle::take_now`] found.
enum Take {
    /// Values taken, in this term.
    Served(Block, i32),
    /// The window is short: reserve what the term needs first.
    NeedsMore(Need),
    /// This sidecar does not serve (another does, or none now).
    NotOracle,
}

/// How this sidecar takes part.
#[derive(Debug, Clone)]
pub(crate) struct OracleConfig {
    pub(crate) sequence: String,
    /// This pod's UID: the holder identity.
    pub(crate) uid: String,
    /// Where this sidecar takes forwarded requests (`None`: it never becomes the oracle).
    pub(crate) listen: Option<SocketAddr>,
    /// How long a local request may wait for its group's answer.
    pub(crate) wait_limit: Duration,
    /// Test only (the broken variant of the linearizability test): take a held Lease over
    /// without waiting `D·(1+ρ)`. Breaks rule 13's order, never uniqueness.
    pub(crate) take_over_without_waiting: bool,
    /// The pod's state dir (an `emptyDir`), where the [`PodLock`] lives; `None`: a restart
    /// waits for its own Lease to lapse.
    pub(crate) state_dir: Option<PathBuf>,
}

struct Shared {
    role: Role,
    requests: group::Queue,
    /// The end of the highest window this process reserved: the counter is never below it.
    top: u64,
    /// An oracle was known (this sidecar or another) at least once.
    started: bool,
}

/// A strict sequence's values in a cluster.
pub(crate) struct Oracle {
    shared: Mutex<Shared>,
    /// Wakes the dispatcher (requests queued, or stopped).
    wake: Notify,
    /// One window write at a time.
    extending: tokio::sync::Mutex<()>,
    stop_tx: watch::Sender<bool>,
    counter: Arc<dyn CounterStore>,
    leases: Arc<dyn OracleStore>,
    config: OracleConfig,
    /// `ip:port` published in the Lease (the listener's address).
    address: Option<String>,
    /// Held from the start until the process ends, while this sidecar may serve.
    pod_lock: Option<PodLock>,
    backoff: Backoff,
    metrics: SegmentMetrics,
    /// The token this sidecar shows on the oracle port, and how it checks its peers'.
    peers: Arc<PeerAuth>,
}

impl Oracle {
    /// Binds the forwarding listener (if this sidecar may serve) and starts the three tasks.
    pub(crate) async fn start(
        counter: Arc<dyn CounterStore>,
        leases: Arc<dyn OracleStore>,
        config: OracleConfig,
        metrics: SegmentMetrics,
        peers: Arc<PeerAuth>,
    ) -> Arc<Oracle> {
        let listener = match config.listen {
            Some(addr) => match TcpListener::bind(addr).await {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::error!(%addr, error = %e, "cannot listen for forwarded strict requests: this sidecar forwards, it never serves as the oracle");
                    None
                }
            },
            None => None,
        };
        let address = listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string());
        // Taken before anything could be served, kept until the process ends.
        let pod_lock = match (&address, &config.state_dir) {
            (Some(_), Some(dir)) => match PodLock::acquire(dir, &config.sequence) {
                Ok(lock) => Some(lock),
                Err(e) => {
                    tracing::warn!(error = %e, "strict: no pod lock; after a restart this sidecar waits for its own oracle lease to lapse");
                    None
                }
            },
            _ => None,
        };
        let (stop_tx, _) = watch::channel(false);
        let oracle = Arc::new(Oracle {
            shared: Mutex::new(Shared {
                role: Role::Unknown {
                    why: "reading the oracle lease".into(),
                },
                requests: group::Queue::default(),
                top: 0,
                started: false,
            }),
            wake: Notify::new(),
            extending: tokio::sync::Mutex::new(()),
            stop_tx,
            counter,
            leases,
            config,
            address,
            pod_lock,
            backoff: Backoff::default(),
            metrics,
            peers,
        });
        oracle.metrics.block_size.set(WINDOW as i64);
        if let Some(listener) = listener {
            tokio::spawn(listen::listen(
                oracle.clone(),
                listener,
                oracle.stop_tx.subscribe(),
            ));
        }
        tokio::spawn(oracle.clone().elect());
        tokio::spawn(oracle.clone().dispatch());
        oracle
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Ok` once this sidecar served or knew an oracle to forward to, until it stops. A
    /// hand-over later does not make it unready: that would take every pod of the sequence
    /// out of its Services for seconds; its strict requests get 503 meanwhile.
    pub(crate) fn check_ready(&self) -> Result<(), SegmentRefusal> {
        let s = self.lock();
        if s.requests.is_stopped() {
            return Err(SegmentRefusal::Stopping);
        }
        if s.started {
            return Ok(());
        }
        match &s.role {
            Role::Oracle { term, .. } => term.serving_at(Instant::now()).map_err(|r| refusal(&r)),
            Role::Follower { .. } => Ok(()),
            Role::Unknown { why } => Err(SegmentRefusal::NoBlock(format!(
                "strict: no oracle serves this sequence yet ({why})"
            ))),
        }
    }

    /// Whether requests are answered now (this sidecar serves, or knows the oracle).
    #[cfg(test)]
    pub(crate) fn serving_now(&self) -> bool {
        let s = self.lock();
        !s.requests.is_stopped()
            && match &s.role {
                Role::Oracle { term, .. } => term.serving_at(Instant::now()).is_ok(),
                Role::Follower { .. } => true,
                Role::Unknown { .. } => false,
            }
    }

    /// Whether pod `uid` is a claimant of the sequence, as the oracle Lease this sidecar
    /// holds lists them (the operator writes the counter's claimants there in the same
    /// pass, and this copy is at most one renewal old); `None` when it is not the oracle.
    pub(crate) fn is_claimant(&self, uid: &str) -> Option<bool> {
        let s = self.lock();
        let Role::Oracle { lease, .. } = &s.role else {
            return None;
        };
        Some(lists_claimant(&lease.read, uid))
    }

    /// Whether this sidecar is the oracle now (for tests and metrics).
    pub(crate) fn is_oracle(&self) -> bool {
        matches!(self.lock().role, Role::Oracle { .. })
    }

    /// `want` consecutive values, each at least `min`, taken after this call began.
    ///
    /// The raise limit itself is kept by the term ([`Term::take`]), for every request,
    /// local or forwarded. This check only keeps a request whose `min` the counter has not
    /// reached out of a group (the group's `min` is its largest, so the whole group would be
    /// refused) and answers it here, with the counter's `next`, also on a follower.
    pub(crate) async fn take_from(
        self: &Arc<Self>,
        want: u64,
        min: u64,
    ) -> Result<Runs, SegmentRefusal> {
        if min > crate::segment::buffer::RAISE_LIMIT && min > self.lock().top {
            check_raise(self.counter.as_ref(), &self.backoff, min).await?;
        }
        // The oracle serves its own requests at once while its window has the values:
        // taken under the lock, inside this call, like a group's (no queue, no task switch).
        if let Take::Served(block, _) = self.take_now(want, min)? {
            return Ok(vec![block]);
        }
        let answer = self.lock().requests.push(want, min)?;
        self.wake.notify_one();
        group::answer(answer, self.config.wait_limit).await
    }

    /// One value of at least `min`.
    pub(crate) async fn take_one_from(self: &Arc<Self>, min: u64) -> Result<u64, SegmentRefusal> {
        let runs = self.take_from(1, min).await?;
        runs.first()
            .map(|b| b.start)
            .ok_or_else(|| SegmentRefusal::NoBlock("strict: an empty answer".into()))
    }

    /// A group forwarded by another sidecar of the sequence (a claimant whose token the
    /// listener checked: admit.rs; its `min` is held to the raise limit by the term like
    /// any other).
    pub(crate) async fn serve_forwarded(
        self: &Arc<Self>,
        request: ForwardRequest,
    ) -> Result<ForwardReply, SegmentRefusal> {
        let (block, term) = self.serve_here(request.count, request.min).await?;
        Ok(ForwardReply {
            start: block.start,
            end: block.end,
            term,
        })
    }

    /// Values from this sidecar's term: reserves more first when the window is short.
    async fn serve_here(
        self: &Arc<Self>,
        count: u64,
        min: u64,
    ) -> Result<(Block, i32), SegmentRefusal> {
        for _ in 0..3 {
            match self.take_now(count, min)? {
                Take::Served(block, term) => return Ok((block, term)),
                Take::NeedsMore(need) => self.extend(need).await?,
                Take::NotOracle => {
                    return Err(SegmentRefusal::NoBlock(
                        "strict: this sidecar is not the sequence's oracle (a hand-over is under way)"
                            .into(),
                    ));
                }
            }
        }
        Err(SegmentRefusal::NoBlock(
            "strict: the window was used up by others three times while this request waited".into(),
        ))
    }

    /// Takes `count` values of at least `min` from this sidecar's term now, if it is the
    /// oracle and its window has them; starts the next window write when it runs low.
    fn take_now(self: &Arc<Self>, count: u64, min: u64) -> Result<Take, SegmentRefusal> {
        let mut s = self.lock();
        if s.requests.is_stopped() {
            return Err(SegmentRefusal::Stopping);
        }
        let Role::Oracle { term, .. } = &mut s.role else {
            return Ok(Take::NotOracle);
        };
        match term.take(count, min, Instant::now()) {
            Ok(block) => {
                let number = term.number;
                let low = term.remaining() < WINDOW / 2;
                drop(s);
                if low {
                    self.extend_in_background();
                }
                Ok(Take::Served(block, number))
            }
            Err(TermRefusal::NeedsMore(need)) => Ok(Take::NeedsMore(need)),
            Err(refused) => Err(refusal(&refused)),
        }
    }

    /// Starts a window write unless one is under way: the window runs low.
    fn extend_in_background(self: &Arc<Self>) {
        if self.extending.try_lock().is_err() {
            return;
        }
        let oracle = self.clone();
        tokio::spawn(async move {
            // A failure is logged and counted in `reserve`; the next request retries.
            let _ = oracle.extend(Need::from_next(WINDOW)).await;
        });
    }

    /// Reserves what `need` says on the counter and adds it to the term (if it is still
    /// this sidecar's): one window write at a time. A [`Need`] comes only from the term's
    /// raise check or from `next` (term.rs).
    async fn extend(&self, need: Need) -> Result<(), SegmentRefusal> {
        let (want, min) = (need.want(), need.min());
        let _one_at_a_time = self.extending.lock().await;
        let (number, floor, have) = {
            let s = self.lock();
            match &s.role {
                Role::Oracle { term, .. } => (term.number, s.top, term.remaining()),
                _ => return Err(SegmentRefusal::NoBlock("strict: the term ended".into())),
            }
        };
        // Another request's write may have brought enough while this one waited.
        if have >= want && min <= floor {
            return Ok(());
        }
        let block = self.reserve(want.max(WINDOW), floor, min).await?;
        let mut s = self.lock();
        s.top = s.top.max(block.end);
        match &mut s.role {
            Role::Oracle { term, .. } if term.number == number => term.add(block),
            // The term ended while the write was in flight: its values are a gap.
            _ => {}
        }
        Ok(())
    }

    /// One window write: `[next, next + size)` of the counter (from `min` if higher).
    async fn reserve(&self, size: u64, floor: u64, min: u64) -> Result<Block, SegmentRefusal> {
        let (result, _) = claim_counted(
            self.counter.as_ref(),
            size,
            floor,
            min,
            &self.backoff,
            &self.metrics,
        )
        .await;
        match result {
            Ok(claimed) => {
                self.metrics
                    .claimed_top
                    .set(i64::try_from(claimed.block.end).unwrap_or(i64::MAX));
                Ok(claimed.block)
            }
            Err(e) => {
                tracing::warn!(error = %e, "strict oracle: reserving a window failed");
                Err(match e {
                    ClaimError::Exhausted => SegmentRefusal::Exhausted,
                    e => SegmentRefusal::NoBlock(format!("strict: reserving values failed: {e}")),
                })
            }
        }
    }
}

/// The refusal a client sees when the term does not serve.
fn refusal(r: &TermRefusal) -> SegmentRefusal {
    match r {
        TermRefusal::Lapsed { since } => SegmentRefusal::NoBlock(format!(
            "strict: the oracle lease was not renewed for {since:?}; serving stops until a \
             renewal succeeds or another sidecar takes over"
        )),
        TermRefusal::NeedsMore(_) => {
            SegmentRefusal::NoBlock("strict: the window is used up; reserving more".into())
        }
        TermRefusal::AboveRaiseLimit { min, top } => SegmentRefusal::AfterAboveCounter {
            after: min.saturating_sub(1),
            next: *top,
        },
    }
}

mod dispatch;
mod tasks;

#[cfg(test)]
mod port_tests;
#[cfg(test)]
mod tests;
