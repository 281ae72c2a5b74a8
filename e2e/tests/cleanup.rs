//! No control-plane process outlives the test binary that started it, however that binary
//! ends: normal exit, a failing (panicking) test, or `kill -9`.
//!
//! The test re-runs this very binary as a child, limited to the ignored helper test
//! `child_starts_cluster`, which starts the shared cluster, reports the process ids and
//! then returns, panics, or waits to be killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kubeflake_e2e::Cluster;
use kubeflake_e2e::process::pid_alive;

const MODE_ENV: &str = "KUBEFLAKE_E2E_CHILD_MODE";
const REPORT_ENV: &str = "KUBEFLAKE_E2E_CHILD_REPORT";

#[test]
#[ignore = "helper run by no_control_plane_process_outlives_its_test_binary"]
fn child_starts_cluster() {
    let (Ok(mode), Ok(report)) = (std::env::var(MODE_ENV), std::env::var(REPORT_ENV)) else {
        return;
    };
    let cluster = Cluster::shared();
    // Line 1: the state directory; then one `pid executable` line per process.
    let mut text = format!("{}\n", cluster.dir().display());
    for (name, pid) in cluster.pids() {
        text.push_str(&format!(
            "{pid} {}\n",
            cluster.bin_dir().join(name).display()
        ));
    }
    let partial = format!("{report}.partial");
    std::fs::write(&partial, text).expect("write report");
    std::fs::rename(&partial, &report).expect("publish report");
    match mode.as_str() {
        "exit" => {}
        "panic" => panic!("deliberate failure: the exit hook must still stop the cluster"),
        _ => std::thread::sleep(Duration::from_secs(600)), // "kill": wait for SIGKILL
    }
}

struct Report {
    dir: PathBuf,
    processes: Vec<(u32, PathBuf)>,
}

fn read_report(path: &Path) -> Option<Report> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let dir = PathBuf::from(lines.next()?);
    let processes = lines
        .filter_map(|line| {
            let (pid, exe) = line.split_once(' ')?;
            Some((pid.parse().ok()?, PathBuf::from(exe)))
        })
        .collect();
    Some(Report { dir, processes })
}

/// True while `pid` is alive and still runs `exe` (so a reused pid does not count).
fn still_running(pid: u32, exe: &Path) -> bool {
    pid_alive(pid)
        && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|target| target == exe)
}

fn run_child(mode: &str, scratch: &Path) -> (Child, PathBuf) {
    let report = scratch.join(format!("{mode}.report"));
    // The child's own output (including the deliberate panic) goes to a file, shown only
    // if something goes wrong.
    let log = std::fs::File::create(scratch.join(format!("{mode}.log"))).expect("child log");
    let child = Command::new(std::env::current_exe().expect("current test binary"))
        .args([
            "child_starts_cluster",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MODE_ENV, mode)
        .env(REPORT_ENV, &report)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot run the child test binary");
    (child, report)
}

fn wait_for_report(child: &mut Child, report: &Path, mode: &str) -> Report {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(report) = read_report(report) {
            return report;
        }
        if let Ok(Some(status)) = child.try_wait() {
            // "exit" and "panic" children may finish right after reporting.
            if let Some(report) = read_report(report) {
                return report;
            }
            let log = std::fs::read_to_string(report.with_extension("log")).unwrap_or_default();
            panic!("{mode} child exited ({status}) before starting its cluster:\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "{mode} child did not start a cluster in time"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_all_gone(report: &Report, mode: &str) {
    assert_eq!(
        report.processes.len(),
        3,
        "{mode}: expected etcd, kube-apiserver and kube-controller-manager"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left: Vec<_> = report
            .processes
            .iter()
            .filter(|(pid, exe)| still_running(*pid, exe))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{mode}: still running after the test binary ended: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn no_control_plane_process_outlives_its_test_binary() {
    let scratch = tempfile::tempdir().expect("scratch dir");

    // kill -9: no Rust code runs; PR_SET_PDEATHSIG must take the children down.
    let (mut child, report) = run_child("kill", scratch.path());
    let killed = wait_for_report(&mut child, &report, "kill");
    assert!(
        killed
            .processes
            .iter()
            .all(|(pid, exe)| still_running(*pid, exe)),
        "kill: cluster not running"
    );
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    assert_all_gone(&killed, "kill");

    // Normal exit: the exit hook stops the processes and removes the state directory.
    let (mut child, report) = run_child("exit", scratch.path());
    let exited = wait_for_report(&mut child, &report, "exit");
    let status = child.wait().expect("reap the child");
    assert!(status.success(), "exit child failed: {status}");
    assert_all_gone(&exited, "exit");
    assert!(
        !exited.dir.exists(),
        "exit: state directory {} left behind",
        exited.dir.display()
    );
    // Starting that cluster also removed the state directory the killed child left.
    assert!(
        !killed.dir.exists(),
        "stale state directory {} not cleaned up",
        killed.dir.display()
    );

    // A failing test: the harness exits non-zero, through the same exit hook.
    let (mut child, report) = run_child("panic", scratch.path());
    let panicked = wait_for_report(&mut child, &report, "panic");
    let status = child.wait().expect("reap the child");
    assert!(!status.success(), "panic child should fail");
    assert_all_gone(&panicked, "panic");
    assert!(
        !panicked.dir.exists(),
        "panic: state directory {} left behind",
        panicked.dir.display()
    );
}
