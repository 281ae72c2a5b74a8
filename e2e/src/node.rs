//! The test node: one real Kubernetes node on this machine, beside the control plane.
//!
//! kube-scheduler, containerd (runc, the CNI bridge plugin), kubelet, kube-proxy and CoreDNS
//! run as child processes of the test binary, like the control plane (see
//! [`crate::process`]). What outlives a process (the bridge, routes, firewall rules,
//! sysctls, mounts, cgroups, network namespaces, container shims) is made and removed by
//! `e2e/node/node.sh`. A watchdog started from that script tears the node down when the
//! test binary is gone, however it ended, and every start tears down what an earlier node
//! left first.
//!
//! There is one node per machine (it owns fixed paths, a bridge and port 6443), so only
//! one test binary may run a node at a time: `scripts/test.sh` runs the binaries that call
//! [`crate::Cluster::shared_with_node`] in one lane, one after another, beside a lane of the
//! binaries that need no node (and plain `cargo test` runs every binary one after another).
//!
//! Addresses (docs/e2e-node.md): the bridge `kubeflake0` is 10.244.0.1/24 and pods get
//! 10.244.0.10 and up; Services are 10.96.0.0/16, routed to the bridge. The API server,
//! the kubelet and CoreDNS bind 10.244.0.1; pods have no default route.
//!
//! One piece (over 400 lines): the node's processes in the order they start, each beside the
//! configuration file it reads (containerd, CNI, kubelet, kube-proxy, CoreDNS). Its names and
//! addresses are in [`crate::addresses`].

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::{Api, Client, Config};

use crate::addresses::{BRIDGE_IP, NODE_NAME, POD_CIDR, SERVICE_CIDR, registry_host};
use crate::blocking::run_on_private_runtime;
use crate::certs::Pki;
use crate::kubeconfig::write_kubeconfig;
use crate::process::{Process, ProcessSpec, STOP_GRACE, args};

/// Where the node keeps state that must be found again after a killed run.
pub const ROOT: &str = "/var/lib/kubeflake-node";
/// containerd's socket (for `ctr --address`).
pub const CONTAINERD_SOCKET: &str = "/run/kubeflake-node/containerd.sock";
/// The images every node has, built from this repository by `e2e/images/build.sh`.
pub const OPERATOR_IMAGE: &str = "localhost/kubeflake/operator:dev";
pub const SIDECAR_IMAGE: &str = "localhost/kubeflake/sidecar:dev";
pub const EXAMPLE_APP_IMAGE: &str = "localhost/kubeflake/example-app:dev";
pub const PAUSE_IMAGE: &str = "localhost/kubeflake/pause:dev";

/// How long the node may take to become Ready (a 2-core machine may be compiling).
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// The path of `e2e/node/node.sh`.
pub fn node_script() -> PathBuf {
    crate::bin_dir::repo_file("e2e/node/node.sh")
}

/// Runs `node.sh <verb>` and returns what it printed, whatever its exit status.
fn run_node_sh(verb: &str) -> Result<std::process::Output> {
    Command::new(node_script())
        .arg(verb)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run node.sh {verb}"))
}

/// Runs `node.sh <verb>` and fails with its output if it fails.
fn node_sh(verb: &str) -> Result<String> {
    let output = run_node_sh(verb)?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("node.sh {verb} failed ({}):\n{text}", output.status);
    }
    Ok(text)
}

