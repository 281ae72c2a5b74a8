//! `after=<x>` over HTTP (docs/safety.md rule 12): bad input, the drift limit, and two
//! sidecars passing what they got back and forth 10,000 times, in both modes. The servers
//! run in-process, each on its own manual clock.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kubeflake_crds::IdSequenceSpec;
use kubeflake_crds::sequence::SegmentParams;
use kubeflake_sidecar::clock::ManualClock;
use kubeflake_sidecar::standalone::{SegmentStandaloneConfig, StandaloneConfig};
use support::{Answer, InProcess, get, segment_in_process, snowflake_in_process};

const NOW_MS: u64 = 1_800_000_000_000;

type Server = InProcess;

/// A standalone Snowflake sidecar (default layout, drift limit 2 s) with worker `worker`.
fn snowflake(worker: u64, clock: Arc<ManualClock>, state: &std::path::Path) -> Server {
    let config = StandaloneConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_unix: None,
        state_dir: state.to_path_buf(),
        worker_id: worker,
        sequence_name: "after-test".into(),
        sequence: IdSequenceSpec::default().params().unwrap(),
        max_batch: 10_000,
        // The manual clocks run faster than real time here: keep the fence far ahead.
        fence_ahead: Duration::from_secs(30),
        drain: Duration::from_secs(5),
    };
    snowflake_in_process((), config, clock)
}

/// A standalone segment sidecar whose counter file is in `state`.
fn segment(state: &std::path::Path, block: u64) -> Server {
    let config = SegmentStandaloneConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_unix: None,
        state_dir: state.to_path_buf(),
        sequence_name: "after-test".into(),
        segment: SegmentParams {
            start: 1,
            block_size: block,
            max_block_size: block,
            prefetch_percent: 50,
            target_claim_interval_secs: 60,
            strict: false,
        },
        max_batch: 10_000,
        max_range: 1_000_000,
        drain: Duration::from_secs(5),
    };
    segment_in_process((), config)
}

fn values(answer: &Answer) -> Vec<u64> {
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body.lines().map(|l| l.parse().unwrap()).collect()
}

/// Asks `server` for `count` values after `x` (one `/id` when `count` is 0).
fn after(server: &Server, x: u64, count: u32) -> Vec<u64> {
    if count == 0 {
        values(&get(server.addr, &format!("/id?after={x}")))
    } else {
        values(&get(server.addr, &format!("/ids?count={count}&after={x}")))
    }
}

/// Two sidecars pass what they got to each other as `after`, 10,000 times in all; every
/// answer is above what was passed in, and nothing repeats.
fn ping_pong(a: &Server, b: &Server, mut each_round: impl FnMut()) {
    let mut passed = 0u64;
    let mut all = std::collections::HashSet::new();
    for round in 0..5_000u32 {
        for server in [a, b] {
            let count = if round % 100 == 7 { 3 } else { 0 };
            let got = after(server, passed, count);
            for &v in &got {
                assert!(v > passed, "round {round}: {v} is not above after={passed}");
                assert!(all.insert(v), "round {round}: {v} issued twice");
            }
            assert!(got.windows(2).all(|w| w[0] < w[1]));
            passed = *got.last().unwrap();
        }
        each_round();
    }
}

#[test]
fn rule12_two_snowflake_sidecars_passing_ids_back_and_forth_10000_times_always_answer_above() {
    // Worker 5 and worker 6, separate state directories, and clocks 1.5 s apart (within
    // the 2 s drift limit): worker 5 sorts below worker 6 in a tick, so each of its
    // answers has to move to a later tick, and its clock is behind.
    let (state_a, state_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let clock_a = Arc::new(ManualClock::at_millis(NOW_MS));
    let clock_b = Arc::new(ManualClock::at_millis(NOW_MS + 1_500));
    let a = snowflake(5, clock_a.clone(), state_a.path());
    let b = snowflake(6, clock_b.clone(), state_b.path());
    ping_pong(&a, &b, || {
        clock_a.advance_millis(1);
        clock_b.advance_millis(1);
    });
    for server in [&a, &b] {
        assert_eq!(get(server.addr, "/readyz").status, 200, "both still ready");
    }
}

#[test]
fn rule12_two_segment_sidecars_sharing_one_counter_file_pass_values_10000_times_always_above() {
    // Each answer lies above the other sidecar's block: the block below it is dropped and
    // a claim above it made, so this exercises the claim path on every round.
    let state = tempfile::tempdir_in(shm_or_tmp()).unwrap();
    let a = segment(state.path(), 50);
    let b = segment(state.path(), 50);
    ping_pong(&a, &b, || {});
}

/// The counter file is written durably on every claim: on tmpfs when there is one, so
/// that 10,000 claims do not wait on a disk.
fn shm_or_tmp() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

#[test]
fn rule12_an_after_beyond_the_drift_limit_gets_409_with_retry_after_and_is_served_after_it() {
    let state = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::at_millis(NOW_MS));
    let s = snowflake(5, clock.clone(), state.path());
    let mine: u64 = get(s.addr, "/id").body.trim().parse().unwrap();
    let layout = kubeflake_crds::Layout::default();
    let tick = layout
        .decode(kubeflake_crds::Id::new(mine).unwrap())
        .unwrap()
        .tick
        .0;
    let id_at = |tick: u64, worker: u32| {
        layout
            .encode(kubeflake_crds::IdParts {
                tick: kubeflake_crds::Tick(tick),
                datacenter: kubeflake_crds::DatacenterId(0),
                slot: kubeflake_crds::Slot(worker),
                sequence: 0,
            })
            .unwrap()
            .get()
    };
    // Worker 4, at the edge of the drift limit: served in that tick.
    let edge = id_at(tick + 2000, 4);
    assert!(after(&s, edge, 0)[0] > edge);
    // 5 s ahead: refused, nothing issued, told to come back in 3 s.
    let ahead = id_at(tick + 5000, 4);
    let refused = get(s.addr, &format!("/id?after={ahead}"));
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.json()["reason"], "after_ahead_of_clock");
    assert_eq!(refused.header("retry-after"), Some("3"));
    assert_eq!(get(s.addr, "/readyz").status, 200, "still ready");
    let batch = get(s.addr, &format!("/ids?count=10&after={ahead}"));
    assert_eq!(batch.status, 409, "{}", batch.body);
    clock.advance_millis(3_000);
    let got = after(&s, ahead, 10);
    assert!(got.iter().all(|&v| v > ahead));
    assert_eq!(get(s.addr, "/id").status, 200);
}

