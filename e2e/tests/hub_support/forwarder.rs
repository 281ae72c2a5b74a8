//! A TCP forwarder on loopback that the test can switch off: a member's hub kubeconfig
//! names it instead of the hub, so the test can cut that member off from the hub (every
//! connection dropped, new ones closed at once) while the hub keeps serving the others,
//! and switch it back on. Bytes pass through untouched (TLS ends at the hub, whose
//! certificate names 127.0.0.1 and the node's bridge address). On the bridge address
//! ([`Forwarder::start_on`]) it is how pods on the test node reach a second control plane:
//! a pod has no route to this machine's loopback, only to the bridge.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Forwarder {
    pub ip: IpAddr,
    pub port: u16,
    on: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    /// Forwards 127.0.0.1:<port> to `server` (`https://127.0.0.1:<port>`), switched on.
    pub async fn start(server: &str) -> Result<Forwarder> {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST), server).await
    }

    /// Forwards `ip`:<port> to `server`, switched on. `ip` is an address of this machine
    /// (loopback, or the test node's bridge, which no traffic leaves the machine from).
    pub async fn start_on(ip: IpAddr, server: &str) -> Result<Forwarder> {
        let target = server
            .strip_prefix("https://")
            .with_context(|| format!("the hub's address {server} is not https://host:port"))?
            .to_string();
        let listener = TcpListener::bind((ip, 0))
            .await
            .with_context(|| format!("cannot listen on {ip}"))?;
        let port = listener.local_addr()?.port();
        let (on, rx) = watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                if !*rx.borrow() {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = rx.wait_for(|on| !*on) => {}
                    }
                });
            }
        });
        Ok(Forwarder { port, ip, on, task })
    }

    /// The address a kubeconfig names to go through this forwarder.
    pub fn server(&self) -> String {
        format!("https://{}:{}", self.ip, self.port)
    }

    /// Off: every open connection is dropped and new ones are closed at once. On: passes.
    pub fn switch(&self, on: bool) {
        self.on.send_replace(on);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        self.on.send_replace(false);
    }
}
