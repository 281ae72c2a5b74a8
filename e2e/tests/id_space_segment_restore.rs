//! Rule 22 with a real etcd restore (docs/design/2026-11-29-multicluster.md, "A member's
//! etcd restored from an older snapshot while its pods run", Segment): the shared control
//! plane is the hub and Segment member H; A is a Segment member on its own control plane.
//! Both run real cluster-mode sidecars issuing into Collectors, and their real operators
//! take ranges from the hub's counter through member tokens and the hub's policy.
//!
//! A's etcd is snapshotted while it runs, at a known generation of its membership (read
//! before and after the snapshot, equal); then every sidecar of A claims again (its blocks
//! lie above the snapshot's counter) and A's operator counts its generation up on the hub.
//! A's etcd is restored from the snapshot while its sidecars and operator keep running:
//! its counter Lease comes back below values already claimed and issued, with the ranges
//! of the snapshot. A's operator must find its status behind its entry on the hub, give
//! the ranges up and move the counter into a fresh range (Event `LocalBehind`,
//! `went_back_total{record="copy"}`, the status holding the hub's generation again); A's
//! sidecars issue again, a sidecar started after the check too. Every value of H and A: 0
//! duplicates.
//!
//! - `rule22_broken_twin_*`: the same restore with A's operator stopped first (no contact
//!   compares A's records with the hub), and a sidecar started after it: it claims from
//!   the restored counter, and the same checker must find the values issued twice.
//!
//! - `rule22_after_a_restore_new_and_quiet_pods_*`: A reaches the hub through a forwarder,
//!   runs under the Lease policy, and is cut from the hub before the restore; its operator
//!   is stopped before and started after it (a running one remembers the claim count and
//!   holds every claim back: `CounterWentBack`). A pod started after the restore, its
//!   sidecar holding its own pod-bound token, is not listed as a claimant while no contact
//!   compared A's copy with the hub (the operator's watch listed the restored store
//!   again): it claims nothing from the restored counter. A quiet pod, listed, that
//!   claimed before the snapshot and nothing after it (its own blocks lie below the
//!   restored counter), is then asked for more than it holds: it serves what it holds and
//!   refuses the restored counter, below the `next` its watch saw the others reach; its
//!   sidecar restarted (a container restart since the restore) refuses it too, from what
//!   the process before kept in the pod's state directory. With the hub back, the contact
//!   gives the ranges up, the new pod is listed and issues: 0 duplicates, the quiet pod's
//!   values included.
//!
//! What it does not cover: a claim that reached etcd in the last moments before the API
//! server stopped for the restore, before the other sidecars' watches delivered it
//! (docs/known-limits.md).
//!
//! Its own test binary: it stops and restores a control plane's etcd.

mod hub_support;
mod operator_support;
mod policy_support;
mod segment_support;
mod sidecar_support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use hub_support::forwarder::Forwarder;
use hub_support::{Hub, SEQUENCE, install_crds};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflake_crds::id_space::IdSpaceMembership;
use kubeflake_crds::segment_counter::counter_name;
use kubeflake_e2e::cluster::snapshot::EtcdSnapshot;
use kubeflake_e2e::{Cluster, TestNamespace, exposition};
use operator_support::{create_pods, create_pods_as, eventually};
use policy_support::{enforce_policy, generous_rbac, service_account, token, token_kubeconfig};
use segment_support::{LIMIT, Member, counter, no_value_twice, repeated, segment_space};
use sidecar_support::{Collector, Sidecar, get};

/// The two tests share A's control plane and restore its etcd: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Member A's control plane, started once; stopped by the exit hook, as the shared one is.
fn a_cluster() -> Result<&'static Cluster> {
    static A: OnceLock<Result<Cluster, String>> = OnceLock::new();
    Cluster::started_once(&A, "member A")
}

/// A's membership's `status.generation` (0 before the first count-up).
async fn generation(m: &Member) -> Result<i64> {
    let api: Api<IdSpaceMembership> = Api::namespaced(m.ns.client.clone(), &m.ns.name);
    Ok(api.get(SEQUENCE).await?.status.map_or(0, |s| s.generation))
}

