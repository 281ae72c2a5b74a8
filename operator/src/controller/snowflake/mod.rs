//! Snowflake mode: worker slots in slot Leases. One pass is
//! [`observe`] (caches, silence) -> [`plan`] (pure) -> [`apply`] (compare-and-swap writes)
//! -> [`events`] and [`status`] (pure) -> the one status writer, the Events and the status
//! written at once. Deletion runs the same pass
//! without handing out slots, then finishes (docs/safety.md rule 10).
//!
//! A pass plans only on a cache that shows the previous pass's own writes
//! ([`crate::controller::expectations`]), else it is put off briefly.
//!
//! A write that fails does not hide the ones that succeeded beside it: their Events,
//! expectations, metrics and status are published as if nothing had failed, and only then
//! is the first failure returned (so `error_policy` requeues). Otherwise a pod that got a
//! slot would show in no Event and not be counted in the status until a later pass.
//!
//! Slot reclaim (which slot goes, and when) is decided in [`plan`]; silence is measured in
//! [`crate::controller::silence`]; the writes that reclaim are in [`apply`].
//!
//! A slot Lease kubeflake did not make (rule 16: named like one of the sequence's, but not
//! labelled or not owned by it) is never planned with, written or deleted; its slot is
//! skipped and it is reported once ([`super::foreign`]).
//!
//! A slot Lease in a format this release does not understand (written by a newer
//! kubeflake) stops the pass before planning, in normal passes and in deletion alike:
//! nothing is assigned, reclaimed or deleted, `Ready=False LeaseFormatUnsupported` and a
//! Warning Event say which Lease and what to do ([`events::unreadable_lease`]).
//!
//! A sequence joined to an ID space (an `IdSpaceMembership` names it; issue 55, rule 17)
//! hands out only the slots of the blocks its cluster holds, with their limits, and none
//! while its membership gives no usable copy ([`super::id_spaces`]).

pub mod apply;
pub mod events;
pub mod observe;
pub mod plan;
pub mod status;

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kubeflake_crds::Tick;
use kubeflake_crds::sequence::{IdSequence, SequenceParams};
use kubeflake_crds::slot_lease::SlotLease;
use kubeflake_runtime::cpu::ThreadCpu;

use self::apply::Outcome;
use self::plan::{Observed, Plan};
use super::context::Context;
use super::error::Error;
use super::expectations::{Readiness, Written};
use super::finalizer;
use super::foreign;
use super::id_spaces::blocks::Blocks;
use super::update_status::update_status;
use super::validate::Teardown;
use crate::metrics::{SlotFigures, Source};
use kubeflake_crds::ownership::slot_of_name;

/// Writes in flight at once within one pass.
const WRITE_CONCURRENCY: usize = 8;
/// How soon a pass that lost a compare-and-swap race is repeated.
const AFTER_CONFLICT: Duration = Duration::from_millis(500);
/// How soon a pass put off for a cache behind its own writes is tried again (the watch
/// event of the write usually wakes it sooner).
const CACHE_BEHIND: Duration = Duration::from_millis(200);

/// What one pass saw and did.
struct Pass {
    leases: Vec<SlotLease>,
    /// What the sequence's ID space let the pass hand out.
    blocks: Blocks,
    plan: Plan,
    /// The writes that did not fail (conflicts and skips included).
    outcomes: Vec<Outcome>,
    /// Slots held after this pass's writes.
    assigned: i64,
    /// The first write that failed, returned once the outcomes above are published.
    failed: Option<Error>,
}

impl Pass {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|o| f(o)).count()
    }
}

/// A pass either planned and wrote, or waited for the cache to show the last pass's writes.
enum Ran {
    Planned(Box<Pass>),
    Deferred,
}

