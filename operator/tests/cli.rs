//! The operator binary's command line: bad input is named, never a panic.

use std::process::Command;

fn run(args: &[&str], kubeconfig: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeflake-operator"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the operator binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_metrics_address_is_rejected_naming_the_flag() {
    let (code, stderr) = run(&["--metrics-addr", "not-an-address"], "/nonexistent");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-addr"), "{stderr}");
}

#[test]
fn an_unreachable_api_server_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "this is not a kubeconfig").unwrap();
    let (code, stderr) = run(
        &["--metrics-addr", "127.0.0.1:0"],
        kubeconfig.to_str().unwrap(),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the Kubernetes API"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
