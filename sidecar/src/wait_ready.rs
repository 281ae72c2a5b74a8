//! `kubeflake-sidecar wait-ready URL`: returns once the sidecar's `/readyz` answers 200.
//!
//! The webhook injects it as the sidecar's postStart hook (operator/src/inject): the kubelet
//! starts a pod's app containers only after a native sidecar's postStart hook returned, so
//! the app's first request for an ID finds a sidecar that holds its slot or segment block.
//! It runs in the sidecar's own container, beside the serving process, and only asks it:
//! it never touches the fence or the API server.
//!
//! It asks often at first (the usual wait is well under a second, and every millisecond
//! here delays the app) and less often once the wait is long (a pod that waits for a free
//! slot may wait for hours; the kubelet shows the sidecar's `WaitingForSlot` Event meanwhile).

use std::time::{Duration, Instant};

use crate::check::{CheckError, check};

/// How long one question to `/readyz` may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How often to ask, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct WaitPolicy {
    /// Interval while the wait is young.
    pub fast: Duration,
    /// How long the fast interval is used.
    pub fast_for: Duration,
    /// Interval after that.
    pub slow: Duration,
    /// Give up after this long (the kubelet then restarts the sidecar container).
    pub limit: Duration,
}

impl WaitPolicy {
    /// The hook's policy: every 10 ms for 10 s, then every 500 ms, for at most `limit`.
    pub fn hook(limit: Duration) -> WaitPolicy {
        WaitPolicy {
            fast: Duration::from_millis(10),
            fast_for: Duration::from_secs(10),
            slow: Duration::from_millis(500),
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
    pub url: String,
    pub waited_secs: u64,
    pub asked: u64,
    pub last: CheckError,
}

/// Asks `url` until it answers 2xx, or `policy.limit` has passed. Returns how long it took.
pub fn wait_ready(url: &str, policy: WaitPolicy) -> Result<Duration, NotReady> {
    let started = Instant::now();
    let mut asked = 0u64;
    loop {
        asked += 1;
        let last = match check(url, None, ASK_TIMEOUT) {
            Ok(_) => return Ok(started.elapsed()),
            // A URL that can never work is not worth waiting a day for.
            Err(e @ CheckError::BadUrl(..)) => e,
            Err(e) => {
                let waited = started.elapsed();
                if waited < policy.limit {
                    std::thread::sleep(policy.interval(waited).min(policy.limit - waited));
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
            limit,
        }
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
        assert_eq!(p.interval(Duration::ZERO), Duration::from_millis(10));
        assert_eq!(
            p.interval(Duration::from_secs(11)),
            Duration::from_millis(500)
        );
    }
}
