//! Rule 16 (docs/safety.md) against the real API server, with its own tokens: a tenant
//! whose service account may only create Leases (common: leader election) makes
//! `<sequence>-segment-counter` before the IdSequence exists, without the kubeflake label
//! the Lease policy guards by. The operator, running with its own token under the policy,
//! refuses it: `Ready=False ForeignLease` and `ForeignLeases=True` naming it, a Warning
//! Event, the metric; it never writes or deletes it. Once a person deletes it, the operator
//! creates its own counter, labelled, which the policy then guards.
//!
//! Before rule 16 the operator adopted the tenant's Lease (found by name), raised it to
//! `spec.segment.start` and listed claimants on it; since the policy never matched it, its
//! creator could lower `next` again and make values repeat.

mod operator_support;
mod policy_support;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kubeflake_crds::IdSequence;
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::segment_counter::{COUNTER_LABEL, Counter, NEXT_ANNOTATION, new_counter};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::{Operator, create_sequence, eventually, install_crd};
use policy_support::{enforce_policy, service_account, token, token_client, token_kubeconfig};

const SEQUENCE: &str = "orders";
const COUNTER: &str = "orders-segment-counter";
const OPERATOR_ACCOUNT: &str = "operator";
const TENANT_ACCOUNT: &str = "tenant";
const OUTSIDER_ACCOUNT: &str = "outsider";

/// The operator's account may do anything (as the chart's ClusterRole lets it, and more);
/// the tenant's may only create Leases in the namespace; the outsider may write Leases (the
/// policy's canary needs one RBAC allows and the policy refuses).
async fn accounts(ns: &TestNamespace) -> Result<()> {
    for account in [OPERATOR_ACCOUNT, TENANT_ACCOUNT, OUTSIDER_ACCOUNT] {
        service_account(ns, account).await?;
    }
    let subject = |name: &str| Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(ns.name.clone()),
        api_group: None,
    };
    let roles: Api<Role> = Api::namespaced(ns.client.clone(), &ns.name);
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: ObjectMeta {
                    name: Some("lease-creator".into()),
                    ..Default::default()
                },
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec!["coordination.k8s.io".into()]),
                    resources: Some(vec!["leases".into()]),
                    verbs: vec!["create".into()],
                    ..Default::default()
                }]),
            },
        )
        .await?;
    let bindings: Api<RoleBinding> = Api::namespaced(ns.client.clone(), &ns.name);
    let bind = |name: &str, kind: &str, role: &str, who: Vec<Subject>| RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: kind.into(),
            name: role.into(),
        },
        subjects: Some(who),
    };
    for binding in [
        bind(
            "tenant-creates-leases",
            "Role",
            "lease-creator",
            vec![subject(TENANT_ACCOUNT)],
        ),
        bind(
            "operator-and-outsider",
            "ClusterRole",
            "cluster-admin",
            vec![subject(OPERATOR_ACCOUNT), subject(OUTSIDER_ACCOUNT)],
        ),
    ] {
        bindings.create(&PostParams::default(), &binding).await?;
    }
    Ok(())
}

