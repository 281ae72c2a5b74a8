//! The `Holding` state: acquire a slot the operator assigned (rules 4, 6: start above a
//! fence; rule 2: write both fences before issuing), keep it (renew the lease fence; the
//! local fence file is renewed by its own task), lose it (rule 3: stop at once) or release
//! it at shutdown (rule 5). Every fence write to the Lease goes through `HeldSlot`
//! ([`crate::slot`], rule 1: compare-and-swap); every file write runs off the async workers
//! ([`crate::renewer`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeflake_crds::Tick;
use kubeflake_crds::sequence::SequenceParams;

use super::{ClusterError, Ctx, Ending, Lifecycle, Unheld};
use crate::fence::{FenceGate, FenceIdentity, FenceRecord, LocalFence};
use crate::generator::{Generator, WorkerConfig};
use crate::renewer::{Renewer, RenewerError, off_worker};
use crate::slot::{HeldSlot, Released, SlotError};
use crate::state::{Serving, WaitReason};

/// A slot being served. The generator may use ticks up to the lower of the lease fence
/// and the local fence file's (the [`FenceGate`] caps one by the other).
pub(crate) struct Held {
    pub(crate) generator: Arc<Generator>,
    slot: HeldSlot,
    params: SequenceParams,
    /// Raises the local fence's cap to each lease fence written.
    gate: Arc<FenceGate>,
    /// Renews the local fence file, which it owns until stopped.
    renewer: Renewer<LocalFence>,
}

/// Why a slot could not be acquired.
#[allow(clippy::large_enum_variant)] // built once per failed acquisition
pub(crate) enum Acquire {
    /// Try again later, with the fence file handed back.
    Retry(SlotError, Unheld),
    /// A fence write died: fatal.
    Fatal(RenewerError),
}

/// The fence to start above (rules 4 and 6): the local file's, only if it was written for
/// this very sequence, slot, holder and acquisition; otherwise the lease's. Returns whether
/// the local one was used.
fn start_fence(
    local: Option<&FenceRecord>,
    identity: &FenceIdentity,
    lease_fence: Tick,
) -> (Tick, bool) {
    match local {
        Some(record) if record.identity == *identity => (Tick(record.fence_tick), true),
        _ => (lease_fence, false),
    }
}

/// The generator's configuration for `slot`; a slot the layout cannot hold is its own
/// error (the lease and the sequence disagree), not a lost slot.
fn worker_config(params: &SequenceParams, slot: u32) -> Result<WorkerConfig, SlotError> {
    Ok(WorkerConfig {
        layout: params.layout,
        timebase: params.timebase,
        datacenter: params.datacenter,
        slot: params
            .layout
            .check_slot(u64::from(slot))
            .map_err(|source| SlotError::SlotOutsideLayout { slot, source })?,
        max_drift_ms: params.max_drift_ms,
    })
}

/// `d` plus or minus up to 10%, so that sidecars started together do not renew together.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.9 + fastrand::f64() * 0.2)
}

/// Why a held slot stops being served at once.
enum Loss {
    /// Given to another pod (or freed).
    Lost,
    /// Rewritten in a format this release does not understand (a newer kubeflake): its
    /// holder and fence can no longer be read, so it is treated like a lost slot, never
    /// guessed at ([`SlotError::is_unreadable_format`]).
    UnreadableFormat(SlotError),
}

/// Reason of the Warning Event on the pod when its slot Lease or segment counter is in a
/// format this release does not understand (the operator's condition reason too).
pub(crate) const FORMAT_EVENT_REASON: &str = "LeaseFormatUnsupported";

/// What woke the renewal loop.
enum Wake {
    Renew,
    RenewerDied(RenewerError),
    Stop,
}

