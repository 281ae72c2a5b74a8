//! The `Waiting` state: find this pod's slot Lease and the sequence's settings (noted on the
//! Lease by the operator, or read from the IdSequence), or wait for the operator to assign
//! a slot (Snowflake) or for the counter Lease to exist (Segment). Each step publishes what
//! it waits for, which `/readyz` shows.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeflake_crds::IdSequence;
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::contract::WAITING_FOR_SLOT_REASON;
use kubeflake_crds::sequence::{SegmentParams, SequenceParams};
use kubeflake_crds::slot_lease::assigned_sequence_spec;

use super::holder::Acquire;
use super::{ClusterError, Ctx, Ending, Lifecycle};
use crate::fence::{FenceFile, FenceRecord};
use crate::oracle::store::KubeOracleStore;
use crate::oracle::{Oracle, OracleConfig};
use crate::segment::claim::StoreError;
use crate::segment::lease::LeaseCounter;
use crate::segment::seen_file::SeenFile;
use crate::segment::{CounterStore, DEFAULT_WAIT_LIMIT};
use crate::slot::{SlotError, assigned_lease, wait_for_assignment};
use crate::source::Source;
use crate::state::{Serving, WaitReason};

/// A pod that has waited this long for a slot gets a `WaitingForSlot` Warning Event (once
/// per wait): its app containers do not start meanwhile (the startup probe holds them), so
/// `kubectl describe pod` must say why. Long enough that a burst of pods the operator is
/// still working through records none.
pub(crate) const SLOT_WAIT_EVENT_AFTER: Duration = Duration::from_secs(10);

/// After [`SLOT_WAIT_EVENT_AFTER`], a waiting sidecar reads its sequence this often. A 401
/// answer means the API server no longer accepts this pod's token: the pod was deleted (a
/// pod-bound token is invalid a minute after the pod's deletion time, at once when the pod
/// object is gone). Pods injected by 0.1.0 hold their app with a postStart hook, and the
/// kubelet cannot stop a pod whose postStart hook still runs, so the sidecar exits instead,
/// which ends the hook and lets the kubelet finish the deletion. (A startup probe, which
/// this release injects, does not keep the kubelet from stopping the pod.)
pub(crate) const WAITING_CHECK_EVERY: Duration = Duration::from_secs(5);

/// How often a sidecar looks again at a slot Lease or segment counter it refused for its
/// format (an upgrade of the sidecar, which recreates the pod, is what usually ends it).
pub(crate) const FORMAT_RETRY_EVERY: Duration = Duration::from_secs(5);

/// Whether the API server refused this pod's credentials (see [`WAITING_CHECK_EVERY`]).
fn token_refused(e: &kube::Error) -> bool {
    kubeflake_runtime::kube_error::status_code(e) == Some(401)
}

/// What the sequence says: its parameters, and its segment settings in Segment mode.
type SequenceRead = (SequenceParams, Option<SegmentParams>);

/// The sequence's settings the operator noted on `lease` when it assigned the slot to this
/// pod (`kubeflake_crds::slot_lease::sequence_spec`), for the first container of the pod
/// on that assignment: a restarted container reads the sequence, whose changeable settings
/// (lease duration, maximum drift) may be newer. `None` means: read the sequence.
fn noted_params(lease: &Lease, restarted: bool) -> Option<SequenceParams> {
    if restarted {
        return None;
    }
    match assigned_sequence_spec(lease) {
        Ok(Some(spec)) => match (spec.params(), spec.segment_params()) {
            (Ok(params), Ok(None)) => Some(params),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "the sequence spec noted on the slot lease does not validate; reading the sequence instead");
                None
            }
            (Ok(_), Ok(Some(_))) => {
                tracing::warn!(
                    "the sequence spec noted on the slot lease is a Segment sequence's; reading the sequence instead"
                );
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "not using the sequence spec noted on the slot lease");
            None
        }
    }
}

/// The `Waiting` state's resources: no slot held, the fence file, and the record an
/// earlier container of this pod left in it (rule 6; used only for the first acquisition,
/// and only if it names it).
pub(crate) struct Unheld {
    pub(crate) file: FenceFile,
    pub(crate) found: Option<FenceRecord>,
}

