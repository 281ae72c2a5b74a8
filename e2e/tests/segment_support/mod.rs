//! The Segment members of the ID-space tests (docs/safety.md rule 22): a Segment IdSpace,
//! a member joining it with its operator and sidecars issuing into Collectors, and the
//! checks of what they issued (e2e `id_space_segment`, `id_space_segment_restore`); the
//! hub's IdSpace restored from a backup ([`backup`]).
#![allow(dead_code)]

pub mod backup;

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::segment_counter::{Counter, counter_name};
use kubeflake_crds::sequence::Mode;
use kubeflake_e2e::{Cluster, TestNamespace};
use serde_json::json;

use crate::hub_support::{Hub, Joined, SEQUENCE, SPACE, join_member, ready_is};
use crate::operator_support::{Operator, create_pods, eventually};
use crate::sidecar_support::{Collector, Sidecar};

pub const LIMIT: Duration = Duration::from_secs(90);

pub fn segment_space() -> IdSpaceSpec {
    IdSpaceSpec::new(
        SpaceSequenceSpec {
            mode: Mode::Segment,
            ..SpaceSequenceSpec::default()
        },
        64,
    )
}

pub async fn counter(ns: &TestNamespace) -> Result<Counter> {
    let lease = Api::<Lease>::namespaced(ns.client.clone(), &ns.name)
        .get(&counter_name(SEQUENCE))
        .await?;
    Ok(Counter::parse(&lease)?)
}

/// One member: its namespace, operator and membership ([`join_member`]), and the sidecars
/// issuing into Collectors.
pub struct Member {
    pub name: &'static str,
    pub cluster: &'static Cluster,
    pub ns: TestNamespace,
    pub operator: Operator,
    pub sidecars: Vec<Sidecar>,
    pub collectors: Vec<Collector>,
}

impl Member {
    /// Joins `hub` (through `server` when given); waits until its counter holds a queued
    /// range, so that no pod claims before it joined (values issued alone are not the
    /// space's).
    pub async fn join(
        cluster: &'static Cluster,
        name: &'static str,
        hub: &Hub,
        server: Option<&str>,
    ) -> Result<Member> {
        let prefix = format!("seg-{name}");
        let spec = json!({"mode": "Segment"});
        let Joined { ns, operator, .. } =
            join_member(cluster, &prefix, name, hub, server, spec).await?;
        eventually(LIMIT, &format!("{name}: a range queued"), || async {
            Ok(counter(&ns)
                .await
                .ok()
                .and_then(|c| c.range)
                .and_then(|r| r.queued)
                .map(|_| ()))
        })
        .await
        .with_context(|| operator.process.log_tail(40))?;
        Ok(Member {
            name,
            cluster,
            ns,
            operator,
            sidecars: Vec::new(),
            collectors: Vec::new(),
        })
    }

    /// `count` pods named `prefix-<i>` with ready sidecars, each called by a Collector.
    pub async fn serve(&mut self, prefix: &str, count: usize) -> Result<()> {
        let created = create_pods(&self.ns, SEQUENCE, prefix, count).await?;
        let sidecars = Sidecar::start_all_ready(self.cluster, &self.ns.name, &created, SEQUENCE)
            .await
            .with_context(|| self.log())?;
        self.collectors
            .extend(sidecars.iter().map(|s| Collector::start(s.port)));
        self.sidecars.extend(sidecars);
        Ok(())
    }

    pub fn log(&self) -> String {
        format!(
            "operator of {}:\n{}",
            self.name,
            self.operator.process.log_tail(40)
        )
    }

    /// Waits until the membership is `Ready=<status> <reason>`.
    pub async fn ready_is(&self, status: &str, reason: &str) -> Result<()> {
        ready_is(&self.ns, SEQUENCE, status, reason, LIMIT)
            .await
            .map(drop)
            .with_context(|| self.log())
    }

    /// Values collected so far from every sidecar.
    pub fn count(&self) -> usize {
        self.collectors.iter().map(Collector::count).sum()
    }

    /// Stops the collectors; every value received, and the refusals.
    pub fn finish(self) -> (TestNamespace, Vec<u64>, u64) {
        let mut values = Vec::new();
        let mut refusals = 0;
        for c in self.collectors {
            let data = c.finish();
            refusals += data.refusals;
            values.extend(data.segments.into_iter().flatten());
        }
        drop(self.sidecars);
        drop(self.operator);
        (self.ns, values, refusals)
    }
}

/// Fails unless each of `members` collected more values than `before` says, with every
/// sidecar ready.
pub fn issuing(members: &[&Member], before: &[usize], during: &str) -> Result<Vec<usize>> {
    let now: Vec<usize> = members.iter().map(|m| m.count()).collect();
    for ((m, b), n) in members.iter().zip(before).zip(&now) {
        ensure!(
            n > b && m.sidecars.iter().all(Sidecar::ready),
            "{} stopped issuing while {during}: {b} then {n} values\n{}",
            m.name,
            m.log()
        );
    }
    Ok(now)
}

/// The values issued more than once across `values`: (how many, the first 10).
pub fn repeated(values: &[&[u64]]) -> (usize, Vec<u64>) {
    let mut seen = HashSet::new();
    let twice: Vec<u64> = values
        .iter()
        .flat_map(|v| v.iter())
        .filter(|v| !seen.insert(**v))
        .copied()
        .collect();
    (twice.len(), twice.into_iter().take(10).collect())
}

/// How every Segment e2e test ends: no value issued twice across `members`, and each
/// member's values below its counter and below the hub's ([`repeated`], [`inside`]).
/// The hub's counter.
pub async fn no_value_twice(hub: &Hub, members: &[(&TestNamespace, &[u64])]) -> Result<u64> {
    let values: Vec<&[u64]> = members.iter().map(|(_, v)| *v).collect();
    let (twice, first) = repeated(&values);
    ensure!(
        twice == 0,
        "{twice} values issued twice (first {first:?}) of {}",
        values.iter().map(|v| v.len()).sum::<usize>()
    );
    inside(hub, members).await
}

/// The hub's counter: every value it handed out lies below.
pub async fn hub_next(hub: &Hub) -> Result<u64> {
    let space = hub.spaces().get(SPACE).await?;
    Ok(space
        .spec
        .segment
        .context("the hub's counter was written")?
        .next as u64)
}

/// Each member's values lie below its counter and below the hub's.
pub async fn inside(hub: &Hub, members: &[(&TestNamespace, &[u64])]) -> Result<u64> {
    let hub_next = hub_next(hub).await?;
    for (ns, values) in members {
        let c = counter(ns).await?;
        let max = values.iter().max().copied().unwrap_or(0);
        ensure!(
            max < c.next,
            "{}: {max} at or above next {}",
            ns.name,
            c.next
        );
        ensure!(
            max < hub_next,
            "{}: {max} beyond the hub's {hub_next}",
            ns.name
        );
    }
    Ok(hub_next)
}
