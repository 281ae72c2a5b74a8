//! `kubectl kubeflake check` against a real install on the test node (issue 57, item 3):
//! `check --pre` passes before `helm install` and names the checks it made; `check` passes
//! once the chart runs with an IdSequence and a running app pod; and each broken case is a
//! failed check, named by its group and check, with a `do:` line, and exit code 1:
//!
//! - the operator Deployment scaled to 0, and while no operator runs, an expired CA in the
//!   webhook configuration's `caBundle` (a running operator writes its own CA back at once,
//!   which is what restores it);
//! - a `caBundle` from another CA than the one that signed the webhook's serving
//!   certificate (dates all valid): only the dry-run probe sees it, in the API server's
//!   own words; deleting the operator's certificate Secret and restarting it, as the hint
//!   says, restores it;
//! - a sequence whose slots are all held with a pod still waiting (`Exhausted`); with one
//!   pod fewer it only warns: exit 0, and 4 with `--strict`;
//! - a pod whose sidecar was injected by a release outside the skew policy.
//!
//! One release and one app serve every test here, installed once (after `check --pre` ran)
//! by [`installed`]; the tests take turns on the node, and each restores what it broke and
//! waits until `check` passes again. The plugin is the workspace's real binary
//! (`operator_support::workspace_binary`), run with the test cluster's kubeconfig.

mod chart_support;
mod node_support;
mod operator_support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use kubeflake_crds::contract::{INJECT_ANNOTATION, INJECTED_ANNOTATION};
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_e2e::Cluster;
use node_support::{
    LIMIT, RELEASE, RELEASE_NAMESPACE, app_deployment, apply, delete_namespace, first_ready_pod,
    one_at_a_time, rollout, shared_release,
};
use operator_support::{create_sequence, eventually, workspace_binary};
use serde_json::{Value, json};

fn cluster() -> &'static Cluster {
    Cluster::shared_with_node()
}

/// Upper bound for one plugin run (it talks to a local API server).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The operator Deployment of the shared release.
fn operator_deployment() -> String {
    chart_support::fullname(RELEASE)
}

/// What one `check` said: its exit code, its json report and its checklist (two runs of the
/// plugin, `-o json` and the table, on a state the test holds still).
struct Checked {
    code: i32,
    report: Value,
    table: String,
}

impl Checked {
    /// The finding of `group` / `check`.
    fn finding(&self, group: &str, check: &str) -> Result<&Value> {
        self.report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["group"] == group && f["check"] == check)
            .with_context(|| format!("no finding {group} / {check} in\n{}", self.table))
    }

    /// The findings marked `mark`, as `group / check`.
    fn marked(&self, mark: &str) -> Vec<String> {
        self.report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["mark"] == mark)
            .map(|f| format!("{} / {}", text(&f["group"]), text(&f["check"])))
            .collect()
    }

    /// Asserts that `group` / `check` is marked `mark` (fail or warn), that its detail
    /// holds each of `detail` and its hint `hint`, and that the checklist shows it with a
    /// `do:` line under it.
    fn assert_flagged(
        &self,
        mark: &str,
        group: &str,
        check: &str,
        detail: &[&str],
        hint: &str,
    ) -> Result<()> {
        let f = self.finding(group, check)?;
        ensure!(
            f["mark"] == mark,
            "{group} / {check} is not {mark}: {f}\n{}",
            self.table
        );
        for part in detail {
            ensure!(
                text(&f["detail"]).contains(part),
                "the detail of {group} / {check} does not say {part:?}: {f}"
            );
        }
        ensure!(
            text(&f["hint"]).contains(hint),
            "the hint of {group} / {check} does not say {hint:?}: {f}"
        );
        let label = format!("[{mark}]");
        let lines: Vec<&str> = self.table.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains(&label) && l.contains(&format!(" {check}: ")))
            .with_context(|| format!("no {label} {check} line in the checklist\n{}", self.table))?;
        ensure!(
            lines
                .get(at + 1)
                .is_some_and(|l| l.trim_start().starts_with("do: ")),
            "no do: line under {label} {check}\n{}",
            self.table
        );
        Ok(())
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// `kubectl-kubeflake <args>` with the test cluster's kubeconfig: exit code and stdout
/// (stderr is part of the error when the run does not end normally).
async fn run_plugin(args: &[&str]) -> Result<(i32, String, String)> {
    let plugin: PathBuf = workspace_binary("kubectl-kubeflake");
    let mut command = tokio::process::Command::new(plugin);
    command
        .args(args)
        .env("KUBECONFIG", cluster().kubeconfig())
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let Output {
        status,
        stdout,
        stderr,
    } = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .with_context(|| format!("kubectl-kubeflake {args:?} did not finish in time"))??;
    let stderr = String::from_utf8_lossy(&stderr);
    let code = status
        .code()
        .with_context(|| format!("kubectl-kubeflake {args:?} was killed: {stderr}"))?;
    Ok((code, String::from_utf8(stdout)?, stderr.into_owned()))
}

