//! The process's one shutdown: SIGTERM or SIGINT (or a test) triggers it, every task
//! learns of it through a cloned [`ShutdownToken`], and [`drain`] waits for the tasks that
//! must finish, with a bound, naming those that did not.
//!
//! Why one type: the fan-out (signal -> tell every task -> wait for them) used to be
//! written by hand in each binary and mode, each time with a channel, a relay task and a
//! "the sender is gone" rule of its own. A token is cheap to clone, can be asked
//! (`is_triggered`) or awaited (`triggered`), and a part that may stop for a reason of its
//! own as well (the operator's controller on lost leadership) takes a [`ShutdownToken::child`].
//!
//! Created once at startup ([`Shutdown::on_signals`], which installs the handlers before it
//! returns: a handler installed later leaves a window in which SIGTERM kills the process
//! without a graceful stop).

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why the shutdown could not be set up (a startup error).
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error(
        "cannot install the SIGTERM/SIGINT handlers ({0}); without them a stop would not be \
         graceful"
    )]
    Signals(#[source] std::io::Error),
}

/// When a shutdown was triggered; a child also sees its parent's.
#[derive(Debug, Default)]
struct TriggeredAt {
    at: OnceLock<Instant>,
    parent: Option<Arc<TriggeredAt>>,
}

impl TriggeredAt {
    fn get(&self) -> Option<Instant> {
        let parent = self.parent.as_ref().and_then(|p| p.get());
        match (self.at.get().copied(), parent) {
            (Some(own), Some(parent)) => Some(own.min(parent)),
            (own, parent) => own.or(parent),
        }
    }
}

/// The owner's side: triggers the shutdown. Dropping it does not trigger anything: tokens
/// of a dropped `Shutdown` never fire (tests use that for "runs until the end").
#[derive(Debug)]
pub struct Shutdown {
    token: ShutdownToken,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A shutdown triggered only by [`Shutdown::trigger`].
    pub fn new() -> Shutdown {
        Shutdown {
            token: ShutdownToken {
                cancel: CancellationToken::new(),
                at: Arc::new(TriggeredAt::default()),
            },
        }
    }

    /// A shutdown triggered by the first SIGTERM or SIGINT. The handlers are installed
    /// before this returns. Must be called inside a tokio runtime.
    pub fn on_signals() -> Result<Shutdown, ShutdownError> {
        let mut term = signal(SignalKind::terminate()).map_err(ShutdownError::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(ShutdownError::Signals)?;
        let shutdown = Shutdown::new();
        let token = shutdown.token.clone();
        tokio::spawn(async move {
            let reason = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                () = token.triggered() => return,
            };
            token.fire(reason);
        });
        Ok(shutdown)
    }

    /// A token to hand to a task.
    pub fn token(&self) -> ShutdownToken {
        self.token.clone()
    }

    /// Starts the shutdown (once; later calls change nothing). `reason` goes to the log.
    pub fn trigger(&self, reason: &str) {
        self.token.fire(reason);
    }
}

/// A task's side: tells whether the shutdown began and waits for it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownToken {
    cancel: CancellationToken,
    at: Arc<TriggeredAt>,
}

/// A token nobody can trigger (for parts run without a shutdown, such as tests).
impl Default for ShutdownToken {
    fn default() -> Self {
        Shutdown::new().token()
    }
}

impl ShutdownToken {
    fn fire(&self, reason: &str) {
        if self.at.at.set(Instant::now()).is_ok() {
            tracing::info!(reason, "shutting down");
        }
        self.cancel.cancel();
    }

    /// Whether the shutdown began.
    pub fn is_triggered(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when the shutdown begins (at once if it has). Owns its token, so it can be
    /// handed to a task or a server as its stop signal.
    pub fn triggered(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.cancel.clone().cancelled_owned()
    }

    /// Sleeps `d`, or less when the shutdown begins meanwhile.
    pub async fn sleep(&self, d: Duration) {
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            () = self.cancel.cancelled() => {}
        }
    }

    /// When the shutdown began (the earliest trigger this token sees), if it did.
    pub fn triggered_at(&self) -> Option<Instant> {
        self.at.get()
    }

    /// A shutdown of its own that is also triggered with this one: for a part that may be
    /// stopped alone (the operator's controller when leadership is lost).
    pub fn child(&self) -> Shutdown {
        Shutdown {
            token: ShutdownToken {
                cancel: self.cancel.child_token(),
                at: Arc::new(TriggeredAt {
                    at: OnceLock::new(),
                    parent: Some(self.at.clone()),
                }),
            },
        }
    }
}

