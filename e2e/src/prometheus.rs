//! A real Prometheus for the e2e tests: Debian's `/usr/bin/prometheus` (package
//! `prometheus`, installed by `scripts/install-deps.sh`) on 127.0.0.1 with a free port, a
//! throw-away storage directory and a generated configuration: static scrape targets on
//! loopback, 1 s scrape and evaluation intervals, and the chart's alerting rules as a rule
//! file. A small client reads `/api/v1/query`, `/api/v1/alerts` and `/api/v1/rules`.
//!
//! ```no_run
//! # fn example(rules: &str) -> anyhow::Result<()> {
//! use kubeflake_e2e::prometheus::{Prometheus, Target};
//! let prom = Prometheus::start(&[Target::new("kubeflake-metrics", 8080)], Some(rules))?;
//! let up = prom.query("up")?;
//! # Ok(()) }
//! ```
//!
//! The process is stopped when the [`Prometheus`] is dropped (and killed by the kernel if
//! the test binary dies, see [`crate::process`]). Every wait is bounded.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::process::{Process, ProcessSpec};

/// Debian's Prometheus server.
pub const PROMETHEUS: &str = "/usr/bin/prometheus";

/// One static scrape target on 127.0.0.1.
#[derive(Clone, Debug)]
pub struct Target {
    /// The `job` label.
    pub job: String,
    pub port: u16,
    /// Extra target labels (e.g. `namespace` and `pod`, as Kubernetes discovery would set).
    pub labels: BTreeMap<String, String>,
}

impl Target {
    pub fn new(job: &str, port: u16) -> Target {
        Target {
            job: job.into(),
            port,
            labels: BTreeMap::new(),
        }
    }

    /// Adds a target label.
    pub fn label(mut self, name: &str, value: &str) -> Target {
        self.labels.insert(name.into(), value.into());
        self
    }
}

/// A running Prometheus server. Stopped on drop.
pub struct Prometheus {
    process: Process,
    pub port: u16,
    dir: tempfile::TempDir,
}

/// The configuration for `targets` (JSON, which is YAML): one scrape job per job name.
fn config(targets: &[Target], rule_file: Option<&Path>) -> Value {
    let mut jobs: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for t in targets {
        jobs.entry(&t.job).or_default().push(json!({
            "targets": [format!("127.0.0.1:{}", t.port)],
            "labels": t.labels,
        }));
    }
    json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_file.map(|f| vec![f.display().to_string()]).unwrap_or_default(),
        "scrape_configs": jobs.into_iter().map(|(job, static_configs)| json!({
            "job_name": job,
            "static_configs": static_configs,
        })).collect::<Vec<_>>(),
    })
}