/// `kubectl kubeflake check <args>`, as json and as the checklist; the two runs must agree
/// on the exit code.
async fn check(args: &[&str]) -> Result<Checked> {
    let (checked, table_code) = check_twice(args).await?;
    ensure!(
        checked.code == table_code,
        "check {args:?} exits {} with -o json and {table_code} without:\n{}",
        checked.code,
        checked.table
    );
    Ok(checked)
}

/// The json run and the checklist run of `check <args>`, and the checklist run's exit code
/// (the two may disagree while the cluster changes between them).
async fn check_twice(args: &[&str]) -> Result<(Checked, i32)> {
    let mut json_args = vec!["check", "-o", "json"];
    json_args.extend(args);
    let (code, stdout, stderr) = run_plugin(&json_args).await?;
    let report: Value = serde_json::from_str(&stdout).with_context(|| {
        format!("check {args:?} -o json: exit {code}, not json: {stdout}; stderr: {stderr}")
    })?;
    let mut table_args = vec!["check"];
    table_args.extend(args);
    let (table_code, table, _) = run_plugin(&table_args).await?;
    Ok((
        Checked {
            code,
            report,
            table,
        },
        table_code,
    ))
}

/// Runs `check <args>` until `done` says the state it wants is reached and the json and
/// checklist runs agree (bounded by [`LIMIT`]); the last run is returned, or the error
/// shows it.
async fn check_until(
    args: &[&str],
    what: &str,
    done: impl Fn(&Checked) -> bool,
) -> Result<Checked> {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let (checked, table_code) = check_twice(args).await?;
        if checked.code == table_code && done(&checked) {
            return Ok(checked);
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "timed out after {LIMIT:?} waiting for {what}; the last check exited {} (the checklist run {table_code}):\n{}",
                checked.code,
                checked.table
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `check` passes (exit 0, no failure): the state every test starts from and
/// restores.
async fn passes() -> Result<Checked> {
    check_until(&[], "check to pass", |c| c.code == 0).await
}

/// What was seen before the shared install, and the namespace of its app.
#[derive(Clone)]
struct Install {
    /// `check --pre` before `helm install`: exit code and checklist, and the json report.
    pre: (i32, String, Value),
    /// `check` (after install) before `helm install`.
    installed_before: (i32, String, Value),
    /// The namespace with the IdSequence `orders` and the example app `app`.
    app_namespace: String,
}

/// Runs `check --pre` and `check` on the empty cluster, then installs the chart, an
/// IdSequence and the example app (once per test binary).
async fn installed() -> Result<Install> {
    static INSTALL: tokio::sync::OnceCell<Result<Install, String>> =
        tokio::sync::OnceCell::const_new();
    INSTALL
        .get_or_init(|| async {
            install()
                .await
                .map_err(|e| format!("the shared install failed: {e:#}"))
        })
        .await
        .clone()
        .map_err(anyhow::Error::msg)
}

async fn install() -> Result<Install> {
    let cluster = cluster();
    let before = |args: &'static [&'static str]| async move {
        let c = check(args).await?;
        Ok::<_, anyhow::Error>((c.code, c.table, c.report))
    };
    let pre = before(&["--pre"]).await?;
    let installed_before = before(&[]).await?;
    shared_release(cluster).await?;
    let ns = cluster.namespace("check").await?;
    create_sequence(&ns, "orders", json!({})).await?;
    apply(cluster, &ns.name, &app_deployment("app", "orders", 1)).await?;
    rollout(cluster, &ns.name, "app").await?;
    Ok(Install {
        pre,
        installed_before,
        app_namespace: ns.name.clone(),
    })
}

#[tokio::test]
async fn check_pre_passes_before_install_and_names_the_version_the_api_kinds_and_the_rights()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let (code, table, report) = installed().await?.pre;
    assert_eq!(code, 0, "check --pre before install:\n{table}");
    assert_eq!(report["phase"], "pre");
    let checks: Vec<(&str, &str, &str)> = report["findings"]
        .as_array()
        .context("findings")?
        .iter()
        .map(|f| (text(&f["group"]), text(&f["check"]), text(&f["mark"])))
        .collect();
    for check in ["version", "API kinds", "installer's rights"] {
        assert!(
            checks.contains(&("kubernetes", check, "ok")),
            "check --pre made the check {check:?} and it passed: {checks:?}"
        );
        assert!(
            table.contains(&format!("[ok]   {check}: ")),
            "the checklist names {check:?}:\n{table}"
        );
    }
    assert!(
        table.contains("v1.35"),
        "the version check names the cluster's version:\n{table}"
    );
    assert!(
        table.ends_with("passed: 3 ok, 0 warnings, 0 failures\n"),
        "{table}"
    );
    Ok(())
}

