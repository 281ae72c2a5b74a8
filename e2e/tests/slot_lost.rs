//! Rule 3, second half, against the real API server: a holder that learns its slot was
//! given to another pod stops issuing *at once*, not when its fence runs out.
//!
//! The sequence's lease lasts an hour, so the fence the sidecar writes is an hour ahead of
//! the IDs it issues; the first half of rule 3 (stop at the fence) could not make it refuse
//! within this test. Only the "slot lost, stop now" path can. No operator runs: the test
//! writes the slot lease itself, as the operator would, so nothing else touches it.

mod operator_support;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, HOLDER_POD_ANNOTATION, SlotLease, lease_labels, lease_name,
};
use kubeflake_crds::{Id, Layout, Slot};
use kubeflake_e2e::Cluster;
use kubeflake_e2e::process::{Process, ProcessSpec};
use serde_json::json;

use operator_support::{create_pods, create_sequence, eventually, free_port, install_crd};

const SEQUENCE: &str = "lost";

/// A GET on the sidecar: status and body; `None` while it does not answer.
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let url = format!("http://127.0.0.1:{port}{path}");
    let answer = tokio::task::spawn_blocking(move || {
        let (host_port, target) = url.trim_start_matches("http://").split_once('/')?;
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(host_port).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET /{target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    });
    answer.await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule3_a_holder_that_learns_its_slot_was_given_away_stops_at_once_not_at_its_fence()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("slot-lost").await?;
    create_sequence(&ns, SEQUENCE, json!({"lease": {"durationSeconds": 3600}})).await?;
    let pod = create_pods(&ns, SEQUENCE, "holder", 1)
        .await?
        .pop()
        .context("one pod")?;
    let uid = pod.uid().context("a created pod has a UID")?;

    // Slot 0 goes to the pod, as the operator's assignment writes it.
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let name = lease_name(SEQUENCE, Slot(0));
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(lease_labels(SEQUENCE, Slot(0), Some(&uid))),
                    annotations: Some(BTreeMap::from([
                        (FENCE_ANNOTATION.to_string(), "0".to_string()),
                        (HOLDER_POD_ANNOTATION.to_string(), pod.name_any()),
                    ])),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(uid.clone()),
                    lease_duration_seconds: Some(3600),
                    lease_transitions: Some(1),
                    ..Default::default()
                }),
            },
        )
        .await?;

    // The pod's sidecar, renewing every second so that it hears of the change quickly.
    let port = free_port();
    // SAFETY: this test binary only ever points KUBECONFIG at its own cluster.
    unsafe { std::env::set_var("KUBECONFIG", cluster.kubeconfig()) };
    let args = [
        "cluster".to_string(),
        format!("--listen=127.0.0.1:{port}"),
        format!("--sequence={SEQUENCE}"),
        format!("--pod-name={}", pod.name_any()),
        format!("--pod-namespace={}", ns.name),
        format!("--pod-uid={uid}"),
        format!(
            "--fence-dir={}",
            cluster.dir().join("fence-slot-lost").display()
        ),
        "--renew-every-secs=1".to_string(),
        "--log-format=json".to_string(),
    ];
    let _sidecar = Process::start(ProcessSpec {
        name: "sidecar-slot-lost".into(),
        program: operator_support::workspace_binary("kubeflake-sidecar"),
        args: args.into_iter().map(OsString::from).collect(),
        log: cluster.dir().join("sidecar-slot-lost.log"),
    })?;
    let first: u64 = eventually(Duration::from_secs(60), "the sidecar serving", || async {
        Ok(match get(port, "/id").await {
            Some((200, body)) => body.trim().parse().ok(),
            _ => None,
        })
    })
    .await?;

    // The slot is given to another pod (a reclaim: CAS on what was read, fence kept).
    let mut lease = leases.get(&name).await?;
    let other = "uid-of-another-pod";
    lease.metadata.labels = Some(lease_labels(SEQUENCE, Slot(0), Some(other)));
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some(other.to_string());
        spec.lease_transitions = Some(2);
    }
    let given_away = leases
        .replace(&name, &PostParams::default(), &lease)
        .await?;
    let fence_then = SlotLease::parse(&given_away)?.fence;

    // It stops issuing at its next renewal, is no longer ready, and says why in an Event.
    let last_served = std::sync::Mutex::new(first);
    eventually(
        Duration::from_secs(30),
        "the old holder refusing",
        || async {
            Ok(match get(port, "/id").await {
                Some((200, body)) => {
                    if let Ok(id) = body.trim().parse() {
                        *last_served.lock().unwrap() = id;
                    }
                    None
                }
                Some((503, _)) => Some(()),
                _ => None,
            })
        },
    )
    .await?;
    let (ready, _) = get(port, "/readyz").await.context("readyz answers")?;
    ensure!(
        ready == 503,
        "a holder without a slot is not ready ({ready})"
    );
    eventually(
        Duration::from_secs(30),
        "a SlotLost Event on the pod",
        || async {
            let out = cluster
                .kubectl(&[
                    "-n",
                    &ns.name,
                    "get",
                    "events",
                    "--field-selector=reason=SlotLost",
                    "-o",
                    "name",
                ])
                .await?
                .ok()?;
            Ok((!out.trim().is_empty()).then_some(()))
        },
    )
    .await?;

    // Its fence was still about an hour ahead of the last ID it issued: it stopped because
    // it learned the slot was lost, not because the fence ran out.
    let layout = Layout::default();
    let last = *last_served.lock().unwrap();
    let last_tick = layout.decode(Id::new(last)?)?.tick.0;
    let minutes_left = fence_then.0.saturating_sub(last_tick) / 60_000;
    ensure!(
        minutes_left >= 30,
        "the fence ({}) should be far ahead of the last tick issued ({last_tick})",
        fence_then.0
    );
    // And the new holder's lease is untouched by the old one.
    let now = SlotLease::parse(&leases.get(&name).await?)?;
    ensure!(
        now.holder.as_deref() == Some(other),
        "new holder kept: {now:?}"
    );
    ensure!(
        now.fence == fence_then,
        "the old holder wrote nothing after losing the slot"
    );
    Ok(())
}