#[test]
fn rule12_bad_after_values_get_400_naming_after_in_both_modes() {
    let state = tempfile::tempdir().unwrap();
    let s = snowflake(5, Arc::new(ManualClock::at_millis(NOW_MS)), state.path());
    let seg_state = tempfile::tempdir().unwrap();
    let g = segment(seg_state.path(), 100);
    let both: &[(&str, &str)] = &[
        ("/id?after=", "after must be"),
        ("/id?after", "after must be"),
        ("/id?after=abc", "after must be"),
        ("/id?after=-1", "after must be"),
        ("/id?after=+5", "after must be"),
        ("/id?after=1.5", "after must be"),
        ("/id?after=%201", "after must be"),
        ("/id?after=18446744073709551616", "after must be"),
        ("/id?after=1&after=2", "\\\"after\\\" is given twice"),
        ("/ids?count=2&after=", "after must be"),
        ("/ids?count=2&after=1&after=1", "given twice"),
        ("/ids?after=1", "missing query parameter count"),
        ("/id?after=1&count=2", "unknown query parameter"),
    ];
    for (server, mode) in [(&s, "Snowflake"), (&g, "Segment")] {
        for &(target, message) in both {
            let answer = get(server.addr, target);
            assert_eq!(answer.status, 400, "{mode} {target}: {}", answer.body);
            assert!(
                answer.body.contains(message),
                "{mode} {target}: {}",
                answer.body
            );
            assert_eq!(answer.header("content-type"), Some("application/json"));
        }
    }
    // Snowflake: beyond the layout, and the largest ID (nothing above it).
    for (target, message) in [
        (
            "/id?after=9223372036854775808",
            "not an ID of this sequence",
        ),
        ("/id?after=9223372036854775807", "no ID is above it"),
    ] {
        let answer = get(s.addr, target);
        assert_eq!(answer.status, 400, "{target}: {}", answer.body);
        assert!(answer.body.contains(message), "{target}: {}", answer.body);
    }
    // Segment: nothing is above 2^63-1.
    for target in [
        "/id?after=9223372036854775807",
        "/ids?count=1&after=9223372036854775808",
    ] {
        let answer = get(g.addr, target);
        assert_eq!(answer.status, 400, "{target}: {}", answer.body);
        assert!(answer.body.contains("after"), "{}", answer.body);
    }
    // Both still serve.
    assert_eq!(get(s.addr, "/id").status, 200);
    assert_eq!(get(g.addr, "/id").status, 200);
}

#[test]
fn rule12_a_segment_after_raises_the_shared_counter_but_never_to_2_pow_62_or_beyond() {
    let state = tempfile::tempdir().unwrap();
    let s = segment(state.path(), 100);
    assert_eq!(after(&s, 0, 0), vec![1]);
    assert_eq!(
        after(&s, 1_000_000, 0),
        vec![1_000_001],
        "the counter was raised"
    );
    let next: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(state.path().join("after-test.segment")).unwrap(),
    )
    .unwrap();
    assert!(next["next"].as_u64().unwrap() > 1_000_001);
    let far = (1u64 << 62) + 5;
    let refused = get(s.addr, &format!("/id?after={far}"));
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.json()["reason"], "after_above_counter");
    assert_eq!(
        after(&s, 0, 0),
        vec![1_000_002],
        "the refusal dropped and raised nothing"
    );
    // Just below 2^62 is a raise like any other.
    let high = (1u64 << 62) - 10;
    assert!(after(&s, high, 5).iter().all(|&v| v > high));
}
