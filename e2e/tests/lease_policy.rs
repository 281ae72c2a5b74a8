//! The API server, not good manners, keeps kubeflake's Leases to the protocol: the
//! ValidatingAdmissionPolicy built by `kubeflake_crds::lease_policy` (the chart ships the
//! same spec), against the real API server with its own tokens (`kubectl create token`,
//! pod-bound where it matters). Every write below is a transition of
//! `kubeflake_crds::slot_lease` or a segment claim, made by the identity it belongs to, or by
//! one it does not belong to.
//!
//! RBAC is deliberately generous here (every service account of the namespace may write
//! every Lease, as the sidecar binding allowed before): the refusals come from the policy
//! alone. With the policy's binding left out, the same attacks succeed, so the test can fail.

mod policy_support;

use anyhow::{Context, Result, ensure};
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::layout::{Slot, Tick};
use kubeflake_crds::segment_counter::{
    CLAIMANTS_ANNOTATION, NEXT_ANNOTATION, claimants_value, new_counter,
};
use kubeflake_crds::slot_lease::{
    self, BlockLimits, FENCE_CAP_ANNOTATION, Holder, Releaser, SEQUENCE_LABEL, SlotLease,
};
use kubeflake_crds::strict_oracle::{OracleLease, new_oracle_lease};
use kubeflake_e2e::{Cluster, TestNamespace};
use policy_support::{
    enforce_policy, forged_release, forged_takeover, generous_rbac, lease_spec, leases, refused,
    service_account, token, token_client,
};
use serde_json::json;

const SEQUENCE: &str = "orders";
const SEGMENT_SEQUENCE: &str = "invoices";

/// Who is who in one namespace: the operator's account, two labelled pods of the app's
/// account (pod-bound tokens), a pod of the Segment sequence, and an account that runs
/// no kubeflake pod.
struct World {
    ns: TestNamespace,
    operator: Client,
    pod_a: (String, Client),
    pod_b: (String, Client),
    claimer: (String, Client),
    bystander: Client,
}

/// A pod labelled for `sequence`, run by `account` (never scheduled: no node here).
async fn labelled_pod(
    ns: &TestNamespace,
    name: &str,
    sequence: &str,
    account: &str,
) -> Result<Pod> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {SEQUENCE_LABEL: sequence}},
        "spec": {"serviceAccountName": account, "containers": [{"name": "app", "image": "app"}]},
    }))?;
    Ok(api.create(&PostParams::default(), &pod).await?)
}

async fn world(cluster: &'static Cluster, prefix: &str) -> Result<World> {
    let ns = cluster.namespace(prefix).await?;
    for account in ["operator", "app", "bystander"] {
        service_account(&ns, account).await?;
    }
    generous_rbac(&ns).await?;
    let a = labelled_pod(&ns, "a", SEQUENCE, "app").await?;
    let b = labelled_pod(&ns, "b", SEQUENCE, "app").await?;
    let c = labelled_pod(&ns, "c", SEGMENT_SEQUENCE, "app").await?;
    let n = ns.name.as_str();
    let pod_client = |pod: &Pod, label: &str| {
        let pod = pod.clone();
        let label = format!("{n}-{label}");
        async move {
            let t = token(cluster, n, "app", Some(&pod)).await?;
            anyhow::Ok((
                pod.uid().unwrap_or_default(),
                token_client(cluster, &label, &t)?,
            ))
        }
    };
    let operator = token_client(
        cluster,
        &format!("{n}-operator"),
        &token(cluster, n, "operator", None).await?,
    )?;
    let bystander = token_client(
        cluster,
        &format!("{n}-bystander"),
        &token(cluster, n, "bystander", None).await?,
    )?;
    Ok(World {
        pod_a: pod_client(&a, "a").await?,
        pod_b: pod_client(&b, "b").await?,
        claimer: pod_client(&c, "c").await?,
        operator,
        bystander,
        ns,
    })
}

/// A slot lease of `slot` as the operator creates it (no owner: no IdSequence exists here,
/// and the garbage collector would remove a Lease whose owner is missing).
fn vacant(ns: &str, slot: u32) -> Lease {
    let mut seq = IdSequence::new(SEQUENCE, Default::default());
    seq.metadata.namespace = Some(ns.into());
    let mut lease = slot_lease::vacant(&seq, Slot(slot));
    lease.metadata.owner_references = None;
    lease
}

async fn replace(client: &Client, ns: &str, lease: &Lease) -> Result<Lease, kube::Error> {
    leases(client, ns)
        .replace(&lease.name_any(), &PostParams::default(), lease)
        .await
}

fn holder(uid: &str) -> Holder<'_> {
    Holder { uid, pod: "a" }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_only_the_operator_and_the_holder_pod_change_a_slot_lease_and_only_as_the_protocol_allows()
