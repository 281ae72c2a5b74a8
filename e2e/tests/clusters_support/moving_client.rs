//! One client whose requests move from one member's sidecar to another's (the blue/green
//! phase of e2e/tests/id_space_clusters.rs): it sends `/id` in a loop on one keep-alive
//! connection to its target, and when the target is switched it closes that connection and
//! carries on at the new one. What it measures is the serving side as traffic moves: every
//! request is counted per target, with its 503 refusals and the requests that got no ID
//! otherwise (a connection that could not be made or broke, any other status), and the longest time between two IDs
//! it received is kept for the report (never asserted on: the machine is shared).

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clusters_support::Issued;
use crate::sidecar_support::{Collected, request};

/// Where the client sends its requests: a sidecar's port, and whose it is.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Target {
    port: u16,
    member: &'static str,
}

/// What the client saw at one target.
struct Leg {
    target: Target,
    data: Collected,
    /// Requests that got no ID and no 503 (connection refused or broken, another status).
    unanswered: u64,
    /// The first refusals' bodies (the sidecar's error code and message), for the report.
    refused: Vec<String>,
}

/// How many refusal bodies a leg keeps for the report.
const REFUSALS_KEPT: usize = 5;

#[derive(Default)]
struct Seen {
    legs: Vec<Leg>,
    longest_gap: Duration,
}

/// What the client saw, once stopped.
pub struct Moved {
    /// The IDs per target, as the checker takes them (pod `client`).
    pub issued: Vec<Issued>,
    pub requests: u64,
    pub refusals: u64,
    /// The first refusals of each target, `member: body`, to say why a request was refused.
    pub refused: Vec<String>,
    pub unanswered: u64,
    /// The longest time between two IDs received, across the switch.
    pub longest_gap: Duration,
}

pub struct MovingClient {
    target: Arc<Mutex<Target>>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MovingClient {
    /// Starts sending to `member`'s sidecar on `port`.
    pub fn start(member: &'static str, port: u16) -> MovingClient {
        let target = Arc::new(Mutex::new(Target { port, member }));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (t, s, d) = (target.clone(), stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || run(&t, &s, &d));
        MovingClient {
            target,
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// Moves the requests to `member`'s sidecar on `port` (from the next request on).
    pub fn switch(&self, member: &'static str, port: u16) {
        *self.target.lock().unwrap() = Target { port, member };
    }

    /// IDs received from `member` so far.
    pub fn count_from(&self, member: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.legs
            .iter()
            .filter(|l| l.target.member == member)
            .flat_map(|l| l.data.segments.iter())
            .map(Vec::len)
            .sum()
    }

    pub fn finish(mut self) -> Moved {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        let mut moved = Moved {
            issued: Vec::new(),
            requests: 0,
            refusals: 0,
            refused: Vec::new(),
            unanswered: 0,
            longest_gap: seen.longest_gap,
        };
        for leg in seen.legs {
            moved.requests += leg.data.requests;
            moved.refusals += leg.data.refusals;
            moved.unanswered += leg.unanswered;
            let member = leg.target.member;
            moved
                .refused
                .extend(leg.refused.iter().map(|body| format!("{member}: {body}")));
            moved.issued.push(Issued {
                member: leg.target.member,
                pod: "client".to_string(),
                data: leg.data,
            });
        }
        moved
    }
}

fn run(target: &Mutex<Target>, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let mut last_id: Option<Instant> = None;
    let current = || *target.lock().unwrap();
    while !stop.load(Ordering::Relaxed) {
        let to = current();
        let leg = {
            let mut s = seen.lock().unwrap();
            if s.legs.last().is_none_or(|l| l.target != to) {
                s.legs.push(Leg {
                    target: to,
                    data: Collected::default(),
                    unanswered: 0,
                    refused: Vec::new(),
                });
            }
            s.legs.len() - 1
        };
        let connected = TcpStream::connect(("127.0.0.1", to.port)).ok().filter(|c| {
            c.set_read_timeout(Some(Duration::from_secs(5))).is_ok() && c.set_nodelay(true).is_ok()
        });
        let Some(stream) = connected else {
            let mut s = seen.lock().unwrap();
            s.legs[leg].unanswered += 1;
            s.legs[leg].data.requests += 1;
            drop(s);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let mut conn = BufReader::new(stream);
        seen.lock().unwrap().legs[leg]
            .data
            .segments
            .push(Vec::new());
        while !stop.load(Ordering::Relaxed) && current() == to {
            let answer = request(&mut conn, "/id");
            let mut s = seen.lock().unwrap();
            let data = &mut s.legs[leg].data;
            data.requests += 1;
            match &answer {
                Some((200, body)) => {
                    let ids = body.lines().filter_map(|l| l.trim().parse::<u64>().ok());
                    data.segments
                        .last_mut()
                        .expect("a segment per connection")
                        .extend(ids);
                    let now = Instant::now();
                    if let Some(before) = last_id.replace(now) {
                        s.longest_gap = s.longest_gap.max(now - before);
                    }
                }
                Some((503, body)) => {
                    data.refusals += 1;
                    let refused = &mut s.legs[leg].refused;
                    if refused.len() < REFUSALS_KEPT {
                        refused.push(body.trim().chars().take(300).collect());
                    }
                }
                Some(_) | None => s.legs[leg].unanswered += 1,
            }
            drop(s);
            if answer.is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
