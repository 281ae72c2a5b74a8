//! Holding a slot lease from inside a pod (docs/safety.md rules 1-5).
//!
//! The operator names this pod holder of a slot lease; from then on this module is the only
//! writer of the lease's fence for that acquisition. Every write is conditional on the
//! `resourceVersion` last read. A conflict is re-read: if this pod is still the holder the
//! write is retried on the new version (the fence never goes down); if it is not, the slot
//! is lost and the caller must stop issuing at once.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeflake_crds::Tick;
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, HOLDER_LABEL, RELEASED_AT_ANNOTATION, SEQUENCE_LABEL, SlotLease,
    SlotLeaseError,
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
    #[error(transparent)]
    LocalFence(#[from] crate::fence::FenceFileError),
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

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn holder_selector(sequence: &str, uid: &str) -> String {
    format!("{SEQUENCE_LABEL}={sequence},{HOLDER_LABEL}={uid}")
}

/// Waits until a slot lease of `sequence` names `uid` as holder; returns the lowest such.
pub async fn wait_for_assignment(
    leases: &Api<Lease>,
    sequence: &str,
    uid: &str,
) -> Result<Lease, SlotError> {
    let selector = holder_selector(sequence, uid);
    let mine = |l: &Lease| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(uid);
    // Already assigned (a restarted container)? Take the lowest slot.
    let listed = leases
        .list(&ListParams::default().labels(&selector))
        .await?;
    let mut held: Vec<Lease> = listed.items.into_iter().filter(|l| mine(l)).collect();
    held.sort_by_key(|l| SlotLease::parse(l).map(|s| s.slot).ok());
    if let Some(lease) = held.into_iter().next() {
        return Ok(lease);
    }
    let stream = watcher(leases.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(lease) if mine(&lease) => return Ok(lease),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "lease watch error; retrying"),
        }
    }
    Err(SlotError::WatchEnded)
}

/// A slot lease held by this pod.
pub struct HeldSlot {
    api: Api<Lease>,
    uid: String,
    lease: Lease,
    pub slot: SlotLease,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl HeldSlot {
    pub fn new(api: Api<Lease>, uid: &str, lease: Lease) -> Result<HeldSlot, SlotError> {
        let slot = SlotLease::parse(&lease)?;
        if slot.holder.as_deref() != Some(uid) {
            return Err(SlotError::Lost);
        }
        Ok(HeldSlot {
            api,
            uid: uid.to_string(),
            lease,
            slot,
        })
    }

    fn annotations(lease: &mut Lease) -> &mut BTreeMap<String, String> {
        lease.metadata.annotations.get_or_insert_with(BTreeMap::new)
    }

    /// Raises the lease's fence to `fence` (and renews). When this returns `Ok`, ticks up
    /// to `fence` may be used (rule 2). The fence never goes down here (rule 5).
    pub async fn raise_fence(&mut self, fence: Tick) -> Result<Tick, SlotError> {
        loop {
            let current = SlotLease::parse(&self.lease)?;
            if current.holder.as_deref() != Some(self.uid.as_str()) {
                return Err(SlotError::Lost);
            }
            let target = fence.max(current.fence);
            let mut next = self.lease.clone();
            Self::annotations(&mut next).insert(FENCE_ANNOTATION.to_string(), target.0.to_string());
            if let Some(spec) = next.spec.as_mut() {
                spec.renew_time = Some(now());
            }
            match self
                .api
                .replace(&current.name, &PostParams::default(), &next)
                .await
            {
                Ok(written) => {
                    self.slot = SlotLease::parse(&written)?;
                    self.lease = written;
                    return Ok(target);
                }
                Err(e) if is_conflict(&e) => {
                    // Someone else wrote the lease: re-read and decide again.
                    self.lease = self.api.get(&current.name).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// After issuing has stopped for good: lowers the fence to `high_water`, the exact
    /// highest tick issued, and frees the slot (the exception in rule 5). If the slot is no
    /// longer ours, nothing is written.
    pub async fn release(&mut self, high_water: Tick) -> Result<(), SlotError> {
        loop {
            let current = SlotLease::parse(&self.lease)?;
            if current.holder.as_deref() != Some(self.uid.as_str()) {
                return Ok(());
            }
            let mut next = self.lease.clone();
            let annotations = Self::annotations(&mut next);
            annotations.insert(FENCE_ANNOTATION.to_string(), high_water.0.to_string());
            annotations.insert(RELEASED_AT_ANNOTATION.to_string(), now().0.to_string());
            if let Some(labels) = next.metadata.labels.as_mut() {
                labels.remove(HOLDER_LABEL);
            }
            if let Some(spec) = next.spec.as_mut() {
                spec.holder_identity = None;
                spec.renew_time = Some(now());
            }
            match self
                .api
                .replace(&current.name, &PostParams::default(), &next)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => self.lease = self.api.get(&current.name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
