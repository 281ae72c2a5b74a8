//! The counter in a cluster: the sequence's `<name>-segment-counter` Lease. Reads are GETs
//! (quorum reads); writes are merge patches carrying the `resourceVersion` read, which the
//! API server turns into a compare-and-swap in etcd (409 Conflict when it moved on).
//! The API server lets only the sidecars of pods the operator lists on the counter
//! (`kubeflake.io/claimants`) write it, and only upwards (`kubeflake_crds::lease_policy`):
//! so a graceful stop gives nothing back here (its unused values stay a gap).
//!
//! The sidecar never creates the counter: only the operator does, and only for a sequence
//! that never had one. A missing counter (404) is an error that is retried, never a reason
//! to start again. Reads must stay quorum reads (no `resourceVersion=0`): a cached, older
//! counter would look like one that went backwards.
//!
//! A Lease with the counter's name but without its label was not made by kubeflake (a
//! tenant may create one before the operator does; docs/safety.md rule 16): its parse
//! refuses it, so the sidecar claims nothing from it and is not ready, saying what to do.
//!
//! Every `next` read or written is recorded ([`HighestSeen`]): the counter may only go up,
//! so a later read below it is a copy that went back, and claims refuse it. The cluster
//! sidecar also follows the counter with a watch ([`LeaseCounter::follow`]), so that a pod
//! that claimed nothing for a while knows how far the others got.
//!
//! Each claim also reads the IdSequence's `status.segment.blocksClaimed` (from the API
//! server's cache: an older status is only less strict), the claim count the operator last
//! saw: a counter with fewer claims is an older copy and is refused (see `claim`).

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{GetParams, Patch, PatchParams};
use kube::runtime::watcher::Event;
use kube::{Api, Client};
use kubeflake_crds::segment_counter::{CLAIMS_ANNOTATION, Counter, NEXT_ANNOTATION, counter_name};
use kubeflake_crds::sequence::IdSequence;
use kubeflake_runtime::kube_error::{self, KubeErrorKind};
use serde_json::json;

use super::claim::{CounterStore, HighestSeen, StoreError};
use super::seen_file::SeenFile;

/// How often a rise of the highest `next` seen is written to the pod's state directory, at
/// most (a busy counter rises at every claim of every pod).
const REMEMBER_EVERY: Duration = Duration::from_secs(1);

/// The counter Lease of one sequence.
pub(crate) struct LeaseCounter {
    api: Api<Lease>,
    name: String,
    sequences: Api<IdSequence>,
    sequence: String,
    seen: HighestSeen,
    /// Where [`LeaseCounter::follow`] keeps `seen` for the pod's next container.
    remembered: Option<SeenFile>,
}

impl LeaseCounter {
    /// The counter of `sequence` in `namespace`.
    pub(crate) fn new(client: Client, namespace: &str, sequence: &str) -> LeaseCounter {
        LeaseCounter {
            api: Api::namespaced(client.clone(), namespace),
            name: counter_name(sequence),
            sequences: Api::namespaced(client, namespace),
            sequence: sequence.to_owned(),
            seen: HighestSeen::default(),
            remembered: None,
        }
    }

    /// Starts from the highest `next` an earlier container of this pod saw (kept in the
    /// pod's state directory), and keeps it there while following the counter. A record
    /// that cannot be read is logged and the sidecar starts from what it reads itself, as
    /// a new pod does.
    pub(crate) fn remembering(mut self, file: SeenFile) -> LeaseCounter {
        match file.load() {
            Ok(0) => {}
            Ok(highest) => {
                self.seen.record(highest);
                tracing::info!(counter = %self.name, highest_next = highest, "an earlier container of this pod saw the counter at this next: claims refuse a counter below it");
            }
            Err(e) => {
                tracing::error!(error = %e, counter = %self.name, "the record of the counter an earlier container saw is unreadable: starting from what this one reads");
            }
        }
        self.remembered = Some(file);
        self
    }

