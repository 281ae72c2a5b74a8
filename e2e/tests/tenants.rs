//! Tenant isolation on the real node (docs/safety.md rule 14; docs/install.md, "Security"):
//! the chart as installed (its Lease policy and the operator's per-namespace sidecar Role
//! and binding), two pods of the example app in real pods, and the API server's own tokens
//! (`kubectl create token`, bound to those very pods). Pod B's token and an account that
//! runs no kubeflake pod try to change pod A's slot Lease and an app's own Lease; all are
//! refused, while pod A keeps renewing and serving, releases its slot when it is deleted,
//! and the operator gives the slot to the pod that replaces it.

mod chart_support;
mod node_support;
mod operator_support;
mod policy_support;

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeflake_crds::Tick;
use kubeflake_crds::slot_lease::{self, Holder, SEQUENCE_LABEL, SlotLease};
use kubeflake_e2e::Cluster;
use node_support::*;
use operator_support::eventually;
use policy_support::{forged_takeover, leases, refused, service_account, token, token_client};
use serde_json::json;

const SEQUENCE: &str = "orders";
const APP: &str = "web";
const LIMIT: Duration = Duration::from_secs(90);

/// An RBAC refusal (403 that is not the Lease policy's).
fn refused_by_rbac<T>(result: Result<T, kube::Error>, what: &str) -> Result<()> {
    match result {
        Ok(_) => bail!("{what}: the API server accepted it"),
        Err(kube::Error::Api(e))
            if e.code == 403 && !e.message.contains("ValidatingAdmissionPolicy") =>
        {
            Ok(())
        }
        Err(e) => bail!("{what}: failed otherwise than by RBAC: {e}"),
    }
}

/// The slot Lease `uid` holds.
async fn lease_of(client: &Client, ns: &str, uid: &str) -> Result<Lease> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let all = api
        .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}={SEQUENCE}")))
        .await?;
    all.items
        .into_iter()
        .find(|l| SlotLease::parse(l).ok().and_then(|s| s.holder).as_deref() == Some(uid))
        .with_context(|| format!("no slot Lease names {uid}"))
}

#[tokio::test]
async fn rule14_on_the_node_another_pods_token_cannot_touch_a_slot_while_its_holder_renews_serves_and_releases()
-> Result<()> {
    let cluster = Cluster::shared_with_node();
    let node = on_the_node(cluster, "tenants", SEQUENCE, json!({})).await?;
    let result = attacks(&node).await;
    delete_namespace(node.cluster, &node.ns).await;
    result
}

