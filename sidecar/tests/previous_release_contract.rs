//! The sidecar of this release must run with what an earlier release's webhook injected.
//!
//! A pod keeps the sidecar container (env, args) its webhook wrote when it was created, and
//! a newer sidecar binary may run in it (a re-pulled floating tag, a restarted container).
//! Each `tests/fixtures/injected-<release>.json` records what that release's webhook
//! injects (see the README there); these tests run the built binary with exactly that
//! environment and those args plus `--print-config`, and compare the settings it resolves
//! with the fixture's `expected`. A renamed variable without an alias, a dropped flag or a
//! changed default makes them fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kubeflake_crds::contract;
use serde_json::Value;

/// Settings of an earlier release's pods that this release changes on purpose:
/// `(release, key of --print-config, why)`. The key is then not compared for that release.
const DELIBERATE_CHANGES: &[(&str, &str, &str)] = &[
    (
        "0.1.0",
        "oracle_listen",
        "new in 0.3 (issue 24), not a change: pods injected before carry no POD_IP, so this setting \
         resolves to null and such a sidecar forwards strict requests and never serves as the oracle",
    ),
    (
        "0.1.0",
        "oracle_token_file",
        "new in 0.3 (issue 54), not a change: pods injected before carry no projected oracle token, \
         so this setting resolves to its default path, which is absent there; such a sidecar is \
         not listed as a strict claimant anyway (its 0.1.0 sidecar has no oracle)",
    ),
    (
        "0.1.0",
        "max_range",
        "new in 0.3 (issue 58), not a change: 0.1.0 had no /range; pods injected before pass no \
         --max-range, so /range takes its default bound (1,000,000), and /ids keeps --max-batch",
    ),
    (
        "0.1.0",
        "runtime_threads",
        "new in 0.3 (issue 24): one runtime thread unless --runtime-threads says more; 0.1.0 \
         started one per CPU it was allowed (one under the chart's default 200m limit)",
    ),
];

/// One `injected-<release>.json`.
struct Injected {
    file: PathBuf,
    release: String,
    args: Vec<String>,
    /// `lifecycle.postStart.exec.command` of the injected container: the hook that holds
    /// the app containers until the sidecar is ready.
    post_start: Vec<String>,
    /// `env[]` of the injected container, Kubernetes JSON.
    env: Vec<Value>,
    /// The value the kubelet would give each `valueFrom.fieldRef.fieldPath`.
    field_samples: BTreeMap<String, String>,
    expected: Value,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read_fixture(file: &Path) -> Injected {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let json: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", file.display()));
    let field = |key: &str| {
        json.get(key)
            .unwrap_or_else(|| panic!("{} has no `{key}`", file.display()))
    };
    let strings = |v: &Value, what: &str| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("{}: `{what}` is not an array", file.display()))
            .iter()
            .map(|s| {
                s.as_str()
                    .unwrap_or_else(|| panic!("{}: `{what}` holds a non-string", file.display()))
                    .to_string()
            })
            .collect()
    };
    let field_samples = field("fieldRefSamples")
        .as_object()
        .unwrap_or_else(|| panic!("{}: `fieldRefSamples` is not an object", file.display()))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    Injected {
        file: file.to_path_buf(),
        release: field("release").as_str().unwrap_or_default().to_string(),
        args: strings(field("args"), "args"),
        post_start: strings(field("postStart"), "postStart"),
        env: field("env")
            .as_array()
            .unwrap_or_else(|| panic!("{}: `env` is not an array", file.display()))
            .clone(),
        field_samples,
        expected: field("expected").clone(),
    }
}

/// Every `injected-*.json`, oldest file name first. Never empty: a lost fixture must not
/// turn these tests into no-ops.
fn all_fixtures() -> Vec<Injected> {
    let dir = fixtures_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("injected-") && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no injected-*.json in {}: the fixtures of earlier releases are missing",
        dir.display()
    );
    files.iter().map(|f| read_fixture(f)).collect()
}

