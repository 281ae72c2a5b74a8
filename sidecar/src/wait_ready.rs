//! `kubeflake-sidecar wait-ready URL`: returns once the sidecar's `/readyz` answers 200.
//!
//! The webhook of 0.1.0 injected it as the sidecar's postStart hook: the kubelet starts a
//! pod's app containers only after a native sidecar's postStart hook returned, so the app's
//! first request for an ID finds a sidecar that holds its slot or segment block. Pods
//! keep what they were injected with, and a newer sidecar may run in them, so it stays;
//! the webhook now injects a startup probe that asks the same `/readyz?wait=`
//! (operator/src/inject). Scripts use it too (bench/sidecar-lease.sh).
//! It runs in the sidecar's own container, beside the serving process, and only asks it:
//! it never touches the fence or the API server.
//!
//! Each question is long-polled: `/readyz?wait=<ms>` ([`contract::READYZ_WAIT_PARAM`]), which
//! the sidecar holds open until it is ready (and answers within a few ms of it) or the wait
//! is over: one request per [`WaitPolicy::long_poll`] instead of one every 10 ms, so the
//! hook costs the pod's CPU next to nothing while the sidecar starts. A sidecar that does
//! not know `wait` (older, or its probe port not listening yet) answers or refuses at once;
//! then it asks again after the policy's interval, often at first (the usual wait is well
//! under a second, and every millisecond here delays the app) and less often once the wait
//! is long (a pod that waits for a free slot may wait for hours; the kubelet shows the
//! sidecar's `WaitingForSlot` Event meanwhile).

use std::time::{Duration, Instant};

use kubeflake_crds::contract;

use crate::check::{CheckError, check};

/// How long one question to `/readyz` may take beyond the wait it asks for.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How often to ask, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct WaitPolicy {
    /// Interval while the wait is young.
    pub(crate) fast: Duration,
    /// How long the fast interval is used.
    pub(crate) fast_for: Duration,
    /// Interval after that.
    pub(crate) slow: Duration,
    /// How long the sidecar may hold one question (`/readyz?wait=`); zero asks without.
    pub(crate) long_poll: Duration,
    /// Give up after this long (the kubelet then restarts the sidecar container).
    pub(crate) limit: Duration,
}

impl WaitPolicy {
    /// The hook's policy: questions held up to 5 s; to a sidecar that answers at once,
    /// every 10 ms for 10 s, then every 500 ms; for at most `limit`.
    pub fn hook(limit: Duration) -> WaitPolicy {
        WaitPolicy {
            fast: Duration::from_millis(10),
            fast_for: Duration::from_secs(10),
            slow: Duration::from_millis(500),
            long_poll: Duration::from_secs(5),
            limit,
        }
    }

    fn interval(&self, waited: Duration) -> Duration {
        if waited < self.fast_for {
            self.fast
        } else {
            self.slow
        }
    }
}

/// Why the sidecar did not become ready in time: the last answer, which the kubelet shows
/// in the `FailedPostStartHook` Event.
#[derive(Debug, thiserror::Error)]
#[error(
    "the sidecar was not ready after {waited_secs} s ({asked} questions to {url}); last answer: \
     {last}. The kubelet restarts the sidecar container; see the pod's Events (WaitingForSlot) \
     and the IdSequence's conditions for why it waits"
)]
pub struct NotReady {
    pub(crate) url: String,
    pub(crate) waited_secs: u64,
    pub(crate) asked: u64,
    pub(crate) last: CheckError,
}

/// `url` with `wait=<ms>` added to its query (as is for a zero wait).
fn with_wait(url: &str, wait: Duration) -> String {
    if wait.is_zero() {
        return url.to_owned();
    }
    let join = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{join}{}={}",
        contract::READYZ_WAIT_PARAM,
        wait.as_millis()
    )
}

