//! Issue 55's acceptance suite (docs/design/2026-11-29-multicluster.md, plan step 4): one
//! ID space shared by FOUR control planes, each a member with its own IdSequence (the
//! same layout), its own operator process and real cluster-mode sidecars issuing IDs at a
//! high rate from low slot numbers, so that blocks that did not separate the members would
//! repeat IDs (the issue's repro: two clusters each handing out slots 0 and 1 repeated
//! 16,000 of 120,000 IDs). The shared control plane H is the hub and a member; A, B and
//! blue are members of their own control planes. Every ID of every member is collected
//! and checked: no ID twice, across clusters.
//!
//! - `rule17_18_19_*`, first blue/green: blue serves and a client calls one of its
//!   sidecars; green (H) joins meanwhile, with its own identity and blocks (blue keeps
//!   issuing, 0 refused); the client moves to green (0 requests refused or unanswered);
//!   blue's pods drain and blue leaves (its membership deleted: its operator releases its
//!   blocks through the finalizer, floor at least its bound; its control plane stopped);
//!   green grows into blue's blocks and issues there only above blue's bound. Then the
//!   hub killed, started again and paused while A and B keep issuing; A cut off from the
//!   hub (a loopback forwarder switched off) past its bound stops at the fence cap; B deleted without cleanup (processes killed, control plane
//!   stopped); their lapsed blocks are reclaimed by H a minute after their bounds, and H
//!   issues in one above its old owner's bound; switched back on, A drops its lost blocks,
//!   claims one and serves again from new pods.
//! - `rule18_*`: the broken twin. The hub's administrator hands a block A issues in to H
//!   without raising its floor to A's bound (what every hand-over must do); the same
//!   checker must find the duplicates, so CI proves the suite can see one.
//!
//! Its own test binary: it kills and pauses API servers. The two tests take turns. Over
//! 400 lines: one schedule, read top to bottom; the blue/green move and the moving client
//! are in clusters_support/.

mod clusters_support;
mod hub_support;
mod operator_support;
mod policy_support;
mod sidecar_support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clusters_support::moving_client::MovingClient;
use clusters_support::{blue_green, *};
use hub_support::forwarder::Forwarder;
use hub_support::{Hub, install_crds};
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};
use kubeflake_e2e::Cluster;
use operator_support::eventually;
use serde_json::json;
use sidecar_support::{Sidecar, get};

/// Slots per block: small, so a few pods fill a member's blocks and the space's blocks
/// are few enough for the administrator to list.
const BLOCK_SLOTS: i64 = 4;
/// The shortest tolerance the IdSpace accepts, and a renewal every 10 s: a member's bound
/// is 60-70 s ahead, and a lapsed block is reclaimed a minute after its bound.
const TOLERANCE: i64 = 60;
const RENEW_EVERY: i64 = 10;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn space() -> IdSpaceSpec {
    let mut spec = IdSpaceSpec::new(SpaceSequenceSpec::default(), BLOCK_SLOTS);
    spec.tolerance_seconds = TOLERANCE;
    spec.renew_every_seconds = RENEW_EVERY;
    spec
}

fn block_slots(index: i64) -> std::ops::Range<u32> {
    let first = (index * BLOCK_SLOTS) as u32;
    first..first + BLOCK_SLOTS as u32
}

/// Waits until `members` all show `Ready=<status> <reason>`.
async fn all_ready_is(members: &[&Member], status: &str, reason: &str) -> Result<()> {
    for m in members {
        m.ready_is(status, reason, LIMIT).await?;
    }
    Ok(())
}

