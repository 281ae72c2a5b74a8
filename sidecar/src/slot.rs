//! Holding a slot lease from inside a pod (docs/safety.md rules 1-5).
//!
//! The operator names this pod holder of a slot lease; from then on this module is the only
//! writer of the lease's fence for that acquisition. Every write is conditional on the
//! `resourceVersion` last read. A conflict is re-read: if this pod is still the holder the
//! write is retried on the new version (the fence never goes down); if it is not, the slot
//! is lost and the caller must stop issuing at once. A lease in a format this release does
//! not understand ([`SlotError::is_unreadable_format`]) is never taken, renewed or
//! released: every transition parses it first and refuses.

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeflake_crds::Tick;
use kubeflake_crds::slot_lease::{
    HOLDER_LABEL, Releaser, SEQUENCE_LABEL, SlotLease, SlotLeaseError, TransitionError,
};

/// Who this pod is (from the downward API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("the slot was given to another pod (or freed); stopping at once")]
    Lost,
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    BadLease(#[from] SlotLeaseError),
    #[error("the lease watch ended")]
    WatchEnded,
    #[error(
        "the API server refuses to let this pod list or watch the slot Leases of its namespace \
         ({0}); the operator binds the namespace's kubeflake-sidecar Role to the service \
         accounts of labelled pods: check `kubectl get rolebinding kubeflake-sidecar -o yaml` \
         in this namespace and the operator's log. Retrying"
    )]
    LeaseWatchRefused(String),
    #[error(transparent)]
    LocalFence(#[from] crate::fence::FenceFileError),
    /// The fence found is beyond the layout's last tick: the slot can issue no ID.
    #[error(transparent)]
    Start(#[from] crate::generator::StartError),
    #[error("the wall clock stepped since the skew check; the fence is not raised")]
    ClockStepped,
    #[error(
        "the slot lease names worker {slot}, which does not fit the IdSequence's layout \
         ({source}); the lease and the sequence disagree: check the IdSequence's workerBits \
         and its slot leases (kubectl kubeflake slots <sequence>)"
    )]
    SlotOutsideLayout {
        slot: u32,
        source: kubeflake_crds::LayoutError,
    },
}

impl SlotError {
    /// The slot lease is in a format this release does not understand (written by a newer
    /// kubeflake, or not a format number): it is neither served nor written, and a holder
    /// stops at once, as for a lost slot (its holder and fence can no longer be read).
    pub(crate) fn is_unreadable_format(&self) -> bool {
        matches!(self, SlotError::BadLease(e) if e.is_format())
    }
}

use kubeflake_runtime::kube_error::is_conflict;

fn holder_selector(sequence: &str, uid: &str) -> String {
    format!("{SEQUENCE_LABEL}={sequence},{HOLDER_LABEL}={uid}")
}

/// Whether `lease` names `uid` as its holder.
fn names_holder(lease: &Lease, uid: &str) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        == Some(uid)
}

/// The slot lease of `sequence` that names `uid` as holder now, the lowest if several (a
/// restarted container takes the lowest); one list call.
pub(crate) async fn assigned_lease(
    leases: &Api<Lease>,
    sequence: &str,
    uid: &str,
) -> Result<Option<Lease>, SlotError> {
    let listed = leases
        .list(&ListParams::default().labels(&holder_selector(sequence, uid)))
        .await?;
    let mut held: Vec<Lease> = listed
        .items
        .into_iter()
        .filter(|l| names_holder(l, uid))
        .collect();
    held.sort_by_key(|l| SlotLease::parse(l).map(|s| s.slot).ok());
    Ok(held.into_iter().next())
}

/// Waits until a slot lease of `sequence` names `uid` as holder. Call it after
/// [`assigned_lease`] found none: it only watches (the watch's own initial list still sees a
/// lease written in between), so the lease is not listed twice.
pub(crate) async fn wait_for_assignment(
    leases: &Api<Lease>,
    sequence: &str,
    uid: &str,
) -> Result<Lease, SlotError> {
    let selector = holder_selector(sequence, uid);
    let stream = watcher(leases.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(lease) if names_holder(&lease, uid) => return Ok(lease),
            Ok(_) => {}
            Err(e) => match refused(&e) {
                Some(refusal) => return Err(SlotError::LeaseWatchRefused(refusal)),
                None => tracing::warn!(error = %e, "lease watch error; retrying"),
            },
        }
    }
    Err(SlotError::WatchEnded)
}

/// The API server's refusal (403, RBAC) behind a watch error, if that is what it is: a
/// refusal does not go away by retrying the watch, so it is reported, not retried quietly.
fn refused(e: &kube::runtime::watcher::Error) -> Option<String> {
    use kube::runtime::watcher::Error as W;
    let status = match e {
        W::InitialListFailed(kube::Error::Api(s))
        | W::WatchStartFailed(kube::Error::Api(s))
        | W::WatchFailed(kube::Error::Api(s)) => s,
        W::WatchError(s) => s,
        _ => return None,
    };
    (status.code == 403).then(|| format!("{} {}", status.code, status.message))
}