/// Observes, plans and writes; the caller publishes the Events. Put off
/// (without planning) while the cache does not show the previous pass's own writes yet.
async fn pass(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    params: Option<&SequenceParams>,
    lease_duration: Duration,
    now: Tick,
    capacity: u64,
) -> Result<Ran, Error> {
    let name = seq.name_any();
    let cached = |lease: &str| observe::lease_version(&ctx.leases, ns, lease);
    match ctx
        .expectations
        .readiness(ns, &name, cached, Instant::now())
    {
        Readiness::Current => {}
        Readiness::Behind { unseen } => {
            ctx.metrics.passes_deferred.inc();
            tracing::debug!(sequence = %name, namespace = ns, unseen, "pass put off: the cache does not show the last pass's writes yet");
            return Ok(Ran::Deferred);
        }
        Readiness::GaveUp { unseen } => {
            tracing::warn!(sequence = %name, namespace = ns, unseen, "the cache still does not show the last pass's writes; planning anyway (every write is a compare-and-swap)");
        }
    }
    // Foreign slot Leases found by a create (rule 16) are read again now and then: one
    // deleted frees its slot.
    foreign::recheck_slots(seq, ctx, ns).await?;
    // Rule 17: a joined sequence hands out slots of its blocks only. Deleted (no params):
    // nothing is handed out anyway.
    let blocks = match (params, &ctx.id_spaces) {
        (Some(p), Some(spaces)) => {
            spaces
                .blocks_of(&ctx.client, seq, p, now, lease_duration)
                .await
        }
        _ => Blocks::Lone,
    };
    // What a pass computes (no await until the plan is made) is measured in CPU time, which
    // depends only on this sequence's objects (the index), not on how busy the machine is.
    let compute = ThreadCpu::start();
    let (leases, foreign_cached) = match observe::sorted(&ctx.leases, seq) {
        Ok(sorted) => sorted,
        Err(e) if e.is_format() => {
            events::unreadable_lease(seq, ctx, &e).await?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let key_form = params.is_some_and(|p| !p.layout.is_time_ordered());
    // Sidecars injected before 0.2.0 know neither key forms nor the fence cap.
    let pods = observe::pods(
        &ctx.pods,
        ns,
        &name,
        key_form || blocks.needs_current_sidecars(),
    );
    let silent = ctx.silence.silent(ns, &name, &leases, lease_duration);
    // Slots whose Lease name a foreign Lease takes: known ones, and those the cache shows
    // (labelled for the sequence, but not named or owned as kubeflake's).
    let mut taken = ctx.metrics.foreign.taken_slots(ns, &name);
    taken.extend(
        foreign_cached
            .iter()
            .filter_map(|f| slot_of_name(&name, &f.name)),
    );
    let plan = plan::plan(&Observed {
        capacity,
        leases: &leases,
        pods: &pods,
        silent: &silent,
        now,
        assign: params.is_some() && seq.metadata.deletion_timestamp.is_none(),
        taken: &taken,
        blocks: &blocks,
    });
    if let Some(cpu) = compute.elapsed() {
        ctx.metrics.pass_cpu.observe(cpu.as_secs_f64());
    }
    let mut cached = std::collections::BTreeSet::new();
    for f in foreign_cached {
        let slot = slot_of_name(&name, &f.name);
        foreign::report(seq, ctx, &f, slot, Source::Cache).await;
        cached.insert(f.name);
    }
    ctx.metrics.foreign.seen_in_cache(ns, &name, &cached);
    let results: Vec<(Written, Result<Outcome, Error>)> = futures::stream::iter(plan.steps.clone())
        .map(|step| async {
            let written = apply::written_by(&name, &step);
            (written, apply::execute(step, seq, ns, params, ctx).await)
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    // What the next pass waits to see: every write that succeeded, also when another failed.
    let writes = results
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                Ok(Outcome::Assigned { .. } | Outcome::Released { .. } | Outcome::CapRaised { .. })
            )
        })
        .map(|(w, _)| w.clone())
        .collect();
    ctx.expectations.expect(ns, &name, writes, Instant::now());
    let mut outcomes = Vec::with_capacity(results.len());
    let mut failed = None;
    for (written, result) in results {
        match result {
            Ok(Outcome::Foreign { slot, foreign: f }) => {
                foreign::report(seq, ctx, &f, Some(slot), Source::Read).await;
                outcomes.push(Outcome::Foreign { slot, foreign: f });
            }
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                // Every failure is logged; the first is returned after publishing.
                tracing::warn!(sequence = %name, namespace = ns, lease = %written.lease, error = %e, "a slot lease write failed; the pass is repeated");
                failed.get_or_insert(e);
            }
        }
    }
    let mut pass = Pass {
        leases,
        blocks,
        plan,
        outcomes,
        assigned: 0,
        failed,
    };
    let assigned_now = pass.count(|o| matches!(o, Outcome::Assigned { .. })) as i64;
    let released_now = pass.count(|o| matches!(o, Outcome::Released { .. })) as i64;
    pass.assigned = (pass.plan.assigned as i64 + assigned_now - released_now).max(0);
    // Every planned pass, so the waiting gauges return to 0 once no pod waits.
    let figures = SlotFigures {
        assigned: pass.assigned as u64,
        capacity,
        waiting: pass.plan.still_waiting,
        oldest_waiting_since_ms: pass.plan.oldest_waiting_since.map(|t| t.timestamp_millis()),
    };
    ctx.metrics.set_slots(ns, &name, figures);
    Ok(Ran::Planned(Box::new(pass)))
}

