//! Where a Snowflake pass learns whether its sequence is joined to an ID space (issue 55):
//! the `IdSpaceMembership` cache (a reflector, `run.rs`), and this cluster's ID, read once
//! (`hub/cluster_id.rs`) and only when a membership names a sequence. What the copy lets a
//! pass hand out is decided in [`blocks`] (pure).
//!
//! Without the `IdSpaceMembership` CRD installed there is no cache
//! (`Context::id_spaces` is `None`): every sequence is lone, as before. With it, nothing
//! is handed out before the cache's first full list: until then a joined sequence cannot
//! be told from a lone one.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::Tick;
use kubeflake_crds::id_space::{IdSpaceMembership, MemberId, SpaceSequence};
use kubeflake_crds::sequence::{IdSequence, SequenceParams};
use kubeflake_runtime::backoff;

use crate::hub::checks::HubChecks;

pub mod blocks;

use self::blocks::{Blocks, Membership, Waiting};

/// The memberships the controller caches, this cluster's ID once read, and which copies
/// the membership task has compared with the hub since the start or the last re-list.
pub struct IdSpaces {
    memberships: Store<IdSpaceMembership>,
    this: tokio::sync::OnceCell<MemberId>,
    /// `None` when no membership task runs in this process: copies are used unchecked.
    checks: Option<Arc<HubChecks>>,
}

impl IdSpaces {
    pub fn new(memberships: Store<IdSpaceMembership>) -> IdSpaces {
        IdSpaces {
            memberships,
            this: tokio::sync::OnceCell::new(),
            checks: None,
        }
    }

    /// With this cluster's ID already known (tests, or a caller that read it).
    pub fn of_cluster(memberships: Store<IdSpaceMembership>, this: MemberId) -> IdSpaces {
        IdSpaces {
            memberships,
            this: tokio::sync::OnceCell::new_with(Some(this)),
            checks: None,
        }
    }

    /// No slot of a joined sequence until the membership task recorded in `checks` has
    /// compared its copy with the hub (`hub/checks.rs`).
    pub fn with_hub_checks(mut self, checks: Option<Arc<HubChecks>>) -> IdSpaces {
        self.checks = checks;
        self
    }

    /// The memberships of namespace `ns` naming sequence `name`, by name.
    fn naming(&self, ns: &str, name: &str) -> Vec<Arc<IdSpaceMembership>> {
        let mut found: Vec<Arc<IdSpaceMembership>> = self
            .memberships
            .state()
            .into_iter()
            .filter(|m| m.namespace().as_deref() == Some(ns) && m.spec.sequence == name)
            .collect();
        found.sort_by_key(|m| m.name_any());
        found
    }

    /// Whether a membership (in the cache) names sequence `name` of namespace `ns`: the
    /// sequence is joined, or joining, an ID space.
    pub fn names(&self, ns: &str, name: &str) -> bool {
        self.memberships
            .state()
            .iter()
            .any(|m| m.namespace().as_deref() == Some(ns) && m.spec.sequence == name)
    }

    /// Whether the ranges of the sequence's counter are this cluster's (rule 22): a
    /// membership naming it (in the cache) was made by this cluster (its `status.memberId`
    /// is this cluster's ID). A ranged counter without such a membership (deleted, not
    /// made yet, or a copy restored from another cluster) may hold another cluster's
    /// ranges: nobody claims from it.
    pub async fn ranges_are_ours(&self, client: &Client, ns: &str, name: &str) -> bool {
        let found = self.naming(ns, name);
        if found.is_empty() {
            return false;
        }
        let Ok(this) = self
            .this
            .get_or_try_init(|| crate::hub::cluster_id::this_cluster(client))
            .await
        else {
            return false;
        };
        found
            .iter()
            .any(|m| m.status.as_ref().and_then(|s| s.member_id.as_deref()) == Some(this.as_str()))
    }

    /// Whether a ranged counter of sequence `name` of namespace `ns` may list new
    /// claimants (rule 22, "A member's etcd restored from an older snapshot"): its
    /// membership, as the API server has it now, was compared with the hub since this
    /// operator started or its watch last listed from scratch (`hub/checks.rs`). Until
    /// then the counter may be a restored copy below values already claimed, and a new
    /// pod's sidecar, holding no block above it, would claim them again: new pods wait for
    /// that contact, as a joined Snowflake sequence's new pods wait for their slots. `true`
    /// when no membership task runs in this process.
    pub async fn new_claimants_allowed(&self, client: &Client, ns: &str, name: &str) -> bool {
        let Some(checks) = &self.checks else {
            return true;
        };
        let Ok(found) = self.fresh(client, self.naming(ns, name)).await else {
            return false;
        };
        !found.is_empty()
            && found.iter().all(|m| {
                let generation = m.status.as_ref().map_or(0, |s| s.generation);
                checks.usable(ns, &m.name_any(), generation)
            })
    }

    fn listed(&self) -> bool {
        matches!(
            futures::FutureExt::now_or_never(self.memberships.wait_until_ready()),
            Some(Ok(()))
        )
    }

