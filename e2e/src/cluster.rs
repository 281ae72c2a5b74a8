//! A real control plane: etcd, kube-apiserver and kube-controller-manager on 127.0.0.1.
//!
//! [`Cluster::shared`] starts one per test binary, the first time a test asks for it;
//! tests isolate themselves with [`Cluster::namespace`]. A test that disturbs the whole
//! cluster (for example by restarting the API server) belongs in its own file under
//! `e2e/tests/`, which cargo builds into its own binary and so gets its own cluster.
//!
//! One piece (almost 600 lines): the [`Cluster`] type and its `impl` (start order, what a
//! test may ask of it, stop), which read best together. Each process's flags and readiness
//! waits are in [`crate::control_plane`]; change those there.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Config, ResourceExt};
use tokio::io::AsyncWriteExt;

use crate::addresses::{APISERVER_PORT, BRIDGE_IP, NODE_NAME};
use crate::bin_dir::{NODE, bin_dir, require, script_output_dir};
use crate::blocking::run_on_private_runtime;
use crate::certs::Pki;
use crate::control_plane::{
    apiserver_args, free_ports, image_archives, load_config, wait_apiserver_ready,
    wait_for_default_service_account, wait_for_port,
};
use crate::kubeconfig::write_kubeconfig;
use crate::node::{Network, Node, NodeInputs};
use crate::process::{
    CommandOutput, Process, ProcessSpec, STOP_GRACE, args, remove_dir_at_exit, remove_stale_dirs,
};

/// Set to keep the temporary state directory (logs, certificates, etcd data) after the
/// tests, for debugging.
pub const KEEP_DIR_ENV: &str = "KUBEFLAKE_E2E_KEEP_DIR";

/// Temporary state directories start with this; stale ones are removed on start.
const TEMP_DIR_PREFIX: &str = "kubeflake-e2e-";

/// How to start a [`Cluster`].
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Where certificates, kubeconfigs, etcd data and logs go. It must be empty, missing,
    /// or a previous cluster's directory (whose content is then deleted). Default: a new temporary directory, deleted when the cluster stops or the
    /// process exits (unless `KUBEFLAKE_E2E_KEEP_DIR` is set).
    pub dir: Option<PathBuf>,
    /// Also run a real node ([`crate::node`]): the API server then listens on the node's
    /// bridge address, and the node's images are built and loaded. Needs root.
    pub node: bool,
}

/// A running control plane. Dropping it stops every process (the shared one is stopped
/// by an exit hook instead, see [`crate::process`]).
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    remove_dir: bool,
    bin_dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    pki: Pki,
    config: Config,
    // Stopped in this order by Drop: dependents before what they depend on.
    node: Option<Node>,
    controller_manager: Process,
    apiserver: Process,
    etcd: Process,
    etcd_url: String,
    network: Option<Network>,
}

