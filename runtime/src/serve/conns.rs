//! The open connections of one listener: what each is doing, since when, and which one to
//! close when the listener is full.
//!
//! A connection is in one [`Phase`] at a time. The serve loop moves it: `Idle` once
//! accepted and after each answer, `Header` when the first byte of a request arrives
//! ([`Tracked`] sees it), `Busy` while the handler runs, `Body` while a handler reads the
//! request's body ([`crate::serve::read_body`]). `Idle`, `Header` and `Body` wait on the
//! client; `Busy` waits on the server. So when the listener is at its cap, the connection
//! waiting on its client for longest is closed to make room ([`Conns::admit`]); a
//! connection the server is answering is never closed, and when every one is, the loop
//! stops accepting until one ends (the newcomer waits in the listen backlog instead of
//! being reset).

use std::collections::BTreeMap;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Limits;

/// What a connection is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Nothing of a request yet: just accepted (or in its TLS handshake), or kept alive
    /// after an answer.
    Idle = 0,
    /// Part of a request's header has arrived, not all of it.
    Header = 1,
    /// The handler reads the request's body.
    Body = 2,
    /// The handler is answering.
    Busy = 3,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Idle,
            1 => Phase::Header,
            2 => Phase::Body,
            _ => Phase::Busy,
        }
    }

    /// Whether the connection waits on its client (and may be closed to make room).
    fn waits_on_client(self) -> bool {
        self != Phase::Busy
    }
}

/// One connection's phase and when it entered it (milliseconds since its listener
/// started), shared by the serve loop, the connection's watchdog and its handler.
#[derive(Debug)]
pub struct Activity {
    phase: AtomicU8,
    since_ms: AtomicU64,
    epoch: Instant,
    changed: Notify,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        let activity = Activity {
            phase: AtomicU8::new(Phase::Idle as u8),
            since_ms: AtomicU64::new(0),
            epoch,
            changed: Notify::new(),
        };
        activity.touch();
        activity
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    fn since_ms(&self) -> u64 {
        self.since_ms.load(Ordering::Acquire)
    }

    /// Enters `phase` now.
    pub fn set(&self, phase: Phase) {
        self.touch();
        self.phase.store(phase as u8, Ordering::Release);
        self.changed.notify_one();
    }

    /// Restarts the current phase's clock (progress made).
    fn touch(&self) {
        self.since_ms.store(self.now_ms(), Ordering::Release);
    }

    /// Completes when the connection has stayed in a waiting phase longer than `limits`
    /// allow for it, with what it was doing; never while the handler answers or reads a
    /// body (the handler bounds its body read itself).
    pub async fn overdue(&self, limits: &Limits) -> &'static str {
        loop {
            let changed = self.changed.notified();
            let (phase, since) = (self.phase(), self.since_ms());
            let (limit, what) = match phase {
                Phase::Idle => (limits.idle_timeout, "idle"),
                Phase::Header => (limits.header_read_timeout, "a request header not complete"),
                Phase::Body | Phase::Busy => {
                    changed.await;
                    continue;
                }
            };
            let deadline = self.epoch + Duration::from_millis(since) + limit;
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if self.phase() == phase && self.since_ms() == since {
                        return what;
                    }
                }
                () = changed => {}
            }
        }
    }
}

/// The handle on its connection a handler finds in the request's extensions, to say it
/// now reads the body (and is done with it): see [`crate::serve::read_body`].
#[derive(Debug, Clone)]
pub struct ConnActivity(pub(crate) Arc<Activity>);

/// A connection's stream, noting when a request starts arriving on an idle connection and
/// when an answer makes progress.
pub struct Tracked<IO> {
    io: IO,
    activity: Arc<Activity>,
}