    /// Follows the counter with a watch until the future is dropped: every `next` it
    /// delivers raises what this sidecar knows the counter reached ([`HighestSeen`]), so
    /// that a claim refuses a counter that went back (an etcd snapshot or a backup restored)
    /// even in a pod that claimed nothing since the others claimed (docs/safety.md rule 22).
    /// A watched copy may be older than what a claim already read (the API server's watch
    /// cache trails etcd), so it only ever raises the record: only a claim's quorum read is
    /// compared with it. A failing watch is retried within a few seconds
    /// ([`kubeflake_runtime::watch::one_object`]) and logged once per streak;
    /// claims go on meanwhile (each reads the counter itself).
    pub(crate) async fn follow(&self) {
        let mut events = kubeflake_runtime::watch::one_object(self.api.clone(), &self.name).boxed();
        let mut failing = false;
        let mut remember = tokio::time::interval(REMEMBER_EVERY);
        remember.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut remembered = self.seen.get();
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = remember.tick() => {
                    remembered = self.remember(remembered);
                    continue;
                }
            };
            let Some(event) = event else { break };
            match event {
                Ok(Event::Apply(lease) | Event::InitApply(lease)) => {
                    failing = false;
                    match parse(&lease) {
                        Ok(counter) => {
                            self.seen.record(counter.next);
                        }
                        // The claim that reads it says why, on the pod and in the log.
                        Err(e) => {
                            tracing::debug!(error = %e, counter = %self.name, "the watched counter is not one to claim from")
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, counter = %self.name, "following the segment counter: the watch failed, retrying with backoff (claims still read the counter)");
                    }
                    failing = true;
                }
            }
        }
        tracing::warn!(counter = %self.name, "following the segment counter: the watch ended");
        loop {
            remember.tick().await;
            remembered = self.remember(remembered);
        }
    }

    /// Writes the highest `next` seen to the pod's state directory if it rose since
    /// `remembered`; returns what the file holds now.
    fn remember(&self, remembered: u64) -> u64 {
        let Some(file) = &self.remembered else {
            return remembered;
        };
        let highest = self.seen.get();
        if highest <= remembered {
            return remembered;
        }
        match file.store(highest) {
            Ok(()) => highest,
            Err(e) => {
                tracing::warn!(error = %e, counter = %self.name, "cannot keep the counter's highest next for the pod's next container; retried in a second");
                remembered
            }
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

fn store_error(e: kube::Error, name: &str) -> StoreError {
    match kube_error::kind(&e) {
        KubeErrorKind::Conflict => StoreError::Conflict,
        KubeErrorKind::NotFound => StoreError::NotFound(format!(
            "counter Lease {name} does not exist: the operator creates it for a new Segment \
             sequence; if it was deleted, the IdSequence's Ready condition (CounterLost) says \
             how to re-create it safely. The sidecar never creates it"
        )),
        // The API server's Lease policy (or RBAC) refused: most often this pod is not yet
        // among the counter's claimants, which the operator adds moments after the pod is
        // created. Retried like an unavailable counter.
        KubeErrorKind::Forbidden => StoreError::Unavailable(format!(
            "counter Lease {name} refused this sidecar's write: {e}; the operator lists a pod \
             labelled for the sequence as a claimant (kubeflake.io/claimants) soon after it is \
             created, so this is retried; if it lasts, is the operator running?"
        )),
        _ => StoreError::Unavailable(format!("counter Lease {name}: {e}")),
    }
}

impl CounterStore for LeaseCounter {
    fn may_lower(&self) -> bool {
        false
    }

    fn seen_next(&self) -> u64 {
        self.seen.get()
    }

    fn known_claims(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let seq = self
                .sequences
                .get_with(&self.sequence, &GetParams::any())
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!("IdSequence {}: {e}", self.sequence))
                })?;
            let known = seq
                .status
                .and_then(|s| s.segment)
                .and_then(|s| s.blocks_claimed)
                .unwrap_or(0);
            Ok(u64::try_from(known).unwrap_or(0))
        })
    }

    fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>> {
        Box::pin(async move {
            let lease = self
                .api
                .get(&self.name)
                .await
                .map_err(|e| store_error(e, &self.name))?;
            let counter = parse(&lease)?;
            self.seen.record(counter.next);
            Ok(counter)
        })
    }

    fn compare_and_swap<'a>(
        &'a self,
        seen: &'a Counter,
        new: Counter,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Without the version the patch would be unconditional: never send it.
            let Some(version) = seen.resource_version.as_deref().filter(|v| !v.is_empty()) else {
                return Err(StoreError::Corrupt(format!(
                    "counter Lease {} was read without a resourceVersion; not writing",
                    self.name
                )));
            };
            // A claim writes `next` and `claims` only, whatever the format: in format 3
            // (rule 22) moving to the queued range is raising `next` into it.
            let patch = json!({"metadata": {
                "resourceVersion": version,
                "annotations": {
                    NEXT_ANNOTATION: new.next.to_string(),
                    CLAIMS_ANNOTATION: new.claims.to_string(),
                },
            }});
            self.api
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| store_error(e, &self.name))?;
            self.seen.record(new.next);
            Ok(())
        })
    }
}

/// The counter a Lease holds, or why it holds none this release can claim from.
pub(crate) fn parse(lease: &Lease) -> Result<Counter, StoreError> {
    Counter::parse(lease).map_err(|e| {
        if e.is_format() {
            StoreError::UnsupportedFormat(e.to_string())
        } else {
            StoreError::Corrupt(e.to_string())
        }
    })
}

#[cfg(test)]
mod tests;