-> Result<()> {
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-slot").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_a, a) = &w.pod_a;
    let (uid_b, b) = &w.pod_b;
    let now = Utc::now();

    // Only the operator creates slot leases.
    refused(
        leases(b, ns)
            .create(&PostParams::default(), &vacant(ns, 1))
            .await,
        "pod B creates a slot lease",
        "only the operator assigns slots",
    )?;
    let created = leases(&w.operator, ns)
        .create(&PostParams::default(), &vacant(ns, 0))
        .await
        .context("the operator creates a vacant slot lease")?;
    let held = replace(
        &w.operator,
        ns,
        &slot_lease::assign(&created, holder(uid_a), &lease_spec(), now)?,
    )
    .await
    .context("the operator assigns the slot to pod A")?;

    // Pod A's sidecar renews and raises its fence.
    let held = replace(a, ns, &slot_lease::renew(&held, uid_a, Tick(500), now)?)
        .await
        .context("pod A renews its slot with its own token")?;

    // Nobody else may touch it, even writing exactly what a holder would.
    let forged = slot_lease::renew(&held, uid_a, Tick(900), now)?;
    refused(
        replace(b, ns, &forged).await,
        "pod B renews pod A's slot",
        "it is held by pod",
    )?;
    refused(
        replace(&w.bystander, ns, &forged).await,
        "a service account without a pod renews pod A's slot",
        "no pod-bound token",
    )?;
    let stolen = forged_takeover(&held, holder(uid_b), now)?;
    refused(
        replace(b, ns, &stolen).await,
        "pod B makes itself the holder",
        "only by the kubeflake operator",
    )?;
    refused(
        leases(b, ns)
            .delete(&held.name_any(), &DeleteParams::default())
            .await
            .map(|_| held.clone()),
        "pod B deletes pod A's slot lease",
        "only by the kubeflake operator",
    )?;
    let freed_by_b = forged_release(&held, Tick(0), now)?;
    refused(
        replace(b, ns, &freed_by_b).await,
        "pod B releases pod A's slot with fence 0",
        "it is held by pod",
    )?;

    // The holder may only renew or release: not hand the slot over, not lower the fence
    // while keeping it, not delete it.
    refused(
        replace(a, ns, &stolen).await,
        "pod A hands its slot to pod B",
        "may only renew it",
    )?;
    let mut lowered = held.clone();
    lowered
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(slot_lease::FENCE_ANNOTATION.into(), "100".into());
    refused(
        replace(a, ns, &lowered).await,
        "pod A lowers its fence",
        "kept or raised",
    )?;
    // The sequence's settings noted for the holder's sidecar are the operator's to write:
    // a holder that rewrote them (say, another datacenter ID) could make another
    // sequence's IDs.
    let mut other_spec = lease_spec();
    other_spec.datacenter_id = 9;
    let mut renoted = slot_lease::renew(&held, uid_a, Tick(600), now)?;
    renoted
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            slot_lease::SEQUENCE_SPEC_ANNOTATION.into(),
            json!({"leaseTransitions": 1, "spec": other_spec}).to_string(),
        );
    refused(
        replace(a, ns, &renoted).await,
        "pod A rewrites the sequence spec noted on its slot lease",
        "may only renew it",
    )?;
    refused(
        leases(a, ns)
            .delete(&held.name_any(), &DeleteParams::default())
            .await
            .map(|_| held.clone()),
        "pod A deletes its slot lease",
        "never create or delete",
    )?;

    // Pod A releases (rule 5's exception: down to its high water), then may no longer renew.
    let freed = replace(
        a,
        ns,
        &slot_lease::release(
            &held,
            Releaser::Holder {
                uid: uid_a,
                high_water: Tick(480),
            },
            now,
        )?,
    )
    .await
    .context("pod A releases its slot")?;
    refused(
        replace(
            a,
            ns,
            &slot_lease::renew(&held, uid_a, Tick(900), now).map(|mut l| {
                l.metadata.resource_version = freed.metadata.resource_version.clone();
                l
            })?,
        )
        .await,
        "pod A renews the slot it released",
        "the slot is free",
    )?;

    // The operator keeps assigning, reclaiming and fencing; and deletes. Its transitions
    // check the holder on the Lease as read: a held slot is not assigned, and a release
    // names the holder it reclaims from.
    let held_b = replace(
        &w.operator,
        ns,
        &slot_lease::assign(&freed, holder(uid_b), &lease_spec(), now)?,
    )
    .await
    .context("the operator gives the slot to pod B")?;
    let held_b = replace(b, ns, &slot_lease::renew(&held_b, uid_b, Tick(700), now)?)
        .await
        .context("pod B renews the slot it now holds")?;
    let reclaimed = replace(
        &w.operator,
        ns,
        &slot_lease::release(&held_b, Releaser::Operator { holder: uid_b }, now)?,
    )
    .await
    .context("the operator reclaims the slot")?;
    ensure!(
        slot_lease::SlotLease::parse(&reclaimed)?.fence == Tick(700),
        "the operator's release keeps the fence (rule 9)"
    );
    leases(&w.operator, ns)
        .delete(&reclaimed.name_any(), &DeleteParams::default())
        .await
        .context("the operator deletes a slot lease")?;

    // Leases that are not kubeflake's are the policy's business only if they pretend to be.
    leases(b, ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "app-leader"}, "spec": {"holderIdentity": "x"}}),
            )?,
        )
        .await
        .context("an app's own leader Lease is not the policy's business")?;
    Ok(())
}

