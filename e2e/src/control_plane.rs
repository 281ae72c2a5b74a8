//! How each control-plane process is started and waited for: the API server's flags, free
//! ports, readiness polls. [`crate::cluster`] runs these in order; change a flag or a
//! readiness wait here.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::addresses::SERVICE_CIDR;
use crate::bin_dir::script_output_dir;
use crate::certs::Pki;
use crate::process::{Process, args};

/// How long each component may take to become ready. Generous: a 2-core CI machine may
/// be compiling Rust at the same time.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) fn apiserver_args(
    dir: &Path,
    pki: &Pki,
    etcd_url: &str,
    ip: Ipv4Addr,
    port: u16,
    with_node: bool,
) -> Vec<OsString> {
    let mut list = args(&[
        &format!("--etcd-servers={etcd_url}"),
        &format!("--bind-address={ip}"),
        &format!("--advertise-address={ip}"),
        &format!("--secure-port={port}"),
        &format!("--cert-dir={}", dir.join("apiserver-serving").display()),
        &format!("--tls-cert-file={}", pki.serving_cert.display()),
        &format!("--tls-private-key-file={}", pki.serving_key.display()),
        &format!("--client-ca-file={}", pki.ca_cert.display()),
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,\
DefaultTolerationSeconds,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,\
ValidatingAdmissionPolicy,ResourceQuota",
        &format!(
            "--service-account-key-file={}",
            pki.service_account_pub.display()
        ),
        &format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key.display()
        ),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        // Without a node only an allocation range for Service objects; with one, kube-proxy
        // makes it real on the bridge.
        &format!("--service-cluster-ip-range={}", SERVICE_CIDR),
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]);
    if with_node {
        list.extend(args(&[
            // The kubelet is reached at the node's InternalIP, never by resolving its
            // name (which would ask this machine's resolver, off the machine).
            "--kubelet-preferred-address-types=InternalIP",
            &format!("--kubelet-client-certificate={}", pki.admin_cert.display()),
            &format!("--kubelet-client-key={}", pki.admin_key.display()),
        ]));
    } else {
        // The `kubernetes` Service's endpoints cannot be a loopback address.
        list.extend(args(&["--endpoint-reconciler-type=none"]));
    }
    list
}

/// The image archives `e2e/images/build.sh` built (operator, sidecar, example app, pause).
pub(crate) fn image_archives() -> Result<Vec<PathBuf>> {
    let dir = script_output_dir(&crate::bin_dir::repo_file("e2e/images/build.sh"))?;
    let mut archives: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tar"))
        .collect();
    archives.sort();
    if archives.len() < 4 {
        bail!(
            "{} holds {} image archives, expected 4",
            dir.display(),
            archives.len()
        );
    }
    Ok(archives)
}

/// Free ports on 127.0.0.1, found by binding port 0. All are held until every one is
/// chosen, so they differ; another process could still grab one before our child binds
/// it, which is unlikely enough for tests.
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot find free ports on 127.0.0.1")?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

pub(crate) fn wait_for_port(process: &Process, port: u16) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        process.check_running()?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not listen on {addr} within {READY_TIMEOUT:?}:\n{}",
                process.name(),
                process.log_tail(40)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) async fn load_config(kubeconfig: &Path) -> Result<Config> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)?;
    Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// Polls `/readyz` until it answers `ok`.
pub(crate) async fn wait_apiserver_ready(apiserver: &Process, config: &Config) -> Result<()> {
    let client = Client::try_from(config.clone())?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        apiserver.check_running()?;
        let request = http::Request::get("/readyz").body(Vec::new())?;
        let last = match client.request_text(request).await {
            Ok(body) if body.trim() == "ok" => return Ok(()),
            Ok(body) => body,
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            bail!(
                "kube-apiserver not ready within {READY_TIMEOUT:?}; last answer: {last}\n{}",
                apiserver.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The service-account controller creates `default` in every namespace: its presence
/// shows the controller manager is working, and pods need it.
pub(crate) async fn wait_for_default_service_account(
    controller_manager: &Process,
    client: &Client,
    namespace: &str,
) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        controller_manager.check_running()?;
        let last = match accounts.get_opt("default").await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => "not found".to_owned(),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            bail!(
                "no service account {namespace}/default within {READY_TIMEOUT:?} ({last}); is kube-controller-manager working?\n{}",
                controller_manager.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