/// A namespace made for one test, and a client whose default namespace it is.
#[derive(Clone)]
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl Cluster {
    /// The control plane shared by all tests of this test binary, started on first use.
    ///
    /// Panics with the reason (including the failing component's log) if it cannot be
    /// built or started: e2e tests fail, they never skip.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
        Self::shared_in(&SHARED, ClusterOptions::default())
    }

    /// Like [`Cluster::shared`], with a real node ([`ClusterOptions::node`]). A test
    /// binary uses either this or [`Cluster::shared`], not both. `scripts/test.sh` finds
    /// the binaries that run the node by this name in their source (they take turns).
    pub fn shared_with_node() -> &'static Cluster {
        static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
        Self::shared_in(
            &SHARED,
            ClusterOptions {
                node: true,
                ..ClusterOptions::default()
            },
        )
    }

    /// Another control plane of this test binary (a hub, a second member), started in
    /// `cell` on first use and stopped by the exit hook, as the shared one is; `whose` names
    /// it in the error ("the hub", "member A").
    pub fn started_once(
        cell: &'static OnceLock<Result<Cluster, String>>,
        whose: &str,
    ) -> Result<&'static Cluster> {
        cell.get_or_init(|| Cluster::start(ClusterOptions::default()).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("{whose}'s control plane could not start: {e}"))
    }

    fn shared_in(
        cell: &'static OnceLock<Result<Cluster, String>>,
        options: ClusterOptions,
    ) -> &'static Cluster {
        // A panic while starting is kept as an error too, so that every test fails with
        // the first reason instead of each test trying (and failing) to start again.
        let cluster =
            cell.get_or_init(
                || match std::panic::catch_unwind(|| Cluster::start(options)) {
                    Ok(started) => started.map_err(|e| format!("{e:#}")),
                    Err(panic) => Err(panic_message(&panic)),
                },
            );
        match cluster {
            Ok(cluster) => cluster,
            Err(e) => panic!("the e2e control plane could not start: {e}"),
        }
    }

    /// Starts a new control plane and waits until it serves requests and its controllers
    /// run (the `default` service account exists). Blocking; safe to call from async code
    /// (the waiting runs on a private runtime in a helper thread).
    pub fn start(options: ClusterOptions) -> Result<Cluster> {
        let bin_dir = bin_dir()?;
        let (dir, temporary) = match options.dir {
            Some(dir) => {
                // Only ever delete a directory that a cluster made (it has owner.pid), so a
                // mistyped path cannot wipe someone's files.
                let ours = dir.join("owner.pid").is_file();
                let empty = dir
                    .read_dir()
                    .map(|mut d| d.next().is_none())
                    .unwrap_or(true);
                if !ours && !empty {
                    bail!(
                        "{} is not empty and not a kubeflake cluster directory",
                        dir.display()
                    );
                }
                if dir.exists() {
                    std::fs::remove_dir_all(&dir)
                        .with_context(|| format!("cannot clear {}", dir.display()))?;
                }
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                (dir, false)
            }
            None => {
                remove_stale_dirs(TEMP_DIR_PREFIX);
                let dir = tempfile::Builder::new()
                    .prefix(TEMP_DIR_PREFIX)
                    .tempdir()
                    .context("cannot create a temporary directory")?
                    .keep();
                (dir, true)
            }
        };
        let dir = dir.canonicalize()?;
        std::fs::write(dir.join("owner.pid"), std::process::id().to_string())?;
        let remove_dir = temporary && std::env::var_os(KEEP_DIR_ENV).is_none();
        if remove_dir {
            remove_dir_at_exit(dir.clone());
        }
        eprintln!(
            "kubeflake-e2e: starting a control plane in {}",
            dir.display()
        );
        let started = Instant::now();
        let cluster = Self::start_in(dir.clone(), bin_dir, remove_dir, options.node)
            .with_context(|| format!("control plane in {} (logs are there)", dir.display()))?;
        eprintln!(
            "kubeflake-e2e: control plane ready in {:.1}s at {}",
            started.elapsed().as_secs_f64(),
            cluster.server
        );
        Ok(cluster)
    }

    fn start_in(
        dir: PathBuf,
        bin_dir: PathBuf,
        remove_dir: bool,
        with_node: bool,
    ) -> Result<Cluster> {
        // The node's firewall rule and bridge come first: the API server binds the bridge.
        let network = if with_node {
            require(&bin_dir, &NODE)?;
            Some(Network::up(&dir)?)
        } else {
            None
        };
        let pki = Pki::generate(&dir)?;
        let [etcd_client, etcd_peer, free_apiserver_port, kcm_port] = free_ports()?;
        let (apiserver_ip, apiserver_port) = if with_node {
            (BRIDGE_IP, APISERVER_PORT)
        } else {
            (Ipv4Addr::LOCALHOST, free_apiserver_port)
        };
        let server = format!("https://{apiserver_ip}:{apiserver_port}");

        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(
            &kubeconfig,
            &server,
            &pki.ca_cert,
            &pki.admin_cert,
            &pki.admin_key,
            "admin",
        )?;
        let kcm_kubeconfig = dir.join("controller-manager.kubeconfig");
        write_kubeconfig(
            &kcm_kubeconfig,
            &server,
            &pki.ca_cert,
            &pki.controller_manager_cert,
            &pki.controller_manager_key,
            "system:kube-controller-manager",
        )?;

        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        let etcd = Process::start(ProcessSpec {
            name: "etcd".into(),
            program: bin_dir.join("etcd"),
            args: args(&[
                "--name=default",
                &format!("--data-dir={}", dir.join("etcd-data").display()),
                &format!("--listen-client-urls={etcd_url}"),
                &format!("--advertise-client-urls={etcd_url}"),
                &format!("--listen-peer-urls={peer_url}"),
                &format!("--initial-advertise-peer-urls={peer_url}"),
                &format!("--initial-cluster=default={peer_url}"),
                // Test data: durability does not matter, speed does.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ]),
            log: dir.join("etcd.log"),
        })?;
        wait_for_port(&etcd, etcd_client)?;

        let apiserver = Process::start(ProcessSpec {
            name: "kube-apiserver".into(),
            program: bin_dir.join("kube-apiserver"),
            args: apiserver_args(
                &dir,
                &pki,
                &etcd_url,
                apiserver_ip,
                apiserver_port,
                with_node,
            ),
            log: dir.join("kube-apiserver.log"),
        })?;
        let config = run_on_private_runtime(async {
            let config = load_config(&kubeconfig).await?;
            wait_apiserver_ready(&apiserver, &config).await?;
            anyhow::Ok(config)
        })?;

        let controller_manager = Process::start(ProcessSpec {
            name: "kube-controller-manager".into(),
            program: bin_dir.join("kube-controller-manager"),
            args: args(&[
                &format!("--kubeconfig={}", kcm_kubeconfig.display()),
                &format!("--authentication-kubeconfig={}", kcm_kubeconfig.display()),
                &format!("--authorization-kubeconfig={}", kcm_kubeconfig.display()),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={kcm_port}"),
                &format!(
                    "--cert-dir={}",
                    dir.join("controller-manager-serving").display()
                ),
                "--controllers=*",
                "--use-service-account-credentials=true",
                &format!("--root-ca-file={}", pki.ca_cert.display()),
                &format!(
                    "--service-account-private-key-file={}",
                    pki.service_account_key.display()
                ),
                &format!("--cluster-signing-cert-file={}", pki.ca_cert.display()),
                &format!("--cluster-signing-key-file={}", pki.ca_key.display()),
                "--leader-elect=false",
                "--v=1",
            ]),
            log: dir.join("kube-controller-manager.log"),
        })?;
        run_on_private_runtime(async {
            let client = Client::try_from(config.clone())?;
            wait_for_default_service_account(&controller_manager, &client, "default").await
        })?;

        let node = if with_node {
            let started = Instant::now();
            let images = image_archives()?;
            let coredns =
                script_output_dir(&crate::bin_dir::repo_file("e2e/dns/build.sh"))?.join("coredns");
            let node = Node::start(
                NodeInputs {
                    dir: &dir,
                    bin_dir: &bin_dir,
                    pki: &pki,
                    server: &server,
                    admin_kubeconfig: &kubeconfig,
                    images: &images,
                    coredns: &coredns,
                },
                &config,
            )?;
            eprintln!(
                "kubeflake-e2e: node {} Ready in {:.1}s",
                NODE_NAME,
                started.elapsed().as_secs_f64()
            );
            Some(node)
        } else {
            None
        };

        Ok(Cluster {
            dir,
            remove_dir,
            bin_dir,
            kubeconfig,
            server,
            pki,
            config,
            node,
            controller_manager,
            apiserver,
            etcd,
            etcd_url,
            network,
        })
    }

    /// Whether this cluster has a real node.
    pub fn has_node(&self) -> bool {
        self.node.is_some()
    }

    /// The node's host network (its rules can be checked), if it has a node.
    pub fn network(&self) -> Option<&Network> {
        self.network.as_ref()
    }

    /// The admin kubeconfig (user in group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// etcd's client URL (`http://127.0.0.1:<port>`, no TLS): its `/metrics` are there.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The state directory: certificates, kubeconfigs, etcd data and one log per process.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the control-plane binaries (and `kubectl`, `helm`) are.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    pub fn kubectl_path(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// helm: `KUBEFLAKE_HELM` if set, else the bin directory's ([`crate::bin_dir::helm_in`]).
    pub fn helm_path(&self) -> PathBuf {
        crate::bin_dir::helm_in(&self.bin_dir)
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// Admin client configuration, for building clients with other settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A new admin client. Call it inside the test's tokio runtime: a `kube::Client`
    /// belongs to the runtime it was created in, which is why the shared cluster hands out
    /// fresh clients instead of keeping one.
    pub fn client(&self) -> Result<Client> {
        Ok(Client::try_from(self.config.clone())?)
    }

    /// Waits until the CustomResourceDefinition `name` is Established (its kind is served).
    ///
    /// Not `kubectl wait --for=condition=Established`: right after a create, while the CRD
    /// has no conditions yet, kubectl fails at once (".status.conditions accessor error")
    /// instead of waiting. That failed CI once.
    pub async fn wait_crd_established(&self, name: &str) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client()?);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let conditions = api
                .get(name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("CRD {name} not Established after 60 s: {conditions:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates a namespace named `<prefix>-<random>`, waits for its `default` service
    /// account (so pods can be created in it), and returns it with a client whose default
    /// namespace it is.
    pub async fn namespace(&self, prefix: &str) -> Result<TestNamespace> {
        let client = self.client()?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let request = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", names::dns_label_prefix(prefix))),
                labels: Some([("kubeflake.io/e2e".to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let name = namespaces
            .create(&PostParams::default(), &request)
            .await
            .with_context(|| format!("cannot create a namespace for {prefix}"))?
            .name_any();
        wait_for_default_service_account(&self.controller_manager, &client, &name).await?;
        let mut config = self.config.clone();
        config.default_namespace = name.clone();
        Ok(TestNamespace {
            name,
            client: Client::try_from(config)?,
        })
    }

    /// A `kubectl` command using the admin kubeconfig (and a discovery cache private to
    /// this cluster, so a previous cluster on the same port cannot confuse it).
    pub fn kubectl_command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(self.kubectl_path());
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!(
                "--cache-dir={}",
                self.dir.join("kubectl-cache").display()
            ))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs `kubectl <args>` and captures its output (a failing kubectl is not an error
    /// here; use [`CommandOutput::ok`]).
    pub async fn kubectl(&self, args: &[&str]) -> Result<CommandOutput> {
        self.kubectl_with_stdin(args, None).await
    }

    /// Runs `kubectl <args>` with `stdin` as its standard input, e.g. for `apply -f -`.
    pub async fn kubectl_with_stdin(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<CommandOutput> {
        let mut command = self.kubectl_command();
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot run kubectl {}", args.join(" ")))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().context("kubectl stdin")?;
            pipe.write_all(input.as_bytes()).await?;
            drop(pipe);
        }
        let output = child.wait_with_output().await?;
        Ok(CommandOutput {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// `kill -9` of the API server. etcd and the controller manager keep running.
    pub fn kill_apiserver(&self) {
        self.apiserver.kill();
    }

    /// Starts the API server again (same flags, port and certificates) if it is not
    /// running, and waits until it is ready.
    pub async fn start_apiserver(&self) -> Result<()> {
        if self.apiserver.pid().is_none() || self.apiserver.exit_status().is_some() {
            self.apiserver.restart()?;
        }
        wait_apiserver_ready(&self.apiserver, &self.config).await
    }

    /// `kill -9` of the API server, then start it again and wait until it is ready.
    pub async fn restart_apiserver(&self) -> Result<()> {
        self.apiserver.restart()?;
        wait_apiserver_ready(&self.apiserver, &self.config).await
    }

    /// Name and process id of every component process currently running.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let mut pids: Vec<(String, u32)> = [&self.etcd, &self.apiserver, &self.controller_manager]
            .into_iter()
            .filter_map(|p| p.pid().map(|pid| (p.name().to_owned(), pid)))
            .collect();
        if let Some(node) = &self.node {
            pids.extend(node.pids());
        }
        pids
    }

    /// Stops every process (the node's, controller manager, API server, then etcd), then
    /// removes the node's host side (containers, mounts, bridge, rules).
    pub fn stop(&self) {
        if let Some(node) = &self.node {
            node.stop();
        }
        self.controller_manager.stop(STOP_GRACE);
        self.apiserver.stop(STOP_GRACE);
        self.etcd.stop(STOP_GRACE);
        if let Some(network) = &self.network {
            network.down();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".to_owned())
}

mod names;
pub mod snapshot;
#[cfg(test)]
mod tests;