/// A sidecar's claim: `next` and `claims` of the counter raised to these.
fn claim(next: u64, claims: u64) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"annotations": {
        NEXT_ANNOTATION: next.to_string(),
        kubeflake_crds::segment_counter::CLAIMS_ANNOTATION: claims.to_string(),
    }}}))
}

/// Patches the counter of [`SEGMENT_SEQUENCE`] in `ns` as `client`.
async fn patch_counter(
    ns: &str,
    client: &Client,
    p: Patch<serde_json::Value>,
) -> Result<Lease, kube::Error> {
    let name = kubeflake_crds::segment_counter::counter_name(SEGMENT_SEQUENCE);
    leases(client, ns)
        .patch(&name, &PatchParams::default(), &p)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_segment_counter_only_goes_up_and_only_the_operator_and_listed_claimants_write_it()
-> Result<()> {
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-counter").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_c, c) = &w.claimer;
    let (_, b) = &w.pod_b;

    refused(
        leases(c, ns)
            .create(
                &PostParams::default(),
                &new_counter(SEGMENT_SEQUENCE, ns, 1),
            )
            .await,
        "a sidecar creates the counter",
        "only by the kubeflake operator",
    )?;
    let mut counter = new_counter(SEGMENT_SEQUENCE, ns, 1000);
    counter
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CLAIMANTS_ANNOTATION.into(), uid_c.clone());
    leases(&w.operator, ns)
        .create(&PostParams::default(), &counter)
        .await
        .context("the operator creates the counter listing pod C")?;

    patch_counter(ns, c, claim(2000, 1))
        .await
        .context("pod C claims a block")?;
    refused(
        patch_counter(ns, b, claim(3000, 2)).await,
        "pod B (another sequence) claims",
        "may only raise",
    )?;
    refused(
        patch_counter(ns, &w.bystander, claim(3000, 2)).await,
        "a service account without a pod claims",
        "no pod-bound token",
    )?;
    refused(
        patch_counter(
            ns,
            c,
            Patch::Merge(json!({"metadata": {"annotations": {CLAIMANTS_ANNOTATION: "anyone"}}})),
        )
        .await,
        "pod C rewrites the claimants",
        "may only raise",
    )?;
    for (who, client) in [("pod C", c), ("the operator", &w.operator)] {
        refused(
            patch_counter(ns, client, claim(1500, 1)).await,
            &format!("{who} lowers next"),
            "may only go up, for every user",
        )?;
    }
    refused(
        patch_counter(ns, &cluster.client()?, claim(1500, 5)).await,
        "a cluster admin lowers next (keeping the claims up)",
        "may only go up, for every user",
    )?;
    patch_counter(ns, &w.operator, claim(2500, 1))
        .await
        .context("the operator raises next")?;
    Ok(())
}