/// Fails unless each of `members` issued more IDs than `before` says, with every sidecar
/// ready: they keep issuing while the hub is away.
fn issuing(members: &[&Member], before: &[usize], during: &str) -> Result<Vec<usize>> {
    let now: Vec<usize> = members.iter().map(|m| m.count()).collect();
    for ((m, b), n) in members.iter().zip(before).zip(&now) {
        ensure!(
            n > b && m.all_ready(),
            "{} stopped issuing while {during}: {b} then {n} IDs\n{}",
            m.name,
            m.readiness()
        );
    }
    Ok(now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule17_18_19_three_control_planes_issue_through_hub_outages_a_member_cut_off_past_its_bound_and_a_member_deleted_without_one_duplicate()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let started = Instant::now();
    let hub_cluster = Cluster::shared();
    let [a_cluster, b_cluster, blue_cluster] = tokio::task::block_in_place(member_clusters)?;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "hub", space()).await?;
    let forwarder = Forwarder::start(hub_cluster.server()).await?;
    // Blue serves first, and a client sends requests to one of its sidecars; green (H)
    // joins while it does, with its own identity and blocks, then A and B.
    let mut blue = Member::join(blue_cluster, "blue", &hub, None).await?;
    blue.holds(1).await?;
    let pods = blue.pods("app", 2).await?;
    blue.serve(&pods).await?;
    blue.holds(2).await?;
    let client = MovingClient::start(blue.name, blue.serving[0].sidecar.port);
    let blue_slots: Vec<u32> = blue.serving.iter().map(|s| s.slot).collect();
    let before = [blue.count()];
    let mut h = Member::join(hub_cluster, "h", &hub, None).await?;
    let mut a = Member::join(a_cluster, "a", &hub, Some(&forwarder.server())).await?;
    let mut b = Member::join(b_cluster, "b", &hub, None).await?;
    for m in [&mut h, &mut a, &mut b] {
        m.holds(1).await?;
        let pods = m.pods("app", 2).await?;
        m.serve(&pods).await?;
        m.holds(2).await?;
    }
    issuing(&[&blue], &before, "green and the others joined")?;
    // The rest of the space is held by a ghost member (written by the hub's administrator,
    // with a bound a day ahead), so that a block that lapses is the only one free.
    let ghost_bound = tick_in(&h.params, 86_400_000)?.0 as i64;
    let blocks = 1024 / BLOCK_SLOTS;
    edit_registry(&hub, |r| {
        r.members.push(serde_json::from_value(json!({
            "id": "ghost", "name": "ghost", "datacenterId": 0, "generation": 1}))?);
        let listed: Vec<i64> = r.blocks.iter().map(|b| b.index).collect();
        for index in (0..blocks).filter(|i| !listed.contains(i)) {
            r.blocks.push(serde_json::from_value(json!({
                "index": index, "term": 1, "floor": 0, "owner": "ghost", "bound": ghost_bound}))?);
        }
        Ok(())
    })
    .await?;
    eprintln!(
        "clusters: four members serving after {:?}",
        started.elapsed()
    );

    // Blue/green: the client's requests move to green; blue's pods drain; blue leaves (its
    // membership deleted: its operator releases each block, floor at bound) and its control
    // plane is stopped. Green grows into blue's two blocks at once (the only free ones),
    // and the pods it adds there get slots once blue's bounds passed.
    let released = blue_green::move_drain_and_leave(&hub, &mut blue, &h, &client).await?;
    let moved = client.finish();
    eprintln!(
        "clusters: blue/green: the client sent {} requests ({} IDs from blue, then {} from \
         green), {} refused (503), {} unanswered, at most {:?} between two IDs; blue's \
         blocks released {released:?} (index, bound, floor), {:?} in",
        moved.requests,
        count_of(&moved.issued, "blue"),
        count_of(&moved.issued, "h"),
        moved.refusals,
        moved.unanswered,
        moved.longest_gap,
        started.elapsed()
    );
    ensure!(
        moved.refusals == 0 && moved.unanswered == 0,
        "the client was refused or unanswered as traffic moved from blue to green; the first \
         refusals: {:?}",
        moved.refused
    );
    blue.vanish();
    let grow = h.pods("grow", 6).await?;
    // Grow's pods hold their slots from now on, their sidecars renewing them: a slot whose
    // Lease stays unchanged for a lease duration is released and given to the oldest
    // waiting pod, and green's new pods below could then take one in green's own blocks
    // instead of blue's old ones (a rehearsal on 2026-12-01 saw slot 10, block 2).
    let _grow_sidecars = grow
        .iter()
        .map(|(pod, _)| {
            let kubeconfig = Some(h.cluster.kubeconfig());
            Sidecar::start_as(h.cluster, &h.ns.name, pod, SEQUENCE, false, kubeconfig)
        })
        .collect::<Result<Vec<_>>>()?;
    let grown = h.holds(4).await?;
    ensure!(
        released
            .iter()
            .all(|(i, _, _)| grown.grants.iter().any(|g| g.block == *i)),
        "green claimed blue's released blocks {released:?}: {:?} (grow: {:?})",
        grown.grants,
        grow.iter().map(|(_, s)| s).collect::<Vec<_>>()
    );
    eprintln!(
        "clusters: green holds {:?} (block, floor, bound)",
        grown
            .grants
            .iter()
            .map(|g| (g.block, g.floor, g.bound))
            .collect::<Vec<_>>()
    );
    let green = operator_support::create_pods(&h.ns, SEQUENCE, "green", 2).await?;

    // The hub killed: A and B say HubUnreachable, and keep issuing.
    let before = [a.count(), b.count()];
    hub_cluster.kill_apiserver();
    let down = async {
        all_ready_is(&[&a, &b], "False", "HubUnreachable").await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        issuing(&[&a, &b], &before, "the hub was down")
    }
    .await;
    hub_cluster.start_apiserver().await?;
    down?;
    all_ready_is(&[&h, &a, &b], "True", "Joined").await?;
    // A renewed after the hub came back (its bounds a tolerance ahead again): then it is
    // cut off, while the hub is paused.
    eventually(
        LIMIT,
        "A's blocks renewed after the hub came back",
        || async {
            let fresh = tick_in(&a.params, 45_000)?.0 as i64;
            let bounds = bounds_of(&hub.registry().await?, &a.id);
            Ok((bounds.len() == 2 && bounds.iter().all(|(_, bound)| *bound > fresh)).then_some(()))
        },
    )
    .await?;
    forwarder.switch(false);
    let cut = Instant::now();
    let before = [a.count(), b.count()];
    signal_apiserver(hub_cluster, libc::SIGSTOP)?;
    let paused = async {
        all_ready_is(&[&b], "False", "HubUnreachable").await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        issuing(&[&a, &b], &before, "the hub was paused")
    }
    .await;
    signal_apiserver(hub_cluster, libc::SIGCONT)?;
    paused?;
    all_ready_is(&[&h, &b], "True", "Joined").await?;
    eprintln!("clusters: hub stopped, restarted and paused; A and B issued throughout");

    // B deleted without cleanup: its sidecars and operator killed (-9), its control plane
    // stopped. No person tells the hub; its blocks lapse and are reclaimed like A's.
    let b_bounds = bounds_of(&hub.registry().await?, &b.id);
    ensure!(b_bounds.len() == 2, "B holds two blocks: {b_bounds:?}");
    b.vanish();
    let gone = Instant::now();

    // A, cut off, reaches its bound: every sidecar refuses at the fence cap.
    let a_bounds = bounds_of(&hub.registry().await?, &a.id);
    ensure!(a_bounds.len() == 2, "A holds two blocks: {a_bounds:?}");
    eventually(
        Duration::from_secs(150),
        "A's sidecars to stop at the cap",
        || async {
            Ok(a.serving
                .iter()
                .all(|s| {
                    get(s.sidecar.port, "/readyz").is_ok_and(|(code, body)| {
                        code == 503 && body.contains("block_bound_reached")
                    })
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| a.readiness())?;
    eprintln!(
        "clusters: A stopped at its bound {:?} after it was cut off",
        cut.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = a.count();
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        a.count() == stopped,
        "A issued past its bound while cut off"
    );
    a.ready_is("False", "HubUnreachable", LIMIT).await?;

    // Meanwhile A's namespace is restored from a backup into H's control plane (the copy of
    // A's claims in the membership's status): H's operator must assign no slot of it.
    let (restored, restored_operator, restored_pods) = restore_into(&a, hub_cluster, 2).await?;
    // Refused as another cluster's copy at once, though its hub (through A's forwarder) is
    // unreachable now.
    let refused = hub_support::ready_is(
        &restored,
        SEQUENCE,
        "False",
        "MembershipOfAnotherCluster",
        LIMIT,
    )
    .await
    .with_context(|| restored_operator.process.log_tail(40))?;
    let (_, _, message) = hub_support::condition(&refused, "Ready").context("Ready")?;
    ensure!(
        message.contains("restored or copied"),
        "the refusal says the namespace was restored: {message}"
    );

    // Green's pods in blue's old blocks (assigned once blue's bounds passed) serve.
    let green = h.assigned(green, Duration::from_secs(150)).await?;
    ensure!(
        green.iter().all(|(_, slot)| released
            .iter()
            .any(|(i, _, _)| block_slots(*i).contains(slot))),
        "green's new pods hold slots in blue's old blocks {released:?}: {:?}",
        green.iter().map(|(_, s)| s).collect::<Vec<_>>()
    );
    h.serve(&green).await?;
    eprintln!(
        "clusters: green serves from slots {:?} of blue's old blocks; blue's pods had {:?}",
        green.iter().map(|(_, s)| s).collect::<Vec<_>>(),
        blue_slots
    );

    // Their blocks lapse and are reclaimed by the member left, each floor at the bound.
    let old: Vec<(&str, i64, i64)> = a_bounds
        .iter()
        .map(|(i, bound)| ("a", *i, *bound))
        .chain(b_bounds.iter().map(|(i, bound)| ("b", *i, *bound)))
        .collect();
    eventually(
        Duration::from_secs(180),
        "A's and B's blocks reclaimed",
        || async {
            let registry = hub.registry().await?;
            Ok(old
                .iter()
                .all(|(_, index, bound)| {
                    registry.blocks.iter().any(|block| {
                        block.index == *index
                            && block.owner.as_deref() != Some(a.id.as_str())
                            && block.owner.as_deref() != Some(b.id.as_str())
                            && block.floor >= *bound
                    })
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| h.log())?;
    eprintln!(
        "clusters: A's and B's blocks reclaimed {:?} after A was cut off, {:?} after B was gone",
        cut.elapsed(),
        gone.elapsed()
    );

    // H grows: its own blocks full (blue's old ones too), it claims a reclaimed block (the
    // lowest floor first), and its next pods get slots there.
    let fill = h.pods("fill", 6).await?;
    let grown = h.holds(5).await?;
    let taken: Vec<(&str, i64, i64)> = old
        .iter()
        .copied()
        .filter(|(_, i, _)| grown.grants.iter().any(|g| g.block == *i))
        .collect();
    ensure!(
        !taken.is_empty(),
        "H's spare is one of A's or B's old blocks {old:?}: {:?}",
        grown.grants
    );
    let more = h.pods("more", 2).await?;
    ensure!(
        more.iter()
            .all(|(_, slot)| { taken.iter().any(|(_, i, _)| block_slots(*i).contains(slot)) }),
        "H's new pods hold slots in the old blocks {taken:?}: {:?} (fill: {:?})",
        more.iter().map(|(_, s)| s).collect::<Vec<_>>(),
        fill.iter().map(|(_, s)| s).collect::<Vec<_>>()
    );
    h.serve(&more).await?;
    let from = h.count();
    eventually(LIMIT, "H issuing in a lost member's old block", || async {
        Ok((h.count() > from + 2_000).then_some(()))
    })
    .await?;

    // A switched back on: its renewals are refused (NotOwner, its blocks were reclaimed) and
    // it drops them; it claims a free block (one of the old ones: its floor at the old
    // owner's bound) and new pods serve there.
    forwarder.switch(true);
    let back = eventually(LIMIT, "A joined again with a new block", || async {
        let m = a.status().await?;
        let joined = hub_support::condition(&m, "Ready")
            .is_some_and(|(s, r, _)| s == "True" && r == "Joined");
        Ok(m.status.filter(|s| {
            joined
                && !s.grants.is_empty()
                && s.grants.iter().all(|g| {
                    taken.iter().all(|(_, i, _)| g.block != *i)
                        && old
                            .iter()
                            .all(|(_, i, bound)| g.block != *i || g.floor >= *bound)
                })
        }))
    })
    .await
    .with_context(|| a.log())?;
    eprintln!(
        "clusters: A back with blocks {:?}",
        back.grants.iter().map(|g| g.block).collect::<Vec<_>>()
    );
    let again = a.pods("again", 2).await?;
    a.serve(&again).await?;
    let from = a.count();
    eventually(LIMIT, "A issuing again", || async {
        Ok((a.count() > from + 2_000).then_some(()))
    })
    .await?;
    eprintln!(
        "clusters: A's pods cut off past their bound, after A is back:\n{}",
        a.readiness()
    );

    // The restored namespace: no slot assigned, nothing written on the hub for it.
    let held: Vec<String> = operator_support::slot_leases(&restored, SEQUENCE)
        .await?
        .into_iter()
        .filter_map(|l| l.holder)
        .filter(|holder| restored_pods.contains(holder))
        .collect();
    ensure!(
        held.is_empty(),
        "pods of the restored namespace hold slots: {held:?}"
    );
    let names: Vec<String> = hub
        .registry()
        .await?
        .members
        .into_iter()
        .map(|m| m.name)
        .collect();
    ensure!(
        names.len() == 5,
        "the hub lists h, a, b, blue (it left its blocks, not the space) and the ghost only: \
         {names:?}"
    );

    for m in [&mut h, &mut a, &mut b] {
        m.finish();
    }
    let blue_refused: u64 = blue.issued.iter().map(|i| i.data.refusals).sum();
    ensure!(
        blue_refused == 0,
        "blue's sidecars refused {blue_refused} requests while green joined or traffic moved"
    );
    let all: Vec<&Issued> = [&h, &a, &b, &blue]
        .iter()
        .flat_map(|m| m.issued.iter())
        .chain(&moved.issued)
        .collect();
    let layout = *h.layout();
    let crossed = check_across(&layout, &all)?;
    eprintln!(
        "clusters: {} IDs from 4 control planes, {} duplicates, {:?} in all\n{}",
        crossed.ids,
        crossed.duplicates,
        started.elapsed(),
        crossed.lines.join("\n")
    );
    ensure!(crossed.duplicates == 0, "IDs repeated across clusters");
    ensure!(
        crossed.ids > 50_000,
        "too few IDs collected: {}",
        crossed.ids
    );
    let of = |m: &str| -> Vec<&Issued> { all.iter().copied().filter(|i| i.member == m).collect() };
    // Rule 18: in a block H took over, its old owner issued at or below its bound and H
    // only above it.
    for (owner, index, bound) in &taken {
        let bound = *bound as u64;
        if let Some((_, hi)) = ticks_in(&layout, &of(owner), block_slots(*index))? {
            ensure!(
                hi <= bound,
                "{owner} issued tick {hi} in block {index} above its bound {bound}"
            );
        }
        let Some((lo, _)) = ticks_in(&layout, &of("h"), block_slots(*index))? else {
            bail!("H issued nothing in {owner}'s old block {index}");
        };
        ensure!(
            lo > bound,
            "H issued tick {lo} in {owner}'s old block {index}, not above its bound {bound}"
        );
        eprintln!(
            "clusters: block {index}: {owner} issued at or below tick {bound}, H from tick {lo}"
        );
    }
    // Rule 18 for blue's released blocks: blue issued at or below the bound the hub recorded
    // before it left, green only above the floor its release set (at least that bound).
    let mut used_again = 0;
    for (index, bound, floor) in &released {
        let (bound, floor) = (*bound as u64, *floor as u64);
        if let Some((_, hi)) = ticks_in(&layout, &of("blue"), block_slots(*index))? {
            ensure!(
                hi <= bound,
                "blue issued tick {hi} in block {index} above its bound {bound}"
            );
        }
        if let Some((lo, _)) = ticks_in(&layout, &of("h"), block_slots(*index))? {
            ensure!(
                lo > floor,
                "green issued tick {lo} in blue's old block {index}, not above {floor}"
            );
            used_again += 1;
            eprintln!(
                "clusters: blue's block {index}: blue's bound tick {bound}, released at \
                 {floor}, green from tick {lo}"
            );
        }
    }
    ensure!(
        used_again > 0,
        "green issued in none of blue's released blocks {released:?}"
    );
    Ok(())
}

/// IDs in `issued` of `member`.
fn count_of(issued: &[Issued], member: &str) -> usize {
    issued
        .iter()
        .filter(|i| i.member == member)
        .flat_map(|i| i.data.segments.iter())
        .map(Vec::len)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule18_broken_twin_a_block_handed_over_without_raising_its_floor_to_the_old_bound_repeats_ids_and_the_checker_finds_them()
-> Result<()> {
    let _turn = SERIAL.lock().await;
    let hub_cluster = Cluster::shared();
    let [a_cluster, _, _] = tokio::task::block_in_place(member_clusters)?;
    install_crds(hub_cluster).await?;
    let hub = Hub::create(hub_cluster, "hub-broken", space()).await?;
    let forwarder = Forwarder::start(hub_cluster.server()).await?;
    let mut a = Member::join(a_cluster, "a", &hub, Some(&forwarder.server())).await?;
    // A holds its first block before H joins, so A's blocks are the space's lowest (a fresh
    // space hands out the lowest index first): H's new pods below take the lowest free
    // slots they may use, which are then A's block, not H's own (a rehearsal on 2026-12-01
    // had H join first, and H's new pods took slots 2 and 3 of H's own block 0).
    a.holds(1).await?;
    let mut h = Member::join(hub_cluster, "h", &hub, None).await?;
    let mut a_slots = Vec::new();
    for m in [&mut a, &mut h] {
        m.holds(1).await?;
        let pods = m.pods("app", 2).await?;
        if m.name == "a" {
            a_slots = pods.iter().map(|(_, s)| *s).collect();
        }
        m.serve(&pods).await?;
        m.holds(2).await?;
    }
    // A is cut off from the hub just after a renewal: it never learns that its block is
    // handed over (a member in touch would release its slots there at its next contact,
    // ReleaseReason::OutsideBlocks), so its pods keep issuing there up to their cap, a
    // minute ahead, as a cut-off member's do.
    eventually(LIMIT, "A's blocks renewed before it is cut off", || async {
        let fresh = tick_in(&a.params, 50_000)?.0 as i64;
        let bounds = bounds_of(&hub.registry().await?, &a.id);
        Ok((bounds.len() == 2 && bounds.iter().all(|(_, bound)| *bound > fresh)).then_some(()))
    })
    .await?;
    forwarder.switch(false);
    // The broken hand-over: the block A's pods issue in is given to H with its floor kept
    // (0), not raised to A's bound. The registry is otherwise valid (revision counted up,
    // H's term counted up, a bound above the floor), so H's operator takes it.
    let a_block = i64::from(a_slots[0]) / BLOCK_SLOTS;
    let h_id = h.id.clone();
    edit_registry(&hub, |r| {
        let block = r
            .blocks
            .iter_mut()
            .find(|x| x.index == a_block)
            .context("A's block is listed")?;
        block.owner = Some(h_id.clone());
        block.term += 1;
        Ok(())
    })
    .await?;
    h.holds(3).await?;
    let more = h.pods("more", 2).await?;
    ensure!(
        more.iter()
            .all(|(_, slot)| block_slots(a_block).contains(slot)),
        "H's new pods hold slots in A's block {a_block}: {:?}",
        more.iter().map(|(_, s)| s).collect::<Vec<_>>()
    );
    h.serve(&more).await?;
    let from = h.count();
    eventually(LIMIT, "H issuing in A's block", || async {
        Ok((h.count() > from + 20_000).then_some(()))
    })
    .await?;
    a.finish();
    h.finish();
    let all: Vec<&Issued> = a.issued.iter().chain(&h.issued).collect();
    let crossed = check_across(a.layout(), &all)?;
    eprintln!(
        "broken hand-over: {} IDs, {} duplicates\n{}",
        crossed.ids,
        crossed.duplicates,
        crossed.lines.join("\n")
    );
    ensure!(
        crossed.duplicates > 0,
        "the checker found no duplicate although A and H issued in one block at once: the \
         suite could not see a broken hand-over"
    );
    Ok(())
}
