//! The operator against a real API server (docs/safety.md rules 1, 9, 10, 15). Pods are API
//! objects only: no kubelet runs them, which is all slot assignment needs.

mod operator_support;

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubeflake_crds::IdSequence;
use kubeflake_crds::slot_lease::FENCE_ANNOTATION;
use kubeflake_e2e::Cluster;
use operator_support::*;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(90);

fn uids(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.uid().unwrap()).collect()
}

fn scarce() -> serde_json::Value {
    json!({"layout": {"timestampBits": 49, "workerBits": 2, "sequenceBits": 12}})
}

async fn delete_pods(ns: &kubeflake_e2e::TestNamespace, names: &[String]) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    for name in names {
        api.delete(name, &DeleteParams::default().grace_period(0))
            .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_pods_get_distinct_slots_and_kubectl_shows_20_assigned() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-twenty").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "orders", json!({})).await?;
    let pods = create_pods(&ns, "orders", "app", 20).await?;
    let held = all_assigned(&ns, "orders", &uids(&pods), LIMIT).await?;
    let slots: HashSet<u32> = held.values().copied().collect();
    assert_eq!(slots.len(), 20, "distinct slots");
    let table = eventually(LIMIT, "kubectl get idseq to show 20 assigned", || async {
        let out = cluster
            .kubectl(&["get", "idseq", "-n", &ns.name])
            .await?
            .ok()?;
        Ok(out
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(2) == Some("20"))
            .then_some(out))
    })
    .await?;
    assert!(
        table.contains("CAPACITY") && table.contains("1024"),
        "{table}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule9_deleted_pods_free_their_slots_with_fences_kept_and_new_pods_get_them() -> Result<()>
{
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-reclaim").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "orders", scarce()).await?;
    let first = create_pods(&ns, "orders", "first", 4).await?;
    all_assigned(&ns, "orders", &uids(&first), LIMIT).await?;
    // Holders raise fences; pretend they did (a sidecar writes this annotation).
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ns.client.clone(), &ns.name);
    for l in slot_leases(&ns, "orders").await? {
        let patch = json!({"metadata": {"annotations": {FENCE_ANNOTATION: format!("{}", 1000 + l.slot.0)}}});
        leases
            .patch(&l.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let gone: Vec<String> = first[..2].iter().map(|p| p.name_any()).collect();
    let gone_uids: Vec<String> = first[..2].iter().map(|p| p.uid().unwrap()).collect();
    delete_pods(&ns, &gone).await?;
    let freed = eventually(LIMIT, "the deleted pods' slots to be released", || async {
        let leases = slot_leases(&ns, "orders").await?;
        let free: Vec<_> = leases.into_iter().filter(|l| l.holder.is_none()).collect();
        Ok((free.len() == 2).then_some(free))
    })
    .await?;
    for l in &freed {
        assert_eq!(
            l.fence.0,
            1000 + u64::from(l.slot.0),
            "fence kept on release"
        );
        assert!(l.released_at.is_some());
    }
    let second = create_pods(&ns, "orders", "second", 2).await?;
    let held = all_assigned(&ns, "orders", &uids(&second), LIMIT).await?;
    let freed_slots: HashSet<u32> = freed.iter().map(|l| l.slot.0).collect();
    for uid in uids(&second) {
        assert!(
            freed_slots.contains(&held[&uid]),
            "new pods got the freed slots"
        );
    }
    for l in slot_leases(&ns, "orders").await? {
        assert_eq!(
            l.fence.0,
            1000 + u64::from(l.slot.0),
            "fence kept on reassignment"
        );
        assert!(!gone_uids.contains(l.holder.as_ref().unwrap()));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_pods_than_slots_wait_the_sequence_reports_exhausted_and_describe_shows_it()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-exhausted").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "orders", scarce()).await?;
    let pods = create_pods(&ns, "orders", "app", 6).await?;
    let seqs: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(LIMIT, "Exhausted=True with 4 assigned", || async {
        let seq = seqs.get("orders").await?;
        let status = seq.status.unwrap_or_default();
        let exhausted = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Exhausted" && c.status == "True");
        Ok((exhausted && status.assigned == Some(4)).then_some(()))
    })
    .await?;
    let holders: HashSet<String> = slot_leases(&ns, "orders")
        .await?
        .into_iter()
        .filter_map(|l| l.holder)
        .collect();
    assert_eq!(holders.len(), 4);
    let holder = pods
        .iter()
        .find(|p| holders.contains(&p.uid().unwrap()))
        .unwrap();
    let waiting: Vec<String> = pods
        .iter()
        .map(|p| p.uid().unwrap())
        .filter(|u| !holders.contains(u))
        .collect();
    delete_pods(&ns, &[holder.name_any()]).await?;
    eventually(LIMIT, "a waiting pod to get the freed slot", || async {
        let now: HashSet<String> = slot_leases(&ns, "orders")
            .await?
            .into_iter()
            .filter_map(|l| l.holder)
            .collect();
        Ok(waiting.iter().any(|u| now.contains(u)).then_some(()))
    })
    .await?;
    let describe = eventually(
        LIMIT,
        "kubectl describe to show events and conditions",
        || async {
            let out = cluster
                .kubectl(&["describe", "idseq", "orders", "-n", &ns.name])
                .await?
                .ok()?;
            let complete = [
                "SlotsAssigned",
                "Exhausted",
                "SlotsReclaimed",
                "PodsWaiting",
                "Ready",
            ]
            .iter()
            .all(|w| out.contains(w));
            Ok(complete.then_some(out))
        },
    )
    .await?;
    assert!(describe.contains("pods wait"), "{describe}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule1_two_operators_and_a_burst_of_200_pods_never_give_a_slot_two_holders() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-two").await?;
    let (history, watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let a = Operator::start(cluster, &ns.name, "a")?;
    let b = Operator::start(cluster, &ns.name, "b")?;
    create_sequence(&ns, "orders", json!({})).await?;
    let pods = create_pods(&ns, "orders", "burst", 200).await?;
    let held = all_assigned(&ns, "orders", &uids(&pods), Duration::from_secs(180)).await?;
    assert_eq!(
        held.values().collect::<HashSet<_>>().len(),
        200,
        "200 distinct slots"
    );
    tokio::time::sleep(Duration::from_secs(1)).await; // let the watch catch up
    watch.abort();
    let problems = history.violations(&[]);
    assert!(
        problems.is_empty(),
        "{} lease versions; violations:\n{}",
        history.len(),
        problems.join("\n")
    );
    let conflicts: u64 = [&a, &b]
        .iter()
        .filter_map(|o| {
            o.metrics()
                .lines()
                .find(|l| l.starts_with("kubeflake_operator_write_conflicts_total "))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
                .map(|v| v as u64)
        })
        .sum();
    eprintln!(
        "two operators: {} lease versions, {conflicts} write conflicts resolved",
        history.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule1_two_operators_reassigning_released_leases_never_give_a_slot_two_holders()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-two-reuse").await?;
    let (history, watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let _a = Operator::start(cluster, &ns.name, "a")?;
    let _b = Operator::start(cluster, &ns.name, "b")?;
    // 4 slots: after the first round every assignment reuses an existing, released Lease,
    // and both operators see the same free ones.
    create_sequence(&ns, "orders", scarce()).await?;
    let mut reused = 0;
    let mut deleted: Vec<String> = Vec::new();
    for round in 0..3 {
        let pods = create_pods(&ns, "orders", &format!("round{round}"), 4).await?;
        let held = all_assigned(&ns, "orders", &uids(&pods), LIMIT).await?;
        assert_eq!(
            held.values().collect::<HashSet<_>>().len(),
            4,
            "round {round}"
        );
        if round > 0 {
            reused += held.len();
        }
        let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
        deleted.extend(uids(&pods));
        delete_pods(&ns, &names).await?;
        eventually(LIMIT, "every slot released", || async {
            let leases = slot_leases(&ns, "orders").await?;
            Ok(leases.iter().all(|l| l.holder.is_none()).then_some(()))
        })
        .await?;
    }
    assert_eq!(
        slot_leases(&ns, "orders").await?.len(),
        4,
        "no Lease beyond the 4 slots"
    );
    tokio::time::sleep(Duration::from_secs(1)).await; // let the watch catch up
    watch.abort();
    let problems = history.violations(&deleted);
    assert!(
        problems.is_empty(),
        "{} lease versions; violations:\n{}",
        history.len(),
        problems.join("\n")
    );
    eprintln!(
        "two operators, released leases: {reused} reassignments, {} lease versions",
        history.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule1_operator_killed_mid_burst_converges_without_giving_a_slot_twice() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-kill").await?;
    let (history, watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "orders", json!({})).await?;
    let creating = {
        let ns = kubeflake_e2e::TestNamespace {
            name: ns.name.clone(),
            client: ns.client.clone(),
        };
        tokio::spawn(async move { create_pods(&ns, "orders", "burst", 120).await })
    };
    eventually(LIMIT, "some slots to be assigned", || async {
        Ok((slot_leases(&ns, "orders").await?.len() >= 10).then_some(()))
    })
    .await?;
    operator.process.kill(); // kill -9, mid-burst
    let pods = creating.await??;
    operator.process.restart()?;
    let held = all_assigned(&ns, "orders", &uids(&pods), Duration::from_secs(180)).await?;
    assert_eq!(held.values().collect::<HashSet<_>>().len(), 120);
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let problems = history.violations(&[]);
    assert!(problems.is_empty(), "violations:\n{}", problems.join("\n"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule10_deleting_a_sequence_waits_for_released_slots_and_passed_fences_then_removes_leases()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-delete").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    let seq = create_sequence(&ns, "orders", scarce()).await?;
    let pods = create_pods(&ns, "orders", "app", 2).await?;
    all_assigned(&ns, "orders", &uids(&pods), LIMIT).await?;
    // A holder raised the fence of slot 0 to 6 s from now.
    let params = seq.spec.params()?;
    let now_ms = chrono::Utc::now().timestamp_millis() as u64;
    let fence = params.timebase.tick_at(now_ms + 6_000).unwrap().0;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ns.client.clone(), &ns.name);
    let slot0 = slot_leases(&ns, "orders")
        .await?
        .into_iter()
        .find(|l| l.slot.0 == 0)
        .unwrap();
    let patch = json!({"metadata": {"annotations": {FENCE_ANNOTATION: fence.to_string()}}});
    leases
        .patch(&slot0.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;

    let seqs: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    seqs.delete("orders", &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = seqs.get("orders").await?;
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "deletion requested"
    );
    assert_eq!(
        slot_leases(&ns, "orders").await?.len(),
        2,
        "leases kept while slots are held"
    );

    delete_pods(&ns, &pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        seqs.get_opt("orders").await?.is_some(),
        "still there: slot 0's fence is in the future"
    );
    assert_eq!(slot_leases(&ns, "orders").await?.len(), 2);

    eventually(
        LIMIT,
        "the sequence and its leases to go once the fence passed",
        || async {
            let gone = seqs.get_opt("orders").await?.is_none()
                && slot_leases(&ns, "orders").await?.is_empty();
            Ok(gone.then_some(()))
        },
    )
    .await?;
    assert!(
        chrono::Utc::now().timestamp_millis() as u64 >= now_ms + 6_000,
        "not before the fence passed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leader_election_one_replica_works_and_the_other_takes_over_when_it_dies() -> Result<()>
{
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-leader").await?;
    let elect = ["--leader-election-namespace", ns.name.as_str()];
    let a = Operator::start_with(cluster, &ns.name, "a", &elect)?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ns.client.clone(), &ns.name);
    let leader = eventually(LIMIT, "a leader", || async {
        let lease = leases.get_opt("kubeflake-operator-leader").await?;
        Ok(lease.and_then(|l| l.spec?.holder_identity))
    })
    .await?;
    assert_eq!(leader, "a");
    let b = Operator::start_with(cluster, &ns.name, "b", &elect)?;
    create_sequence(&ns, "orders", json!({})).await?;
    let first = create_pods(&ns, "orders", "first", 3).await?;
    all_assigned(&ns, "orders", &uids(&first), LIMIT).await?;
    assert_eq!(
        b.metric("kubeflake_operator_slot_assignments_total"),
        0.0,
        "the follower does no work"
    );
    a.process.kill();
    let second = create_pods(&ns, "orders", "second", 3).await?;
    all_assigned(&ns, "orders", &uids(&second), LIMIT).await?;
    assert_eq!(
        b.metric("kubeflake_operator_slot_assignments_total"),
        3.0,
        "the follower took over"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule9_a_silent_holder_loses_its_slot_after_a_lease_duration_a_renewing_one_never()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-silent").await?;
    let (history, watch) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    let spec =
        json!({"layout": {"timestampBits": 50, "workerBits": 1}, "lease": {"durationSeconds": 15}});
    create_sequence(&ns, "orders", spec).await?;
    let pods = create_pods(&ns, "orders", "app", 2).await?;
    let held = all_assigned(&ns, "orders", &uids(&pods), LIMIT).await?;
    let assigned_at = std::time::Instant::now();
    let renewing = format!("orders-slot-{}", held[&pods[0].uid().unwrap()]);
    let silent = format!("orders-slot-{}", held[&pods[1].uid().unwrap()]);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ns.client.clone(), &ns.name);
    // Pod 0 renews like a sidecar would (every 3 s); pod 1 never does.
    let released = eventually(
        Duration::from_secs(60),
        "the silent slot to be released",
        || async {
            let now =
                serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    k8s_openapi::jiff::Timestamp::now(),
                ))?;
            leases
                .patch(
                    &renewing,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"renewTime": now}})),
                )
                .await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let versions = history.versions.lock().unwrap().clone();
            Ok(versions
                .iter()
                .any(|(l, h)| *l == silent && h.is_none())
                .then(std::time::Instant::now))
        },
    )
    .await?;
    assert!(
        released.duration_since(assigned_at) >= Duration::from_secs(15),
        "released after {:?}, before a full lease duration",
        released.duration_since(assigned_at)
    );
    watch.abort();
    let versions = history.versions.lock().unwrap().clone();
    assert!(
        !versions.iter().any(|(l, h)| *l == renewing && h.is_none()),
        "the renewing holder kept its slot"
    );
    Ok(())
}

/// Rule 15 against the real API server: of a sequence whose IDs are stored in a key form
/// (bit-reversed, docs/layouts.md), a pod injected by 0.1.0 gets no slot, since its
/// sidecar does not know key forms and would issue other numbers than the sequence's other
/// pods, which could equal theirs; pods injected by this release, created after it, do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule15_a_pod_injected_by_0_1_gets_no_slot_of_a_sequence_with_a_key_form() -> Result<()> {
    use kubeflake_crds::contract::INJECTED_ANNOTATION;
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("op-key-form").await?;
    let _operator = Operator::start(cluster, &ns.name, "a")?;
    create_sequence(&ns, "orders", json!({"layout": {"bitReversed": true}})).await?;
    let injected = |version: &str| json!({INJECTED_ANNOTATION: version});
    let old = create_pods_with(&ns, "orders", "old", 2, None, injected("0.1.0")).await?;
    let new = create_pods_with(&ns, "orders", "new", 2, None, injected("0.2.0")).await?;
    // The operator saw the old pods before the new ones (one watch, in creation order).
    all_assigned(&ns, "orders", &uids(&new), LIMIT).await?;
    let holders: HashSet<String> = slot_leases(&ns, "orders")
        .await?
        .into_iter()
        .filter_map(|l| l.holder)
        .collect();
    for uid in uids(&old) {
        assert!(
            !holders.contains(&uid),
            "a pod injected by 0.1.0 holds a slot of a bit-reversed sequence: {holders:?}"
        );
    }
    Ok(())
}