/// A counter an operator before 0.2 created has no claimants list (docs/install.md,
/// "Upgrades and version skew"): until this release's operator lists the claimants, any
/// pod-bound token may raise it (as before 0.2), nobody may lower it, a token without a
/// pod may not write it; once listed, only the listed pods may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_a_counter_left_by_0_1_without_claimants_takes_raises_from_pods_until_the_operator_lists_them()
-> Result<()> {
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-legacy").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_c, c) = &w.claimer;
    let (_, b) = &w.pod_b;
    // As release 0.1.0 created it: no claimants annotation at all.
    let mut counter = new_counter(SEGMENT_SEQUENCE, ns, 1000);
    if let Some(annotations) = counter.metadata.annotations.as_mut() {
        annotations.remove(CLAIMANTS_ANNOTATION);
    }
    leases(&w.operator, ns)
        .create(&PostParams::default(), &counter)
        .await
        .context("the operator creates a counter without claimants")?;
    patch_counter(ns, c, claim(2000, 1))
        .await
        .context("pod C claims from the unlisted counter")?;
    patch_counter(ns, b, claim(3000, 2))
        .await
        .context("pod B claims from the unlisted counter")?;
    refused(
        patch_counter(ns, &w.bystander, claim(4000, 3)).await,
        "a service account without a pod claims",
        "no pod-bound token",
    )?;
    refused(
        patch_counter(ns, c, claim(2500, 3)).await,
        "pod C lowers the unlisted counter",
        "may only go up, for every user",
    )?;
    patch_counter(
        ns,
        &w.operator,
        Patch::Merge(json!({"metadata": {"annotations": {CLAIMANTS_ANNOTATION: uid_c}}})),
    )
    .await
    .context("the operator lists pod C")?;
    refused(
        patch_counter(ns, b, claim(4000, 3)).await,
        "pod B claims once the claimants are listed",
        "may only raise",
    )?;
    patch_counter(ns, c, claim(4000, 3))
        .await
        .context("pod C, listed, claims")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_without_the_policy_the_same_attacks_succeed() -> Result<()> {
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-off").await?;
    let ns = w.ns.name.as_str();
    let (uid_a, _) = &w.pod_a;
    let (uid_b, b) = &w.pod_b;
    let now = Utc::now();
    let created = leases(&w.operator, ns)
        .create(&PostParams::default(), &vacant(ns, 0))
        .await?;
    let held = replace(
        &w.operator,
        ns,
        &slot_lease::assign(&created, holder(uid_a), &lease_spec(), now)?,
    )
    .await?;
    let stolen = replace(b, ns, &forged_takeover(&held, holder(uid_b), now)?)
        .await
        .context("without the policy, RBAC alone lets pod B take pod A's slot")?;
    ensure!(slot_lease::SlotLease::parse(&stolen)?.holder.as_deref() == Some(uid_b.as_str()));
    let mut counter = new_counter(SEGMENT_SEQUENCE, ns, 1000);
    counter
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    leases(&w.operator, ns)
        .create(&PostParams::default(), &counter)
        .await?;
    leases(b, ns)
        .patch(
            &kubeflake_crds::segment_counter::counter_name(SEGMENT_SEQUENCE),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {NEXT_ANNOTATION: "1"}}})),
        )
        .await
        .context("without the policy, pod B lowers another sequence's counter")?;
    let (uid_c, c) = &w.claimer;
    let oracle = leases(&w.operator, ns)
        .create(&PostParams::default(), &oracle_lease(ns, &[uid_a]))
        .await?;
    let taken = replace(c, ns, &parsed(&oracle)?.take(uid_c, "10.0.0.7:7072", now))
        .await
        .context("without the policy, unlisted pod C takes the strict oracle lease")?;
    replace(b, ns, &parsed(&taken)?.renew(uid_c, now)?)
        .await
        .context("without the policy, pod B renews it for pod C")?;
    Ok(())
}

/// The strict oracle Lease of [`SEQUENCE`] as the operator creates it, listing `claimants`
/// (no owner: no IdSequence exists here).
fn oracle_lease(ns: &str, claimants: &[&str]) -> Lease {
    let mut lease = new_oracle_lease(SEQUENCE, ns);
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            CLAIMANTS_ANNOTATION.into(),
            claimants_value(claimants.iter().copied()),
        );
    lease
}

fn parsed(lease: &Lease) -> Result<OracleLease> {
    Ok(OracleLease::parse(lease.clone())?)
}