    /// What the ID space lets this pass of `seq` hand out at `now`.
    pub async fn blocks_of(
        &self,
        client: &Client,
        seq: &IdSequence,
        params: &SequenceParams,
        now: Tick,
        lease_duration: Duration,
    ) -> Blocks {
        if !self.listed() {
            return Blocks::Waiting(Waiting::NotListed);
        }
        let ns = seq.namespace().unwrap_or_default();
        let found = self.naming(&ns, &seq.name_any());
        if found.is_empty() {
            return blocks::unnamed(seq);
        }
        let this = self
            .this
            .get_or_try_init(|| crate::hub::cluster_id::this_cluster(client))
            .await
            .map_err(|e| e.to_string());
        let found = match self.fresh(client, found).await {
            Ok(found) => found,
            Err(waiting) => return Blocks::Waiting(waiting),
        };
        if found.is_empty() {
            return blocks::unnamed(seq);
        }
        let found: Vec<&IdSpaceMembership> = found.iter().map(Arc::as_ref).collect();
        let every = self.memberships.state();
        let all: Vec<&IdSpaceMembership> = every.iter().map(Arc::as_ref).collect();
        let lease_ms = u64::try_from(lease_duration.as_millis()).unwrap_or(u64::MAX);
        let checks = self.checks.clone();
        let hub_checked = move |m: &IdSpaceMembership| {
            let Some(checks) = &checks else { return true };
            let generation = m.status.as_ref().map_or(0, |s| s.generation);
            checks.usable(
                &m.namespace().unwrap_or_default(),
                &m.name_any(),
                generation,
            )
        };
        blocks::blocks(&Membership {
            found: &found,
            all: &all,
            hub_checked: &hub_checked,
            this: this.as_ref().copied().map_err(String::clone),
            sequence: SpaceSequence {
                layout: params.layout,
                timebase: params.timebase,
                mode: seq.spec.mode,
                strict: seq.spec.segment.as_ref().is_some_and(|s| s.strict),
            },
            datacenter: params.datacenter,
            now,
            min_ahead: params.timebase.ticks_in_ms(lease_ms),
        })
    }
}

impl IdSpaces {
    /// The memberships in `cached`, as the API server has them now, when a membership task
    /// runs in this process (rule 21, "A member's etcd restored from an older snapshot"):
    /// a restore reaches the controller's watches one by one, each after its own backoff,
    /// so a pass may see the restored pods and Leases while its membership cache still
    /// holds the copy of before the restore, which the task compared with the hub. A read
    /// from the API server (a quorum read of etcd) shows the restored copy at once, whose
    /// generation is below the one the task compared, so the gate waits for the hub. A
    /// routine re-list changes no generation and costs one local read, never the hub. A
    /// membership deleted meanwhile is left out.
    async fn fresh(
        &self,
        client: &Client,
        cached: Vec<Arc<IdSpaceMembership>>,
    ) -> Result<Vec<Arc<IdSpaceMembership>>, Waiting> {
        if self.checks.is_none() {
            return Ok(cached);
        }
        let mut fresh = Vec::with_capacity(cached.len());
        for m in cached {
            let ns = m.namespace().unwrap_or_default();
            let name = m.name_any();
            let api: Api<IdSpaceMembership> = Api::namespaced(client.clone(), &ns);
            let unread = |error: String| Waiting::Unread {
                membership: name.clone(),
                error,
            };
            match tokio::time::timeout(FRESH_READ, api.get_opt(&name)).await {
                Ok(Ok(Some(read))) => fresh.push(Arc::new(read)),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => return Err(unread(e.to_string())),
                Err(_) => return Err(unread(format!("no answer in {FRESH_READ:?}"))),
            }
        }
        Ok(fresh)
    }
}

/// How long a pass's read of a membership may take (`IdSpaces::fresh`).
const FRESH_READ: Duration = Duration::from_secs(10);

/// How long the check that the CRD is installed may take.
const CRD_CHECK: Duration = Duration::from_secs(10);

/// The memberships' events, which wake the sequence each names.
pub type MembershipStream = BoxStream<'static, Result<IdSpaceMembership, watcher::Error>>;

/// The memberships' watch (in `namespace`, else all), when their CRD is installed: the
/// cache passes read, and the stream (to hand the controller) that fills it. Each list
/// from scratch after the first is told to `checks` (`hub/checks.rs`). Without the
/// CRD: `None`, and a stream that never yields. An installed CRD that cannot be listed now
/// is watched anyway: nothing is handed out until the first full list.
pub async fn watch(
    client: &Client,
    namespace: &Option<String>,
    checks: Option<Arc<HubChecks>>,
) -> (Option<Arc<IdSpaces>>, MembershipStream) {
    let api: Api<IdSpaceMembership> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match tokio::time::timeout(CRD_CHECK, api.list(&ListParams::default().limit(1))).await {
        Ok(Err(e)) if crate::controller::error::is_not_found(&e) => {
            tracing::info!(
                "the IdSpaceMembership CRD is not installed: every sequence is lone (install \
                 it and restart the operator to share an ID space)"
            );
            return (None, futures::stream::pending().boxed());
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot list IdSpaceMemberships; watching them anyway: no slot is handed out until they are listed");
        }
        Err(_) => {
            tracing::warn!(
                "listing IdSpaceMemberships timed out; watching them anyway: no slot is handed out until they are listed"
            );
        }
        Ok(Ok(_)) => {}
    }
    let (store, writer) = reflector::store();
    let relists = checks.clone();
    let stream = watcher(api, watcher::Config::default())
        .backoff(backoff::WatchBackoff::default())
        .inspect_ok(move |event| {
            if let (watcher::Event::Init, Some(checks)) = (event, &relists) {
                checks.listing();
            }
        })
        .reflect(writer)
        .applied_objects()
        .boxed();
    let id_spaces = IdSpaces::new(store).with_hub_checks(checks);
    (Some(Arc::new(id_spaces)), stream)
}