/// The blocks each sidecar of `m` claimed so far.
fn claims(m: &Member) -> Vec<u64> {
    m.sidecars.iter().map(blocks_claimed).collect()
}

/// Both members joined the hub and serve: H on the shared control plane, A on its own.
async fn members(prefix: &str) -> Result<(Hub, Member, Member)> {
    let hub_cluster = Cluster::shared();
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, prefix, segment_space()).await?;
    let (h, a) = members_of(&hub, None).await?;
    Ok((hub, h, a))
}

/// H and A joined `hub` and serving, A through `server` when given.
async fn members_of(hub: &Hub, server: Option<&str>) -> Result<(Member, Member)> {
    let a_cluster = tokio::task::block_in_place(a_cluster)?;
    let mut h = Member::join(Cluster::shared(), "h", hub, None).await?;
    let mut a = Member::join(a_cluster, "a", hub, server).await?;
    h.serve("app", 2).await?;
    a.serve("app", 2).await?;
    eventually(LIMIT, "A's generation counted up on the hub", || async {
        Ok((generation(&a).await? > 0).then_some(()))
    })
    .await?;
    Ok((h, a))
}

/// A snapshot of A's etcd at a known generation (read before and after it, equal), then
/// every sidecar of A claims twice more (a claim in flight during the snapshot may have
/// been in it) and A's operator counts up on the hub: the restored counter is below
/// blocks every running sidecar of A holds, and the restored status behind the hub.
async fn snapshot_then_claims(a: &Member, name: &str) -> Result<(EtcdSnapshot, i64)> {
    let cluster = a.cluster;
    for attempt in 0..5 {
        let (before, claimed) = (generation(a).await?, claims(a));
        let snapshot = cluster.etcd_snapshot(&format!("{name}-{attempt}")).await?;
        if generation(a).await? != before {
            eprintln!("segment restore: A counted up during snapshot {attempt}: again");
            continue;
        }
        let next_then = counter(&a.ns).await?.next;
        eventually(
            LIMIT,
            "every sidecar of A claimed, A counted up",
            || async {
                let again = claims(a).iter().zip(&claimed).all(|(n, b)| *n >= b + 2);
                Ok((again && generation(a).await? > before).then_some(()))
            },
        )
        .await?;
        eprintln!(
            "segment restore: snapshot at generation {before} (counter near {next_then}); A's \
             sidecars claimed {:?} blocks since, its counter at {}",
            claims(a),
            counter(&a.ns).await?.next
        );
        return Ok((snapshot, before));
    }
    Err(anyhow!(
        "A counted up during each of 5 snapshots: no snapshot at a known generation"
    ))
}