/// Issue 24: the oracle Lease of a strict sequence is taken, renewed and released only by
/// the sidecars of the pods the operator lists, each only for itself, changing only what
/// `kubeflake_crds::strict_oracle::OracleLease`'s transitions change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule14_only_listed_claimants_take_renew_or_release_the_strict_oracle_lease_and_only_for_themselves()
-> Result<()> {
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-oracle").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_a, a) = &w.pod_a;
    let (uid_b, b) = &w.pod_b;
    let (uid_c, c) = &w.claimer;
    let now = Utc::now();
    let address = "10.0.0.5:7072";

    // Only the operator creates it.
    refused(
        leases(a, ns)
            .create(&PostParams::default(), &oracle_lease(ns, &[uid_a]))
            .await,
        "pod A creates the oracle lease",
        "never create or delete it",
    )?;
    let created = leases(&w.operator, ns)
        .create(&PostParams::default(), &oracle_lease(ns, &[uid_a, uid_b]))
        .await
        .context("the operator creates the oracle lease listing pods A and B")?;

    // A listed pod takes it for itself, renews it.
    let taken = replace(a, ns, &parsed(&created)?.take(uid_a, address, now))
        .await
        .context("pod A takes the free oracle lease")?;
    ensure!(parsed(&taken)?.term == 1, "a take starts term 1");
    let held = replace(a, ns, &parsed(&taken)?.renew(uid_a, now)?)
        .await
        .context("pod A renews the oracle lease")?;

    // Nobody unlisted, nobody without a pod, and no listed pod for another.
    refused(
        replace(c, ns, &parsed(&held)?.take(uid_c, "10.0.0.7:7072", now)).await,
        "pod C (not listed) takes the oracle lease",
        "only by the kubeflake operator",
    )?;
    refused(
        replace(&w.bystander, ns, &parsed(&held)?.renew(uid_a, now)?).await,
        "a service account without a pod renews the oracle lease",
        "no pod-bound token",
    )?;
    refused(
        replace(b, ns, &parsed(&held)?.renew(uid_a, now)?).await,
        "pod B renews for pod A",
        "may only take it for itself",
    )?;
    refused(
        replace(b, ns, &parsed(&held)?.take(uid_a, "10.0.0.6:7072", now)).await,
        "pod B writes pod A's UID as a new holder",
        "may only take it for itself",
    )?;
    let mut emptied = Lease::clone(&parsed(&held)?.read);
    emptied
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = None;
    refused(
        replace(b, ns, &emptied).await,
        "pod B releases pod A's oracle lease",
        "may only take it for itself",
    )?;
    let mut skipped = parsed(&held)?.take(uid_b, "10.0.0.6:7072", now);
    skipped
        .spec
        .get_or_insert_with(Default::default)
        .lease_transitions = Some(5);
    refused(
        replace(b, ns, &skipped).await,
        "pod B takes it over raising leaseTransitions by 4",
        "raised by exactly 1",
    )?;

    // Even the holder changes nothing else, and never deletes it.
    let mut longer = parsed(&held)?.renew(uid_a, now)?;
    longer
        .spec
        .get_or_insert_with(Default::default)
        .lease_duration_seconds = Some(60);
    refused(
        replace(a, ns, &longer).await,
        "pod A lengthens the lease duration",
        "may change only spec.holderIdentity",
    )?;
    let mut alone = parsed(&held)?.renew(uid_a, now)?;
    alone
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CLAIMANTS_ANNOTATION.into(), uid_a.clone());
    refused(
        replace(a, ns, &alone).await,
        "pod A drops pod B from the claimants",
        "may change only spec.holderIdentity",
    )?;
    refused(
        leases(a, ns)
            .delete(&held.name_any(), &DeleteParams::default())
            .await
            .map(|_| held.clone()),
        "pod A deletes the oracle lease",
        "never create or delete it",
    )?;

    // The holder releases; another listed pod takes it (a new term).
    let released = replace(a, ns, &parsed(&held)?.release(uid_a)?)
        .await
        .context("pod A releases the oracle lease")?;
    ensure!(parsed(&released)?.holder.is_none());
    let taken_b = replace(b, ns, &parsed(&released)?.take(uid_b, "10.0.0.6:7072", now))
        .await
        .context("pod B takes the released oracle lease")?;
    ensure!(parsed(&taken_b)?.term == 2, "the next term");

    // The operator keeps the claimants and deletes.
    let relisted = leases(&w.operator, ns)
        .patch(
            &taken_b.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "resourceVersion": taken_b.metadata.resource_version,
                "annotations": {CLAIMANTS_ANNOTATION: uid_b},
            }})),
        )
        .await
        .context("the operator lists pod B alone")?;
    refused(
        replace(a, ns, &parsed(&relisted)?.take(uid_a, address, now)).await,
        "pod A, no longer listed, takes the oracle lease",
        "only by the kubeflake operator",
    )?;
    leases(&w.operator, ns)
        .delete(&relisted.name_any(), &DeleteParams::default())
        .await
        .context("the operator deletes the oracle lease")?;
    Ok(())
}

/// `lease` with its fence annotation set to `fence`, text as sent (a value the protocol's
/// transitions would never write).
fn with_fence(mut lease: Lease, fence: &str) -> Lease {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(slot_lease::FENCE_ANNOTATION.into(), fence.into());
    lease
}

/// A claim with `next` and `claims` sent as these texts.
fn claim_text(next: &str, claims: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"annotations": {
        NEXT_ANNOTATION: next,
        kubeflake_crds::segment_counter::CLAIMS_ANNOTATION: claims,
    }}}))
}