impl Prometheus {
    /// Starts Prometheus scraping `targets`, with `rules` (the text of a Prometheus rule
    /// file, `groups: ...`) if given, and waits until it is ready (at most 60 s).
    pub fn start(targets: &[Target], rules: Option<&str>) -> Result<Prometheus> {
        if !Path::new(PROMETHEUS).exists() {
            bail!(
                "no {PROMETHEUS}: install the Debian package prometheus (scripts/install-deps.sh)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("kubeflake-prometheus-")
            .tempdir()?;
        let rule_file = match rules {
            Some(text) => {
                let file = dir.path().join("rules.yaml");
                std::fs::write(&file, text)?;
                Some(file)
            }
            None => None,
        };
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(
            &config_file,
            serde_json::to_string_pretty(&config(targets, rule_file.as_deref()))?,
        )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let args: Vec<OsString> = [
            format!("--config.file={}", config_file.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--log.level=warn".into(),
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        let process = Process::start(ProcessSpec {
            name: "prometheus".into(),
            program: PathBuf::from(PROMETHEUS),
            args,
            log: dir.path().join("prometheus.log"),
        })?;
        let prom = Prometheus { process, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = prom.get("/-/ready") {
                break;
            }
            if Instant::now() > deadline || prom.process.check_running().is_err() {
                bail!(
                    "Prometheus did not become ready in 60 s:\n{}",
                    prom.process.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(prom)
    }

    /// The storage, configuration, rule file and log directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines of Prometheus's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// One HTTP/1.0 GET (no chunked encoding, the server closes): status and body.
    pub fn get(&self, target: &str) -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(format!("GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        let out = String::from_utf8_lossy(&out);
        let status = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    /// GETs an API path and returns its `data` (fails unless `status` is `success`).
    pub fn api(&self, target: &str) -> Result<Value> {
        let (code, body) = self
            .get(target)
            .with_context(|| format!("GET {target} from Prometheus"))?;
        let answer: Value = serde_json::from_str(&body)
            .with_context(|| format!("GET {target}: HTTP {code}, not JSON: {body}"))?;
        if answer["status"] != "success" {
            bail!("GET {target}: HTTP {code}: {answer}");
        }
        Ok(answer["data"].clone())
    }

    /// An instant query: the result vector (a scalar answer becomes one element).
    pub fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(expr)))?;
        Ok(match &data["result"] {
            Value::Array(v) if data["resultType"] == "vector" || data["resultType"] == "matrix" => {
                v.clone()
            }
            Value::Null => Vec::new(),
            other => vec![other.clone()],
        })
    }

    /// Prometheus's own clock, in seconds since the epoch (the query `time()`).
    pub fn now(&self) -> Result<f64> {
        let data = self.api("/api/v1/query?query=time()")?;
        data["result"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("time(): {data}"))
    }

    /// Every active alert (pending or firing), as `/api/v1/alerts` returns them.
    pub fn alerts(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/alerts")?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The state (`pending` or `firing`) of every active alert named `name`.
    pub fn alert_states(&self, name: &str) -> Result<Vec<String>> {
        Ok(self
            .alerts()?
            .iter()
            .filter(|a| a["labels"]["alertname"] == name)
            .filter_map(|a| a["state"].as_str().map(str::to_owned))
            .collect())
    }

    /// Waits until an alert named `name` is firing (at most `limit`) and returns it; the
    /// failure message shows the last `/api/v1/alerts` answer.
    pub fn wait_firing(&self, name: &str, limit: Duration) -> Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let alerts = self.alerts()?;
            if let Some(a) = alerts
                .iter()
                .find(|a| a["labels"]["alertname"] == name && a["state"] == "firing")
            {
                return Ok(a.clone());
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} was not firing after {limit:?}; the last /api/v1/alerts answer:\n{}",
                    serde_json::to_string_pretty(&alerts)?
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until `expr` returns at least one series (at most `limit`) and returns them.
    pub fn wait_series(&self, expr: &str, limit: Duration) -> Result<Vec<Value>> {
        let deadline = Instant::now() + limit;
        loop {
            let result = self.query(expr)?;
            if !result.is_empty() {
                return Ok(result);
            }
            if Instant::now() > deadline {
                bail!(
                    "{expr} returned no series in {limit:?}; targets: {}",
                    self.api("/api/v1/targets?state=active")
                        .map(|t| t.to_string())
                        .unwrap_or_else(|e| e.to_string())
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until every rule group has been evaluated (completely) after Prometheus's
    /// time `since`, so that the alerts reflect the samples scraped before it. At most
    /// `limit`.
    pub fn wait_evaluated_after(&self, since: f64, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let data = self.api("/api/v1/rules")?;
            let groups = data["groups"].as_array().cloned().unwrap_or_default();
            if groups.is_empty() {
                bail!("Prometheus has no rule group loaded: {data}");
            }
            let done = groups.iter().all(|g| {
                g["lastEvaluation"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .is_some_and(|t| t.timestamp_millis() as f64 / 1000.0 > since)
            });
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the rules were not evaluated after {since} within {limit:?}: {data}");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The chart's PrometheusRule as a Prometheus rule file: renders
/// `templates/prometheusrule.yaml` with `helm template <release> --namespace <namespace>`,
/// the rule switched on and `sets` (`key=value`, e.g. thresholds or selectors), and takes
/// the lines under `spec:` one indent less (as `charts/kubeflake/tests/promtool.sh` does).
pub fn chart_rules(helm: &Path, release: &str, namespace: &str, sets: &[&str]) -> Result<String> {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/kubeflake");
    let mut cmd = std::process::Command::new(helm);
    cmd.args(["template", release, chart, "--namespace", namespace])
        .args(["--kube-version", "1.35.4"])
        .args(["--show-only", "templates/prometheusrule.yaml"])
        .args(["--set", "metrics.prometheusRule.enabled=true"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rendered = String::from_utf8(out.stdout)?;
    let rules: String = rendered
        .lines()
        .skip_while(|l| *l != "spec:")
        .skip(1)
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    if !rules.starts_with("groups:") {
        bail!("no rule groups under spec: in the rendered PrometheusRule:\n{rendered}");
    }
    Ok(rules)
}
