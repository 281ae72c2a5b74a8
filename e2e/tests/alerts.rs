//! The chart's PrometheusRule and Grafana dashboard against the real API server: with both
//! switched on, `helm template` renders objects the server accepts (the PrometheusRule
//! through a CRD with the Prometheus operator's rule-group schema), and what is stored is
//! what Prometheus and Grafana read. The rules themselves are unit-tested with promtool
//! by charts/kubeflake/tests/promtool.sh. The operator's and a sidecar's `/metrics` pass
//! `promtool check metrics`, and every metric the rules and the dashboard query is one
//! that they export.

mod chart_support;
mod operator_support;
mod sidecar_support;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chart_support::*;
use kubeflake_e2e::Cluster;
use kubeflake_e2e::process::{Process, ProcessSpec};
use operator_support::{Operator, free_port, install_crd, workspace_binary};

const SWITCHES: &[&str] = &[
    "metrics.prometheusRule.enabled=true",
    "metrics.dashboard.enabled=true",
];

/// The PrometheusRule CRD of the Prometheus operator (monitoring.coreos.com/v1), reduced to
/// the fields the chart uses but with their real types and required fields, so that a
/// malformed rule is rejected as it would be in a cluster running the operator.
fn prometheus_rule_crd() -> serde_json::Value {
    let string_map =
        serde_json::json!({"type": "object", "additionalProperties": {"type": "string"}});
    let duration = serde_json::json!({"type": "string",
        "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"});
    let rule = serde_json::json!({
    "type": "object", "required": ["expr"], "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"x-kubernetes-int-or-string": true},
        "for": duration,
        "labels": string_map,
        "annotations": string_map,
    }});
    let group = serde_json::json!({
    "type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "minLength": 1},
        "interval": duration,
        "rules": {"type": "array", "items": rule},
    }});
    let schema = serde_json::json!({
    "type": "object", "required": ["spec"], "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": {"groups": {"type": "array", "items": group}}},
    }});
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"kind": "PrometheusRule", "listKind": "PrometheusRuleList",
                      "plural": "prometheusrules", "singular": "prometheusrule",
                      "categories": ["prometheus-operator"], "shortNames": ["promrule"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": schema}}],
        },
    })
}

async fn install_prometheus_rule_crd(cluster: &Cluster) -> Result<()> {
    let crd = prometheus_rule_crd().to_string();
    cluster
        .kubectl_with_stdin(&["apply", "--server-side", "-f", "-"], Some(&crd))
        .await?
        .ok()?;
    cluster
        .wait_crd_established("prometheusrules.monitoring.coreos.com")
        .await
}

/// `helm template <release>` into `namespace` with the rule and the dashboard switched on.
async fn render(
    cluster: &Cluster,
    release: &str,
    namespace: &str,
    extra: &[&str],
) -> Result<String> {
    let mut args = vec![
        "template",
        release,
        CHART,
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
    ];
    let sets = set_args(SWITCHES);
    args.extend(sets.iter().map(String::as_str));
    args.extend_from_slice(extra);
    helm(cluster, &args).await?.ok()
}

#[tokio::test]
async fn rule_and_dashboard_render_objects_the_api_server_accepts() -> Result<()> {
    let cluster = Cluster::shared();
    install_prometheus_rule_crd(cluster).await?;
    let ns = cluster.namespace("alerts-dry-run").await?;
    let rendered = render(cluster, "alerts", &ns.name, &["--include-crds"]).await?;
    let out = cluster
        .kubectl_with_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered))
        .await?;
    assert!(
        out.success(),
        "the API server rejected the chart with the rule and dashboard on:\n{}",
        out.stderr
    );
    let name = fullname("alerts");
    for object in [
        format!("prometheusrule.monitoring.coreos.com/{name} created (server dry run)"),
        format!("configmap/{name}-dashboard created (server dry run)"),
    ] {
        assert!(
            out.stdout.contains(&object),
            "no {object:?} in:\n{}",
            out.stdout
        );
    }
    Ok(())
}