#[tokio::test]
async fn check_before_install_fails_on_the_missing_crd_and_operator() -> Result<()> {
    let _turn = one_at_a_time().await;
    let (code, table, report) = installed().await?.installed_before;
    assert_eq!(code, 1, "check before install:\n{table}");
    let checked = Checked {
        code,
        report,
        table,
    };
    checked.assert_flagged(
        "fail",
        "operator",
        "CRD",
        &["idsequences.kubeflake.io is not installed"],
        "kubectl apply",
    )?;
    checked.assert_flagged(
        "fail",
        "operator",
        "deployment",
        &["no operator Deployment", RELEASE_NAMESPACE],
        "install the chart",
    )?;
    Ok(())
}

#[tokio::test]
async fn check_passes_on_a_healthy_install_with_a_running_app() -> Result<()> {
    let _turn = one_at_a_time().await;
    let ns = installed().await?.app_namespace;
    let checked = passes().await?;
    assert_eq!(checked.report["phase"], "installed");
    assert_eq!(
        checked.marked("fail"),
        Vec::<String>::new(),
        "{}",
        checked.table
    );
    assert_eq!(
        checked.marked("warn"),
        Vec::<String>::new(),
        "a healthy install has nothing to warn of:\n{}",
        checked.table
    );
    let sequence = format!("sequence {ns}/orders");
    for (group, check) in [
        ("operator", "CRD"),
        ("operator", "deployment"),
        ("operator", "leader"),
        ("operator", "lease policy"),
        ("webhook", "configuration"),
        ("webhook", "endpoints"),
        ("webhook", "CA certificate"),
        ("webhook", "answers the API server"),
        (sequence.as_str(), "ready"),
        (sequence.as_str(), "slots"),
        (sequence.as_str(), "waiting pods"),
        (sequence.as_str(), "lifetime"),
        ("sidecars", "versions"),
    ] {
        assert_eq!(
            checked.finding(group, check)?["mark"],
            "ok",
            "{group} / {check}"
        );
    }
    let deployment = text(&checked.finding("operator", "deployment")?["detail"]).to_string();
    assert!(
        deployment.contains(&format!("{RELEASE_NAMESPACE}/{}", operator_deployment())),
        "the operator found is the release's: {deployment}"
    );
    let versions = text(&checked.finding("sidecars", "versions")?["detail"]).to_string();
    assert!(
        versions.starts_with("1 injected pod within one release of "),
        "the app's pod is the one injected pod: {versions}"
    );
    let strict = check(&["--strict"]).await?;
    assert_eq!(strict.code, 0, "nothing warns:\n{}", strict.table);
    Ok(())
}

/// `kubectl -n <release namespace> <args>`, which must succeed.
async fn kubectl_release(args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", RELEASE_NAMESPACE];
    all.extend(args);
    cluster().kubectl(&all).await?.ok()
}

/// The name of the MutatingWebhookConfiguration, from the operator's own flags.
async fn webhook_config_name() -> Result<String> {
    let args = chart_support::deployment_args(cluster(), RELEASE_NAMESPACE, RELEASE).await?;
    args.iter()
        .find_map(|a| a.strip_prefix("--webhook-config="))
        .map(str::to_string)
        .with_context(|| format!("no --webhook-config= in the operator's args {args:?}"))
}

