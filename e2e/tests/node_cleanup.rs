//! Nothing of the test node outlives a killed test binary: no process (the node's own,
//! the container shims containerd detaches, the containers), mount, cgroup, interface,
//! route, firewall rule or state path.
//!
//! The test re-runs this binary as a child, limited to the ignored helper test
//! `child_runs_a_node_with_a_pod`, which starts a node, runs a pod on it, reports, and
//! waits to be killed with SIGKILL (no Rust code runs after that: the watchdog of
//! `e2e/node/node.sh` must clean up). While it runs, `node.sh teardown-orphan` (what
//! `e2e/cluster down` calls) must leave its node alone.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kubeflake_e2e::Cluster;
use kubeflake_e2e::node;
use kubeflake_e2e::process::pid_alive;

const REPORT_ENV: &str = "KUBEFLAKE_E2E_NODE_CHILD_REPORT";

#[tokio::test]
#[ignore = "helper run by nothing_of_the_node_outlives_a_killed_test_binary"]
async fn child_runs_a_node_with_a_pod() {
    let Ok(report) = std::env::var(REPORT_ENV) else {
        return;
    };
    let cluster = Cluster::shared_with_node();
    let ns = cluster.namespace("cleanup").await.expect("namespace");
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sleeper"},
        "spec": {"containers": [{
            "name": "app", "image": node::EXAMPLE_APP_IMAGE, "imagePullPolicy": "Never",
            "env": [{"name": "KUBEFLAKE_URL", "value": "http://127.0.0.1:7070"}]
        }]}
    })
    .to_string();
    cluster
        .kubectl_with_stdin(&["apply", "-n", &ns.name, "-f", "-"], Some(&pod))
        .await
        .expect("kubectl")
        .ok()
        .expect("pod created");
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Ready",
            "pod/sleeper",
            "-n",
            &ns.name,
            "--timeout=180s",
        ])
        .await
        .expect("kubectl")
        .ok()
        .expect("the pod runs");
    let pids: Vec<String> = cluster
        .pids()
        .iter()
        .map(|(_, pid)| pid.to_string())
        .collect();
    let partial = format!("{report}.partial");
    std::fs::write(&partial, pids.join("\n")).expect("write report");
    std::fs::rename(&partial, &report).expect("publish report");
    tokio::time::sleep(Duration::from_secs(600)).await; // until SIGKILL
}

#[test]
fn nothing_of_the_node_outlives_a_killed_test_binary() {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let report = scratch.path().join("report");
    let log = scratch.path().join("child.log");
    let mut child = Command::new(std::env::current_exe().expect("current test binary"))
        .args([
            "child_runs_a_node_with_a_pod",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(REPORT_ENV, &report)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("child log"))
        .spawn()
        .expect("cannot run the child test binary");
    let deadline = Instant::now() + Duration::from_secs(600);
    let pids: Vec<u32> = loop {
        if let Ok(text) = std::fs::read_to_string(&report) {
            break text.lines().filter_map(|l| l.parse().ok()).collect();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the child exited ({status}) before its node ran a pod:\n{}",
                tail(&log)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no node with a pod in time:\n{}",
            tail(&log)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        pids.len() >= 8,
        "control plane and node processes: {pids:?}"
    );
    let before = node::leftovers().expect("node.sh leftovers");
    assert!(
        before.contains("interface kubeflake0")
            && before.contains("process ")
            && before.contains("mount "),
        "a running node shows up as leftovers (else the check below proves nothing):\n{before}"
    );

    // Another cluster's `e2e/cluster down` must not take a running node away (its API
    // server's requests to the bridge address would then leave the machine by the default
    // route): its node step leaves a node alone while the process that brought it up runs.
    let orphan = Command::new(node::node_script())
        .arg("teardown-orphan")
        .output()
        .expect("node.sh teardown-orphan");
    let said = String::from_utf8_lossy(&orphan.stderr).into_owned();
    let after = node::leftovers().expect("node.sh leftovers");
    if !(orphan.status.success() && said.contains("left alone") && after == before) {
        // The child's control plane must not run on without its bridge: end it first.
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "node.sh teardown-orphan did not leave the running node alone ({}): {said}\nbefore:\n{before}\nafter:\n{after}",
            orphan.status
        );
    }

    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");

    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = node::leftovers().expect("node.sh leftovers");
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
        if left.trim().is_empty() && alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left 120 s after the test binary was killed:\n{left}\nprocesses still alive: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn tail(path: &Path) -> String {
    kubeflake_e2e::process::log_tail(path, 40)
}
