//! Segment sequences across control planes (issue 55, docs/safety.md rule 22). Each
//! member control plane has the Segment IdSequence `orders` with its own operator (the
//! real binary, reaching the hub through a member ServiceAccount token, so every take
//! passes the hub's RBAC and admission policy) and an IdSpaceMembership of one Segment
//! IdSpace; pods are API objects with real cluster-mode sidecars issuing into Collectors.
//! Each counter goes to format 3 with ranges from the hub's `spec.segment.next`; every
//! value of every sidecar is collected and checked.
//!
//! - `rule22_one_segment_sequence_*`: the shared control plane is the hub and member `a`,
//!   a second one member `b`: no value twice, each member's values inside ranges the hub
//!   handed out (below its counter).
//! - `rule22_segment_members_issue_through_*`: the fault schedule. The hub alone on the
//!   shared control plane, members `a` (through a loopback forwarder the test switches
//!   off) and `b` on two others. The hub's API server killed and started again: both keep
//!   issuing (Ready=False `HubUnreachable`, then `Joined`); `a` cut off from the hub: both
//!   keep issuing, a pod started in `a` meanwhile issues from the ranges `a` holds, and
//!   `a`'s operator shows the values left (read from its counter, not the hub); `a` back,
//!   `Joined`. The hub's IdSpace restored from a backup (`segment_support::backup`): kept
//!   while both issue; `a`'s sidecar asked for values `after` its ranges until `a` issues
//!   from a range taken after the backup; deleted and created from the kept copy (no UID or
//!   resourceVersion). Both refuse it (`HubWentBack`), take nothing from it and keep
//!   issuing; the real plugin's `hub recover` with both member kubeconfigs raises
//!   `spec.segment.next` (its JSON `nextAfter`) above every range they hold and every value
//!   they issued; each membership's `status.idSpaceUid` removed (the documented step), `b`
//!   then `a` `Joined`, both claiming above the recovered counter. Then every value: 0
//!   duplicates (with `hub recover` ignoring the members' holdings, `b` takes the values
//!   `a` issued after the backup). Meanwhile every query of the dashboard's Segment ranges
//!   row returns a series on a real Prometheus scraping `a`'s operator.
//! - `rule22_broken_twin_*`: the hub's administrator deletes the IdSpace and creates it
//!   again while `a` holds ranges (what `kubectl kubeflake hub recover` exists to avoid);
//!   `b` joins the new one and is handed the values `a` issues: the same checker must find
//!   the duplicates, so CI proves the suite can see one.
//!
//! The tests take turns: the schedule kills the shared API server.