/// What a node left on this machine (processes, mounts, cgroups, interfaces, routes,
/// firewall rules, paths), one item per line; empty when nothing is left.
pub fn leftovers() -> Result<String> {
    let output = run_node_sh("leftovers")?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The host network of a node: made before anything starts, removed when this value is
/// dropped, or by the watchdog when the test binary dies without dropping it.
#[derive(Debug)]
pub struct Network {
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
}

impl Network {
    /// Tears down whatever an earlier node left, installs the firewall rule, then the
    /// bridge and routes, and starts the watchdog.
    pub fn up(log_dir: &Path) -> Result<Network> {
        node_sh("net-up")?;
        let log = std::fs::File::create(log_dir.join("node-watchdog.log"))?;
        let mut command = Command::new(node_script());
        command
            .arg("watchdog")
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: setsid is async-signal-safe. Its own session: no signal meant for the
        // test binary's process group reaches it, and it has no parent-death signal, so
        // it outlives a killed test binary and cleans up after it.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = command.spawn().context("cannot start the node watchdog")?;
        let stdin = child.stdin.take().context("watchdog stdin")?;
        Ok(Network {
            watchdog: Mutex::new(Some((child, stdin))),
        })
    }

    /// Tears the node's host side down now (waits for the watchdog to finish it).
    pub fn down(&self) {
        let taken = self
            .watchdog
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((mut child, stdin)) = taken {
            drop(stdin);
            let deadline = Instant::now() + Duration::from_secs(90);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("kubeflake-e2e: the node watchdog did not finish within 90 s");
        }
    }

    /// `node.sh check-net`: the network rules in force, one line each, and whether all
    /// hold.
    pub fn check(&self) -> (bool, String) {
        match run_node_sh("check-net") {
            Ok(out) => (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            ),
            Err(e) => (false, format!("{e:#}")),
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.down();
    }
}

/// The node's processes. Dropping it stops them (the host side is [`Network`]'s).
#[derive(Debug)]
pub struct Node {
    // Stopped in this order: what uses the runtime before the runtime.
    dns: Process,
    proxy: Process,
    kubelet: Process,
    containerd: Process,
    scheduler: Process,
}

/// What [`Node::start`] needs from the control plane.
pub struct NodeInputs<'a> {
    pub dir: &'a Path,
    pub bin_dir: &'a Path,
    pub pki: &'a Pki,
    pub server: &'a str,
    /// The admin kubeconfig, for CoreDNS (it only reads).
    pub admin_kubeconfig: &'a Path,
    /// The image archives to load into containerd (`e2e/images/build.sh`).
    pub images: &'a [PathBuf],
    /// The CoreDNS binary (`e2e/dns/build.sh`).
    pub coredns: &'a Path,
}

impl Node {
    /// Starts the scheduler, containerd (and loads the images), the kubelet, kube-proxy
    /// and CoreDNS, and waits until the node is Ready.
    /// Blocking; the readiness wait runs on a private runtime, with a client made there
    /// (a `kube::Client` works only while the runtime it was made in runs).
    pub fn start(inputs: NodeInputs<'_>, config: &Config) -> Result<Node> {
        let NodeInputs {
            dir,
            bin_dir,
            pki,
            server,
            admin_kubeconfig,
            images,
            coredns,
        } = inputs;
        let root = Path::new(ROOT);
        std::fs::create_dir_all(root.join("cni"))?;
        let kubeconfig = |name: &str, cert: &Path, key: &Path, user: &str| -> Result<PathBuf> {
            let path = dir.join(format!("{name}.kubeconfig"));
            write_kubeconfig(&path, server, &pki.ca_cert, cert, key, user)?;
            Ok(path)
        };
        let scheduler_kubeconfig = kubeconfig(
            "scheduler",
            &pki.scheduler_cert,
            &pki.scheduler_key,
            "system:kube-scheduler",
        )?;
        let kubelet_kubeconfig = kubeconfig(
            "kubelet",
            &pki.kubelet_cert,
            &pki.kubelet_key,
            &format!("system:node:{NODE_NAME}"),
        )?;
        let proxy_kubeconfig = kubeconfig(
            "proxy",
            &pki.proxy_cert,
            &pki.proxy_key,
            "system:kube-proxy",
        )?;

        let scheduler = Process::start(ProcessSpec {
            name: "kube-scheduler".into(),
            program: bin_dir.join("kube-scheduler"),
            args: args(&[
                &format!("--kubeconfig={}", scheduler_kubeconfig.display()),
                &format!(
                    "--authentication-kubeconfig={}",
                    scheduler_kubeconfig.display()
                ),
                &format!(
                    "--authorization-kubeconfig={}",
                    scheduler_kubeconfig.display()
                ),
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                "--v=1",
            ]),
            log: dir.join("kube-scheduler.log"),
        })?;

        let containerd_config = root.join("containerd.toml");
        std::fs::write(&containerd_config, containerd_toml())?;
        write_registry_hosts()?;
        std::fs::write(root.join("cni/10-kubeflake.conflist"), cni_conflist())?;
        let containerd = Process::start(ProcessSpec {
            name: "containerd".into(),
            program: "containerd".into(),
            args: args(&[&format!("--config={}", containerd_config.display())]),
            log: dir.join("containerd.log"),
        })?;
        wait_for_socket(&containerd, Path::new(CONTAINERD_SOCKET))?;
        for image in images {
            load_image(image)?;
        }

        let kubelet_config = root.join("kubelet-config.yaml");
        std::fs::write(&kubelet_config, kubelet_yaml(&pki.ca_cert))?;
        let kubelet = Process::start(ProcessSpec {
            name: "kubelet".into(),
            program: bin_dir.join("kubelet"),
            args: args(&[
                &format!("--config={}", kubelet_config.display()),
                &format!("--kubeconfig={}", kubelet_kubeconfig.display()),
                &format!("--root-dir={ROOT}/kubelet"),
                &format!("--cert-dir={ROOT}/kubelet-pki"),
                &format!("--hostname-override={NODE_NAME}"),
                &format!("--node-ip={BRIDGE_IP}"),
                "--v=1",
            ]),
            log: dir.join("kubelet.log"),
        })?;

        let proxy_config = root.join("kube-proxy-config.yaml");
        std::fs::write(&proxy_config, kube_proxy_yaml(&proxy_kubeconfig))?;
        let proxy = Process::start(ProcessSpec {
            name: "kube-proxy".into(),
            program: bin_dir.join("kube-proxy"),
            args: args(&[&format!("--config={}", proxy_config.display()), "--v=1"]),
            log: dir.join("kube-proxy.log"),
        })?;

        let corefile = dir.join("Corefile");
        std::fs::write(&corefile, corefile_text(admin_kubeconfig))?;
        let dns = Process::start(ProcessSpec {
            name: "coredns".into(),
            program: coredns.to_path_buf(),
            args: args(&["-conf", &corefile.to_string_lossy()]),
            log: dir.join("coredns.log"),
        })?;

        let node = Node {
            dns,
            proxy,
            kubelet,
            containerd,
            scheduler,
        };
        run_on_private_runtime(async {
            let client = Client::try_from(config.clone())?;
            node.wait_ready(client).await
        })?;
        Ok(node)
    }

    async fn wait_ready(&self, client: Client) -> Result<()> {
        let nodes: Api<NodeObject> = Api::all(client);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            for process in self.processes() {
                process.check_running()?;
            }
            let asked = tokio::time::timeout(Duration::from_secs(10), nodes.get_opt(NODE_NAME));
            let last = match asked.await.unwrap_or_else(|_| Ok(None)) {
                Ok(Some(node)) => {
                    let ready = node
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .into_iter()
                        .find(|c| c.type_ == "Ready");
                    match ready {
                        Some(c) if c.status == "True" => return Ok(()),
                        Some(c) => format!("Ready={} {}", c.status, c.message.unwrap_or_default()),
                        None => "no Ready condition yet".to_owned(),
                    }
                }
                Ok(None) => "not registered yet".to_owned(),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                bail!(
                    "node {NODE_NAME} not Ready within {READY_TIMEOUT:?} ({last}); kubelet log:\n{}",
                    self.kubelet.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn processes(&self) -> [&Process; 5] {
        [
            &self.dns,
            &self.proxy,
            &self.kubelet,
            &self.containerd,
            &self.scheduler,
        ]
    }

    /// Name and process id of each node process.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes()
            .into_iter()
            .filter_map(|p| p.pid().map(|pid| (p.name().to_owned(), pid)))
            .collect()
    }

    /// Stops the node's processes (not the containers; [`Network::down`] removes those).
    pub fn stop(&self) {
        for process in self.processes() {
            process.stop(STOP_GRACE);
        }
    }
}

/// `ctr import` of one image archive into containerd's `k8s.io` namespace (the CRI's).
pub fn load_image(archive: &Path) -> Result<()> {
    let output = Command::new("ctr")
        .args(["--address", CONTAINERD_SOCKET, "--namespace", "k8s.io"])
        .args(["images", "import", "--no-unpack"])
        .arg(archive)
        .stdin(Stdio::null())
        .output()
        .context("cannot run ctr (containerd's client)")?;
    if !output.status.success() {
        bail!(
            "ctr images import {} failed: {}",
            archive.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn wait_for_socket(process: &Process, socket: &Path) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        process.check_running()?;
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not listen on {} within {READY_TIMEOUT:?}:\n{}",
                process.name(),
                socket.display(),
                process.log_tail(40)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `hosts.toml` of the test registry ([`crate::registry`]): plain HTTP, pull and
/// resolve. The only registry the node can reach (it has no route out).
fn write_registry_hosts() -> Result<()> {
    let host = registry_host();
    let dir = Path::new(ROOT).join("certs.d").join(&host);
    std::fs::create_dir_all(&dir)?;
    let text = format!(
        "server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    );
    std::fs::write(dir.join("hosts.toml"), text)
        .with_context(|| format!("cannot write {}/hosts.toml", dir.display()))
}

/// containerd: state under [`ROOT`] and `/run/kubeflake-node`, runc with cgroupfs, the
/// CNI bridge, a pause image built here, and the test registry's
/// `hosts.toml` under `certs.d`. `restrict_oom_score_adj`: this machine
/// withholds CAP_SYS_RESOURCE, so no process may lower its OOM score below containerd's.
fn containerd_toml() -> String {
    format!(
        r#"version = 2
root = "{ROOT}/containerd"
state = "/run/kubeflake-node/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{CONTAINERD_SOCKET}"

[ttrpc]
  address = "{CONTAINERD_SOCKET}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{ROOT}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{ROOT}/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{ROOT}/certs.d"
"#
    )
}

/// The CNI network: pods on the bridge, no masquerade, no default route; the only route
/// besides the pods' own range is the Services' range through the bridge address.
fn cni_conflist() -> String {
    let service_cidr = SERVICE_CIDR;
    format!(
        r#"{{
  "cniVersion": "1.0.0",
  "name": "kubeflake",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "kubeflake0",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "dataDir": "{ROOT}/cni-ipam",
        "ranges": [[{{ "subnet": "{POD_CIDR}", "rangeStart": "10.244.0.10", "gateway": "{BRIDGE_IP}" }}]],
        "routes": [{{ "dst": "{service_cidr}" }}]
      }}
    }}
  ]
}}
"#
    )
}