#[tokio::test]
async fn stored_rule_and_dashboard_are_what_prometheus_and_grafana_read() -> Result<()> {
    let cluster = Cluster::shared();
    install_prometheus_rule_crd(cluster).await?;
    let ns = cluster.namespace("alerts-stored").await?;
    let release = "stored";
    let name = fullname(release);
    let rendered = render(
        cluster,
        release,
        &ns.name,
        &[
            "--show-only",
            "templates/prometheusrule.yaml",
            "--show-only",
            "templates/dashboard.yaml",
            "--set",
            "metrics.prometheusRule.labels.prometheus=main",
            "--set",
            "metrics.prometheusRule.thresholds.clockSkewSeconds=3",
        ],
    )
    .await?;
    cluster
        .kubectl_with_stdin(&["apply", "-n", &ns.name, "-f", "-"], Some(&rendered))
        .await?
        .ok()?;

    let rule: serde_json::Value = serde_json::from_str(
        &cluster
            .kubectl(&["get", "prometheusrule", &name, "-n", &ns.name, "-o", "json"])
            .await?
            .ok()?,
    )?;
    assert_eq!(
        rule["metadata"]["labels"]["prometheus"], "main",
        "the extra rule label"
    );
    let alerts: Vec<&serde_json::Value> = rule["spec"]["groups"]
        .as_array()
        .context("spec.groups")?
        .iter()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    // Every alert of the rendered rules (the rules file is the only list) is stored.
    let rendered_alerts: BTreeSet<&str> = rendered
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- alert: "))
        .map(str::trim)
        .collect();
    let stored_alerts: BTreeSet<&str> = alerts.iter().filter_map(|a| a["alert"].as_str()).collect();
    assert!(
        !rendered_alerts.is_empty(),
        "no alert rendered:\n{rendered}"
    );
    assert_eq!(stored_alerts, rendered_alerts, "the stored alerts");
    // The rest are recording rules: the deprecated names of group kubeflake-deprecated.
    let alerts: Vec<&serde_json::Value> = alerts
        .into_iter()
        .filter(|rule| {
            rule.get("alert").is_some() || {
                assert!(
                    rule["record"].is_string(),
                    "a rule neither alert nor record: {rule}"
                );
                false
            }
        })
        .collect();
    for alert in &alerts {
        let alertname = alert["alert"].as_str().context("every rule is an alert")?;
        let anchor = alertname.to_lowercase();
        assert!(
            alert["labels"]["severity"].is_string(),
            "{alertname} has no severity"
        );
        for key in ["summary", "description"] {
            assert!(
                alert["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{alertname} has no {key}"
            );
        }
        assert_eq!(
            alert["annotations"]["runbook_url"].as_str(),
            Some(
                format!("https://github.com/kubeflake/kubeflake/blob/main/docs/alerts.md#{anchor}")
                    .as_str()
            ),
            "{alertname}'s runbook"
        );
        // Operator alerts select the series of this release's ServiceMonitor job.
        let expr = alert["expr"].as_str().context("expr")?;
        if expr.contains("kubeflake_operator_")
            || expr.contains("kubeflake_webhook_")
            || expr.contains("up{")
        {
            assert!(
                expr.contains(&format!(r#"job="{name}-metrics",namespace="{}""#, ns.name)),
                "{alertname} does not select this release's operator: {expr}"
            );
        }
    }
    let skew = alerts
        .iter()
        .find(|a| a["alert"] == "KubeflakeClockSkew")
        .context("KubeflakeClockSkew")?;
    assert!(
        skew["expr"].as_str().is_some_and(|e| e.ends_with("> 3")),
        "the threshold value is not applied: {}",
        skew["expr"]
    );

    let config_map: serde_json::Value = serde_json::from_str(
        &cluster
            .kubectl(&[
                "get",
                "configmap",
                &format!("{name}-dashboard"),
                "-n",
                &ns.name,
                "-o",
                "json",
            ])
            .await?
            .ok()?,
    )?;
    assert_eq!(
        config_map["metadata"]["labels"]["grafana_dashboard"], "1",
        "Grafana's sidecar selects dashboards by this label"
    );
    let dashboard: serde_json::Value = serde_json::from_str(
        config_map["data"]["kubeflake.json"]
            .as_str()
            .context("data.kubeflake.json")?,
    )
    .context("the stored dashboard is not JSON")?;
    let shipped: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(format!(
        "{CHART}/dashboards/kubeflake.json"
    ))?)?;
    assert_eq!(
        dashboard, shipped,
        "the stored dashboard differs from the chart's file"
    );
    Ok(())
}

#[tokio::test]
async fn the_crd_rejects_a_rule_without_an_expression() -> Result<()> {
    // Shows that the dry run above validates the rules, not just the metadata.
    let cluster = Cluster::shared();
    install_prometheus_rule_crd(cluster).await?;
    let ns = cluster.namespace("alerts-bad-rule").await?;
    let bad = serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "bad", "namespace": ns.name},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "NoExpr", "for": "five minutes"}]}]},
    })
    .to_string();
    let out = cluster
        .kubectl_with_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&bad))
        .await?;
    assert!(!out.success(), "a rule without expr was accepted");
    for needle in ["expr", "Required value", "spec.groups[0].rules[0].for"] {
        assert!(
            out.stderr.contains(needle),
            "the error does not say {needle:?}:\n{}",
            out.stderr
        );
    }
    Ok(())
}

/// Runs `promtool check metrics` on an exposition; fails on any complaint (a format error
/// is one too). There is no list of accepted findings: a name promtool rejects is renamed,
/// its old name recorded by the chart for one release (docs/alerts.md, "Deprecated metric
/// names"). The crates' own tests do the same with `kubeflake_runtime::metrics`.
fn promtool_check_metrics(exposition: &str) -> Result<()> {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("cannot run promtool (scripts/install-deps.sh installs the prometheus package)")?;
    child
        .stdin
        .take()
        .context("promtool stdin")?
        .write_all(exposition.as_bytes())?;
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let complaints: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if !complaints.is_empty() || !out.status.success() {
        bail!("promtool check metrics: {complaints:?}\n--- exposition ---\n{exposition}")
    }
    Ok(())
}

