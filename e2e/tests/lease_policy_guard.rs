//! The operator fails closed without the Lease policy (docs/safety.md rule 14), against a
//! real API server: the ValidatingAdmissionPolicy and its binding of
//! `kubeflake_crds::lease_policy` (what the chart installs) for one test namespace, the
//! operator told their names (`--lease-policy`, `--lease-policy-binding`, as the chart does).
//! With the binding deleted, or made to audit only, a new pod gets no slot and a Segment
//! sequence no counter and no claimant, and the sequence says why; with it back, both go on.
//!
//! The operator and the API calls here act as the cluster admin (`system:masters`, exempt by
//! the policy): what is tested is the operator's own check, not what the policy refuses
//! (e2e/tests/lease_policy.rs). Each test's policy and binding cover its own namespace only
//! and are left to go with the test cluster.

mod operator_support;
mod policy_support;

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::lease_policy;
use kubeflake_crds::segment_counter::{claimants, counter_name};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use policy_support::policy_name;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
/// Longer than the operator's check interval (5 s) plus a pass: long enough for a slot to be
/// assigned if the operator were going to.
const HELD: Duration = Duration::from_secs(12);
const MISSING_GAUGE: &str = "kubeflake_operator_lease_policy_missing";

fn uids(pods: &[Pod]) -> Vec<String> {
    pods.iter().filter_map(|p| p.uid()).collect()
}

/// The chart's policy and binding for `ns` only (other tests share the cluster), under one
/// name; returns it.
async fn install_policy(admin: &Client, ns: &str) -> Result<String> {
    let name = policy_name(ns);
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    let operator = format!("system:serviceaccount:{ns}:kubeflake");
    policies
        .create(
            &PostParams::default(),
            &lease_policy::policy(&name, &operator, &["system:masters"]),
        )
        .await?;
    bind(admin, ns, &name).await?;
    Ok(name)
}

async fn bind(admin: &Client, ns: &str, name: &str) -> Result<()> {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    bindings
        .create(
            &PostParams::default(),
            &lease_policy::binding(name, name, Some(ns)),
        )
        .await?;
    Ok(())
}

async fn unbind(admin: &Client, name: &str) -> Result<()> {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    bindings.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// The operator told the policy's names, as the chart runs it. With
/// `KUBEFLAKE_E2E_WITHOUT_GATE=1` it runs with `--unsafe-without-lease-policy` instead (no
/// gate): then these tests must fail, which shows they can.
fn operator(cluster: &Cluster, ns: &str, name: &str) -> Result<Operator> {
    if std::env::var("KUBEFLAKE_E2E_WITHOUT_GATE").is_ok_and(|v| v == "1") {
        return Operator::start(cluster, ns, "a");
    }
    Operator::start_with(
        cluster,
        ns,
        "a",
        &["--lease-policy", name, "--lease-policy-binding", name],
    )
}

/// The Ready condition's (status, reason, message) of a sequence.
async fn ready(ns: &TestNamespace, sequence: &str) -> Result<Option<(String, String, String)>> {
    let api: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let seq = api.get(sequence).await?;
    Ok(condition(seq.status.as_ref(), ConditionType::Ready)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())))
}

async fn wait_reason(ns: &TestNamespace, sequence: &str, reason: &str) -> Result<String> {
    eventually(LIMIT, &format!("Ready's reason {reason}"), || async {
        Ok(ready(ns, sequence)
            .await?
            .filter(|(_, r, _)| r == reason)
            .map(|(_, _, message)| message))
    })
    .await
}

/// Warning Events of reason `LeasePolicyMissing` in the namespace.
async fn policy_events(ns: &TestNamespace) -> Result<usize> {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(ns.client.clone(), &ns.name);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("LeasePolicyMissing"))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_without_the_lease_policy_the_operator_assigns_no_slot_and_says_why() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("guard-slots").await?;
    let admin = cluster.client()?;
    let name = install_policy(&admin, &ns.name).await?;
    let operator = operator(cluster, &ns.name, &name)?;
    create_sequence(&ns, "orders", json!({})).await?;
    // In force (as the real API server returns it): slots are assigned.
    let first = create_pods(&ns, "orders", "first", 1).await?;
    all_assigned(&ns, "orders", &uids(&first), LIMIT).await?;
    wait_reason(&ns, "orders", "Reconciled").await?;
    assert_eq!(operator.metric(MISSING_GAUGE), 0.0);

    // The binding deleted: the policy is no longer in force.
    unbind(&admin, &name).await?;
    let message = wait_reason(&ns, "orders", "LeasePolicyMissing").await?;
    assert!(
        message.contains(&name) && message.contains("ValidatingAdmissionPolicyBinding"),
        "the condition names what is missing: {message}"
    );
    let second = create_pods(&ns, "orders", "second", 1).await?;
    tokio::time::sleep(HELD).await;
    let leases = slot_leases(&ns, "orders").await?;
    let second_uid = uids(&second);
    assert!(
        !leases
            .iter()
            .any(|l| l.holder.as_ref().is_some_and(|h| second_uid.contains(h))),
        "a pod created while the binding is gone got a slot: {leases:?}"
    );
    assert!(
        leases
            .iter()
            .any(|l| l.holder.as_ref().is_some_and(|h| uids(&first).contains(h))),
        "the first pod keeps its slot: {leases:?}"
    );
    assert_eq!(operator.metric(MISSING_GAUGE), 1.0);
    assert!(policy_events(&ns).await? >= 1, "a Warning Event says why");

    // The binding restored: the waiting pod gets its slot.
    bind(&admin, &ns.name, &name).await?;
    all_assigned(&ns, "orders", &second_uid, LIMIT).await?;
    wait_reason(&ns, "orders", "Reconciled").await?;
    assert_eq!(operator.metric(MISSING_GAUGE), 0.0);

    // A binding that only audits puts nothing in force either.
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    let audit = json!({"spec": {"validationActions": ["Audit"]}});
    bindings
        .patch(&name, &PatchParams::default(), &Patch::Merge(&audit))
        .await?;
    let message = wait_reason(&ns, "orders", "LeasePolicyMissing").await?;
    assert!(message.contains("without Deny"), "{message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_without_the_lease_policy_no_segment_counter_is_made_and_no_claimant_listed()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("guard-segment").await?;
    let admin = cluster.client()?;
    let name = install_policy(&admin, &ns.name).await?;
    // The binding is gone before the operator starts.
    unbind(&admin, &name).await?;
    let _operator = operator(cluster, &ns.name, &name)?;
    create_sequence(&ns, "invoices", json!({"mode": "Segment", "segment": {}})).await?;
    let pods = create_pods(&ns, "invoices", "app", 1).await?;
    wait_reason(&ns, "invoices", "LeasePolicyMissing").await?;
    tokio::time::sleep(HELD).await;
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let counter = counter_name("invoices");
    assert!(
        leases.get_opt(&counter).await?.is_none(),
        "no counter is made while the binding is gone"
    );

    bind(&admin, &ns.name, &name).await?;
    let listed = eventually(LIMIT, "the counter listing the pod", || async {
        let found = leases.get_opt(&counter).await?;
        Ok(found
            .map(|c| claimants(&c))
            .filter(|c| c.iter().any(|u| uids(&pods).contains(u))))
    })
    .await?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    wait_reason(&ns, "invoices", "CounterReady").await?;
    Ok(())
}