impl<IO> Tracked<IO> {
    pub fn new(io: IO, activity: Arc<Activity>) -> Tracked<IO> {
        Tracked { io, activity }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && self.activity.phase() == Phase::Idle
        {
            self.activity.set(Phase::Header);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> Tracked<IO> {
    /// An answer written on an idle connection (the handler is done, hyper still sends):
    /// the client is reading, so the idle clock restarts.
    fn wrote(&self, polled: &Poll<std::io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(n)) if *n > 0) && self.activity.phase() == Phase::Idle {
            self.activity.touch();
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

struct Entry {
    activity: Arc<Activity>,
    close: CancellationToken,
}

/// The open connections of one listener, at most `max`.
pub struct Conns {
    name: &'static str,
    max: usize,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<BTreeMap<u64, Entry>>,
    ended: Notify,
    /// Connections closed to make room, since the listener started.
    closed_for_room: AtomicU64,
    /// When the cap was last logged (ms since `epoch`, `u64::MAX` for never).
    warned_ms: AtomicU64,
}

/// How often, at most, a full listener says so at warn.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// How often a listener full of connections being answered looks again for room.
const FULL_RECHECK: Duration = Duration::from_millis(50);

/// A registered connection: removed from its listener when dropped.
pub struct Registered {
    conns: Arc<Conns>,
    id: u64,
    pub activity: Arc<Activity>,
    /// Cancelled when the connection is closed to make room.
    pub close: CancellationToken,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.conns.lock().remove(&self.id);
        self.conns.ended.notify_one();
    }
}

impl Conns {
    pub fn new(name: &'static str, max: usize) -> Arc<Conns> {
        Arc::new(Conns {
            name,
            max: max.max(1),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            ended: Notify::new(),
            closed_for_room: AtomicU64::new(0),
            warned_ms: AtomicU64::new(u64::MAX),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        // The map stays consistent whatever panicked while it was held.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until a connection could be admitted: the listener is under its cap, or one of
    /// its connections waits on its client (and would be closed to make room).
    pub async fn room(&self) {
        loop {
            let ended = self.ended.notified();
            {
                let open = self.lock();
                if open.len() < self.max || Self::longest_waiting(&open).is_some() {
                    return;
                }
            }
            tokio::select! {
                () = ended => {}
                () = tokio::time::sleep(FULL_RECHECK) => {}
            }
        }
    }

    /// The connection that has waited on its client for longest.
    fn longest_waiting(open: &BTreeMap<u64, Entry>) -> Option<u64> {
        open.iter()
            .filter(|(_, e)| e.activity.phase().waits_on_client())
            .min_by_key(|(id, e)| (e.activity.since_ms(), **id))
            .map(|(id, _)| *id)
    }

    /// Closes the connection that has waited on its client for longest; false when every
    /// connection is being answered.
    pub fn close_one(&self, why: &'static str) -> bool {
        let mut open = self.lock();
        let Some(id) = Self::longest_waiting(&open) else {
            return false;
        };
        if let Some(entry) = open.remove(&id) {
            entry.close.cancel();
            tracing::debug!(server = self.name, phase = ?entry.activity.phase(), why, "connection closed to make room");
        }
        let total = self.closed_for_room.fetch_add(1, Ordering::Relaxed) + 1;
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.warned_ms.load(Ordering::Relaxed);
        if last == u64::MAX || now.saturating_sub(last) >= WARN_EVERY.as_millis() as u64 {
            self.warned_ms.store(now, Ordering::Relaxed);
            tracing::warn!(
                server = self.name,
                max_connections = self.max,
                closed_for_room = total,
                why,
                "connection cap reached: closing the connections that waited on their clients longest"
            );
        }
        true
    }

    /// Registers a newly accepted connection, first closing the longest-waiting one when
    /// the listener is full; `None` when it is full of connections being answered (the
    /// caller then waits for [`Conns::room`] and asks again).
    pub fn admit(self: &Arc<Self>) -> Option<Registered> {
        if self.len() >= self.max && !self.close_one("the listener is full") {
            tracing::debug!(
                server = self.name,
                "connection waits: every connection is being answered"
            );
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new(self.epoch));
        let close = CancellationToken::new();
        self.lock().insert(
            id,
            Entry {
                activity: activity.clone(),
                close: close.clone(),
            },
        );
        Some(Registered {
            conns: self.clone(),
            id,
            activity,
            close,
        })
    }
}