/// GETs `path` from 127.0.0.1:`port` until it answers 200 (at most `limit`).
fn get_ok(port: u16, path: &str, limit: Duration) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        match sidecar_support::get(port, path) {
            Ok((200, body)) => return Ok(body),
            other if Instant::now() > deadline => bail!("GET {path} on {port}: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Names of the metric families in an exposition (from its `# TYPE` lines).
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Every `kubeflake_*` name in a text, without a histogram's series suffix.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("kubeflake_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        names.insert(base.to_owned());
        rest = &tail[end..];
    }
    names
}

#[tokio::test]
async fn sidecar_and_operator_metrics_pass_promtool_and_cover_every_queried_metric() -> Result<()> {
    // A standalone sidecar that issued one ID (so the per-route series exist).
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let sidecar = Process::start(ProcessSpec {
        name: "alerts-standalone-sidecar".into(),
        program: workspace_binary("kubeflake-sidecar"),
        args: [
            "standalone",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--state-dir",
            &dir.path().to_string_lossy(),
        ]
        .iter()
        .map(OsString::from)
        .collect(),
        log: dir.path().join("sidecar.log"),
    })?;
    get_ok(port, "/readyz", Duration::from_secs(30))?;
    get_ok(port, "/id", Duration::from_secs(5))?;
    let sidecar_metrics = get_ok(port, "/metrics", Duration::from_secs(5))?;
    sidecar.kill();
    promtool_check_metrics(&sidecar_metrics).context("the sidecar's /metrics")?;

    // The operator, after it reconciled one sequence.
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("alerts-metrics").await?;
    let operator = Operator::start(cluster, &ns.name, "alerts")?;
    operator_support::create_sequence(&ns, "orders", serde_json::json!({})).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while operator.metric_with("kubeflake_operator_reconciles_total", r#"result="ok""#) < 1.0 {
        if Instant::now() > deadline {
            bail!(
                "the operator reconciled nothing in 60 s:\n{}",
                operator.process.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let operator_metrics = get_ok(operator.metrics_port, "/metrics", Duration::from_secs(5))?;
    promtool_check_metrics(&operator_metrics).context("the operator's /metrics")?;

    // Every kubeflake metric the alerts and the dashboard query is exported by one of them.
    // Labelled families appear once a series exists; the first series of these is a
    // refusal, which a healthy sidecar does not make, so they count as exported when the
    // sidecar registers them under that very name.
    // The chart's recording rules (deprecated names, recorded from their new ones) count
    // as exported: Prometheus has them.
    let first_series_is_a_refusal = [
        "kubeflake_refusals_total",
        "kubeflake_strict_peer_refusals_total",
    ];
    let registered = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sidecar/src/metrics.rs"
    ))?;
    for name in first_series_is_a_refusal {
        assert!(
            registered.contains(&format!("\"{name}\"")),
            "sidecar/src/metrics.rs registers no metric {name}"
        );
    }
    // The ID-space families are labelled per IdSpaceMembership: this operator has none, so
    // they count as exported when operator/src/metrics/hub.rs registers them under that very
    // name (every quoted `kubeflake_operator_id_space_*` name in it).
    let hub_metrics = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../operator/src/metrics/hub.rs"
    ))?;
    let per_membership: BTreeSet<String> = hub_metrics
        .split('"')
        .filter(|piece| piece.starts_with("kubeflake_operator_id_space_"))
        .filter(|piece| piece.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_owned)
        .collect();
    for name in [
        "kubeflake_operator_id_space_nearest_bound_seconds",
        "kubeflake_operator_id_space_ready_reason",
        "kubeflake_operator_id_space_blocks_held",
        "kubeflake_operator_id_space_hub_calls_total",
    ] {
        assert!(
            per_membership.contains(name),
            "operator/src/metrics/hub.rs registers no metric {name}"
        );
    }
    let rules = std::fs::read_to_string(format!("{CHART}/files/alerts.yaml"))?;
    let recorded = rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- record: "))
        .map(|name| name.trim().to_owned());
    let exported: BTreeSet<String> = families(&sidecar_metrics)
        .into_iter()
        .chain(families(&operator_metrics))
        .chain(first_series_is_a_refusal.map(str::to_owned))
        .chain(per_membership)
        .chain(recorded)
        .collect();
    for file in ["files/alerts.yaml", "dashboards/kubeflake.json"] {
        let text = std::fs::read_to_string(format!("{CHART}/{file}"))?;
        let queried = metric_names(&text);
        assert!(queried.len() >= 10, "{file}: only {queried:?}");
        let unknown: Vec<&String> = queried.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} queries metrics nobody exports: {unknown:?}"
        );
    }
    Ok(())
}