/// The `caBundle` of every webhook of the configuration `name`.
async fn ca_bundles(client: &Client, name: &str) -> Result<Vec<Option<Vec<u8>>>> {
    let config = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await?;
    Ok(config
        .webhooks
        .iter()
        .flatten()
        .map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()))
        .collect())
}

/// A self-signed CA certificate (PEM) named `name`, valid from the start of `from` to the
/// start of `until` (years).
fn self_signed_ca(name: &str, from: i32, until: i32) -> Result<String> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
    Ok(params.self_signed(&key)?.pem())
}

#[tokio::test]
async fn with_the_operator_scaled_to_0_check_fails_on_the_deployment_and_on_an_expired_ca_bundle_until_scaled_back()
-> Result<()> {
    let _turn = one_at_a_time().await;
    installed().await?;
    passes().await?;
    let client = cluster().client()?;
    let deployment = operator_deployment();
    let replicas = kubectl_release(&[
        "get",
        "deployment",
        &deployment,
        "-o",
        "jsonpath={.spec.replicas}",
    ])
    .await?;
    kubectl_release(&["scale", "deployment", &deployment, "--replicas=0"]).await?;

    let down = check(&[]).await?;
    assert_eq!(down.code, 1, "{}", down.table);
    down.assert_flagged(
        "fail",
        "operator",
        "deployment",
        &[&format!("{RELEASE_NAMESPACE}/{deployment} is scaled to 0")],
        &format!("scale deploy/{deployment} --replicas="),
    )?;

    // With no operator pod left, nothing writes the caBundle back: replace it with a CA
    // that expired in 2021 (what an operator that stopped long ago would leave behind).
    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let operator_pods = ListParams::default().labels("app.kubernetes.io/component=operator");
    eventually(LIMIT, "the operator pods to be gone", || async {
        Ok(pods
            .list(&operator_pods)
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await?;
    let before = check(&[]).await?;
    assert_eq!(
        before.finding("webhook", "CA certificate")?["mark"],
        "ok",
        "the operator's own CA is valid:\n{}",
        before.table
    );
    let name = webhook_config_name().await?;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut config = configs.get(&name).await?;
    // Valid in 2020 only.
    let expired = self_signed_ca("an expired CA", 2020, 2021)?.into_bytes();
    for hook in config.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = Some(ByteString(expired.clone()));
    }
    configs
        .replace(&name, &PostParams::default(), &config)
        .await?;

    let broken = check(&[]).await?;
    assert_eq!(broken.code, 1, "{}", broken.table);
    broken.assert_flagged(
        "fail",
        "webhook",
        "CA certificate",
        &["expired at 2021-01-01T00:00:00Z"],
        &format!("kubectl -n {RELEASE_NAMESPACE} rollout restart deploy/{deployment} "),
    )?;

    // Restored as the hint says: an operator that starts writes its own CA back.
    kubectl_release(&[
        "scale",
        "deployment",
        &deployment,
        &format!("--replicas={}", replicas.trim()),
    ])
    .await?;
    rollout(cluster(), RELEASE_NAMESPACE, &deployment).await?;
    let restored = passes().await?;
    assert_eq!(
        restored.finding("webhook", "CA certificate")?["mark"],
        "ok",
        "{}",
        restored.table
    );
    let bundles = ca_bundles(&client, &name).await?;
    assert!(
        bundles
            .iter()
            .all(|b| b.as_deref() != Some(expired.as_slice())),
        "the restarted operator replaced the expired caBundle"
    );
    Ok(())
}

#[tokio::test]
async fn with_a_ca_bundle_from_another_ca_check_fails_on_the_webhooks_answer_until_the_secret_is_renewed()
-> Result<()> {
    let _turn = one_at_a_time().await;
    installed().await?;
    passes().await?;
    let client = cluster().client()?;
    let deployment = operator_deployment();
    let args = chart_support::deployment_args(cluster(), RELEASE_NAMESPACE, RELEASE).await?;
    let secret_name = args
        .iter()
        .find_map(|a| a.strip_prefix("--webhook-secret="))
        .map(str::to_string)
        .with_context(|| format!("no --webhook-secret= in the operator's args {args:?}"))?;

    // The operator's Secret keeps its CA key, serving certificate and `ca.crt` (the bundle
    // it writes into the configuration). A `ca.crt` from another CA, as a hand edit or a
    // partial restore would leave it: every date valid, but the API server no longer
    // trusts the certificate the webhook serves.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    // Right dates, wrong CA.
    let other = self_signed_ca("another CA", 2025, 2060)?.into_bytes();
    let mut secret = secrets.get(&secret_name).await?;
    secret
        .data
        .get_or_insert_with(Default::default)
        .insert("ca.crt".to_string(), ByteString(other.clone()));
    secrets
        .replace(&secret_name, &PostParams::default(), &secret)
        .await?;
    let name = webhook_config_name().await?;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut config = configs.get(&name).await?;
    for hook in config.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = Some(ByteString(other.clone()));
    }
    configs
        .replace(&name, &PostParams::default(), &config)
        .await?;

    let broken = check_until(&[], "check to fail on the webhook's answer", |c| {
        c.code == 1
            && c.finding("webhook", "answers the API server")
                .is_ok_and(|f| f["mark"] == "fail")
    })
    .await?;
    broken.assert_flagged(
        "fail",
        "webhook",
        "answers the API server",
        &["failed calling webhook", "x509"],
        "caBundle does not trust the certificate the webhook serves",
    )?;
    assert_eq!(
        broken.finding("webhook", "CA certificate")?["mark"],
        "ok",
        "the dates alone look fine, which is why the probe is needed:\n{}",
        broken.table
    );
    assert!(
        ca_bundles(&client, &name)
            .await?
            .iter()
            .all(|b| b.as_deref() == Some(other.as_slice())),
        "the caBundle is still the other CA while check runs"
    );

    // Restored as the hint says: delete the Secret, restart the operator.
    kubectl_release(&["delete", "secret", &secret_name]).await?;
    kubectl_release(&["rollout", "restart", "deployment", &deployment]).await?;
    rollout(cluster(), RELEASE_NAMESPACE, &deployment).await?;
    let restored = passes().await?;
    assert_eq!(
        restored.finding("webhook", "answers the API server")?["mark"],
        "ok",
        "{}",
        restored.table
    );
    Ok(())
}

/// A labelled pod in `sequence` that never runs: not injected (`kubeflake.io/inject:
/// "false"`) and with a node selector no node matches. The operator gives it a slot all
/// the same, so it holds one (or waits for one) like any pod of the sequence.
fn parked_pod(name: &str, sequence: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {SEQUENCE_LABEL: sequence},
            "annotations": {INJECT_ANNOTATION: "false"},
        },
        "spec": {
            "nodeSelector": {"kubeflake.io/e2e-no-such-node": "true"},
            "containers": [{
                "name": "app",
                "image": kubeflake_e2e::node::EXAMPLE_APP_IMAGE,
                "imagePullPolicy": "Never",
            }],
        },
    }))?)
}

