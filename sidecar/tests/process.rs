//! The `kubeflake-sidecar` binary as a user runs it: restarts, signals, bad flags.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kubeflake_crds::{Id, Layout};
use support::{SidecarProcess, get, run_to_exit, wait_for, write_file};

fn ids(p: &SidecarProcess, count: u32) -> Vec<u64> {
    let answer = get(p.addr, &format!("/ids?count={count}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body.lines().map(|l| l.parse().unwrap()).collect()
}

fn fence_tick(state: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(state.join("default-worker-0.fence")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["fenceTick"]
        .as_u64()
        .unwrap()
}

#[test]
fn rule5_sigterm_lowers_the_fence_to_the_last_tick_issued_and_the_next_start_is_ready_at_once() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let mut first = SidecarProcess::start(&["--state-dir", dir], None);
    let issued = ids(&first, 5000);
    assert!(fence_tick(state.path()) > 0);
    first.signal("TERM");
    assert_eq!(
        first.wait(Duration::from_secs(15)),
        Some(0),
        "exits 0 on SIGTERM"
    );
    let last_tick = Layout::default()
        .decode(Id::new(*issued.last().unwrap()).unwrap())
        .unwrap()
        .tick
        .0;
    assert_eq!(
        fence_tick(state.path()),
        last_tick,
        "fence lowered to exactly the last tick issued"
    );

    let second = SidecarProcess::start(&["--state-dir", dir], None);
    let ready = get(second.addr, "/readyz");
    assert_eq!(ready.status, 200, "ready at once: {}", ready.body);
    let next = ids(&second, 10);
    assert!(next[0] > *issued.last().unwrap());
}

#[test]
fn rule4_restart_after_kill_9_with_the_clock_stepped_back_10s_repeats_no_id() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let first = SidecarProcess::start(&["--state-dir", dir], None);
    let mut seen = HashSet::new();
    let started = Instant::now();
    let mut before_max = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        for id in ids(&first, 1000) {
            assert!(seen.insert(id));
            before_max = before_max.max(id);
        }
    }
    first.signal("KILL");
    drop(first);

    // The new process's wall clock is 10 s behind: it must not serve until its clock passes
    // the fence the killed process wrote, and then only above it.
    let second = SidecarProcess::start(&["--state-dir", dir], Some("-10s"));
    let refused = get(second.addr, "/id");
    assert_eq!(
        refused.status, 503,
        "refuses while behind the fence: {}",
        refused.body
    );
    let retry_after: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(
        retry_after >= 5,
        "the clock really is 10 s behind the fence (Retry-After {retry_after})"
    );
    wait_for(
        Duration::from_secs(30),
        "the restarted sidecar to serve",
        || (get(second.addr, "/readyz").status == 200).then_some(()),
    );
    for _ in 0..20 {
        for id in ids(&second, 1000) {
            assert!(
                id > before_max,
                "ID {id} not above the pre-crash maximum {before_max}"
            );
            assert!(seen.insert(id), "duplicate {id}");
        }
    }
}

#[test]
fn two_processes_cannot_serve_the_same_worker_from_one_state_dir() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let _first = SidecarProcess::start(&["--state-dir", dir], None);
    let (code, stderr) = run_to_exit(&["--listen", "127.0.0.1:0", "--state-dir", dir]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("already serves") && stderr.contains("--state-dir"),
        "{stderr}"
    );
}