/// A slot lease held by this pod: the lease as last read ([`SlotLease::read`]), from
/// which every write starts, and what it says.
pub struct HeldSlot {
    api: Api<Lease>,
    uid: String,
    pub(crate) slot: SlotLease,
}

/// What a release at shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The slot is free, its fence lowered to the highest tick issued.
    Freed,
    /// The lease names another pod or none (the operator reclaimed the slot): nothing was
    /// written.
    NotOurs,
}

impl HeldSlot {
    pub fn new(api: Api<Lease>, uid: &str, lease: Lease) -> Result<HeldSlot, SlotError> {
        let slot = SlotLease::parse_shared(lease.into())?;
        if slot.holder.as_deref() != Some(uid) {
            return Err(SlotError::Lost);
        }
        Ok(HeldSlot {
            api,
            uid: uid.to_string(),
            slot,
        })
    }

    /// Raises the lease's fence towards `fence` (and renews), and returns the fence
    /// written: ticks up to it, and none above it, may be used (rule 2). It may be below
    /// `fence`: the transition, [`SlotLease::renew`] (written once in the API crate), stops
    /// at the Lease's fence cap, the bound of the ID-space block the slot lies in (rule
    /// 17); callers bound the generator by the value returned, never by `fence`. The fence
    /// never goes down here (rule 5), and a lease that no longer names this pod is refused.
    #[must_use = "the fence written is the bound (rule 2), not the one asked for"]
    pub async fn raise_fence(&mut self, fence: Tick) -> Result<Tick, SlotError> {
        loop {
            let next = match self.slot.renew(&self.uid, fence, Utc::now()) {
                Ok(next) => next,
                Err(TransitionError::NotHolder { .. } | TransitionError::Held { .. }) => {
                    return Err(SlotError::Lost);
                }
                Err(TransitionError::BadLease(e)) => return Err(e.into()),
            };
            if let Some(written) = self.compare_and_swap(&next).await? {
                self.slot = SlotLease::parse_shared(written.into())?;
                return Ok(self.slot.fence);
            }
        }
    }

    /// After issuing has stopped for good: lowers the fence to `high_water`, the exact
    /// highest tick issued, and frees the slot (the exception in rule 5; the transition is
    /// [`SlotLease::release`] by [`Releaser::Holder`], which refuses a lease that no
    /// longer names this pod: then nothing is written).
    pub async fn release(&mut self, high_water: Tick) -> Result<Released, SlotError> {
        loop {
            let by = Releaser::Holder {
                uid: &self.uid,
                high_water,
            };
            let next = match self.slot.release(by, Utc::now()) {
                Ok(next) => next,
                Err(TransitionError::NotHolder { .. } | TransitionError::Held { .. }) => {
                    return Ok(Released::NotOurs);
                }
                Err(TransitionError::BadLease(e)) => return Err(e.into()),
            };
            if self.compare_and_swap(&next).await?.is_some() {
                return Ok(Released::Freed);
            }
        }
    }

    /// Writes `next`, conditional on the version read (rule 1): the Lease written, or
    /// `None` when someone else wrote first, after re-reading the lease into `self.slot` so
    /// the caller decides again.
    async fn compare_and_swap(&mut self, next: &Lease) -> Result<Option<Lease>, SlotError> {
        let name = self.slot.name.clone();
        match self.api.replace(&name, &PostParams::default(), next).await {
            Ok(written) => Ok(Some(written)),
            Err(e) if is_conflict(&e) => {
                self.slot = SlotLease::parse_shared(self.api.get(&name).await?.into())?;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_runtime::fake_api::{self, FakeApi};
    use std::time::Duration;

    fn leases(answer: (u16, serde_json::Value)) -> Api<Lease> {
        let client = FakeApi::answering(move |_, _, _| answer.clone()).client();
        Api::namespaced(client, "shop")
    }

    /// A sidecar whose account may not watch Leases (a missing or wrong RoleBinding) would
    /// otherwise look like one waiting for a slot, forever: the refusal is reported.
    #[tokio::test]
    async fn a_refused_lease_watch_is_reported_not_retried_quietly() {
        let api = leases(fake_api::status(403, "Forbidden"));
        let found = tokio::time::timeout(
            Duration::from_secs(5),
            wait_for_assignment(&api, "orders", "uid-a"),
        )
        .await
        .expect("a refusal ends the wait at once");
        match found {
            Err(e @ SlotError::LeaseWatchRefused(_)) => {
                let text = e.to_string();
                assert!(
                    text.contains("403") && text.contains("kubeflake-sidecar"),
                    "{text}"
                );
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a refused watch found a lease"),
        }
    }

    /// Other failures (the API server restarting, a timeout) are retried by the watch.
    #[tokio::test]
    async fn other_lease_watch_errors_are_retried() {
        let api = leases(fake_api::status(500, "InternalError"));
        let waited = tokio::time::timeout(
            Duration::from_millis(1500),
            wait_for_assignment(&api, "orders", "uid-a"),
        )
        .await;
        assert!(waited.is_err(), "still retrying after 1.5 s");
    }
}
