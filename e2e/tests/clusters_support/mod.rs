//! The members of the three-control-plane suite (e2e/tests/id_space_clusters.rs): per
//! control plane an IdSequence, its own operator process, the hub Secret and the
//! IdSpaceMembership, pods (API objects) with real cluster-mode sidecars issuing into
//! Collectors; the control planes the members run on; the hub's administrator's edits of
//! the registry; and the checker of every ID across clusters.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::membership::IdSpaceMembershipStatus;
use kubeflake_crds::id_space::{IdSpaceMembership, RegistryRecord};
use kubeflake_crds::sequence::SequenceParams;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_crds::{Id, Layout, Tick};
use kubeflake_e2e::{Cluster, ClusterOptions, TestNamespace};
use serde_json::json;

use crate::hub_support::{Hub, Joined, SPACE, condition, join_member};
use crate::operator_support::{Operator, all_assigned, create_pods, eventually};
use crate::sidecar_support::{Collected, Collector, Sidecar, get};

pub mod blue_green;
pub mod moving_client;

pub use crate::hub_support::{HUB_SECRET, SEQUENCE};
/// The shortest slot lease: a slot is assignable only while its block's bound is at least
/// a lease away, and the bounds here are 60-70 s ahead.
pub const LEASE_SECONDS: u64 = 15;
pub const LIMIT: Duration = Duration::from_secs(60);

/// The three member control planes besides the shared one (the hub): A, B and blue,
/// started once per test binary, side by side; stopped by the exit hook, as the shared one
/// is.
pub fn member_clusters() -> Result<&'static [Cluster; 3]> {
    static MEMBERS: OnceLock<Result<[Cluster; 3], String>> = OnceLock::new();
    let started = MEMBERS.get_or_init(|| {
        std::thread::scope(|s| {
            let a = s.spawn(|| Cluster::start(ClusterOptions::default()));
            let b = s.spawn(|| Cluster::start(ClusterOptions::default()));
            let blue = s.spawn(|| Cluster::start(ClusterOptions::default()));
            let join = |h: std::thread::ScopedJoinHandle<'_, Result<Cluster>>| {
                h.join()
                    .map_err(|_| "starting it panicked".to_string())?
                    .map_err(|e| format!("{e:#}"))
            };
            let (a, b, blue) = (join(a), join(b), join(blue));
            Ok([a?, b?, blue?])
        })
    });
    started
        .as_ref()
        .map_err(|e| anyhow!("a member control plane could not start: {e}"))
}

/// The tick of the sequence's timebase `ahead` from now (negative: behind).
pub fn tick_in(params: &SequenceParams, ahead_ms: i64) -> Result<Tick> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    params
        .timebase
        .tick_at((now + ahead_ms) as u64)
        .context("now is inside the sequence's timebase")
}

/// One pod with its sidecar and the Collector calling it.
pub struct Serving {
    pub pod: String,
    pub slot: u32,
    pub sidecar: Sidecar,
    pub collector: Collector,
}

/// What one pod's sidecar issued, and whose it was.
pub struct Issued {
    pub member: &'static str,
    pub pod: String,
    pub data: Collected,
}

/// One member control plane's side of the space.
pub struct Member {
    pub name: &'static str,
    pub cluster: &'static Cluster,
    /// The cluster ID the hub knows it by (its kube-system namespace's UID).
    pub id: String,
    pub ns: TestNamespace,
    pub operator: Operator,
    pub params: SequenceParams,
    pub serving: Vec<Serving>,
    pub issued: Vec<Issued>,
}

