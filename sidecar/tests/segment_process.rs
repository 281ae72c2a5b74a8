//! `kubeflake-sidecar standalone --mode segment` as a user runs it: dense values, restarts
//! after kill -9 and SIGTERM, the HTTP answers, and bad flags.

mod support;

use std::time::Duration;

use support::{SidecarProcess, get, run_to_exit, write_file};

fn values(p: &SidecarProcess, count: u32) -> Vec<u64> {
    let answer = get(p.addr, &format!("/ids?count={count}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body.lines().map(|l| l.parse().unwrap()).collect()
}

fn counter_next(state: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(state.join("default.segment")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["next"]
        .as_u64()
        .unwrap()
}

#[test]
fn segment_values_are_dense_and_a_restart_after_kill_9_starts_above_every_value_issued() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let args = [
        "--state-dir",
        dir,
        "--mode",
        "segment",
        "--block-size",
        "100",
        "--segment-start",
        "7",
    ];
    let first = SidecarProcess::start(&args, None);
    let got = values(&first, 250);
    assert_eq!(
        got,
        (7..257).collect::<Vec<u64>>(),
        "one process alone leaves no gap"
    );
    let one = get(first.addr, "/id");
    assert_eq!(one.body.trim(), "257");
    let json =
        support::request(first.addr, "GET", "/id", &[("Accept", "application/json")]).unwrap();
    assert_eq!(
        json.json()["id"],
        "258",
        "a string in JSON, like Snowflake IDs"
    );
    assert!(
        counter_next(state.path()) > 258,
        "the counter is written before values are served"
    );
    first.signal("KILL");
    drop(first);

    let second = SidecarProcess::start(&args, None);
    let after = values(&second, 10);
    assert!(
        after[0] > 258,
        "after kill -9 the next values are above all issued: {after:?}"
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn sigterm_gives_the_unused_block_back_so_a_clean_restart_leaves_no_gap() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let args = [
        "--state-dir",
        dir,
        "--mode",
        "segment",
        "--block-size",
        "50",
    ];
    let mut first = SidecarProcess::start(&args, None);
    let got = values(&first, 120);
    first.signal("TERM");
    assert_eq!(
        first.wait(Duration::from_secs(15)),
        Some(0),
        "exits 0 on SIGTERM"
    );
    assert_eq!(
        counter_next(state.path()),
        121,
        "lowered to the first value not issued"
    );
    let second = SidecarProcess::start(&args, None);
    assert_eq!(
        values(&second, 3),
        vec![121, 122, 123],
        "continues right after {}",
        got[119]
    );
}

#[test]
fn segment_http_answers_decode_readyz_metrics_and_bad_requests() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let p = SidecarProcess::start(&["--state-dir", dir, "--mode", "segment"], None);
    values(&p, 5);
    let decoded = get(p.addr, "/decode/3");
    assert_eq!(decoded.status, 200, "{}", decoded.body);
    assert_eq!(decoded.json()["mode"], "Segment");
    assert!(decoded.json()["fields"].is_null());
    assert!(decoded.json()["note"].as_str().unwrap().contains("no time"));
    for bad in [
        "/decode/x",
        "/decode/9223372036854775808",
        "/ids?count=0",
        "/ids?count=10001",
        "/id?x=1",
    ] {
        let a = get(p.addr, bad);
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert!(a.json()["error"].is_string(), "{bad}: {}", a.body);
    }
    assert_eq!(get(p.addr, "/readyz").status, 200);
    let metrics = get(p.addr, "/metrics").body;
    for name in [
        "kubeflake_segment_blocks_claimed_total 1",
        "kubeflake_segment_block_size 1000",
        "kubeflake_ready 1",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    assert_eq!(values(&p, 1), vec![6], "still serving after bad requests");
}

#[test]
fn segment_mode_comes_from_the_sequence_file_and_bad_flags_name_the_flag() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let file = write_file(
        state.path(),
        "seq.yaml",
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: invoices}\nspec:\n  mode: Segment\n  segment: {start: 500, blockSize: 20}\n",
    );
    let p = SidecarProcess::start(&["--state-dir", dir, "--sequence-file", &file], None);
    assert_eq!(values(&p, 2), vec![500, 501]);
    assert!(state.path().join("invoices.segment").exists());
    drop(p);

    let snowflake_with_segment = write_file(
        state.path(),
        "mixed.yaml",
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: s}\nspec:\n  segment: {blockSize: 20}\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--mode",
                "segment",
                "--block-size",
                "50",
                "--max-block-size",
                "10",
            ],
            "--max-block-size 10 is below --block-size 50",
        ),
        (
            vec!["--block-size", "50"],
            "--block-size applies only to segment mode",
        ),
        (
            vec!["--mode", "segment", "--prefetch-percent", "95"],
            "--prefetch-percent",
        ),
        (
            vec!["--mode", "segment", "--block-size", "0"],
            "--block-size",
        ),
        (vec!["--mode", "sequence"], "--mode"),
        (
            vec!["--sequence-file", &snowflake_with_segment],
            "segment is set but mode is Snowflake",
        ),
        (vec!["--strict"], "--strict applies only to segment mode"),
        (
            vec!["--mode", "segment", "--strict", "--block-size", "10"],
            "--block-size has no effect with --strict",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["--state-dir", dir, "--listen", "127.0.0.1:0"];
        all.extend(args.iter());
        let (code, stderr) = run_to_exit(&all);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
    }
}

/// docs/safety.md rule 13 standalone: each value is written to the counter file before it
/// is served, so two processes sharing the file answer in strictly increasing order,
/// whichever is asked, and a kill -9 loses nothing that was served.
#[test]
fn rule13_strict_processes_sharing_a_counter_file_answer_in_real_time_order() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let args = ["--state-dir", dir, "--mode", "segment", "--strict"];
    let a = SidecarProcess::start(&args, None);
    let b = SidecarProcess::start(&args, None);
    let mut last = 0;
    for i in 0..300 {
        let p = if i % 3 == 0 { &a } else { &b };
        let got = if i % 10 == 0 {
            values(p, 3)
        } else {
            values(p, 1)
        };
        assert!(got[0] > last, "call {i}: {got:?} after {last}");
        assert!(
            got.windows(2).all(|w| w[1] == w[0] + 1),
            "a batch is consecutive"
        );
        last = *got.last().unwrap();
        assert_eq!(
            counter_next(state.path()),
            last + 1,
            "call {i}: the counter file holds nothing beyond what was served"
        );
    }
    a.signal("KILL");
    drop(a);
    let after_kill = values(&b, 1)[0];
    assert_eq!(
        after_kill,
        last + 1,
        "no gap: a strict process holds no block"
    );
    let ready = get(b.addr, "/readyz");
    assert_eq!(ready.status, 200, "{}", ready.body);
}