mod hub_support;
mod operator_support;
mod plugin_support;
mod policy_support;
mod segment_support;
mod sidecar_support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use hub_support::forwarder::Forwarder;
use hub_support::{Hub, SPACE, install_crds};
use kube::api::{DeleteParams, PostParams};
use kubeflake_crds::id_space::IdSpace;
use kubeflake_e2e::dashboard;
use kubeflake_e2e::prometheus::{Prometheus, Target};
use kubeflake_e2e::{Cluster, ClusterOptions};
use operator_support::eventually;
use plugin_support::plugin_json;
use segment_support::backup::{self, Recovered};
use segment_support::{LIMIT, Member, counter, issuing, no_value_twice, repeated, segment_space};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The two member control planes besides the shared one, started once, side by side
/// (stopped when the process exits).
fn member_clusters() -> Result<&'static [Cluster; 2]> {
    static MEMBERS: OnceLock<Result<[Cluster; 2], String>> = OnceLock::new();
    MEMBERS
        .get_or_init(|| {
            std::thread::scope(|s| {
                let start = || Cluster::start(ClusterOptions::default());
                let (one, two) = (s.spawn(start), s.spawn(start));
                let join = |h: std::thread::ScopedJoinHandle<'_, Result<Cluster>>| {
                    h.join()
                        .map_err(|_| "starting it panicked".to_string())?
                        .map_err(|e| format!("{e:#}"))
                };
                Ok([join(one)?, join(two)?])
            })
        })
        .as_ref()
        .map_err(|e| anyhow!("a member control plane could not start: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_one_segment_sequence_in_two_control_planes_issues_no_value_twice() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let hub_cluster = Cluster::shared();
    let [b_cluster, _] = tokio::task::spawn_blocking(member_clusters).await??;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "seg-hub", segment_space()).await?;
    let mut a = Member::join(hub_cluster, "a", &hub, None).await?;
    a.serve("app", 2).await?;
    let mut b = Member::join(b_cluster, "b", &hub, None).await?;
    b.serve("app", 2).await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (a_ns, a_values, a_refused) = a.finish();
    let (b_ns, b_values, b_refused) = b.finish();
    ensure!(
        a_values.len() > 1000 && b_values.len() > 1000,
        "both members issue: a {} values ({a_refused} refusals), b {} ({b_refused})",
        a_values.len(),
        b_values.len()
    );
    let hub_next = no_value_twice(&hub, &[(&a_ns, &a_values), (&b_ns, &b_values)]).await?;
    println!(
        "a issued {}, b issued {}, the hub's counter at {hub_next}: 0 duplicates",
        a_values.len(),
        b_values.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_segment_members_issue_through_a_hub_outage_and_a_member_cut_off_without_one_duplicate()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let started = Instant::now();
    let hub_cluster = Cluster::shared();
    let [a_cluster, b_cluster] = tokio::task::spawn_blocking(|| {
        // Built before the schedule: the restore phase runs it.
        operator_support::workspace_binary("kubectl-kubeflake");
        member_clusters()
    })
    .await??;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "seg-faults-hub", segment_space()).await?;
    let forwarder = Forwarder::start(hub_cluster.server()).await?;
    let mut a = Member::join(a_cluster, "a", &hub, Some(&forwarder.server())).await?;
    let mut b = Member::join(b_cluster, "b", &hub, None).await?;
    a.serve("app", 2).await?;
    b.serve("app", 2).await?;
    // The dashboard's Segment ranges row: every query returns a series with a value on a
    // real Prometheus scraping A's operator (e2e prometheus checks the rows without a hub).
    let prom = Prometheus::start(
        &[Target::new("kubeflake-operator", a.operator.metrics_port)
            .label("namespace", &a.ns.name)],
        None,
    )?;
    let queries = dashboard::queries(|row| row == dashboard::ID_SPACE_SEGMENT_ROW)?;
    ensure!(queries.len() >= 4, "the Segment row's queries: {queries:?}");
    let ns = a.ns.name.clone();
    let dashboard_checked = tokio::task::spawn_blocking(move || {
        dashboard::wait_every_query(&prom, &queries, &ns, Duration::from_secs(90))
    });
    let mut before = [a.count(), b.count()];
    tokio::time::sleep(Duration::from_secs(2)).await;
    before = issuing(&[&a, &b], &before, "both joined")?
        .try_into()
        .map_err(|_| anyhow!("two members"))?;
    eprintln!(
        "segment faults: two members issuing after {:?}",
        started.elapsed()
    );

    // The hub's API server killed: both say HubUnreachable and keep issuing.
    hub_cluster.kill_apiserver();
    let down = async {
        a.ready_is("False", "HubUnreachable").await?;
        b.ready_is("False", "HubUnreachable").await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        issuing(&[&a, &b], &before, "the hub was down")
    }
    .await;
    hub_cluster.start_apiserver().await?;
    down?;
    a.ready_is("True", "Joined").await?;
    b.ready_is("True", "Joined").await?;
    eprintln!(
        "segment faults: hub killed and started again, both issued throughout, {:?} in",
        started.elapsed()
    );

    // A cut off from the hub: both keep issuing, a pod started in A meanwhile issues from
    // the ranges A holds, and A's operator shows the values left (read from its counter).
    forwarder.switch(false);
    let before = [a.count(), b.count()];
    let cut = async {
        a.ready_is("False", "HubUnreachable").await?;
        a.serve("late", 1).await?;
        let left = a.operator.metric_with(
            "kubeflake_operator_id_space_segment_values_left",
            r#"membership="orders""#,
        );
        ensure!(
            left > 0.0,
            "A's operator shows no values left while cut off:\n{}",
            a.operator.metrics()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        issuing(&[&a, &b], &before, "A was cut off from the hub")?;
        b.ready_is("True", "Joined").await
    }
    .await;
    forwarder.switch(true);
    cut?;
    a.ready_is("True", "Joined").await?;
    eprintln!(
        "segment faults: A cut off and back, both issued throughout, {:?} in",
        started.elapsed()
    );

    // The hub's IdSpace restored from a backup taken while both issued: refused by both,
    // recovered by `hub recover` from both member clusters, joined again.
    let recovered = restored_and_recovered(&hub, [&a, &b]).await?;
    eprintln!(
        "segment faults: hub restored from a backup and recovered (segment.next {} -> {}), \
         both issued throughout, {:?} in",
        recovered.backup_next,
        recovered.next_after,
        started.elapsed()
    );

    dashboard_checked.await??;
    let (a_ns, a_values, a_refused) = a.finish();
    let (b_ns, b_values, b_refused) = b.finish();
    let driven = &recovered.driven;
    let (twice, first) = repeated(&[&a_values, driven, &b_values]);
    eprintln!(
        "segment faults: a issued {} ({a_refused} refusals; {} asked for `after` its ranges), \
         b {} ({b_refused}), {twice} duplicates (first {first:?})",
        a_values.len(),
        driven.len(),
        b_values.len(),
    );
    let issued = [(&a_ns, &a_values[..]), (&a_ns, driven), (&b_ns, &b_values)];
    let hub_next = no_value_twice(&hub, &issued).await?;
    recovered.check()?;
    eprintln!(
        "segment faults: the hub's counter at {hub_next}: 0 duplicates, {:?} in all",
        started.elapsed()
    );
    Ok(())
}

/// Rule 22, a Segment hub restored from a backup while its members issue: the IdSpace kept
/// (as a backup tool keeps it) while both issue; both take ranges until one issues from
/// values above the kept counter; the IdSpace deleted and created from the kept copy. Both
/// refuse it (`HubWentBack`: a new UID, a revision behind what they saw), take nothing from
/// it and keep issuing from the ranges they hold. The real plugin's `hub recover` with both
/// member clusters' kubeconfigs raises the counter; each membership's `status.idSpaceUid`
/// removed (the documented step after recovering a re-created IdSpace); both `Joined` and
/// issue from fresh ranges at or above the recovered counter.
async fn restored_and_recovered(hub: &Hub, members: [&Member; 2]) -> Result<Recovered> {
    let kept = backup::backup(hub).await?;
    let backup_next = backup::space_next(&kept);
    let driven = backup::issue_above(members[0], backup_next).await?;
    let before: Vec<usize> = members.iter().map(|m| m.count()).collect();
    backup::restore(hub, &kept).await?;
    for m in members {
        m.ready_is("False", "HubWentBack").await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    issuing(&members, &before, "the hub was restored from a backup")?;
    let restored_next = segment_support::hub_next(hub).await?;
    ensure!(
        restored_next == backup_next,
        "a member took a range from the restored hub: its counter at {restored_next}, the \
         backup's {backup_next}"
    );
    let mut held = 0;
    let mut issued = driven.iter().max().copied().unwrap_or(0);
    for m in members {
        held = held.max(backup::holds_below(m).await?);
        issued = issued.max(backup::highest_issued(m));
    }
    let kubeconfigs: Vec<String> = members
        .iter()
        .map(|m| m.cluster.kubeconfig().to_string_lossy().to_string())
        .collect();
    let mut args = vec!["hub", "recover", SPACE, "-n", hub.ns.name.as_str()];
    for k in &kubeconfigs {
        args.extend(["--member-kubeconfig", k.as_str()]);
    }
    let report = plugin_json(hub.cluster(), &args).await?;
    let number = |key: &str| {
        report[key]
            .as_u64()
            .with_context(|| format!("hub recover's {key}: {report}"))
    };
    let next_after = number("nextAfter")?;
    ensure!(
        number("nextBefore")? == backup_next,
        "hub recover read another counter than the restored one: {report}"
    );
    eprintln!(
        "segment faults: restored at {backup_next}; the members held below {held}, issued up \
         to {issued}; hub recover: {next_after}"
    );
    // B first: were the counter left at the backup's, B would take the values A issued.
    for m in members.iter().rev() {
        backup::forget_space_uid(m).await?;
        m.ready_is("True", "Joined").await?;
    }
    // Each takes a fresh range from the recovered counter and its sidecars claim from it.
    eventually(
        LIMIT,
        "both members claiming above the recovered counter",
        || async {
            for m in members {
                if counter(&m.ns).await?.next <= next_after {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    let before: Vec<usize> = members.iter().map(|m| m.count()).collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    issuing(&members, &before, "both joined the recovered hub")?;
    Ok(Recovered {
        driven,
        backup_next,
        held,
        issued,
        next_after,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule22_broken_twin_a_hub_space_created_again_hands_out_values_a_member_holds_and_the_checker_finds_them()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let hub_cluster = Cluster::shared();
    let [a_cluster, b_cluster] = tokio::task::spawn_blocking(member_clusters).await??;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "seg-broken-hub", segment_space()).await?;
    let mut a = Member::join(a_cluster, "a", &hub, None).await?;
    a.serve("app", 1).await?;
    // The broken step: the IdSpace deleted and created again (its counter back at none)
    // while A holds the first range. A's operator refuses the new space (its UID changed);
    // B joins it and is handed the values from the start again.
    let spaces = hub.spaces();
    spaces.delete(SPACE, &DeleteParams::default()).await?;
    eventually(LIMIT, "the IdSpace deleted", || async {
        Ok(spaces.get_opt(SPACE).await?.is_none().then_some(()))
    })
    .await?;
    spaces
        .create(
            &PostParams::default(),
            &IdSpace::new(SPACE, segment_space()),
        )
        .await?;
    let mut b = Member::join(b_cluster, "b", &hub, None).await?;
    b.serve("app", 1).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, a_values, _) = a.finish();
    let (_, b_values, _) = b.finish();
    let (twice, first) = repeated(&[&a_values, &b_values]);
    eprintln!(
        "segment broken twin: a issued {}, b {}, {twice} duplicates (first {first:?})",
        a_values.len(),
        b_values.len()
    );
    if twice == 0 {
        bail!(
            "no duplicate found with two members handed one range: the suite could not see \
             a range handed out twice"
        );
    }
    Ok(())
}