async fn attacks(node: &OnTheNode) -> Result<()> {
    let (cluster, ns) = (node.cluster, &node.ns);
    let n = ns.name.as_str();
    node.deploy_app(APP, SEQUENCE, 2).await?;
    let pods = ready_pods(ns, APP).await?;
    ensure!(pods.len() == 2, "two ready pods, got {}", pods.len());
    let (a, b) = (&pods[0], &pods[1]);
    let (uid_a, uid_b) = (a.uid().context("uid")?, b.uid().context("uid")?);
    let account = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into())
    };
    let token_b = token(cluster, n, &account(b), Some(b)).await?;
    let as_b = token_client(cluster, &format!("{n}-pod-b"), &token_b)?;
    service_account(ns, "bystander").await?;
    let as_bystander = token_client(
        cluster,
        &format!("{n}-bystander"),
        &token(cluster, n, "bystander", None).await?,
    )?;
    let ids_before = ids_from_pod(ns, &a.name_any(), 20).await?;
    let held = lease_of(&ns.client, n, &uid_a).await?;
    let renewed_before = held.spec.as_ref().and_then(|s| s.renew_time.clone());

    // Pod B, with its own pod-bound token: RBAC lets it write the namespace's slot Leases
    // (its account runs labelled pods); the Lease policy refuses every change to A's.
    let now = Utc::now();
    let holder_b = Holder {
        uid: &uid_b,
        pod: &b.name_any(),
    };
    let api_b = leases(&as_b, n);
    refused(
        api_b
            .replace(
                &held.name_any(),
                &PostParams::default(),
                &forged_takeover(&held, holder_b, now)?,
            )
            .await,
        "pod B makes itself the holder of pod A's slot",
        "it is held by pod",
    )?;
    refused(
        api_b
            .replace(
                &held.name_any(),
                &PostParams::default(),
                &slot_lease::renew(&held, &uid_a, Tick(u64::from(u32::MAX)), now)?,
            )
            .await,
        "pod B renews pod A's slot with a far fence",
        "it is held by pod",
    )?;
    // Deleting is not even in the sidecars' RBAC (the policy would refuse it as well).
    refused_by_rbac(
        api_b
            .delete(&held.name_any(), &DeleteParams::default())
            .await,
        "pod B deletes pod A's slot Lease",
    )?;
    // An app's own Lease in the namespace: the sidecar Role does not name it, so RBAC
    // refuses pod B (and the policy has nothing to say about it).
    let admin_leases: Api<Lease> = Api::namespaced(ns.client.clone(), n);
    admin_leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "app-leader"}, "spec": {"holderIdentity": "app-0"}}),
            )?,
        )
        .await?;
    refused_by_rbac(
        api_b
            .patch(
                "app-leader",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"holderIdentity": "pod-b"}})),
            )
            .await,
        "pod B rewrites an app's leader Lease",
    )?;
    // An account that runs no kubeflake pod holds no sidecar rights at all.
    refused_by_rbac(
        leases(&as_bystander, n)
            .patch(
                &held.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"kubeflake.io/fence": "0"}}})),
            )
            .await,
        "an account without kubeflake pods lowers pod A's fence",
    )?;

    // Pod A's sidecar keeps renewing and serving, with its slot and its fence intact.
    let renewed = eventually(LIMIT, "pod A's sidecar to renew its slot again", || async {
        let now = lease_of(&ns.client, n, &uid_a).await?;
        let renewed = now.spec.as_ref().and_then(|s| s.renew_time.clone());
        Ok((renewed != renewed_before).then_some(now))
    })
    .await?;
    ensure!(
        SlotLease::parse(&renewed)?.fence >= SlotLease::parse(&held)?.fence,
        "pod A's fence never went down"
    );
    let ids_after = ids_from_pod(ns, &a.name_any(), 20).await?;
    ensure!(
        ids_after.iter().min() > ids_before.iter().max(),
        "pod A keeps serving, above what it served before"
    );

    // Pod A, deleted gracefully, releases its slot with its own token; the operator gives
    // a slot to the pod that replaces it.
    let slot_name = held.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ns.client.clone(), n);
    pods_api
        .delete(&a.name_any(), &DeleteParams::default())
        .await?;
    eventually(
        LIMIT,
        "pod A's slot to be released by its sidecar",
        || async {
            let lease = admin_leases.get(&slot_name).await?;
            let parsed = SlotLease::parse(&lease)?;
            Ok(
                (parsed.holder.as_deref() != Some(uid_a.as_str()) && parsed.released_at.is_some())
                    .then_some(()),
            )
        },
    )
    .await?;
    eventually(
        LIMIT,
        "the replacement pod to be ready with a slot",
        || async {
            let ready = ready_pods(ns, APP).await?;
            let new: Vec<_> = ready
                .iter()
                .filter(|p| p.uid().as_deref() != Some(uid_a.as_str()))
                .collect();
            if new.len() < 2 {
                return Ok(None);
            }
            for pod in new {
                lease_of(&ns.client, n, &pod.uid().unwrap_or_default()).await?;
            }
            Ok(Some(()))
        },
    )
    .await?;
    eprintln!(
        "tenants: pod B's token and a pod-less account refused on pod A's slot Lease (assign, \
         renew, delete) and on an app's Lease; pod A renewed, served {} IDs after, released \
         its slot on delete; the replacement got a slot",
        ids_after.len()
    );
    Ok(())
}

#[tokio::test]
async fn rule14_on_the_node_segment_sidecars_claim_only_once_the_operator_lists_their_pods()
-> Result<()> {
    let cluster = Cluster::shared_with_node();
    let node = on_the_node(
        cluster,
        "tenants-seg",
        "invoices",
        json!({"mode": "Segment"}),
    )
    .await?;
    let result = segment_claimants(&node).await;
    delete_namespace(node.cluster, &node.ns).await;
    result
}

async fn segment_claimants(node: &OnTheNode) -> Result<()> {
    let ns = &node.ns;
    node.deploy_app("billing", "invoices", 2).await?;
    let pods = ready_pods(ns, "billing").await?;
    ensure!(pods.len() == 2, "two ready pods, got {}", pods.len());
    let counter: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let counter = counter
        .get(&kubeflake_crds::segment_counter::counter_name("invoices"))
        .await?;
    let listed = kubeflake_crds::segment_counter::claimants(&counter);
    let mut values = Vec::new();
    for pod in &pods {
        let uid = pod.uid().context("uid")?;
        ensure!(
            listed.contains(&uid),
            "the operator lists every labelled pod as a claimant: {uid} not in {listed:?}"
        );
        values.extend(ids_from_pod(ns, &pod.name_any(), 10).await?);
    }
    let distinct: std::collections::BTreeSet<u64> = values.iter().copied().collect();
    ensure!(distinct.len() == values.len(), "no value twice: {values:?}");
    eprintln!(
        "tenants: 2 Segment sidecars under the Lease policy, both listed as claimants, served {} distinct values",
        values.len()
    );
    Ok(())
}