/// Asks `url` until it answers 2xx, or `policy.limit` has passed. Returns how long it took.
pub fn wait_ready(url: &str, policy: WaitPolicy) -> Result<Duration, NotReady> {
    let started = Instant::now();
    let mut asked = 0u64;
    loop {
        asked += 1;
        let left = policy.limit.saturating_sub(started.elapsed());
        let wait = policy
            .long_poll
            .min(left)
            .min(Duration::from_millis(contract::READYZ_MAX_WAIT_MS));
        let question = with_wait(url, wait);
        let asked_at = Instant::now();
        let last = match check(&question, None, ASK_TIMEOUT + wait) {
            Ok(_) => return Ok(started.elapsed()),
            // A URL that can never work is not worth waiting a day for.
            Err(e @ CheckError::BadUrl(..)) => e,
            Err(e) => {
                let waited = started.elapsed();
                if waited < policy.limit {
                    // A held question has waited already; one answered at once (a sidecar
                    // without `wait`, a port not listening yet) waits the interval here.
                    let pause = policy
                        .interval(waited)
                        .saturating_sub(asked_at.elapsed())
                        .min(policy.limit - waited);
                    std::thread::sleep(pause);
                    continue;
                }
                e
            }
        };
        return Err(NotReady {
            url: url.to_owned(),
            waited_secs: started.elapsed().as_secs(),
            asked,
            last,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    /// A /readyz that answers 503 `not_ready` times, then 200.
    fn readyz_after(not_ready: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for i in 0.. {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let answer = if i < not_ready {
                    "HTTP/1.1 503 Service Unavailable\r\n\r\nwaiting for a slot of orders"
                } else {
                    "HTTP/1.1 200 OK\r\n\r\nready"
                };
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        format!("http://127.0.0.1:{port}/readyz")
    }

    fn quick(limit: Duration) -> WaitPolicy {
        WaitPolicy {
            fast: Duration::from_millis(1),
            fast_for: Duration::from_millis(20),
            slow: Duration::from_millis(5),
            long_poll: Duration::from_secs(5),
            limit,
        }
    }

    /// A /readyz that is ready `ready_after` from its start. With `honours_wait` it holds a
    /// `wait=` question until then (200) or its wait's end (503), as the sidecar does;
    /// without, it answers at once, as an older sidecar does. Returns the URL and the
    /// request lines it got.
    fn readyz_ready_after(
        ready_after: Duration,
        honours_wait: bool,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let ready_at = Instant::now() + ready_after;
        std::thread::spawn(move || {
            while let Ok((mut conn, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let n = conn.read(&mut buf).unwrap_or(0);
                let line = String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let wait = line
                    .split_once("wait=")
                    .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
                    .filter(|_| honours_wait)
                    .map_or(Duration::ZERO, Duration::from_millis);
                log.lock().unwrap().push(line);
                let until = Instant::now() + wait;
                while Instant::now() < until.min(ready_at) {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let answer = if Instant::now() >= ready_at {
                    "HTTP/1.1 200 OK\r\n\r\nready"
                } else {
                    "HTTP/1.1 503 Service Unavailable\r\n\r\nwaiting for a slot of orders"
                };
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        (format!("http://127.0.0.1:{port}/readyz"), seen)
    }

    #[test]
    fn it_asks_once_and_the_sidecar_holds_the_question_until_it_is_ready() {
        let (url, seen) = readyz_ready_after(Duration::from_millis(300), true);
        let took = wait_ready(&url, quick(Duration::from_secs(60))).expect("ready");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.len(),
            1,
            "one question, not one per interval: {seen:?}"
        );
        assert!(seen[0].starts_with("GET /readyz?wait=5000 "), "{seen:?}");
    }

    #[test]
    fn a_held_question_that_ends_unready_is_followed_by_the_next_at_once() {
        let (url, seen) = readyz_ready_after(Duration::from_millis(250), true);
        let policy = WaitPolicy {
            fast: Duration::from_secs(30),
            long_poll: Duration::from_millis(100),
            ..quick(Duration::from_secs(60))
        };
        let fast = policy.fast;
        let took = wait_ready(&url, policy).expect("ready");
        assert!(took < fast, "no interval slept: {took:?}");
        assert_eq!(seen.lock().unwrap().len(), 3, "held 100 + 100 + 50 ms");
    }

    #[test]
    fn a_sidecar_that_ignores_wait_is_asked_at_the_interval_not_in_a_busy_loop() {
        // An older sidecar: /readyz answers at once whatever the query.
        let (url, seen) = readyz_ready_after(Duration::from_millis(200), false);
        let policy = WaitPolicy {
            fast: Duration::from_millis(20),
            fast_for: Duration::from_secs(60),
            ..quick(Duration::from_secs(60))
        };
        wait_ready(&url, policy).expect("ready");
        let seen = seen.lock().unwrap();
        assert!(seen.iter().all(|l| l.contains("wait=5000")), "{seen:?}");
        assert!(
            (5..=15).contains(&seen.len()),
            "about one question per 20 ms over 200 ms: {}",
            seen.len()
        );
    }

    #[test]
    fn it_returns_as_soon_as_readyz_answers_200() {
        let url = readyz_after(5);
        wait_ready(&url, quick(Duration::from_secs(60))).expect("ready");
    }

    #[test]
    fn a_sidecar_not_listening_yet_is_waited_for_not_a_failure() {
        // Bind, learn a free port, close it: nothing listens there at first.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/readyz");
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            conn.write_all(b"HTTP/1.1 200 OK\r\n\r\nready").unwrap();
        });
        wait_ready(&url, quick(Duration::from_secs(60))).expect("ready once it listens");
        late.join().unwrap();
    }

    #[test]
    fn past_its_limit_it_fails_with_the_last_answer_for_the_kubelets_event() {
        let url = readyz_after(usize::MAX);
        let err = wait_ready(&url, quick(Duration::from_millis(50))).unwrap_err();
        assert!(err.asked > 1, "asked again before giving up: {err}");
        let text = err.to_string();
        assert!(text.contains("waiting for a slot of orders"), "{text}");
        assert!(text.contains("WaitingForSlot"), "{text}");
    }

    #[test]
    fn a_url_that_cannot_work_fails_at_once() {
        let err = wait_ready("https://x/readyz", quick(Duration::from_secs(60))).unwrap_err();
        assert_eq!(err.asked, 1);
    }

    #[test]
    fn it_asks_often_while_the_wait_is_young_and_seldom_after() {
        let p = WaitPolicy::hook(Duration::from_secs(86_400));
        assert_eq!(p.long_poll, Duration::from_secs(5));
        assert!(p.long_poll.as_millis() <= u128::from(contract::READYZ_MAX_WAIT_MS));
        assert_eq!(p.interval(Duration::ZERO), Duration::from_millis(10));
        assert_eq!(
            p.interval(Duration::from_secs(11)),
            Duration::from_millis(500)
        );
    }
}