#[test]
fn bad_command_line_input_names_the_flag_and_exits_2() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let bad_sum = write_file(
        state.path(),
        "bad-sum.yaml",
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: s}\nspec:\n  layout: {workerBits: 11}\n",
    );
    let not_yaml = write_file(state.path(), "junk.yaml", "{{{ nope");
    let wide_dc = write_file(
        state.path(),
        "dc.yaml",
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: s}\nspec:\n  datacenterId: 3\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--worker-id", "1024"], "--worker-id 1024 does not fit"),
        (vec!["--worker-id=-1"], "--worker-id"),
        (vec!["--listen", "not-an-address"], "--listen"),
        (
            vec!["--sequence-file", "/nonexistent/seq.yaml"],
            "--sequence-file /nonexistent/seq.yaml: cannot read",
        ),
        (
            vec!["--sequence-file", &bad_sum],
            "must add up to totalBits = 63",
        ),
        (vec!["--sequence-file", &not_yaml], "not an IdSequence"),
        (vec!["--sequence-file", &wide_dc], "datacenterId is 3"),
        (vec!["--max-batch", "0"], "--max-batch"),
        (vec!["--fence-ahead-ms", "1"], "--fence-ahead-ms"),
        (vec!["--no-such-flag"], "--no-such-flag"),
    ];
    for (args, message) in cases {
        let mut full = vec!["--state-dir", dir];
        full.extend(&args);
        let (code, stderr) = run_to_exit(&full);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: expected {message:?} in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn rule6_a_fence_file_written_for_another_layout_is_refused_not_reused() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let mut first = SidecarProcess::start(&["--state-dir", dir], None);
    ids(&first, 10);
    first.signal("TERM");
    assert_eq!(first.wait(Duration::from_secs(15)), Some(0));
    // Same sequence name and worker, different time unit: the old ticks mean other instants.
    let coarse = write_file(
        state.path(),
        "coarse.yaml",
        "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: default}\nspec:\n  timeUnit: 10ms\n",
    );
    let (code, stderr) = run_to_exit(&[
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        dir,
        "--sequence-file",
        &coarse,
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("belongs to") && stderr.contains("IDs could repeat"),
        "{stderr}"
    );
}

/// Issue 18: the Unix socket. A bad path, an occupied socket or a path that is not a
/// socket stop the start with a message naming `--listen-unix`; a stale socket file from
/// a killed run is replaced and the socket serves IDs.
#[test]
fn listen_unix_refuses_bad_or_occupied_paths_by_name_and_replaces_a_stale_socket() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let occupied = state.path().join("occupied.sock");
    let _live = std::os::unix::net::UnixListener::bind(&occupied).unwrap();
    let not_a_socket = write_file(state.path(), "fence-like", "keep me");
    let cases: Vec<(String, &str)> = vec![
        ("/nonexistent/dir/kubeflake.sock".into(), "does not exist"),
        (occupied.to_string_lossy().into_owned(), "another process"),
        (not_a_socket.clone(), "not a socket"),
    ];
    for (path, message) in cases {
        let (code, stderr) = run_to_exit(&[
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            dir,
            "--listen-unix",
            &path,
        ]);
        assert_eq!(code, Some(2), "{path}: {stderr}");
        assert!(
            stderr.contains("--listen-unix") && stderr.contains(message),
            "{path}: expected --listen-unix and {message:?} in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{path}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&not_a_socket).unwrap(), "keep me");

    let stale = state.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let stale_arg = stale.to_string_lossy().into_owned();
    let _sidecar = SidecarProcess::start(&["--state-dir", dir, "--listen-unix", &stale_arg], None);
    let mut conn = std::os::unix::net::UnixStream::connect(&stale).unwrap();
    use std::io::{Read, Write};
    conn.write_all(b"GET /id HTTP/1.1\r\nHost: kubeflake\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let id: u64 = answer
        .rsplit("\r\n\r\n")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(id > 0);
}

#[test]
fn wait_ready_the_injected_post_start_hook_exits_0_once_the_sidecar_is_ready_and_1_past_its_limit()
{
    let state = tempfile::tempdir().unwrap();
    let sidecar = SidecarProcess::start(&["--state-dir", state.path().to_str().unwrap()], None);
    let readyz = format!("http://{}/readyz", sidecar.addr);
    let (code, output) = run_to_exit(&[kubeflake_crds::contract::WAIT_READY_SUBCOMMAND, &readyz]);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("ready after"), "{output}");

    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{nobody}/readyz");
    let (code, output) = run_to_exit(&["wait-ready", &url, "--timeout-secs", "1"]);
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("was not ready after"), "{output}");
    assert!(
        output.contains(&url),
        "the message names what was asked: {output}"
    );

    let (code, output) = run_to_exit(&["wait-ready", &url, "--timeout-secs", "0"]);
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("--timeout-secs"),
        "names the flag: {output}"
    );
}