fn fixture_of(release: &str) -> Injected {
    read_fixture(&fixtures_dir().join(format!("injected-{release}.json")))
}

/// The variables as the kubelet would set them: `value`, or the sample for `fieldRef`.
fn resolved_env(f: &Injected) -> Vec<(String, String)> {
    f.env
        .iter()
        .map(|var| {
            let name = var["name"].as_str().unwrap_or_default().to_string();
            if let Some(value) = var.get("value").and_then(Value::as_str) {
                return (name, value.to_string());
            }
            let path = var
                .pointer("/valueFrom/fieldRef/fieldPath")
                .and_then(Value::as_str)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: env {name} has neither a value nor valueFrom.fieldRef.fieldPath",
                        f.file.display()
                    )
                });
            let sample = f.field_samples.get(path).unwrap_or_else(|| {
                panic!(
                    "{}: env {name} comes from {path}, which fieldRefSamples does not give",
                    f.file.display()
                )
            });
            (name, sample.clone())
        })
        .collect()
}

/// Runs this release's sidecar with only PATH and the fixture's environment, and the
/// fixture's args plus `--print-config`; returns the settings it printed.
fn print_config(f: &Injected) -> Value {
    let env = resolved_env(f);
    let output = Command::new(env!("CARGO_BIN_EXE_kubeflake-sidecar"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(&f.args)
        .arg("--print-config")
        .output()
        .expect("can run the kubeflake-sidecar binary");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the sidecar of this release refuses what release {} injected ({}):\n  args: {:?} + --print-config\n  env: {:?}\n  exit: {}\n  stderr: {}",
        f.release,
        f.file.display(),
        f.args,
        env,
        output.status,
        stderr.trim()
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "--print-config did not print one JSON object ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Compares key by key, so that a failure names each setting that changed.
fn assert_settings_kept(f: &Injected) {
    let printed = print_config(f);
    let expected = f
        .expected
        .as_object()
        .unwrap_or_else(|| panic!("{}: `expected` is not an object", f.file.display()));
    let printed = printed
        .as_object()
        .expect("--print-config prints an object");
    let exempt = |key: &str| {
        DELIBERATE_CHANGES
            .iter()
            .any(|(release, k, _)| *release == f.release && *k == key)
    };
    let keys: std::collections::BTreeSet<&String> = expected.keys().chain(printed.keys()).collect();
    let differences: Vec<String> = keys
        .into_iter()
        .filter(|key| !exempt(key))
        .filter_map(|key| {
            let (want, got) = (expected.get(key), printed.get(key));
            (want != got).then(|| {
                let show = |v: Option<&Value>| v.map_or("(absent)".to_string(), Value::to_string);
                format!(
                    "  {key}: release {} pods need {}, this sidecar resolves {}",
                    f.release,
                    show(want),
                    show(got)
                )
            })
        })
        .collect();
    assert!(
        differences.is_empty(),
        "pods injected by release {} would run differently with this sidecar ({}):\n{}\n\
         Keep the old name as an alias (crds::contract, sidecar/src/main.rs) or the old \
         default; never edit the fixture to make this pass.",
        f.release,
        f.file.display(),
        differences.join("\n")
    );
}

/// Every variable the fixture sets is one the sidecar reads.
fn assert_every_variable_is_read(f: &Injected) {
    let unread: Vec<&str> = f
        .env
        .iter()
        .filter_map(|var| var["name"].as_str())
        .filter(|name| !contract::SIDECAR_ENV_NAMES.contains(name))
        .collect();
    assert!(
        unread.is_empty(),
        "release {}'s webhook injects {unread:?} ({}), but this sidecar reads none of them \
         (crds::contract::SIDECAR_ENV_NAMES): pods it created would silently lose those \
         settings. Keep each old name as an alias.",
        f.release,
        f.file.display()
    );
}

#[test]
fn a_sidecar_of_this_release_runs_with_the_env_and_args_release_0_1_0_injected() {
    let f = fixture_of("0.1.0");
    assert_eq!(f.release, "0.1.0");
    assert_settings_kept(&f);
}

#[test]
fn a_sidecar_of_this_release_reads_every_variable_release_0_1_0_injected() {
    assert_every_variable_is_read(&fixture_of("0.1.0"));
}

#[test]
fn a_sidecar_of_this_release_runs_with_what_every_earlier_release_injected() {
    for f in all_fixtures() {
        assert_every_variable_is_read(&f);
        assert_settings_kept(&f);
    }
}

#[test]
fn every_deliberate_change_names_a_release_with_a_fixture_and_a_reason() {
    let releases: Vec<String> = all_fixtures().into_iter().map(|f| f.release).collect();
    for (release, key, why) in DELIBERATE_CHANGES {
        assert!(
            releases.iter().any(|r| r == release),
            "no fixture for {release}"
        );
        assert!(!why.trim().is_empty(), "{release} {key}: give the reason");
    }
}

/// Sidecars built before 0.1.0 were injected `KUBEFLAKE_FENCE_DIR` (no fixture: that
/// webhook was never released); the name is still read, below `KUBEFLAKE_STATE_DIR`.
#[test]
fn the_state_dir_name_of_pre_release_webhooks_still_sets_the_state_dir() {
    let run = |env: &[(&str, &str)], args: &[&str]| -> Value {
        let output = Command::new(env!("CARGO_BIN_EXE_kubeflake-sidecar"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env(contract::SEQUENCE_ENV, "orders")
            .env(contract::POD_NAME_ENV, "app-0")
            .env(contract::POD_NAMESPACE_ENV, "shop")
            .env(contract::POD_UID_ENV, "uid-0")
            .envs(env.iter().copied())
            .arg(contract::CLUSTER_SUBCOMMAND)
            .args(args)
            .arg("--print-config")
            .output()
            .expect("can run the kubeflake-sidecar binary");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("one JSON object")
    };
    let legacy = [(contract::LEGACY_FENCE_DIR_ENV, "/old")];
    assert_eq!(
        run(&legacy, &[])["state_dir"],
        "/old",
        "{} no longer sets the state directory: a pod injected with it would start without its fence file",
        contract::LEGACY_FENCE_DIR_ENV
    );
    assert_eq!(
        run(&[], &["--fence-dir", "/old-flag"])["state_dir"],
        "/old-flag",
        "--fence-dir no longer sets the state directory"
    );
    let both = [
        (contract::LEGACY_FENCE_DIR_ENV, "/old"),
        (contract::STATE_DIR_ENV, "/new"),
    ];
    assert_eq!(run(&both, &[])["state_dir"], "/new", "the new name wins");
    assert_eq!(run(&[], &[])["state_dir"], contract::STATE_DIR);
}

/// The injected postStart hook runs this sidecar binary too: its subcommand and URL must
/// still parse (a usage error, exit 2, would fail every pod's start: the kubelet kills a
/// container whose postStart hook fails). Run against nothing with a 1 s limit, it ends 1
/// (not ready in time) or 0 (something answered), never 2.
#[test]
fn a_sidecar_of_this_release_runs_the_post_start_hook_every_earlier_release_injected() {
    for f in all_fixtures() {
        let (binary, args) = f
            .post_start
            .split_first()
            .unwrap_or_else(|| panic!("{}: postStart is empty", f.file.display()));
        assert_eq!(
            binary,
            contract::SIDECAR_BINARY,
            "{}: the hook runs {binary}, but the image holds the sidecar at {}",
            f.file.display(),
            contract::SIDECAR_BINARY
        );
        let out = Command::new(env!("CARGO_BIN_EXE_kubeflake-sidecar"))
            .args(args)
            .args(["--timeout-secs", "1"])
            .env_clear()
            .output()
            .expect("the sidecar binary runs");
        let code = out.status.code();
        assert!(
            matches!(code, Some(0 | 1)),
            "release {}'s postStart hook {:?} no longer parses (exit {code:?}): {}",
            f.release,
            f.post_start,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