/// Issue 54, finding 4: the policy bounded fences and counters by digit count (19), so a
/// listed claimant could write `next = 9999999999999999999` (or 2^63 + 1), which
/// `Counter::parse` refuses, and every sidecar and the operator refused the counter for
/// good; a holder could write a fence no layout holds. Now every user, cluster admin and
/// operator included, is refused with a message naming the range, decided on the text
/// (a value `uint()` cannot hold is refused the same way, not by an evaluation error), and
/// the bounds themselves still go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_the_policy_refuses_a_counter_or_fence_beyond_what_the_parsers_accept() -> Result<()>
{
    use kubeflake_crds::lease_policy::FENCE_LIMIT;
    use kubeflake_crds::segment_counter::{Counter, LIMIT};
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-ranges").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_a, a) = &w.pod_a;
    let (uid_c, c) = &w.claimer;
    let admin = cluster.client()?;
    let now = Utc::now();
    let counter_range = format!("must be whole numbers from 0 to {LIMIT}");
    let fence_range = format!("must be a whole number of ticks from 0 to {FENCE_LIMIT}");

    // The counter: a listed claimant, the operator and a cluster admin alike.
    let mut counter = new_counter(SEGMENT_SEQUENCE, ns, 1000);
    counter
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CLAIMANTS_ANNOTATION.into(), uid_c.clone());
    leases(&w.operator, ns)
        .create(&PostParams::default(), &counter)
        .await
        .context("the operator creates the counter listing pod C")?;
    patch_counter(ns, c, claim(2000, 1))
        .await
        .context("pod C claims a block")?;
    let past_limit = (LIMIT + 1).to_string();
    for (next, claims, what) in [
        ("9999999999999999999", "2", "next 9,999,999,999,999,999,999"),
        (past_limit.as_str(), "2", "next 2^63 + 1"),
        ("18446744073709551616", "2", "next 2^64 (past uint)"),
        ("3000", past_limit.as_str(), "claims 2^63 + 1"),
        ("soon", "2", "next not a number"),
    ] {
        for (who, client) in [
            ("listed pod C", c),
            ("the operator", &w.operator),
            ("a cluster admin", &admin),
        ] {
            refused(
                patch_counter(ns, client, claim_text(next, claims)).await,
                &format!("{who} writes {what}"),
                &counter_range,
            )?;
        }
    }
    let at_limit = patch_counter(ns, c, claim(LIMIT, 2))
        .await
        .context("pod C raises next to 2^63, the limit itself")?;
    ensure!(
        Counter::parse(&at_limit)?.next == LIMIT,
        "the counter at its limit still parses"
    );

    // The slot: its holder, the operator and a cluster admin alike.
    let created = leases(&w.operator, ns)
        .create(&PostParams::default(), &vacant(ns, 0))
        .await
        .context("the operator creates a vacant slot lease")?;
    let held = replace(
        &w.operator,
        ns,
        &slot_lease::assign(&created, holder(uid_a), &lease_spec(), now)?,
    )
    .await
    .context("the operator assigns the slot to pod A")?;
    let held = replace(a, ns, &slot_lease::renew(&held, uid_a, Tick(500), now)?)
        .await
        .context("pod A renews its slot")?;
    let past_fence_limit = (FENCE_LIMIT + 1).to_string();
    for (fence, what) in [
        (past_fence_limit.as_str(), "fence 2^55"),
        ("9999999999999999999", "fence 9,999,999,999,999,999,999"),
        ("18446744073709551616", "fence 2^64 (past uint)"),
        ("soon", "a fence that is not a number"),
    ] {
        for (who, client) in [
            ("holder pod A", a),
            ("the operator", &w.operator),
            ("a cluster admin", &admin),
        ] {
            refused(
                replace(client, ns, &with_fence(held.clone(), fence)).await,
                &format!("{who} writes {what}"),
                &fence_range,
            )?;
        }
    }
    let at_limit = replace(a, ns, &with_fence(held.clone(), &FENCE_LIMIT.to_string()))
        .await
        .context("pod A raises its fence to 2^55 - 1, the limit itself")?;
    ensure!(
        slot_lease::SlotLease::parse(&at_limit)?.fence == Tick(FENCE_LIMIT),
        "the fence at its limit still parses"
    );
    Ok(())
}

fn with_cap(mut lease: Lease, cap: Option<&str>) -> Lease {
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    match cap {
        Some(cap) => annotations.insert(FENCE_CAP_ANNOTATION.into(), cap.into()),
        None => annotations.remove(FENCE_CAP_ANNOTATION),
    };
    lease
}

fn fence_and_cap(lease: &Lease) -> Result<(Tick, Option<Tick>)> {
    let parsed = slot_lease::SlotLease::parse(lease)?;
    Ok((parsed.fence, parsed.fence_cap))
}