impl Member {
    /// The CRDs, an IdSequence (`{}` but for a short lease) with its own operator, the hub
    /// Secret holding member `name`'s kubeconfig (through `server` when given) and the
    /// IdSpaceMembership joining the hub's space.
    pub async fn join(
        cluster: &'static Cluster,
        name: &'static str,
        hub: &Hub,
        server: Option<&str>,
    ) -> Result<Member> {
        let spec = json!({"lease": {"durationSeconds": LEASE_SECONDS}});
        let prefix = format!("member-{name}");
        let Joined {
            ns,
            sequence,
            operator,
        } = join_member(cluster, &prefix, name, hub, server, spec).await?;
        let params = sequence.spec.params()?;
        let id = Api::<Namespace>::all(cluster.client()?)
            .get("kube-system")
            .await?
            .metadata
            .uid
            .context("kube-system has a UID")?;
        Ok(Member {
            name,
            cluster,
            id,
            ns,
            operator,
            params,
            serving: Vec::new(),
            issued: Vec::new(),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.params.layout
    }

    pub fn log(&self) -> String {
        format!(
            "operator of {}:\n{}",
            self.name,
            self.operator.process.log_tail(40)
        )
    }

    pub async fn status(&self) -> Result<IdSpaceMembership> {
        Ok(
            Api::<IdSpaceMembership>::namespaced(self.ns.client.clone(), &self.ns.name)
                .get(SEQUENCE)
                .await?,
        )
    }

    /// Waits until the membership is `Ready=<status> <reason>`.
    pub async fn ready_is(&self, status: &str, reason: &str, limit: Duration) -> Result<()> {
        crate::hub_support::ready_is(&self.ns, SEQUENCE, status, reason, limit)
            .await
            .map(drop)
            .with_context(|| self.log())
    }

    /// Waits until the copy holds `blocks` grants, joined; returns the copy.
    pub async fn holds(&self, blocks: usize) -> Result<IdSpaceMembershipStatus> {
        eventually(
            LIMIT,
            &format!("{}: joined with {blocks} blocks", self.name),
            || async {
                let m = self.status().await?;
                let joined =
                    condition(&m, "Ready").is_some_and(|(s, r, _)| s == "True" && r == "Joined");
                Ok(m.status.filter(|s| joined && s.grants.len() == blocks))
            },
        )
        .await
        .with_context(|| self.log())
    }

    /// `count` pods named `prefix-<i>`; waits until each holds a slot; returns the slots.
    pub async fn pods(
        &self,
        prefix: &str,
        count: usize,
    ) -> Result<Vec<(k8s_openapi::api::core::v1::Pod, u32)>> {
        let pods = create_pods(&self.ns, SEQUENCE, prefix, count).await?;
        let uids: Vec<String> = pods.iter().filter_map(|p| p.uid()).collect();
        let slots = all_assigned(&self.ns, SEQUENCE, &uids, LIMIT)
            .await
            .with_context(|| self.log())?;
        pods.into_iter()
            .map(|p| {
                let slot = slots.get(&p.uid().unwrap_or_default()).copied();
                Ok((p, slot.context("an assigned pod has a slot")?))
            })
            .collect()
    }

    /// Sidecars for `pods`, ready, each called by a Collector.
    pub async fn serve(&mut self, pods: &[(k8s_openapi::api::core::v1::Pod, u32)]) -> Result<()> {
        let mut started = Vec::new();
        for (pod, slot) in pods {
            let kubeconfig = Some(self.cluster.kubeconfig());
            let sidecar = Sidecar::start_as(
                self.cluster,
                &self.ns.name,
                pod,
                SEQUENCE,
                false,
                kubeconfig,
            )?;
            started.push((pod.name_any(), *slot, sidecar));
        }
        eventually(LIMIT, &format!("{}: sidecars ready", self.name), || async {
            for (_, _, s) in &started {
                s.process.check_running()?;
            }
            Ok(started.iter().all(|(_, _, s)| s.ready()).then_some(()))
        })
        .await
        .with_context(|| self.log())?;
        for (pod, slot, sidecar) in started {
            let collector = Collector::start(sidecar.port);
            self.serving.push(Serving {
                pod,
                slot,
                sidecar,
                collector,
            });
        }
        Ok(())
    }

    /// IDs collected so far from every sidecar of this member.
    pub fn count(&self) -> usize {
        self.serving.iter().map(|s| s.collector.count()).sum()
    }

    pub fn all_ready(&self) -> bool {
        self.serving.iter().all(|s| s.sidecar.ready())
    }

    /// Each sidecar's readiness answer (status and body), for what a failure says.
    pub fn readiness(&self) -> String {
        self.serving
            .iter()
            .map(|s| {
                let (code, body) = get(s.sidecar.port, "/readyz").unwrap_or((0, String::new()));
                format!(
                    "{}/{} (slot {}): {code} {}",
                    self.name,
                    s.pod,
                    s.slot,
                    body.trim()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Gone without cleanup: every sidecar and the operator killed (-9), then the control
    /// plane stopped. What the Collectors saw is kept.
    pub fn vanish(&mut self) {
        for s in &self.serving {
            s.sidecar.process.kill();
        }
        self.operator.process.kill();
        self.finish();
        self.cluster.stop();
    }

    /// Stops every Collector (keeping what each saw) and sidecar.
    pub fn finish(&mut self) {
        for s in self.serving.drain(..) {
            self.issued.push(Issued {
                member: self.name,
                pod: s.pod,
                data: s.collector.finish(),
            });
        }
    }
}

/// A namespace restored from a backup of `source`'s into `target` while `source` runs, as a
/// backup tool would: the hub Secret, the IdSequence, its slot Leases and the
/// IdSpaceMembership with its status (the copy of `source`'s claims); an operator of
/// `target` watching it, and `pods` new pods of the sequence there. Returns the namespace,
/// the operator and the pods' UIDs.
pub async fn restore_into(
    source: &Member,
    target: &'static Cluster,
    pods: usize,
) -> Result<(TestNamespace, Operator, Vec<String>)> {
    let ns = target.namespace("restored").await?;
    let copy = |object: serde_json::Value| -> serde_json::Value {
        let mut object = object;
        if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.retain(|k, _| ["name", "labels", "annotations"].contains(&k.as_str()));
        }
        object
    };
    let from = |kind: &str| format!("restoring {kind} of {} into {}", source.ns.name, ns.name);
    let secret: Secret = Api::<Secret>::namespaced(source.ns.client.clone(), &source.ns.name)
        .get(HUB_SECRET)
        .await?;
    let secret: Secret = serde_json::from_value(copy(serde_json::to_value(secret)?))?;
    Api::<Secret>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await
        .with_context(|| from("the hub Secret"))?;
    let sequence = Api::<IdSequence>::namespaced(source.ns.client.clone(), &source.ns.name)
        .get(SEQUENCE)
        .await?;
    let mut sequence = serde_json::to_value(sequence)?;
    sequence.as_object_mut().map(|o| o.remove("status"));
    let sequence: IdSequence = serde_json::from_value(copy(sequence))?;
    Api::<IdSequence>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &sequence)
        .await
        .with_context(|| from("the IdSequence"))?;
    let leases = Api::<Lease>::namespaced(source.ns.client.clone(), &source.ns.name)
        .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}={SEQUENCE}")))
        .await?;
    for lease in leases.items {
        let lease: Lease = serde_json::from_value(copy(serde_json::to_value(lease)?))?;
        Api::<Lease>::namespaced(ns.client.clone(), &ns.name)
            .create(&PostParams::default(), &lease)
            .await
            .with_context(|| from("a slot Lease"))?;
    }
    let membership = source.status().await?;
    let status = membership.status.clone();
    let mut object = serde_json::to_value(membership)?;
    object.as_object_mut().map(|o| o.remove("status"));
    let object: IdSpaceMembership = serde_json::from_value(copy(object))?;
    let memberships = Api::<IdSpaceMembership>::namespaced(ns.client.clone(), &ns.name);
    memberships
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| from("the IdSpaceMembership"))?;
    memberships
        .patch_status(
            SEQUENCE,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| from("the IdSpaceMembership's status"))?;
    let operator = Operator::start_as_with(
        target,
        &ns.name,
        "restored",
        target.kubeconfig(),
        &["--hub-secret-namespace", &ns.name],
    )?;
    let created = create_pods(&ns, SEQUENCE, "app", pods).await?;
    let uids = created.iter().filter_map(|p| p.uid()).collect();
    Ok((ns, operator, uids))
}

/// Changes the hub's registry as its administrator (whom the members' policy does not
/// hold), by compare-and-swap, retrying a conflict with a member's write.
pub async fn edit_registry(
    hub: &Hub,
    change: impl Fn(&mut RegistryRecord) -> Result<()>,
) -> Result<RegistryRecord> {
    let spaces = hub.spaces();
    for _ in 0..20 {
        let mut space = spaces.get(SPACE).await?;
        change(&mut space.spec.registry)?;
        space.spec.registry.revision += 1;
        match spaces.replace(SPACE, &PostParams::default(), &space).await {
            Ok(written) => return Ok(written.spec.registry),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e).context("the administrator's write of the registry"),
        }
    }
    bail!("the administrator's write of the registry conflicted 20 times")
}

/// What the checker found across every member.
pub struct Crossed {
    pub ids: usize,
    pub duplicates: usize,
    pub lines: Vec<String>,
}

/// Every ID collected from every member, each at most once; each repeat is reported with
/// both issuers (member and pod), its slot, tick and sequence number (the first 10).
pub fn check_across(layout: &Layout, issued: &[&Issued]) -> Result<Crossed> {
    let mut first: HashMap<u64, usize> = HashMap::new();
    let mut crossed = Crossed {
        ids: 0,
        duplicates: 0,
        lines: Vec::new(),
    };
    for (i, is) in issued.iter().enumerate() {
        let mut count = 0;
        for &id in is.data.segments.iter().flatten() {
            count += 1;
            if let Some(&j) = first.get(&id) {
                crossed.duplicates += 1;
                if crossed.duplicates <= 10 {
                    let parts = layout.decode(Id::new(id).context("a 63-bit ID")?)?;
                    let other = issued[j];
                    crossed.lines.push(format!(
                        "DUPLICATE {id}: slot {} tick {} sequence {}, issued by {}/{} and by {}/{}",
                        parts.slot.0,
                        parts.tick.0,
                        parts.sequence,
                        other.member,
                        other.pod,
                        is.member,
                        is.pod
                    ));
                }
            } else {
                first.insert(id, i);
            }
        }
        crossed.ids += count;
        crossed.lines.push(format!(
            "{}/{}: {count} IDs in {} requests, {} refused (503)",
            is.member, is.pod, is.data.requests, is.data.refusals
        ));
    }
    Ok(crossed)
}

/// The lowest and highest tick of the IDs `issued` holds in `slots` (None: no ID there).
pub fn ticks_in(
    layout: &Layout,
    issued: &[&Issued],
    slots: std::ops::Range<u32>,
) -> Result<Option<(u64, u64)>> {
    let mut range: Option<(u64, u64)> = None;
    for &id in issued.iter().flat_map(|i| i.data.segments.iter().flatten()) {
        let parts = layout.decode(Id::new(id).context("a 63-bit ID")?)?;
        if slots.contains(&parts.slot.0) {
            let t = parts.tick.0;
            range = Some(range.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))));
        }
    }
    Ok(range)
}

/// The hub's bound of every block `member` holds: (index, bound).
pub fn bounds_of(registry: &RegistryRecord, member: &str) -> Vec<(i64, i64)> {
    registry
        .blocks
        .iter()
        .filter(|b| b.owner.as_deref() == Some(member))
        .filter_map(|b| b.bound.map(|bound| (b.index, bound)))
        .collect()
}

/// Sends `signal` to the hub's API server process (SIGSTOP, SIGCONT).
pub fn signal_apiserver(cluster: &Cluster, signal: i32) -> Result<()> {
    let pid = cluster
        .pids()
        .into_iter()
        .find(|(name, _)| name.contains("apiserver"))
        .map(|(_, pid)| pid)
        .context("the API server is not running")?;
    // SAFETY: a signal to a child process this test binary started.
    let rc = unsafe { libc::kill(pid as i32, signal) };
    ensure!(rc == 0, "kill({pid}, {signal}) failed");
    Ok(())
}