/// Reconciles one live Snowflake sequence.
pub async fn reconcile(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    params: &SequenceParams,
) -> Result<Action, Error> {
    let lease_duration = Duration::from_secs(params.lease_duration_secs);
    let now = params.timebase.tick_at(status::now_ms()).unwrap_or(Tick(0));
    let capacity = params.layout.slot_count();
    let pass = match pass(seq, ctx, ns, Some(params), lease_duration, now, capacity).await? {
        Ran::Planned(pass) => pass,
        Ran::Deferred => return Ok(Action::requeue(CACHE_BEHIND)),
    };
    // A slot found taken by a foreign Lease: plan again soon, so the pod gets the next one.
    let conflicts = pass.count(|o| matches!(o, Outcome::Conflict | Outcome::Foreign { .. }));
    let why = status::why_waiting(&pass.blocks, capacity);
    let mut status =
        status::ready_status(seq, params, pass.assigned, pass.plan.still_waiting, &why);
    status::set_id_space(&mut status, seq, &pass.blocks);
    let status = foreign::with_condition(status, seq, ctx);
    // The pass's Events and its status are independent writes: made at once, so that the
    // next pass of a busy sequence starts an API round trip sooner.
    let (_, status_written) = tokio::join!(
        events::publish(seq, ctx, &pass.outcomes, pass.plan.still_waiting, &why),
        update_status(seq, ctx, status),
    );
    status_written?;
    if let Some(e) = pass.failed {
        return Err(e);
    }
    if conflicts > 0 {
        return Ok(Action::requeue(AFTER_CONFLICT));
    }
    // Look again in a while even without events: silence is noticed by time passing.
    Ok(Action::requeue(
        (lease_duration / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)),
    ))
}

/// Deletes a sequence safely, in either mode and whatever its spec (rule 10): releases the
/// slots of pods gone or silent, hands out none, and removes the leases and the finalizer
/// once no slot has a holder or a fence in the future.
pub async fn tear_down(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    spec: &Teardown,
) -> Result<Action, Error> {
    let now = match &spec.timebase {
        Ok(timebase) => timebase.tick_at(status::now_ms()).unwrap_or(Tick(0)),
        Err(_) => Tick(0),
    };
    let ran = pass(
        seq,
        ctx,
        ns,
        spec.params.as_ref(),
        spec.lease_duration,
        now,
        spec.capacity,
    )
    .await?;
    let mut pass = match ran {
        Ran::Planned(pass) => pass,
        Ran::Deferred => return Ok(Action::requeue(CACHE_BEHIND)),
    };
    let why = status::why_waiting(&pass.blocks, spec.capacity);
    events::publish(seq, ctx, &pass.outcomes, pass.plan.still_waiting, &why).await;
    let failed = pass.failed.take();
    if !finalizer::has_finalizer(seq) {
        return failed.map_or(Ok(Action::await_change()), Err);
    }
    let leases = &pass.leases;
    let changed = pass.count(|o| matches!(o, Outcome::Conflict | Outcome::Released { .. }));
    let held = leases.iter().filter(|l| l.holder.is_some()).count();
    let fenced = leases.iter().filter(|l| l.fence > now).count();
    if held > 0 || fenced > 0 || changed > 0 {
        let mut message =
            format!("deletion waits: {held} slots still held, {fenced} fences still in the future");
        if let Err(e) = &spec.timebase {
            // Without the epoch no fence can be judged passed (rule 10).
            message = format!(
                "{message}; spec.epoch no longer reads ({e}), so no fence can be judged \
                 passed: once the sidecars are gone and every fence is surely past, delete \
                 the slot Leases by hand"
            );
        }
        let status = status::deleting_status(seq, &message);
        update_status(seq, ctx, status).await?;
        return failed.map_or(Ok(Action::requeue(Duration::from_secs(2))), Err);
    }
    // A failed write was a release of a held slot, so the pass waited above; never delete
    // the leases after a failed write in any case.
    if let Some(e) = failed {
        return Err(e);
    }
    if !apply::delete_leases(ctx, ns, leases).await? {
        return Ok(Action::requeue(AFTER_CONFLICT));
    }
    finalizer::remove(seq, ctx).await?;
    let name = seq.name_any();
    ctx.metrics.forget(ns, &name);
    ctx.silence.forget(ns, &name);
    ctx.expectations.forget(ns, &name);
    tracing::info!(sequence = %name, namespace = ns, leases = leases.len(), "sequence deleted after its slots were released");
    Ok(Action::await_change())
}
