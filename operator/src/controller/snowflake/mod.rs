//! Snowflake mode: worker slots in slot Leases. One pass is
//! [`observe`] (caches, silence) -> [`plan`] (pure) -> [`apply`] (compare-and-swap writes)
//! -> [`events`] -> [`status`] (pure) -> the one status writer. Deletion runs the same pass
//! without handing out slots, then finishes (docs/safety.md rule 10).
//!
//! Slot reclaim (which slot goes, and when) is decided in [`plan`]; silence is measured in
//! [`crate::controller::silence`]; the writes that reclaim are in [`apply`].

pub mod apply;
pub mod events;
pub mod observe;
pub mod plan;
pub mod status;

use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kubeflake_crds::Tick;
use kubeflake_crds::sequence::{IdSequence, SequenceParams};
use kubeflake_crds::slot_lease::SlotLease;

use self::apply::Outcome;
use self::plan::{Observed, Plan};
use super::context::Context;
use super::error::Error;
use super::finalizer;
use super::update_status::update_status;
use super::validate::Teardown;

/// Writes in flight at once within one pass.
const WRITE_CONCURRENCY: usize = 8;
/// How soon a pass that lost a compare-and-swap race is repeated.
const AFTER_CONFLICT: Duration = Duration::from_millis(500);

/// What one pass saw and did.
struct Pass {
    leases: Vec<SlotLease>,
    plan: Plan,
    outcomes: Vec<Outcome>,
    /// Slots held after this pass's writes.
    assigned: i64,
}

impl Pass {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|o| f(o)).count()
    }
}

/// Observes, plans, writes and publishes Events; `assign` is false while deleting.
async fn pass(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    params: Option<&SequenceParams>,
    lease_duration: Duration,
    now: Tick,
    capacity: u64,
) -> Result<Pass, Error> {
    let name = seq.name_any();
    let leases = observe::leases(&ctx.leases, ns, &name)?;
    let pods = observe::pods(&ctx.pods, ns, &name);
    let silent = ctx.silence.silent(ns, &name, &leases, lease_duration);
    let plan = plan::plan(&Observed {
        capacity,
        leases: &leases,
        pods: &pods,
        silent: &silent,
        now,
        assign: params.is_some() && seq.metadata.deletion_timestamp.is_none(),
    });
    let outcomes: Vec<Outcome> = futures::stream::iter(plan.steps.clone())
        .map(|step| apply::execute(step, seq, ns, params, ctx))
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect::<Vec<Result<Outcome, Error>>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    events::publish(seq, ctx, &outcomes, plan.still_waiting, capacity).await;
    let mut pass = Pass {
        leases,
        plan,
        outcomes,
        assigned: 0,
    };
    let assigned_now = pass.count(|o| matches!(o, Outcome::Assigned { .. })) as i64;
    let released_now = pass.count(|o| matches!(o, Outcome::Released { .. })) as i64;
    pass.assigned = (pass.plan.assigned as i64 + assigned_now - released_now).max(0);
    ctx.metrics
        .set_slots(ns, &name, pass.assigned as u64, capacity);
    Ok(pass)
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
    let pass = pass(seq, ctx, ns, Some(params), lease_duration, now, capacity).await?;
    let conflicts = pass.count(|o| matches!(o, Outcome::Conflict));
    let status = status::ready_status(seq, params, pass.assigned, pass.plan.still_waiting);
    update_status(seq, ctx, status).await?;
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
    let pass = pass(
        seq,
        ctx,
        ns,
        spec.params.as_ref(),
        spec.lease_duration,
        now,
        spec.capacity,
    )
    .await?;
    if !finalizer::has_finalizer(seq) {
        return Ok(Action::await_change());
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
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    if !apply::delete_leases(ctx, ns, leases).await? {
        return Ok(Action::requeue(AFTER_CONFLICT));
    }
    finalizer::remove(seq, ctx).await?;
    let name = seq.name_any();
    ctx.metrics.forget(ns, &name);
    ctx.silence.forget(ns, &name);
    tracing::info!(sequence = %name, namespace = ns, leases = leases.len(), "sequence deleted after its slots were released");
    Ok(Action::await_change())
}
