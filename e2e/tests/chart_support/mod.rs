//! Helpers for the Helm chart e2e tests: run `helm` against the test cluster, install a
//! release, and run the operator as a local process with exactly the arguments and the
//! service-account identity the chart's Deployment gives it (there is no kubelet to run
//! the Deployment's pods).
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use kubeflake_e2e::process::{Process, ProcessSpec};
use kubeflake_e2e::{Cluster, CommandOutput};

/// The chart under test, in this checkout.
pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/kubeflake");

/// The Kubernetes version `helm template` renders for (that of the test control plane).
pub const KUBE_VERSION: &str = "1.35.4";

/// Runs `helm <args>` against the test cluster's admin kubeconfig, with helm's cache,
/// config and data kept in the cluster's directory (never the user's home).
pub async fn helm(cluster: &Cluster, args: &[&str]) -> Result<CommandOutput> {
    helm_with_stdin(cluster, args, None).await
}

pub async fn helm_with_stdin(
    cluster: &Cluster,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<CommandOutput> {
    use tokio::io::AsyncWriteExt;
    let home = cluster.dir().join("helm");
    let mut command = tokio::process::Command::new(cluster.helm_path());
    command
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run helm {}", args.join(" ")))?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().context("helm stdin")?;
        pipe.write_all(input.as_bytes()).await?;
    }
    let output = child.wait_with_output().await?;
    Ok(CommandOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// `--set` pairs as helm arguments.
pub fn set_args(values: &[&str]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| ["--set".to_owned(), (*v).to_owned()])
        .collect()
}

/// `helm install <release> <chart> -n <namespace>` with extra `--set` values. No `--wait`:
/// without a kubelet the operator's pods never run.
pub async fn install(
    cluster: &Cluster,
    release: &str,
    namespace: &str,
    values: &[&str],
) -> Result<String> {
    let mut args = vec!["install", release, CHART, "--namespace", namespace];
    let sets = set_args(values);
    args.extend(sets.iter().map(String::as_str));
    helm(cluster, &args).await?.ok()
}

/// The full name the chart gives a release's objects (release name + "-kubeflake").
pub fn fullname(release: &str) -> String {
    if release.contains("kubeflake") {
        release.to_owned()
    } else {
        format!("{release}-kubeflake")
    }
}

/// A kubeconfig that authenticates with a fresh token of a service account (TokenRequest
/// API), so a local process acts with exactly that account's RBAC rights.
pub async fn service_account_kubeconfig(
    cluster: &Cluster,
    namespace: &str,
    account: &str,
) -> Result<PathBuf> {
    let token = cluster
        .kubectl(&["create", "token", account, "-n", namespace, "--duration=2h"])
        .await?
        .ok()?;
    let path = cluster
        .dir()
        .join(format!("sa-{namespace}-{account}.kubeconfig"));
    kubeflake_e2e::kubeconfig::write_token_kubeconfig(
        &path,
        cluster.server(),
        &cluster.pki().ca_cert,
        account,
        &token,
        namespace,
    )?;
    Ok(path)
}

/// The operator container's arguments from the installed Deployment.
pub async fn deployment_args(
    cluster: &Cluster,
    namespace: &str,
    release: &str,
) -> Result<Vec<String>> {
    let json = cluster
        .kubectl(&[
            "get",
            "deployment",
            &fullname(release),
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ])
        .await?
        .ok()?;
    serde_json::from_str(&json).with_context(|| format!("operator args: {json}"))
}

/// The operator as the chart runs it: the Deployment's own arguments (listen addresses
/// moved from 0.0.0.0 to free ports on 127.0.0.1) and the chart's service account.
pub struct ChartOperator {
    pub process: Process,
    pub metrics_port: u16,
    pub webhook_port: u16,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl ChartOperator {
    pub async fn start(cluster: &Cluster, namespace: &str, release: &str) -> Result<ChartOperator> {
        let metrics_port = free_port()?;
        let webhook_port = free_port()?;
        let args = deployment_args(cluster, namespace, release).await?;
        let mut rewritten = Vec::new();
        for arg in args {
            let arg = match arg.split_once('=') {
                Some(("--metrics-addr", _)) => format!("--metrics-addr=127.0.0.1:{metrics_port}"),
                Some(("--webhook-addr", _)) => format!("--webhook-addr=127.0.0.1:{webhook_port}"),
                Some((_, value)) if value.starts_with("0.0.0.0") => {
                    bail!(
                        "the chart passes {arg}: a listen address this test does not know how to move"
                    )
                }
                _ => arg,
            };
            rewritten.push(arg);
        }
        let kubeconfig = service_account_kubeconfig(cluster, namespace, &fullname(release)).await?;
        let binary = crate::operator_support::workspace_binary("kubeflake-operator");
        // The Deployment's environment: its pod name and namespace from the downward API.
        let mut argv: Vec<OsString> = vec![
            format!("KUBECONFIG={}", kubeconfig.display()).into(),
            format!("POD_NAME={}-0", fullname(release)).into(),
            format!("POD_NAMESPACE={namespace}").into(),
            "RUST_LOG=info".into(),
            binary.into(),
        ];
        argv.extend(rewritten.into_iter().map(OsString::from));
        let process = Process::start(ProcessSpec {
            name: format!("chart-operator-{release}"),
            program: PathBuf::from("/usr/bin/env"),
            args: argv,
            log: cluster
                .dir()
                .join(format!("chart-operator-{namespace}-{release}.log")),
        })?;
        Ok(ChartOperator {
            process,
            metrics_port,
            webhook_port,
        })
    }

    /// Everything the operator logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.process.spec().log).unwrap_or_default()
    }

    /// Log lines reporting an authorization failure (HTTP 403 from the API server).
    pub fn forbidden_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for ChartOperator {
    fn drop(&mut self) {
        self.process.kill();
    }
}
