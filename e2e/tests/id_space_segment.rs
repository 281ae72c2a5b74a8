//! One Segment sequence across two control planes (issue 55, docs/safety.md rule 22): the
//! shared control plane is the hub and member `a`, a second one is member `b`. Each has
//! the Segment IdSequence `orders` with its own operator (the real binary, reaching the
//! hub through a member ServiceAccount token, so every take passes the hub's RBAC and
//! admission policy) and an IdSpaceMembership of one Segment IdSpace; pods are API objects
//! with real cluster-mode sidecars issuing into Collectors. Each counter goes to format 3
//! with ranges from the hub's `spec.segment.next`; every value of every sidecar is
//! collected: no value twice across clusters, and each member's values lie inside ranges
//! the hub handed out (below its counter).

mod hub_support;
mod operator_support;
mod policy_support;
mod sidecar_support;

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use hub_support::{Hub, install_crds, membership, secret};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::segment_counter::{Counter, counter_name};
use kubeflake_crds::sequence::Mode;
use kubeflake_e2e::{Cluster, ClusterOptions, TestNamespace};
use operator_support::{Operator, create_pods, create_sequence, eventually};
use serde_json::json;
use sidecar_support::{Collector, Sidecar};

const SEQUENCE: &str = "orders";
const HUB_SECRET: &str = "kubeflake-hub-orders";
const LIMIT: Duration = Duration::from_secs(90);

/// The second control plane, started once (stopped when the process exits).
fn second() -> Result<&'static Cluster> {
    static B: OnceLock<Result<Cluster, String>> = OnceLock::new();
    B.get_or_init(|| Cluster::start(ClusterOptions::default()).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow!("the second control plane could not start: {e}"))
}

async fn counter(ns: &TestNamespace) -> Result<Counter> {
    let lease = Api::<Lease>::namespaced(ns.client.clone(), &ns.name)
        .get(&counter_name(SEQUENCE))
        .await?;
    Ok(Counter::parse(&lease)?)
}

/// One member: the CRDs, the Secret, the Segment sequence, its operator and membership;
/// waits until its counter holds a queued range, then starts `pods` sidecars issuing.
struct Member {
    ns: TestNamespace,
    operator: Operator,
    sidecars: Vec<Sidecar>,
    collectors: Vec<Collector>,
}

impl Member {
    async fn join(cluster: &'static Cluster, name: &str, hub: &Hub, pods: usize) -> Result<Member> {
        install_crds(cluster).await?;
        let ns = cluster.namespace(&format!("seg-{name}")).await?;
        let kubeconfig = hub.add_member(name, None).await?;
        secret(&ns, HUB_SECRET, &kubeconfig).await?;
        create_sequence(&ns, SEQUENCE, json!({"mode": "Segment"})).await?;
        let operator = Operator::start_as_with(
            cluster,
            &ns.name,
            name,
            cluster.kubeconfig(),
            &["--hub-secret-namespace", &ns.name],
        )?;
        membership(&ns, SEQUENCE, SEQUENCE, name, &hub.ns.name, HUB_SECRET).await?;
        // Joined before any pod claims: values issued alone are not the space's.
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
        let created = create_pods(&ns, SEQUENCE, "app", pods).await?;
        let sidecars = Sidecar::start_all_ready(cluster, &ns.name, &created, SEQUENCE)
            .await
            .with_context(|| operator.process.log_tail(40))?;
        let collectors = sidecars.iter().map(|s| Collector::start(s.port)).collect();
        Ok(Member {
            ns,
            operator,
            sidecars,
            collectors,
        })
    }

    /// Stops the collectors; every value received.
    fn finish(self) -> (TestNamespace, Vec<u64>, u64) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_one_segment_sequence_in_two_control_planes_issues_no_value_twice() -> Result<()> {
    let hub_cluster = Cluster::shared();
    let b_cluster = tokio::task::spawn_blocking(second).await??;
    install_crds(hub_cluster).await?;
    let spec = IdSpaceSpec::new(
        SpaceSequenceSpec {
            mode: Mode::Segment,
            ..SpaceSequenceSpec::default()
        },
        64,
    );
    let hub = Hub::create(hub_cluster, "seg-hub", spec).await?;
    let a = Member::join(hub_cluster, "a", &hub, 2).await?;
    let b = Member::join(b_cluster, "b", &hub, 2).await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (a_ns, a_values, a_refused) = a.finish();
    let (b_ns, b_values, b_refused) = b.finish();
    ensure!(
        a_values.len() > 1000 && b_values.len() > 1000,
        "both members issue: a {} values ({a_refused} refusals), b {} ({b_refused})",
        a_values.len(),
        b_values.len()
    );
    let mut seen = HashSet::with_capacity(a_values.len() + b_values.len());
    let twice: Vec<u64> = a_values
        .iter()
        .chain(&b_values)
        .filter(|v| !seen.insert(**v))
        .copied()
        .collect();
    ensure!(
        twice.is_empty(),
        "{} values issued twice (first {:?}) of {}",
        twice.len(),
        &twice[..twice.len().min(10)],
        seen.len()
    );
    // Each member's values lie below its counter, and the hub handed out up to the
    // highest queued end.
    let hub_next = hub
        .spaces()
        .get(hub_support::SPACE)
        .await?
        .spec
        .segment
        .context("the hub's counter was written")?
        .next as u64;
    for (ns, values) in [(&a_ns, &a_values), (&b_ns, &b_values)] {
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
    println!(
        "a issued {}, b issued {}, the hub's counter at {hub_next}: 0 duplicates",
        a_values.len(),
        b_values.len()
    );
    Ok(())
}