/// The kubelet: bound to the bridge address, cgroupfs under `/kubeflake` (cgroup v1, no
/// systemd here), x509 clients of the cluster CA only, no eviction for a nearly full disk
/// and no image garbage collection (the images cannot be pulled again).
fn kubelet_yaml(ca: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "{BRIDGE_IP}"
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: "{ca}"
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /kubeflake
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "unix://{CONTAINERD_SOCKET}"
clusterDNS: ["{BRIDGE_IP}"]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: "{ROOT}/pod-logs"
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
protectKernelDefaults: false
rotateCertificates: false
serverTLSBootstrap: false
"#,
        ca = ca.display()
    )
}

/// kube-proxy: iptables mode, the pods' range as the cluster's, NodePorts on the bridge
/// only, and conntrack sysctls left as they are.
fn kube_proxy_yaml(kubeconfig: &Path) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "{kubeconfig}"
mode: iptables
clusterCIDR: "{POD_CIDR}"
hostnameOverride: "{NODE_NAME}"
bindAddress: "{BRIDGE_IP}"
healthzBindAddress: "127.0.0.1:10256"
metricsBindAddress: "127.0.0.1:10249"
nodePortAddresses: ["{POD_CIDR}"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  masqueradeAll: false
  localhostNodePorts: false
"#,
        kubeconfig = kubeconfig.display()
    )
}

/// CoreDNS on the bridge address: cluster names only. No `.` zone and no `forward`, so a
/// name outside `cluster.local` is refused and nothing is ever asked elsewhere.
fn corefile_text(kubeconfig: &Path) -> String {
    format!(
        r#"cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {BRIDGE_IP}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} kubeflake-e2e
        pods insecure
    }}
    cache 5
}}
"#,
        kubeconfig = kubeconfig.display()
    )
}