/// The `Waiting` state's steps (where the other states' are: `cluster/mod.rs`).
impl Ctx {
    /// One round of waiting: ends holding a slot, serving a segment, still waiting (to be
    /// called again), or done when shutdown began.
    pub(crate) async fn find_work(&self, unheld: Unheld) -> Result<Lifecycle, ClusterError> {
        if self.stopping() {
            return Ok(Lifecycle::Done(Ending::Unheld(unheld)));
        }
        // The operator usually writes a pod's slot lease before the pod's sidecar runs, and
        // notes the sequence's spec on it: then one request finds both, and the sidecar
        // (with it the app, which its startup probe holds) is ready after one round trip
        // and one connection to the API server. Otherwise (a Lease assigned by an earlier
        // operator, a restarted container, a Segment sequence, no slot yet) the sequence is
        // read too.
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let assigned = assigned_lease(&leases, &self.config.sequence, &self.config.pod.uid)
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(error = %e, "could not list this pod's slot lease; watching for it");
                None
            });
        let noted = assigned
            .as_ref()
            .and_then(|lease| noted_params(lease, unheld.found.is_some()));
        let params = match noted {
            Some(params) => params,
            None => {
                let Some((params, segment)) = self.read_sequence().await? else {
                    return Ok(Lifecycle::Waiting(unheld));
                };
                if let Some(segment) = segment {
                    return Ok(match self.start_segment(segment).await {
                        Some((segment, counter)) => Lifecycle::Segment(segment, counter),
                        None => Lifecycle::Done(Ending::Unheld(unheld)),
                    });
                }
                params
            }
        };
        let lease = match assigned {
            Some(lease) => lease,
            None => match self.wait_for_slot().await? {
                Some(lease) => lease,
                None => return Ok(Lifecycle::Waiting(unheld)),
            },
        };
        match self.acquire(unheld, &params, lease).await {
            Ok(held) => Ok(Lifecycle::Holding(held)),
            Err(Acquire::Retry(e, unheld)) if e.is_unreadable_format() => {
                // Never taken, renewed or used: the fence it could not write is counted
                // as a failed fence write, and the pod says why it is not ready.
                self.metrics
                    .fence_writes
                    .with_label_values(&["error"])
                    .inc();
                tracing::error!(error = %e, "not taking the slot lease assigned to this pod: its format is not one this release understands");
                self.tell_unreadable_format(&e);
                self.state
                    .publish(Serving::Waiting(WaitReason::SlotStart(e.to_string())));
                self.pause(FORMAT_RETRY_EVERY).await;
                Ok(Lifecycle::Waiting(unheld))
            }
            Err(Acquire::Retry(e, unheld)) => {
                tracing::warn!(error = %e, "could not start serving the slot; retrying");
                self.state
                    .publish(Serving::Waiting(WaitReason::SlotStart(e.to_string())));
                self.pause(Duration::from_secs(1)).await;
                Ok(Lifecycle::Waiting(unheld))
            }
            Err(Acquire::Fatal(e)) => Err(e.into()),
        }
    }

    async fn read_sequence(&self) -> Result<Option<SequenceRead>, ClusterError> {
        let api: Api<IdSequence> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let name = &self.config.sequence;
        let problem = match api.get_opt(name).await {
            Ok(Some(seq)) => match (seq.spec.params(), seq.spec.segment_params()) {
                (Ok(p), Ok(segment)) => return Ok(Some((p, segment))),
                (Err(e), _) | (_, Err(e)) => format!("IdSequence {name} is invalid: {e}"),
            },
            Ok(None) => format!(
                "IdSequence {name} does not exist in namespace {}",
                self.config.pod.namespace
            ),
            Err(e) if token_refused(&e) => {
                return Err(ClusterError::TokenRefused(e.to_string()));
            }
            Err(e) => format!("cannot read IdSequence {name}: {e}"),
        };
        tracing::warn!(%problem, "waiting for the sequence");
        self.state
            .publish(Serving::Waiting(WaitReason::Sequence(problem)));
        self.pause(Duration::from_secs(2)).await;
        Ok(None)
    }

    /// Waits for the operator to name this pod holder of a slot lease: `None` to try again
    /// (or when shutdown began), an error when this pod's token was refused.
    async fn wait_for_slot(&self) -> Result<Option<Lease>, ClusterError> {
        self.state
            .publish(Serving::Waiting(WaitReason::SlotAssignment {
                sequence: self.config.sequence.clone(),
            }));
        tracing::info!("waiting for a slot lease naming this pod");
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        let assignment = wait_for_assignment(&leases, &self.config.sequence, &self.config.pod.uid);
        tokio::pin!(assignment);
        let check = tokio::time::sleep(SLOT_WAIT_EVENT_AFTER);
        tokio::pin!(check);
        let mut told = false;
        loop {
            tokio::select! {
                found = &mut assignment => return match found {
                    Ok(lease) => Ok(Some(lease)),
                    Err(e @ SlotError::LeaseWatchRefused(_)) => {
                        // Not "waiting for a slot": the pod could never see one. Said where
                        // the user looks (/readyz, the log), retried less often.
                        tracing::error!(error = %e, "cannot watch the slot Leases");
                        self.state
                            .publish(Serving::Waiting(WaitReason::LeaseWatch(e.to_string())));
                        self.pause(Duration::from_secs(5)).await;
                        Ok(None)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "waiting for a slot failed; retrying");
                        self.pause(Duration::from_secs(1)).await;
                        Ok(None)
                    }
                },
                () = &mut check => {
                    let seq = self.sequence_while_waiting().await?;
                    if !told {
                        told = true;
                        self.tell_waiting_for_slot(seq.as_ref());
                    }
                    check.as_mut().reset(tokio::time::Instant::now() + WAITING_CHECK_EVERY);
                }
                () = self.stopped() => return Ok(None),
            }
        }
    }

    /// The sequence, read again while waiting; an error only when this pod's token was
    /// refused (see [`WAITING_CHECK_EVERY`]).
    async fn sequence_while_waiting(&self) -> Result<Option<IdSequence>, ClusterError> {
        let api: Api<IdSequence> = Api::namespaced(self.client.clone(), &self.config.pod.namespace);
        match api.get_opt(&self.config.sequence).await {
            Ok(seq) => Ok(seq),
            Err(e) if token_refused(&e) => Err(ClusterError::TokenRefused(e.to_string())),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the sequence while waiting for a slot");
                Ok(None)
            }
        }
    }

    /// Records why this pod still has no slot on the pod (a Warning Event) and in the log.
    fn tell_waiting_for_slot(&self, seq: Option<&IdSequence>) {
        let exhausted = seq.and_then(|seq| {
            condition(seq.status.as_ref(), ConditionType::Exhausted)
                .filter(|c| c.status == "True")
                .map(|c| c.message.clone())
        });
        let note = waiting_for_slot_note(
            &self.config.sequence,
            SLOT_WAIT_EVENT_AFTER,
            exhausted.as_deref(),
        );
        tracing::warn!(%note, "still waiting for a slot");
        self.events.notify(true, WAITING_FOR_SLOT_REASON, note);
    }

    /// Segment mode: waits for the counter Lease (the operator creates it), then serves
    /// values from blocks claimed from it; the counter is returned to be followed
    /// ([`LeaseCounter::follow`]). `None` if shutdown began first.
    async fn start_segment(&self, params: SegmentParams) -> Option<(Source, Arc<LeaseCounter>)> {
        let store = Arc::new(
            LeaseCounter::new(
                self.client.clone(),
                &self.config.pod.namespace,
                &self.config.sequence,
            )
            .remembering(SeenFile::new(
                &self.config.state_dir,
                &self.config.sequence,
                &format!("{}/{}", self.config.pod.namespace, self.config.sequence),
            )),
        );
        while !self.stopping() {
            match store.read().await {
                Ok(counter) => {
                    tracing::info!(
                        counter = store.name(),
                        next = counter.next,
                        block_size = params.block_size,
                        max_block_size = params.max_block_size,
                        "segment mode: claiming blocks from the counter"
                    );
                    break;
                }
                Err(e @ StoreError::UnsupportedFormat(_)) => {
                    // Never used: no block is claimed from it, the pod says why.
                    self.metrics.segment.claim_errors.inc();
                    tracing::error!(error = %e, counter = store.name(), "not serving from the segment counter: its format is not one this release understands");
                    self.tell_unreadable_format(&e);
                    self.state
                        .publish(Serving::Waiting(WaitReason::Counter(e.to_string())));
                    self.pause(FORMAT_RETRY_EVERY).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for the segment counter");
                    self.state
                        .publish(Serving::Waiting(WaitReason::Counter(e.to_string())));
                    self.pause(Duration::from_secs(1)).await;
                }
            }
        }
        if self.stopping() {
            return None;
        }
        let segment = if params.strict {
            if self.config.unsafe_take_over_without_waiting {
                tracing::error!(
                    "--unsafe-take-over-without-waiting is set: strict order is broken on purpose (a test's broken variant)"
                );
            }
            Source::Oracle(
                Oracle::start(
                    store.clone(),
                    Arc::new(KubeOracleStore::new(
                        self.client.clone(),
                        &self.config.pod.namespace,
                        &self.config.sequence,
                    )),
                    OracleConfig {
                        sequence: self.config.sequence.clone(),
                        uid: self.config.pod.uid.clone(),
                        listen: self.config.oracle_listen,
                        wait_limit: DEFAULT_WAIT_LIMIT,
                        take_over_without_waiting: self.config.unsafe_take_over_without_waiting,
                        state_dir: Some(self.config.state_dir.clone()),
                    },
                    self.metrics.segment.clone(),
                    self.config.peer_auth(&self.client, &self.metrics.segment),
                )
                .await,
            )
        } else {
            Source::start(
                store.clone(),
                params,
                DEFAULT_WAIT_LIMIT,
                self.metrics.segment.clone(),
            )
        };
        self.state.publish(Serving::Segment(segment.clone()));
        self.events.notify(
            false,
            "SegmentServing",
            format!(
                "serving values of segment sequence {} {}",
                self.config.sequence,
                if segment.is_strict() {
                    "strictly, through the sequence's oracle"
                } else {
                    "in blocks"
                }
            ),
        );
        Some((segment, store))
    }
}

/// The `WaitingForSlot` Event's note: the sequence's `Exhausted` message when it has one.
fn waiting_for_slot_note(sequence: &str, waited: Duration, exhausted: Option<&str>) -> String {
    let held = "the app containers start once the pod holds a slot";
    match exhausted {
        Some(why) => format!(
            "IdSequence {sequence} has no free slot ({why}); {held} (kubectl kubeflake slots {sequence})"
        ),
        None => format!(
            "no slot of IdSequence {sequence} assigned to this pod after {} s although the \
             sequence is not exhausted: is kubeflake-operator running? {held} \
             (kubectl kubeflake slots {sequence})",
            waited.as_secs()
        ),
    }
}

#[cfg(test)]
mod tests;