/// The `LocalBehind` Events on A's membership.
async fn local_behind(a: &Member) -> Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(a.ns.client.clone(), &a.ns.name);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("LocalBehind"))
        .filter_map(|e| e.note)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_a_segment_members_etcd_restored_from_an_older_snapshot_gives_its_ranges_up_and_repeats_no_value()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let started = Instant::now();
    let (hub, h, mut a) = members("segr-hub").await?;
    let (snapshot, generation_then) = snapshot_then_claims(&a, "fixed").await?;
    let before = [h.count(), a.count()];
    let restoring = Instant::now();
    a.cluster.restore_etcd(&snapshot).await?;
    ensure!(
        generation(&a).await? <= generation_then,
        "the restore brought the membership's status back"
    );
    eprintln!(
        "segment restore: A's etcd restored in {:?}, counter at {}",
        restoring.elapsed(),
        counter(&a.ns).await?.next
    );
    // A's operator notices at its next contact and gives the restored ranges up.
    let went_back = r#"record="copy""#;
    eventually(LIMIT, "A's operator noticed the restore", || async {
        let counted = a
            .operator
            .metric_with("kubeflake_operator_id_space_went_back_total", went_back);
        Ok((counted >= 1.0).then_some(()))
    })
    .await
    .map_err(|e| anyhow!("{e:#}\n{}", a.log()))?;
    let notes = local_behind(&a).await?;
    ensure!(!notes.is_empty(), "no LocalBehind Event on A\n{}", a.log());
    eprintln!(
        "segment restore: noticed {:?} after the restore began: {}",
        restoring.elapsed(),
        notes[0]
    );
    // A sidecar started after the check, and every sidecar issuing again.
    a.serve("late", 1).await?;
    eventually(LIMIT, "H and A issue after the restore", || async {
        let now = [h.count(), a.count()];
        let ready = a.sidecars.iter().all(sidecar_support::Sidecar::ready);
        Ok((now[0] > before[0] && now[1] > before[1] + 1000 && ready).then_some(()))
    })
    .await
    .map_err(|e| anyhow!("{e:#}\n{}", a.log()))?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hub_entry = hub
        .registry()
        .await?
        .members
        .into_iter()
        .find(|m| m.name == "a")
        .map_or(0, |m| m.generation);
    let local = generation(&a).await?;
    ensure!(
        local > generation_then && local <= hub_entry,
        "A's status holds the hub's generation again: {local}, the hub's {hub_entry}"
    );

    let (h_ns, h_values, h_refused) = h.finish();
    let (a_ns, a_values, a_refused) = a.finish();
    let hub_next = no_value_twice(&hub, &[(&h_ns, &h_values), (&a_ns, &a_values)]).await?;
    eprintln!(
        "segment restore: h issued {} ({h_refused} refusals), a {} ({a_refused}), the hub's \
         counter at {hub_next}: 0 duplicates, {:?} in all",
        h_values.len(),
        a_values.len(),
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_broken_twin_a_segment_restore_no_contact_compares_repeats_values_and_the_checker_finds_them()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let (_hub, h, mut a) = members("segr-broken-hub").await?;
    let (snapshot, _) = snapshot_then_claims(&a, "broken").await?;
    // The broken step: nothing compares A's records with the hub after the restore.
    a.operator.process.kill();
    a.cluster.restore_etcd(&snapshot).await?;
    a.serve("late", 1).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, h_values, _) = h.finish();
    let (_, a_values, _) = a.finish();
    let (twice, first) = repeated(&[&h_values, &a_values]);
    eprintln!(
        "segment restore broken twin: h issued {}, a {}, {twice} duplicates (first {first:?})",
        h_values.len(),
        a_values.len()
    );
    if twice == 0 {
        bail!(
            "no duplicate found after a restore nobody checked: the suite could not see a \
             restored counter repeat values"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_after_a_restore_new_and_quiet_pods_claim_nothing_until_a_contact_compared_the_copy_with_the_hub()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let started = Instant::now();
    let hub_cluster = Cluster::shared();
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "segr-wait-hub", segment_space()).await?;
    let forwarder = Forwarder::start(hub_cluster.server()).await?;
    let (h, mut a) = members_of(&hub, Some(&forwarder.server())).await?;
    // The Lease policy in A's namespace (in the snapshot too): a pod's own token claims
    // only while the operator lists the pod; the operator and the test's sidecars are
    // cluster admins, exempt.
    for account in ["operator", "app", "bystander"] {
        service_account(&a.ns, account).await?;
    }
    generous_rbac(&a.ns).await?;
    sidecars_read_sequences(&a.ns).await?;
    enforce_policy(
        a.cluster,
        &a.ns.name,
        "operator",
        &["system:masters"],
        "bystander",
    )
    .await?;
    // The quiet pod: ready (it claimed its first blocks), then asked for nothing until
    // after the restore; not among A's sidecars, whose claims the snapshot waits for.
    let quiet_pods = create_pods(&a.ns, SEQUENCE, "quiet", 1).await?;
    let quiet = Sidecar::start_all_ready(a.cluster, &a.ns.name, &quiet_pods, SEQUENCE)
        .await?
        .pop()
        .context("the quiet pod's sidecar")?;
    // A claim of its spare right after start-up would still come before the snapshot.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet_claims_then = blocks_claimed(&quiet);
    let (snapshot, _) = snapshot_then_claims(&a, "wait").await?;
    // A cut from the hub, then restored, its operator stopped meanwhile and started
    // again (as a control plane's restore restarts what runs on it): nothing in its memory
    // tells the restored copy from the current one, and no contact can compare it.
    forwarder.switch(false);
    a.operator.process.kill();
    a.cluster.restore_etcd(&snapshot).await?;
    a.operator.process.restart()?;
    let late = create_pods_as(&a.ns, SEQUENCE, "late", 1, Some("app")).await?;
    let late = late.into_iter().next().context("the late pod")?;
    let uid = late.uid().context("a created pod has a UID")?;
    let token = token(a.cluster, &a.ns.name, "app", Some(&late)).await?;
    let kubeconfig = token_kubeconfig(a.cluster, &format!("{}-late", a.ns.name), &token)?;
    let sidecar = Sidecar::start_as(
        a.cluster,
        &a.ns.name,
        &late,
        SEQUENCE,
        false,
        Some(&kubeconfig),
    )?;
    let collector = Collector::start(sidecar.port);
    // The restarted operator's passes over the sequence (one every 2 s while it holds a
    // pod back, and at each change of the pod), with no contact possible.
    eventually(LIMIT, "A's operator started again", || async {
        let log = a.operator.process.log_tail(400);
        Ok((log.matches("caches synced: ready").count() >= 2).then_some(()))
    })
    .await
    .map_err(|e| anyhow!("{e:#}\n{}", a.log()))?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let listed = claimants(&a).await?;
    ensure!(
        !listed.contains(&uid) && collector.count() == 0,
        "with no contact since the restore, the new pod was listed ({}) and issued {} values\n{}",
        listed.contains(&uid),
        collector.count(),
        a.log()
    );
    let held_back = "are not listed as claimants";
    ensure!(
        a.operator.process.log_tail(400).contains(held_back),
        "A's operator did not say why the new pod waits\n{}",
        a.log()
    );
    eprintln!(
        "segment restore, new pod: held back with the hub cut off, {:?} in",
        started.elapsed()
    );
    // The quiet pod, still cut off: what it holds lies below the restored counter (it
    // claimed before the snapshot), and its next claim must refuse the counter.
    ensure!(
        blocks_claimed(&quiet) == quiet_claims_then,
        "the quiet pod claimed before the restore: the test needs it quiet"
    );
    let (quiet_values, quiet_refused) = take_until_refused(&quiet).await;
    let behind = sidecar_metric(&quiet, "kubeflake_segment_claims_refused_behind_total");
    ensure!(
        behind >= 1.0 && quiet_refused >= 3,
        "the quiet pod did not refuse the restored counter ({behind} claims refused behind, \
         {quiet_refused} answers 503, {} values)\n{}",
        quiet_values.len(),
        quiet.process.log_tail(30)
    );
    eprintln!(
        "segment restore, quiet pod: served {} values it held, then refused the restored \
         counter ({behind} claims refused behind)",
        quiet_values.len()
    );
    // Its container restarted since the restore: the new process saw nothing of the
    // counter before the restore, and starts from what the one before kept in the pod's
    // state directory: it refuses the restored counter too, and serves nothing.
    quiet.process.restart()?;
    eventually(
        LIMIT,
        "the restarted quiet sidecar refused the counter",
        || async {
            let behind = sidecar_metric(&quiet, "kubeflake_segment_claims_refused_behind_total");
            Ok((behind >= 1.0).then_some(()))
        },
    )
    .await
    .map_err(|e| anyhow!("{e:#}\n{}", quiet.process.log_tail(30)))?;
    let (restarted_values, _) = take_until_refused(&quiet).await;
    ensure!(
        restarted_values.is_empty(),
        "the restarted quiet sidecar served {} values from the restored counter",
        restarted_values.len()
    );
    eprintln!("segment restore, quiet pod restarted: refused the restored counter, served nothing");
    // The hub back: the contact gives the restored ranges up, then the pod is listed.
    forwarder.switch(true);
    let issuing = eventually(LIMIT, "the new pod listed and issuing", || async {
        let listed = claimants(&a).await?.contains(&uid);
        Ok((listed && collector.count() > 1000).then_some(()))
    })
    .await;
    if let Err(e) = issuing {
        let listed = claimants(&a).await?.contains(&uid);
        let (_, metrics) = get(sidecar.port, "/metrics").unwrap_or_default();
        let metrics: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("kubeflake_segment") && !l.contains("bucket"))
            .collect();
        bail!(
            "{e:#}: listed {listed}, {} values; the new pod's sidecar:\n{}\n{}\n{}",
            collector.count(),
            sidecar.process.log_tail(30),
            metrics.join("\n"),
            a.log()
        );
    }
    let went_back = a.operator.metric_with(
        "kubeflake_operator_id_space_went_back_total",
        r#"record="copy""#,
    );
    ensure!(
        went_back >= 1.0,
        "A's operator never noticed the restore\n{}",
        a.log()
    );
    a.sidecars.push(sidecar);
    a.collectors.push(collector);
    drop(quiet);
    let (h_ns, h_values, _) = h.finish();
    let (a_ns, mut a_values, _) = a.finish();
    a_values.extend(&quiet_values);
    let hub_next = no_value_twice(&hub, &[(&h_ns, &h_values), (&a_ns, &a_values)]).await?;
    eprintln!(
        "segment restore, new and quiet pods: h issued {}, a {} (the quiet pod {}), the \
         hub's counter at {hub_next}: 0 duplicates, {:?} in all",
        h_values.len(),
        a_values.len(),
        quiet_values.len(),
        started.elapsed()
    );
    Ok(())
}