/// The Warning Events of `reason` about the IdSequence.
async fn warnings(ns: &TestNamespace, reason: &str) -> Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("IdSequence"))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_an_unlabelled_counter_lease_precreated_by_a_tenant_is_refused_and_never_adopted()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("foreign-counter").await?;
    accounts(&ns).await?;
    enforce_policy(cluster, &ns.name, OPERATOR_ACCOUNT, &[], OUTSIDER_ACCOUNT).await?;

    // The tenant, with its own token and only Lease create rights, is first.
    let tenant = token_client(
        cluster,
        &format!("{}-tenant", ns.name),
        &token(cluster, &ns.name, TENANT_ACCOUNT, None).await?,
    )?;
    let mut forged = new_counter(SEQUENCE, &ns.name, 1);
    forged.metadata.labels = None;
    let tenant_leases: Api<Lease> = Api::namespaced(tenant, &ns.name);
    let created = tenant_leases
        .create(&PostParams::default(), &forged)
        .await
        .context("a tenant with Lease create rights makes the counter's name, unlabelled")?;
    let version = created.metadata.resource_version.clone();

    let operator_kubeconfig = token_kubeconfig(
        cluster,
        &format!("{}-operator", ns.name),
        &token(cluster, &ns.name, OPERATOR_ACCOUNT, None).await?,
    )?;
    let operator = Operator::start_as(cluster, &ns.name, "a", &operator_kubeconfig)?;
    create_sequence(
        &ns,
        SEQUENCE,
        serde_json::json!({"mode": "Segment", "segment": {"start": 1000}}),
    )
    .await?;

    let sequences: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    let refused = eventually(
        Duration::from_secs(60),
        "the sequence refuses it",
        || async {
            anyhow::Ok(
                async {
                    let seq = sequences.get(SEQUENCE).await.ok()?;
                    let ready = condition(seq.status.as_ref(), ConditionType::Ready)?;
                    let foreign = condition(seq.status.as_ref(), ConditionType::ForeignLeases)?;
                    (ready.reason == "ForeignLease" && foreign.status == "True")
                        .then(|| (ready.message.clone(), foreign.message.clone()))
                }
                .await,
            )
        },
    )
    .await?;
    for part in [COUNTER, "not made by kubeflake", "Delete Lease"] {
        ensure!(
            refused.0.contains(part),
            "Ready says {part:?}: {}",
            refused.0
        );
    }
    ensure!(
        refused.1.contains(COUNTER),
        "ForeignLeases names it: {}",
        refused.1
    );
    eventually(Duration::from_secs(30), "a Warning Event", || async {
        let found = warnings(&ns, "ForeignLease").await?;
        anyhow::Ok((!found.is_empty()).then_some(found))
    })
    .await?;
    let found = eventually(Duration::from_secs(30), "the metric counts it", || async {
        let n = operator.metric_with(
            "kubeflake_operator_foreign_leases_found_total",
            "kind=\"segment_counter\"",
        );
        anyhow::Ok((n >= 1.0).then_some(n))
    })
    .await?;
    ensure!(found == 1.0, "counted once: {found}");
    // Give the operator a few passes' time: it still never wrote the tenant's Lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admin_leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let now = admin_leases.get(COUNTER).await?;
    ensure!(
        now.metadata.resource_version == version,
        "the tenant's Lease was written: {:?} -> {:?}",
        version,
        now.metadata.resource_version
    );
    ensure!(
        now.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NEXT_ANNOTATION))
            .map(String::as_str)
            == Some("1"),
        "never raised"
    );
    let events = warnings(&ns, "ForeignLease").await?;
    ensure!(
        events.len() == 1,
        "one Event, not one per pass: {}",
        events.len()
    );

    // A person deletes it: the operator makes its own, labelled (so the policy guards it).
    admin_leases
        .delete(COUNTER, &DeleteParams::default())
        .await?;
    let own = eventually(
        Duration::from_secs(60),
        "the operator's own counter",
        || async {
            let Some(lease) = admin_leases.get_opt(COUNTER).await? else {
                return anyhow::Ok(None);
            };
            let labelled = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(COUNTER_LABEL))
                .map(String::as_str)
                == Some(SEQUENCE);
            anyhow::Ok(labelled.then_some(lease))
        },
    )
    .await?;
    ensure!(
        Counter::parse(&own)?.next == 1000,
        "created at spec.segment.start"
    );
    eventually(Duration::from_secs(60), "the sequence is ready", || async {
        let seq = sequences.get(SEQUENCE).await?;
        let status = seq.status.as_ref();
        let ready = condition(status, ConditionType::Ready).is_some_and(|c| c.status == "True");
        let clear =
            condition(status, ConditionType::ForeignLeases).is_some_and(|c| c.status == "False");
        anyhow::Ok((ready && clear).then_some(()))
    })
    .await?;
    drop(operator);
    Ok(())
}