impl Ctx {
    /// Rules 4 and 6: picks the fence to start above, writes the first fences (the lease's,
    /// then the file's), and only then serves the generator.
    pub(crate) async fn acquire(
        &self,
        unheld: Unheld,
        params: &SequenceParams,
        lease: Lease,
    ) -> Result<Held, Acquire> {
        let Unheld { file, found } = unheld;
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let mut slot = match HeldSlot::new(leases, &self.config.pod.uid, lease) {
            Ok(slot) => slot,
            Err(e) => return Err(Acquire::Retry(e, Unheld { file, found })),
        };
        let identity = FenceIdentity {
            sequence: format!("{}/{}", self.config.pod.namespace, self.config.sequence),
            slot: slot.slot.slot.0,
            holder: self.config.pod.uid.clone(),
            acquisition: slot.slot.acquisition(),
        };
        // The record of an earlier container serves this acquisition only (used up here).
        let (start, from_local) = start_fence(found.as_ref(), &identity, slot.slot.fence);
        let worker = match worker_config(params, slot.slot.slot.0) {
            Ok(worker) => worker,
            Err(e) => return Err(Acquire::Retry(e, Unheld { file, found: None })),
        };
        // A fence beyond the layout leaves this slot nothing to issue: reported (the pod is
        // not ready, saying why) and tried again, never served from a wrapped position.
        let generator = match Generator::start_above(worker, start, self.clock.clone()) {
            Ok(generator) => Arc::new(generator),
            Err(e) => return Err(Acquire::Retry(e.into(), Unheld { file, found: None })),
        };
        let ahead = params
            .timebase
            .ticks_in_ms(self.config.local_fence_ahead.as_millis() as u64);
        let mut local = LocalFence::new(
            file,
            identity,
            generator.clone(),
            ahead,
            start,
            Some(start),
            None,
        );
        let gate = local.gate();
        let first = match self.renew_lease(&mut slot, &generator, &gate, params).await {
            Ok(()) => {
                let (back, written) = off_worker(local, LocalFence::renew)
                    .await
                    .map_err(Acquire::Fatal)?;
                local = back;
                written.map_err(SlotError::from)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = first {
            generator.stop();
            let file = local.into_file();
            return Err(Acquire::Retry(e, Unheld { file, found: None }));
        }
        tracing::info!(
            slot = slot.slot.slot.0,
            start_above_tick = start.0,
            from = if from_local {
                "local fence file"
            } else {
                "lease fence"
            },
            "holding the slot"
        );
        self.events.notify(
            false,
            "SlotAcquired",
            format!(
                "serving IDs as worker {} of {}",
                slot.slot.slot.0, self.config.sequence
            ),
        );
        self.state.publish(Serving::Snowflake(generator.clone()));
        Ok(Held {
            generator,
            slot,
            params: *params,
            gate,
            renewer: Renewer::spawn(
                local,
                LocalFence::renewal_period(self.config.local_fence_ahead),
            ),
        })
    }

    /// Raises the lease fence to a lease duration past the clock (or the generator), then
    /// lets the local fence follow it (rule 2).
    async fn renew_lease(
        &self,
        slot: &mut HeldSlot,
        generator: &Generator,
        gate: &FenceGate,
        params: &SequenceParams,
    ) -> Result<(), SlotError> {
        if !self.skew.clock_unstepped_since_check(self.clock.as_ref()) {
            return Err(SlotError::ClockStepped);
        }
        let now = generator.now_tick().map(|t| t.0).unwrap_or(0);
        let ahead = params
            .timebase
            .ticks_in_ms(params.lease_duration_secs.saturating_mul(1000));
        let target = Tick(now.max(generator.high_water_tick().0).saturating_add(ahead));
        let result = slot.raise_fence(target).await;
        let label = if result.is_ok() { "ok" } else { "error" };
        self.metrics.fence_writes.with_label_values(&[label]).inc();
        // Rule 2: the bound is the fence written, which the Lease's cap may hold below the
        // one asked for (rule 17), never `target`.
        let written = result?;
        gate.set_cap(written);
        self.note_block_bound(generator, slot, written, target);
        Ok(())
    }

    /// Renews the lease fence until shutdown (`Done`, still serving: in-flight requests
    /// drain first) or until the slot is lost (`Waiting`, with the fence file back). A
    /// renewal task that died is fatal.
    pub(crate) async fn keep(&self, mut held: Held) -> Result<Lifecycle, ClusterError> {
        let params = held.params;
        let renew_every = self
            .config
            .renew_every
            .unwrap_or(Duration::from_secs(params.lease_duration_secs) / 3);
        let mut next_renewal = tokio::time::Instant::now() + jittered(renew_every);
        loop {
            let wake = tokio::select! {
                () = tokio::time::sleep_until(next_renewal) => Wake::Renew,
                died = held.renewer.died() => Wake::RenewerDied(died),
                () = self.stopped() => Wake::Stop,
            };
            match wake {
                Wake::Stop => return Ok(Lifecycle::Done(Ending::Held(held))),
                Wake::RenewerDied(died) => {
                    // Rule 3 without a renewed local fence: stop at once, then exit.
                    let high_water = held.generator.stop();
                    self.state.publish(Serving::Stopping);
                    tracing::error!(error = %died, high_water_tick = high_water.0, "local fence renewal died: stopped issuing");
                    return Err(died.into());
                }
                Wake::Renew => {}
            }
            // A clock far off would push the fence far ahead: let it run out instead.
            if self
                .skew
                .check(
                    &self.client,
                    self.clock.as_ref(),
                    &self.metrics,
                    &self.events,
                )
                .await
                .is_err()
            {
                next_renewal = tokio::time::Instant::now() + Duration::from_secs(2);
                continue;
            }
            let Held {
                slot,
                generator,
                gate,
                ..
            } = &mut held;
            match self.renew_lease(slot, generator, gate, &params).await {
                Ok(()) => next_renewal = tokio::time::Instant::now() + jittered(renew_every),
                Err(SlotError::Lost) => return self.lose(held, Loss::Lost).await,
                Err(e) if e.is_unreadable_format() => {
                    return self.lose(held, Loss::UnreadableFormat(e)).await;
                }
                Err(e) => {
                    let lease_headroom_ms = held
                        .slot
                        .slot
                        .fence
                        .0
                        .saturating_sub(held.generator.now_tick().map(|t| t.0).unwrap_or(0))
                        * params.timebase.unit().millis();
                    tracing::warn!(error = %e, lease_headroom_ms, "lease renewal failed; serving within the fence, retrying");
                    next_renewal = tokio::time::Instant::now() + Duration::from_secs(2);
                }
            }
        }
    }

    /// The slot went to another pod, or its lease was rewritten in a format this release
    /// does not understand: stop issuing at once (rule 3), then take the fence file back
    /// from the renewal task (it waits for a write in flight) for the next slot.
    async fn lose(&self, held: Held, loss: Loss) -> Result<Lifecycle, ClusterError> {
        let Held {
            generator,
            slot,
            renewer,
            ..
        } = held;
        let high_water = generator.stop();
        let worker = slot.slot.slot.0;
        match loss {
            Loss::Lost => {
                self.state.publish(Serving::Waiting(WaitReason::SlotLost));
                tracing::error!(
                    slot = worker,
                    high_water_tick = high_water.0,
                    "slot lost: stopped issuing at once"
                );
                self.events.notify(
                    true,
                    "SlotLost",
                    format!("worker {worker} was given to another pod; stopped issuing"),
                );
            }
            Loss::UnreadableFormat(e) => {
                self.state
                    .publish(Serving::Waiting(WaitReason::SlotStart(e.to_string())));
                tracing::error!(
                    slot = worker,
                    high_water_tick = high_water.0,
                    "stopped issuing at once: {e}"
                );
                self.tell_unreadable_format(&e);
            }
        }
        let local = renewer.stop().await?;
        let (local, lowered) = off_worker(local, LocalFence::stop_and_lower).await?;
        if let Err(e) = lowered {
            // The record names this acquisition, which is over: it is never used again.
            tracing::warn!(error = %e, "could not lower the local fence file");
        }
        Ok(Lifecycle::Waiting(Unheld {
            file: local.into_file(),
            found: None,
        }))
    }

    /// Records a Lease refused for its format as a Warning Event on the pod, once per
    /// distinct refusal (the caller logs it every time).
    pub(crate) fn tell_unreadable_format(&self, e: &dyn std::fmt::Display) {
        let note = format!("{e}; this sidecar issues nothing from it");
        let mut told = self.format_told.lock().unwrap_or_else(|p| p.into_inner());
        if told.as_deref() != Some(note.as_str()) {
            self.events.notify(true, FORMAT_EVENT_REASON, note.clone());
            *told = Some(note);
        }
    }

    /// Shutdown, after the drain: stop for good, lower the local fence and the lease fence
    /// to the highest tick issued, and free the slot (rule 5). A renewal task that died is
    /// reported after the release.
    pub(crate) async fn release(&self, held: Held) -> Result<(), ClusterError> {
        let Held {
            generator,
            mut slot,
            renewer,
            ..
        } = held;
        let (high_water, died) = match renewer.stop().await {
            Ok(local) => match off_worker(local, LocalFence::stop_and_lower).await {
                Ok((_, Ok(high_water))) => (high_water, None),
                Ok((_, Err(e))) => {
                    tracing::warn!(error = %e, "could not lower the local fence");
                    (generator.stop(), None)
                }
                Err(died) => (generator.stop(), Some(died)),
            },
            Err(died) => (generator.stop(), Some(died)),
        };
        match slot.release(high_water).await {
            Ok(Released::Freed) => tracing::info!(
                fence_tick = high_water.0,
                slot = slot.slot.slot.0,
                "released the slot; fence lowered to the highest tick issued"
            ),
            Ok(Released::NotOurs) => tracing::info!(
                slot = slot.slot.slot.0,
                "the slot lease no longer names this pod (reclaimed by the operator); nothing to release"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "could not release the slot; the operator reclaims it when the pod is gone")
            }
        }
        match died {
            Some(died) => Err(died.into()),
            None => Ok(()),
        }
    }
}

mod block_bound;
#[cfg(test)]
mod tests;