/// Waits until `deadline` for `tasks` (each with a name for the log) to finish; those still
/// running then are aborted, logged at warn, and their names returned. A task that ended
/// with a panic is logged at error (it did stop).
pub async fn drain<T>(
    tasks: Vec<(&'static str, JoinHandle<T>)>,
    deadline: Instant,
) -> Vec<&'static str> {
    let mut unfinished = Vec::new();
    for (name, mut task) in tasks {
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(_)) => tracing::debug!(task = name, "stopped"),
            Ok(Err(e)) => {
                tracing::error!(task = name, error = %e, "ended with a failure while stopping")
            }
            Err(_) => {
                task.abort();
                unfinished.push(name);
            }
        }
    }
    if !unfinished.is_empty() {
        tracing::warn!(
            tasks = ?unfinished,
            "did not stop in time: aborted"
        );
    }
    unfinished
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn every_token_fires_on_trigger_and_a_dropped_shutdown_fires_none() {
        let shutdown = Shutdown::new();
        let token = shutdown.token();
        let waiting = tokio::spawn(token.clone().triggered());
        let sleeping = tokio::spawn({
            let token = token.clone();
            async move { token.sleep(Duration::from_secs(3600)).await }
        });
        tokio::task::yield_now().await;
        assert!(!token.is_triggered());
        assert_eq!(token.triggered_at(), None);
        shutdown.trigger("test");
        let limit = Duration::from_secs(10);
        assert!(tokio::time::timeout(limit, waiting).await.is_ok());
        assert!(
            tokio::time::timeout(limit, sleeping).await.is_ok(),
            "a sleep is cut short"
        );
        assert!(token.is_triggered());
        assert!(token.triggered_at().is_some());
        shutdown.trigger("again");
        assert!(token.is_triggered(), "a second trigger changes nothing");

        let dropped = Shutdown::new().token();
        let never = tokio::time::timeout(Duration::from_millis(50), dropped.triggered()).await;
        assert!(
            never.is_err(),
            "a dropped Shutdown never triggers its tokens"
        );
        assert!(!ShutdownToken::default().is_triggered());
    }

    #[tokio::test]
    async fn a_child_fires_with_its_parent_but_not_the_other_way_round() {
        let parent = Shutdown::new();
        let child = parent.token().child();
        child.trigger("lost leadership");
        assert!(child.token().is_triggered());
        assert!(!parent.token().is_triggered());
        let second = parent.token().child();
        parent.trigger("SIGTERM");
        assert!(second.token().is_triggered());
        assert_eq!(second.token().triggered_at(), parent.token().triggered_at());
    }

    /// Sets its flag when dropped: tells an aborted task from one left running.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn drain_returns_at_the_deadline_with_the_names_of_the_tasks_that_did_not_stop() {
        let started = Instant::now();
        let stuck_dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(stuck_dropped.clone());
        let tasks = vec![
            (
                "quick",
                tokio::spawn(tokio::time::sleep(Duration::from_millis(10))),
            ),
            (
                "stuck",
                tokio::spawn(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await
                }),
            ),
            (
                "slow but in time",
                tokio::spawn(tokio::time::sleep(Duration::from_millis(900))),
            ),
        ];
        let unfinished = drain(tasks, started + Duration::from_secs(1)).await;
        assert_eq!(unfinished, ["stuck"]);
        let took = started.elapsed();
        assert!(
            (Duration::from_secs(1)..Duration::from_secs(2)).contains(&took),
            "returned after {took:?}"
        );
        tokio::task::yield_now().await;
        assert!(
            stuck_dropped.load(Ordering::SeqCst),
            "the stuck task is aborted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn drain_returns_as_soon_as_every_task_stopped() {
        let started = Instant::now();
        let tasks = vec![
            ("a", tokio::spawn(async {})),
            ("panics", tokio::spawn(async { panic!("test") })),
        ];
        let unfinished = drain(tasks, started + Duration::from_secs(60)).await;
        assert!(unfinished.is_empty(), "{unfinished:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn sigterm_triggers_the_shutdown() {
        let shutdown = Shutdown::on_signals().expect("handlers install");
        let token = shutdown.token();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let fired = tokio::time::timeout(Duration::from_secs(10), token.triggered()).await;
        assert!(fired.is_ok(), "SIGTERM did not trigger the shutdown");
    }
}