/// A counter of a sidecar's metrics (0 when absent or unreachable).
fn sidecar_metric(sidecar: &Sidecar, name: &str) -> f64 {
    get(sidecar.port, "/metrics")
        .ok()
        .and_then(|(_, text)| exposition::value(&text, name))
        .unwrap_or(0.0)
}

/// The blocks a sidecar claimed so far.
fn blocks_claimed(sidecar: &Sidecar) -> u64 {
    sidecar_metric(sidecar, "kubeflake_segment_blocks_claimed_total") as u64
}

/// Values from `/ids` until three answers in a row are refusals (at most 60 requests):
/// the values, and the refusals seen.
async fn take_until_refused(sidecar: &Sidecar) -> (Vec<u64>, u32) {
    let (mut values, mut refused, mut in_a_row) = (Vec::new(), 0, 0);
    for _ in 0..60 {
        match get(sidecar.port, "/ids?count=1000") {
            Ok((200, body)) => {
                in_a_row = 0;
                values.extend(body.lines().filter_map(|l| l.parse::<u64>().ok()));
            }
            Ok(_) | Err(_) => {
                refused += 1;
                in_a_row += 1;
                if in_a_row == 3 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    (values, refused)
}

/// The pod UIDs A's counter lists as claimants.
async fn claimants(a: &Member) -> Result<Vec<String>> {
    let lease = Api::<Lease>::namespaced(a.ns.client.clone(), &a.ns.name)
        .get(&counter_name(SEQUENCE))
        .await?;
    Ok(kubeflake_crds::segment_counter::claimants(&lease))
}

/// The namespace's service accounts may read its IdSequences, as a sidecar does (the
/// `edit` role of [`generous_rbac`] covers Leases and Events, not kubeflake's resources).
async fn sidecars_read_sequences(ns: &TestNamespace) -> Result<()> {
    let name = "read-sequences";
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["kubeflake.io"], "resources": ["idsequences"],
                   "verbs": ["get", "list", "watch"]}],
    }))?;
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": format!("system:serviceaccounts:{}", ns.name)}],
    }))?;
    let pp = PostParams::default();
    Api::<Role>::namespaced(ns.client.clone(), &ns.name)
        .create(&pp, &role)
        .await?;
    Api::<RoleBinding>::namespaced(ns.client.clone(), &ns.name)
        .create(&pp, &binding)
        .await?;
    Ok(())
}