/// Issue 55, rule 17: in a sequence joined to an ID space, a slot's holder may issue only
/// up to its block's bound, which the operator writes on the slot Lease as its fence cap.
/// The API server holds every holder to it, one that does not know the cap (an older
/// release) included: only the operator adds, raises or removes the cap; no write but the
/// exempt groups' leaves the fence above it, the operator's included; a cap that is not a
/// tick is refused. A renewal up to the cap, and the operator raising it, go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule17_only_the_operator_writes_the_fence_cap_and_no_holder_renews_past_it() -> Result<()>
{
    use kubeflake_crds::lease_policy::FENCE_LIMIT;
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-cap").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_a, a) = &w.pod_a;
    let (uid_b, b) = &w.pod_b;
    let admin = cluster.client()?;
    let now = Utc::now();
    let operator_only = "is written by the kubeflake operator only";
    let above_cap = format!("is above {FENCE_CAP_ANNOTATION}");

    // The operator assigns slot 0 in a block: fence raised to its floor, capped at its bound.
    let created = leases(&w.operator, ns)
        .create(&PostParams::default(), &vacant(ns, 0))
        .await
        .context("the operator creates a vacant slot lease")?;
    let limits = BlockLimits::new(Tick(1_000), Tick(2_000))?;
    let assigned =
        SlotLease::parse(&created)?.assign_in_block(holder(uid_a), &lease_spec(), now, limits)?;
    let held = replace(&w.operator, ns, &assigned)
        .await
        .context("the operator assigns slot 0 to pod A in a block")?;
    ensure!(fence_and_cap(&held)? == (Tick(1_000), Some(Tick(2_000))));

    // Pod A renews up to the cap (the protocol's renew stops there): admitted.
    let held = replace(a, ns, &slot_lease::renew(&held, uid_a, Tick(5_000), now)?)
        .await
        .context("pod A renews up to its cap")?;
    ensure!(fence_and_cap(&held)? == (Tick(2_000), Some(Tick(2_000))));

    // A holder that ignores the cap (an older release) is refused a fence past it.
    for fence in ["2001", "100000", &FENCE_LIMIT.to_string()] {
        refused(
            replace(a, ns, &with_fence(held.clone(), fence)).await,
            &format!("pod A renews past its cap to {fence}"),
            &above_cap,
        )?;
    }
    // The holder may not raise or remove the cap, with its fence kept or raised.
    for (cap, what) in [
        (Some("3000"), "raises its cap"),
        (Some("2000000"), "raises its cap far"),
        (None, "removes its cap"),
    ] {
        refused(
            replace(a, ns, &with_fence(with_cap(held.clone(), cap), "2500")).await,
            &format!("pod A {what} and renews to 2500"),
            operator_only,
        )?;
    }
    refused(
        replace(a, ns, &with_cap(held.clone(), Some("3000"))).await,
        "pod A raises its cap, fence kept",
        operator_only,
    )?;
    // Nor may a holder add a cap to a slot held without one (its sequence not joined).
    let plain = leases(&w.operator, ns)
        .create(&PostParams::default(), &vacant(ns, 1))
        .await?;
    let plain = replace(
        &w.operator,
        ns,
        &slot_lease::assign(
            &plain,
            Holder {
                uid: uid_b,
                pod: "b",
            },
            &lease_spec(),
            now,
        )?,
    )
    .await
    .context("the operator assigns slot 1 to pod B, no block")?;
    refused(
        replace(b, ns, &with_cap(plain, Some("99999"))).await,
        "pod B adds a cap to its slot",
        operator_only,
    )?;

    // The hub renewed the block: the operator raises the cap, and pod A renews up to it.
    let raised = replace(
        &w.operator,
        ns,
        &SlotLease::parse(&held)?.raise_cap(Tick(3_000))?,
    )
    .await
    .context("the operator raises the cap")?;
    let held = replace(a, ns, &slot_lease::renew(&raised, uid_a, Tick(5_000), now)?)
        .await
        .context("pod A renews up to the raised cap")?;
    ensure!(fence_and_cap(&held)? == (Tick(3_000), Some(Tick(3_000))));

    // The operator too keeps the fence at or below the cap, and writes only ticks.
    refused(
        replace(&w.operator, ns, &with_cap(held.clone(), Some("2500"))).await,
        "the operator writes a cap below the fence",
        &above_cap,
    )?;
    let past_limit = (FENCE_LIMIT + 1).to_string();
    for cap in ["soon", "-1", past_limit.as_str(), "18446744073709551616"] {
        for (who, client) in [("pod A", a), ("the operator", &w.operator)] {
            refused(
                replace(client, ns, &with_cap(held.clone(), Some(cap))).await,
                &format!("{who} writes the cap {cap:?}"),
                "fence-cap must be a whole number of ticks",
            )?;
        }
    }
    // Break glass: the exempt groups may repair a Lease by hand, cap included.
    replace(&admin, ns, &with_cap(held.clone(), Some("2500")))
        .await
        .context("a cluster admin lowers the cap by hand")?;
    Ok(())
}

