//! Rule 21 against a real API server (docs/design/2026-11-29-multicluster.md, "A member's
//! etcd restored from an older snapshot while its pods run"): ONE control plane is both the
//! hub and the member (`hub_support`). A real etcd restore is `id_space_etcd_restore.rs`;
//! here "the copy went back" is the membership's status written as an administrator with a
//! generation behind the hub's. The operator must then keep the hub's view with
//! `FencesRaised=False`, raise the fence of the slot Lease in its block to at least
//! `now + lease duration + 20 s` (never past the block's bound), and set `FencesRaised=True`.
//! The IdSequence's `IdSpace` condition says the sequence is joined.

mod hub_support;
mod operator_support;
mod policy_support;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hub_support::{Hub, condition, install_crds, membership, secret};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::{IdSpaceMembership, IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, SlotLease};
use kubeflake_e2e::Cluster;
use operator_support::{Operator, all_assigned, create_pods, create_sequence, eventually};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(40);

#[tokio::test]
async fn rule21_a_copy_behind_the_hub_raises_the_slot_fences_of_its_blocks_before_assigning_again()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crds(cluster).await?;
    let spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64);
    let hub = Hub::create(cluster, "hub", spec).await?;
    let kubeconfig = hub.add_member("prod", None).await?;
    let hub_ns = &hub.ns;
    let ops = cluster.namespace("ops").await?;
    secret(&ops, "kubeflake-hub-orders", &kubeconfig).await?;
    let member = cluster.namespace("shop").await?;
    create_sequence(&member, "orders", json!({})).await?;
    let operator = Operator::start_with(
        cluster,
        &member.name,
        "hub",
        &["--hub-secret-namespace", &ops.name],
    )?;
    let log = || operator.process.log_tail(60);
    let memberships = Api::<IdSpaceMembership>::namespaced(member.client.clone(), &member.name);
    membership(
        &member,
        "orders",
        "orders",
        "prod",
        &hub_ns.name,
        "kubeflake-hub-orders",
    )
    .await?;
    let pods = create_pods(&member, "orders", "app", 1).await?;
    let uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    all_assigned(&member, "orders", &uids, LIMIT)
        .await
        .with_context(log)?;
    let joined = eventually(LIMIT, "the membership joined", || async {
        let m = memberships.get("orders").await?;
        let ready = condition(&m, "Ready").is_some_and(|(s, r, _)| s == "True" && r == "Joined");
        Ok(ready.then_some(m))
    })
    .await
    .with_context(log)?;
    let sequences = Api::<IdSequence>::namespaced(member.client.clone(), &member.name);
    eventually(LIMIT, "the IdSequence's IdSpace condition", || async {
        let seq = sequences.get("orders").await?;
        Ok(condition_of(&seq, "IdSpace").filter(|(s, _)| s == "True"))
    })
    .await
    .with_context(log)?;

    // The copy goes back: its generation behind the hub's, as an etcd restore would leave it.
    let params = sequences.get("orders").await?.spec.params()?;
    let now_tick = || {
        let ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        params.timebase.tick_at(ms).map(|t| t.0).unwrap_or(0)
    };
    let before = now_tick();
    let behind = joined.status.clone().context("a copy")?.generation - 1;
    ensure!(behind >= 0, "the member wrote at least once");
    eventually(LIMIT, "the copy written behind the hub's", || async {
        let mut m = memberships.get("orders").await?;
        if let Some(s) = m.status.as_mut() {
            s.generation = behind;
        }
        let name = m.metadata.name.clone().unwrap_or_default();
        Ok(memberships
            .replace_status(&name, &PostParams::default(), &m)
            .await
            .ok()
            .map(|_| ()))
    })
    .await?;
    let raised = eventually(
        LIMIT,
        "FencesRaised=True after the copy went back",
        || async {
            let m = memberships.get("orders").await?;
            Ok(condition(&m, "FencesRaised")
                .filter(|(s, r, _)| s == "True" && r == "Raised")
                .map(|_| m))
        },
    )
    .await
    .with_context(log)?;
    let status = raised.status.context("a status")?;
    ensure!(
        status.generation > behind,
        "the hub's view is kept: {status:?}"
    );
    let bound = status
        .grants
        .iter()
        .map(|g| g.bound)
        .max()
        .context("a grant")?;
    let leases = Api::<Lease>::namespaced(member.client.clone(), &member.name);
    let list = leases
        .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}=orders")))
        .await?;
    ensure!(!list.items.is_empty(), "the pod's slot Lease");
    for lease in &list.items {
        let slot = SlotLease::parse(lease)?;
        let fence = i64::try_from(slot.fence.0)?;
        let floor = i64::try_from(before + 35_000)?;
        ensure!(
            fence >= floor.min(bound) && fence <= bound,
            "slot Lease {} has fence {fence}: at least now + lease duration + 20 s ({floor}), at \
             most the bound {bound}",
            slot.name
        );
    }
    Ok(())
}

/// The IdSequence's condition `type_`: (status, reason).
fn condition_of(seq: &IdSequence, type_: &str) -> Option<(String, String)> {
    seq.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
    })
}