#[tokio::test]
async fn a_sequence_with_every_slot_held_and_a_pod_waiting_fails_as_exhausted_and_warns_when_full()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let app_namespace = installed().await?.app_namespace;
    passes().await?;
    let cluster = cluster();
    let ns = cluster.namespace("check-exhausted").await?;
    // Two slots (workerBits: 1) and three pods: one of them waits.
    create_sequence(
        &ns,
        "tiny",
        json!({"layout": {"timestampBits": 41, "workerBits": 1, "sequenceBits": 21}}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    for i in 0..3 {
        let pod = parked_pod(&format!("parked-{i}"), "tiny")?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let group = format!("sequence {}/tiny", ns.name);
    let exhausted = check_until(&[], "the sequence to be exhausted", |c| {
        c.finding(&group, "slots")
            .is_ok_and(|f| text(&f["detail"]).contains("exhausted"))
    })
    .await?;
    assert_eq!(exhausted.code, 1, "{}", exhausted.table);
    exhausted.assert_flagged(
        "fail",
        &group,
        "slots",
        &["0 of 2 free", "exhausted"],
        &format!("kubectl kubeflake slots tiny -n {}", ns.name),
    )?;
    exhausted.assert_flagged(
        "warn",
        &group,
        "waiting pods",
        &["1 waiting for a slot"],
        "",
    )?;
    // -n checks one namespace: the app's is healthy.
    let elsewhere = check(&["-n", &app_namespace]).await?;
    assert_eq!(elsewhere.code, 0, "{}", elsewhere.table);
    assert!(elsewhere.finding(&group, "slots").is_err());

    // One pod fewer: every slot held, nobody waiting. A warning: exit 0, and 4 with
    // --strict, which scripts use to stop on warnings too.
    let waiting = waiting_pod(&ns.name).await?;
    pods.delete(&waiting, &Default::default()).await?;
    let full = check_until(&[], "the sequence to be full, not exhausted", |c| {
        c.code == 0
            && c.finding(&group, "slots")
                .is_ok_and(|f| f["mark"] == "warn")
    })
    .await?;
    full.assert_flagged("warn", &group, "slots", &["0 of 2 free", "80%"], "")?;
    let strict = check(&["--strict"]).await?;
    assert_eq!(strict.code, 4, "{}", strict.table);

    delete_namespace(cluster, &ns).await;
    passes().await?;
    Ok(())
}

/// The one pod of `namespace` that `kubectl kubeflake slots` shows waiting.
async fn waiting_pod(namespace: &str) -> Result<String> {
    let (code, stdout, _) = run_plugin(&["slots", "tiny", "-n", namespace, "-o", "json"]).await?;
    ensure!(code == 0, "slots tiny: exit {code}: {stdout}");
    let slots: Value = serde_json::from_str(&stdout)?;
    let waiting: Vec<&str> = slots["waiting"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["pod"].as_str())
        .collect();
    match waiting.as_slice() {
        [one] => Ok((*one).to_string()),
        _ => bail!("expected one waiting pod: {stdout}"),
    }
}

/// The skew policy's nearest release it does not support: two minor releases after this one.
fn release_outside_the_skew_policy() -> Result<String> {
    let this = env!("CARGO_PKG_VERSION");
    let mut parts = this.split('.');
    let major = parts.next().context("major")?;
    let minor: u64 = parts.next().context("minor")?.parse()?;
    Ok(format!("{major}.{}.0", minor + 2))
}

#[tokio::test]
async fn a_pod_whose_sidecar_was_injected_by_a_release_outside_the_skew_policy_fails_the_version_check()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let ns = installed().await?.app_namespace;
    passes().await?;
    let client = cluster().client()?;
    let namespace = kubeflake_e2e::TestNamespace {
        name: ns.clone(),
        client: client.clone(),
    };
    // The app's pod as its webhook made it, injected sidecar included, but recorded as
    // injected by a release two minor versions ahead (an operator rolled back past the
    // policy). The webhook leaves a pod that already has its sidecar alone; the copy is
    // parked (a node selector no node matches) so that it never runs.
    let running = first_ready_pod(&namespace, "app").await?;
    let old = release_outside_the_skew_policy()?;
    let mut copy = Pod {
        spec: running.spec.clone(),
        ..Pod::default()
    };
    // Only the sequence label: with the app's labels its ReplicaSet would adopt the copy.
    let sequence = running.labels().get(SEQUENCE_LABEL).context("label")?;
    copy.metadata = kube::api::ObjectMeta {
        name: Some("skewed".into()),
        labels: Some([(SEQUENCE_LABEL.to_string(), sequence.clone())].into()),
        annotations: Some([(INJECTED_ANNOTATION.to_string(), old.clone())].into()),
        ..Default::default()
    };
    let spec = copy.spec.as_mut().context("spec")?;
    spec.node_name = None;
    spec.node_selector = Some([("kubeflake.io/e2e-no-such-node".into(), "true".into())].into());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = pods.create(&PostParams::default(), &copy).await?;
    assert_eq!(
        created.annotations().get(INJECTED_ANNOTATION),
        Some(&old),
        "the webhook left the pod as injected before"
    );

    let skewed = check(&[]).await?;
    assert_eq!(skewed.code, 1, "{}", skewed.table);
    skewed.assert_flagged(
        "fail",
        "sidecars",
        "versions",
        &["1 of 2 injected pods", &format!("{ns}/skewed ({old})")],
        "rollout restart",
    )?;

    pods.delete("skewed", &Default::default()).await?;
    eventually(LIMIT, "the skewed pod to be gone", || async {
        Ok(pods.get_opt("skewed").await?.is_none().then_some(()))
    })
    .await?;
    passes().await?;
    Ok(())
}