/// docs/safety.md rule 22: a counter of a sequence joined to an ID space (format 3) is
/// claimed from only below its limit or inside the range its operator queued, by anyone (a
/// claim of 0.1.0, which knows no limit, included); a claimant moves to the queued range by
/// raising `next` into it, the one write it may make (next and claims, as before); nobody
/// but the exempt groups removes the limit, writes `next` outside the ranges or queues a
/// range below the limit. The claims are made by `segment_counter::take`, as the sidecar
/// makes them (`sidecar/src/segment/lease.rs` patches `next` and `claims`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule22_a_ranged_counter_is_claimed_only_inside_its_ranges_whoever_writes() -> Result<()> {
    use kubeflake_crds::segment_counter::{
        Counter, QUEUED_LIMIT_ANNOTATION, QUEUED_START_ANNOTATION, RANGE_LIMIT_ANNOTATION, take,
    };
    use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
    let cluster = Cluster::shared();
    let w = world(cluster, "lease-policy-ranges").await?;
    let ns = w.ns.name.as_str();
    enforce_policy(cluster, ns, "operator", &["system:masters"], "bystander").await?;
    let (uid_c, c) = &w.claimer;
    let annotate = |pairs: &[(&str, Option<&str>)]| {
        let map: serde_json::Map<String, serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_string(),
                    v.map_or(serde_json::Value::Null, |v| json!(v)),
                )
            })
            .collect();
        Patch::Merge(json!({"metadata": {"annotations": map}}))
    };
    let as_claim = |counter: &Counter| claim(counter.next, counter.claims);
    let read = |lease: Lease| Counter::parse(&lease).context("the counter reads");
    let mut counter = new_counter(SEGMENT_SEQUENCE, ns, 1000);
    let a = counter
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    a.insert(CLAIMANTS_ANNOTATION.into(), uid_c.clone());
    a.insert(FORMAT_ANNOTATION.into(), "3".into());
    a.insert(RANGE_LIMIT_ANNOTATION.into(), "1100".into());
    let seen = read(
        leases(&w.operator, ns)
            .create(&PostParams::default(), &counter)
            .await
            .context("the operator creates a format 3 counter: range [1000, 1100), pod C listed")?,
    )?;

    // Claims below the limit, the last one cut at it.
    let first = take(&seen, 90, 0)?;
    let seen = read(
        patch_counter(ns, c, as_claim(&first.counter))
            .await
            .context("pod C claims [1000, 1090)")?,
    )?;
    let last = take(&seen, 50, 0)?;
    ensure!(
        (last.start, last.end) == (1090, 1100),
        "cut at the limit: {last:?}"
    );
    let seen = read(
        patch_counter(ns, c, as_claim(&last.counter))
            .await
            .context("pod C claims the rest, [1090, 1100)")?,
    )?;
    ensure!(take(&seen, 10, 0).is_err(), "used up, nothing queued");
    refused(
        patch_counter(ns, c, claim(1110, 3)).await,
        "pod C claims past the limit as 0.1.0 would",
        "rule 22",
    )?;
    refused(
        patch_counter(ns, c, claim(5010, 3)).await,
        "pod C moves to a range nobody queued",
        "rule 22",
    )?;
    refused(
        patch_counter(ns, &w.operator, claim(1200, 3)).await,
        "the operator writes next past the limit",
        "rule 22",
    )?;
    refused(
        patch_counter(
            ns,
            &w.operator,
            annotate(&[
                (QUEUED_START_ANNOTATION, Some("50")),
                (QUEUED_LIMIT_ANNOTATION, Some("60")),
            ]),
        )
        .await,
        "the operator queues a range below the limit",
        "rule 22",
    )?;
    refused(
        patch_counter(
            ns,
            &w.operator,
            annotate(&[(QUEUED_START_ANNOTATION, Some("5000"))]),
        )
        .await,
        "the operator queues half a range",
        "rule 22",
    )?;
    let seen = read(
        patch_counter(
            ns,
            &w.operator,
            annotate(&[
                (QUEUED_START_ANNOTATION, Some("5000")),
                (QUEUED_LIMIT_ANNOTATION, Some("6000")),
            ]),
        )
        .await
        .context("the operator queues [5000, 6000)")?,
    )?;
    for (next, what) in [
        (3000, "between the ranges"),
        (6001, "past the queued range"),
    ] {
        refused(
            patch_counter(ns, c, claim(next, 4)).await,
            &format!("pod C claims {what}"),
            "rule 22",
        )?;
    }
    refused(
        patch_counter(
            ns,
            c,
            annotate(&[
                (QUEUED_START_ANNOTATION, Some("5000")),
                (QUEUED_LIMIT_ANNOTATION, Some("9000")),
            ]),
        )
        .await,
        "pod C widens the queued range",
        "may only raise",
    )?;
    let moved = take(&seen, 10, 0)?;
    ensure!(
        moved.moved && (moved.start, moved.end) == (5000, 5010),
        "{moved:?}"
    );
    let seen = read(
        patch_counter(ns, c, as_claim(&moved.counter))
            .await
            .context("pod C moves to the queued range in its claim")?,
    )?;
    ensure!(
        seen.range.and_then(|r| r.in_use(seen.next)) == Some((6000, None)),
        "moved: {seen:?}"
    );
    refused(
        patch_counter(ns, c, annotate(&[(RANGE_LIMIT_ANNOTATION, None)])).await,
        "pod C removes the limit",
        "may only raise",
    )?;
    refused(
        patch_counter(ns, &w.operator, annotate(&[(RANGE_LIMIT_ANNOTATION, None)])).await,
        "the operator removes the limit",
        "rule 22",
    )?;
    patch_counter(
        ns,
        &w.operator,
        annotate(&[
            (RANGE_LIMIT_ANNOTATION, Some("6000")),
            (QUEUED_START_ANNOTATION, None),
            (QUEUED_LIMIT_ANNOTATION, None),
        ]),
    )
    .await
    .context("the operator writes the range in use as the limit")?;
    patch_counter(
        ns,
        &cluster.client()?,
        annotate(&[(RANGE_LIMIT_ANNOTATION, Some("7000"))]),
    )
    .await
    .context("a cluster admin (exempt) raises the limit by hand")?;
    patch_counter(ns, &w.operator, claim(6500, 4))
        .await
        .context("the operator raises next below the limit")?;
    Ok(())
}
