//! The membership task: every [`Config::period`], for each `IdSpaceMembership`, one contact
//! with its hub ([`contact`]): read the member's IdSequence and slot Leases, read the hub's
//! IdSpace, decide ([`super::step::decide`]), write the registry by compare-and-swap
//! (`replace` with the resourceVersion read, never a patch: rule 1), then keep the copy and
//! the conditions in the membership's status. It runs beside the controller, never on a
//! pod's path: a pod's start reads only the copy.
//!
//! Without the `IdSpaceMembership` CRD installed the task logs once and ends, so clusters
//! that do not share an ID space are unaffected.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{ListParams, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::id_space::local::check_cluster;
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::space::SpaceSequence;
use kubeflake_crds::id_space::{IdSpace, MemberId, MemberName};
use kubeflake_crds::sequence::Mode;
use kubeflake_runtime::kube_error;
use kubeflake_runtime::shutdown::ShutdownToken;

use super::checks::HubChecks;
use super::conditions::Reason;
use super::connect::{self, CALL_TIMEOUT, bounded};
use super::step::{self, Contact, Refusal};
use super::{cluster_id, fences, leave, segment};
use crate::metrics::hub::{HubMetrics, Member};

mod observe;
mod slots;
mod status;

pub use status::keep_copy;
use status::keep_status;

/// How the task runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The operator's namespace: where the hub Secrets are.
    pub secret_namespace: String,
    /// Memberships of this namespace only (default: all).
    pub namespace: Option<String>,
    /// Time between two contacts of one membership.
    pub period: Duration,
    /// How far behind its bound a block must be before this member reclaims it.
    pub reclaim_grace: Duration,
    /// Where the task's figures go (`run.rs` sets the operator's; `new` exports none).
    pub metrics: Arc<HubMetrics>,
    /// Where each contact that compared a copy with the hub is recorded, for the
    /// controller (`run.rs` shares one with it; `new` sets none).
    pub checks: Option<Arc<HubChecks>>,
    /// The claim rates of joined Segment sequences, which size their ranges.
    pub segment_rates: Arc<segment::Rates>,
}

impl Config {
    pub fn new(secret_namespace: String, namespace: Option<String>) -> Config {
        Config {
            secret_namespace,
            namespace,
            period: Duration::from_secs(10),
            reclaim_grace: Duration::from_secs(60),
            metrics: Arc::new(HubMetrics::unexported()),
            checks: None,
            segment_rates: Arc::new(segment::Rates::default()),
        }
    }
}

/// Runs until `stop`: one round over all memberships each period. Ends at once, after one
/// log line, when the `IdSpaceMembership` CRD is not installed.
pub async fn run(client: Client, config: Config, reporter: Reporter, stop: ShutdownToken) {
    let api = memberships(&client, &config.namespace);
    match tokio::time::timeout(CALL_TIMEOUT, api.list(&ListParams::default().limit(1))).await {
        Ok(Err(e)) if kube_error::is_not_found(&e) => {
            tracing::info!(
                "the IdSpaceMembership CRD is not installed: no sequence shares an ID space"
            );
            return;
        }
        _ => {}
    }
    let recorder = Recorder::new(client.clone(), reporter);
    let mut cluster: Option<MemberId> = None;
    loop {
        round(&client, &config, &recorder, &mut cluster).await;
        tokio::select! {
            () = tokio::time::sleep(config.period) => {}
            () = stop.triggered() => return,
        }
    }
}

/// One contact with the hub for every membership; an error in one never stops another.
pub async fn round(
    client: &Client,
    config: &Config,
    recorder: &Recorder,
    cluster: &mut Option<MemberId>,
) {
    // Taken before anything is read: a re-list of the controller's watch during the round
    // voids its comparisons (`hub/checks.rs`).
    let began = config.checks.as_ref().map(|c| c.epoch());
    let api = memberships(client, &config.namespace);
    let list = match tokio::time::timeout(CALL_TIMEOUT, api.list(&ListParams::default())).await {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => return tracing::warn!(error = %e, "cannot list IdSpaceMemberships"),
        Err(_) => return tracing::warn!("listing IdSpaceMemberships timed out"),
    };
    observe::retain(&config.metrics, &list.items);
    if list.items.is_empty() {
        return;
    }
    if cluster.is_none() {
        match cluster_id::this_cluster(client).await {
            Ok(id) => *cluster = Some(id),
            Err(e) => return tracing::warn!(error = %e, "cannot read this cluster's ID"),
        }
    }
    let Some(this) = cluster.clone() else { return };
    let all: Vec<&IdSpaceMembership> = list.items.iter().collect();
    for membership in list.items.iter().cloned() {
        let earlier = membership.earlier_of_same_space(&all);
        let (membership, outcome) = if membership.metadata.deletion_timestamp.is_some() {
            // The blocks of a space an earlier membership also joins are that one's: a
            // deleted later one releases nothing.
            let leave = leave::Leave {
                secret_namespace: &config.secret_namespace,
                this: &this,
                release: earlier.is_none(),
            };
            match leave::leave_deleted(client, recorder, leave, &membership).await {
                Some(refusal) => (membership, Err(refusal)),
                None => continue,
            }
        } else if let Some(earlier) = earlier {
            // The hub sees one member per cluster: a contact for this membership would
            // decide on the earlier one's blocks with another sequence's slots (rule 20).
            let outcome = Err(joined_twice(&membership, earlier));
            observe::contacted(&config.metrics, &membership, &outcome);
            (membership, outcome)
        } else {
            let membership = leave::with_finalizer(client, membership).await;
            let outcome = contact(client, config, &this, &membership).await;
            observe::contacted(&config.metrics, &membership, &outcome);
            match outcome {
                // The Segment path wrote the status as it went: the conditions go on that.
                Ok(Contacted::Segment(kept)) => {
                    (kept.membership.clone(), Ok(Contacted::Segment(kept)))
                }
                outcome => (membership, outcome),
            }
        };
        let compared = outcome.is_ok();
        match keep_status(client, recorder, &this, &membership, outcome).await {
            Ok(stored) => {
                if let (true, Some(checks), Some(began)) = (compared, &config.checks, began) {
                    let generation = stored.status.as_ref().map_or(0, |s| s.generation);
                    let namespace = stored.namespace().unwrap_or_default();
                    checks.compared(&namespace, &stored.name_any(), began, generation);
                }
                fences::raise_logged(client, recorder, &stored).await
            }
            Err(e) => {
                tracing::warn!(membership = %membership.name_any(), error = %e, "cannot write the IdSpaceMembership status");
            }
        }
    }
}

/// The refusal of a membership that joins the space an earlier membership of this cluster
/// (for another sequence) joined: it is never contacted, so the hub and the earlier one's
/// blocks are untouched, and its Ready condition says what to do.
fn joined_twice(membership: &IdSpaceMembership, earlier: &IdSpaceMembership) -> Refusal {
    let qualified =
        |m: &IdSpaceMembership| format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any());
    Refusal {
        reason: Reason::SpaceJoinedTwice,
        message: format!(
            "IdSpaceMembership {} joins the same ID space as {}, made earlier for another \
             sequence of this cluster: one cluster is one member, so both sequences would use \
             the same blocks. This membership is not contacted and its sequence gets no slot: \
             delete one of the two memberships, or join this sequence to a space of its own",
            qualified(membership),
            qualified(earlier)
        ),
    }
}

/// What one contact found: in a space of blocks, the copy to keep ([`Kept`]); in a Segment
/// space, the membership as the Segment path left it ([`segment::Kept`]).
#[derive(Debug)]
pub enum Contacted {
    Blocks(Kept),
    Segment(Box<segment::Kept>),
}

/// What one contact found: the copy to keep (with the hub IdSpace's UID), whether a spare
/// was wanted but none free, and whether the copy went back (`hub/fences.rs`).
#[derive(Debug)]
pub struct Kept {
    pub copy: kubeflake_crds::id_space::local::LocalRecord,
    pub space_uid: String,
    /// The space, whose parameters the copy keeps for the controller's slot planning.
    pub space: kubeflake_crds::id_space::Space,
    pub blocks_low: Option<String>,
    /// Slots held by pods when the contact began.
    pub in_use: u64,
    pub local_went_back: bool,
}

/// One contact of `membership` with its hub. Writes the registry on the hub when the
/// decision changed it; the conflict of a concurrent writer is a refusal to retry next
/// period (the copy is unchanged, so nothing new is used).
pub async fn contact(
    client: &Client,
    config: &Config,
    this: &MemberId,
    membership: &IdSpaceMembership,
) -> Result<Contacted, Refusal> {
    let refused = |reason: Reason, e: &dyn std::fmt::Display| Refusal {
        reason,
        message: e.to_string(),
    };
    // A copy of another cluster's claims (its namespace restored or copied here) is refused
    // before anything is read, the hub above all: an unreachable hub must not hide it.
    if let Some(copy_of) = membership
        .status
        .as_ref()
        .and_then(|s| s.member_id.as_deref())
    {
        let copy_of = MemberId::new(copy_of).map_err(|e| refused(Reason::BadRecord, &e))?;
        check_cluster(&copy_of, this)
            .map_err(|e| refused(Reason::MembershipOfAnotherCluster, &e))?;
    }
    let namespace = membership.namespace().unwrap_or_default();
    let member = Member::of(membership);
    let spec = &membership.spec;
    let name = MemberName::new(&spec.member_name).map_err(|e| refused(Reason::BadRecord, &e))?;
    let sequences: Api<IdSequence> = Api::namespaced(client.clone(), &namespace);
    let sequence = match tokio::time::timeout(CALL_TIMEOUT, sequences.get_opt(&spec.sequence)).await
    {
        Ok(Ok(Some(seq))) => seq,
        Ok(Ok(None)) => {
            let msg = format!(
                "IdSequence {namespace}/{} does not exist: create it, or fix spec.sequence",
                spec.sequence
            );
            return Err(refused(Reason::BadRecord, &msg));
        }
        Ok(Err(e)) => return Err(refused(Reason::HubCheckPending, &e)),
        Err(_) => {
            return Err(refused(
                Reason::HubCheckPending,
                &"reading the IdSequence timed out",
            ));
        }
    };
    let params = sequence
        .spec
        .params()
        .map_err(|e| refused(Reason::BadRecord, &e))?;
    let (used, in_use) = slots::slot_uses(client, &namespace, &spec.sequence).await?;
    let space_sequence = SpaceSequence {
        layout: params.layout,
        timebase: params.timebase,
        mode: sequence.spec.mode,
        strict: sequence.spec.segment.as_ref().is_some_and(|s| s.strict),
    };
    observe::stored(&config.metrics, membership, space_sequence, in_use);
    if sequence.spec.mode == Mode::Segment {
        segment::show_held(client, &config.metrics, membership).await;
    }
    let hub = connect::connect(client, &config.secret_namespace, &spec.hub_secret)
        .await
        .map_err(|e| refused(Reason::HubUnreachable, &e))?;
    let spaces: Api<IdSpace> = Api::namespaced(hub.client.clone(), &spec.space.namespace);
    let read = bounded(&hub, "reading the IdSpace", spaces.get(&spec.space.name));
    let space_object = config
        .metrics
        .call(&member, read)
        .await
        .map_err(|e| refused(Reason::HubUnreachable, &e))?;
    if space_object.spec.sequence.mode == Mode::Segment {
        let object = space_object;
        let reach = segment::Reach {
            hub: &hub,
            metrics: &config.metrics,
            rates: &config.segment_rates,
        };
        return segment::contact(client, reach, this, membership, &sequence, object)
            .await
            .map(|kept| Contacted::Segment(Box::new(kept)));
    }
    let space = space_object
        .spec
        .space()
        .map_err(|e| refused(Reason::BadRecord, &e))?;
    let registry = space_object
        .spec
        .registry(&space)
        .map_err(|e| refused(Reason::BadRecord, &e))?;
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    let timebase = space.sequence().timebase;
    let now = timebase
        .tick_at(now_ms)
        .ok_or_else(|| refused(Reason::BadRecord, &"the space's epoch is in the future"))?;
    let space_uid = space_object.metadata.uid.clone().unwrap_or_default();
    let mut copy = membership.status.clone().unwrap_or_default();
    let mut object = space_object;
    let mut registry = registry;
    let mut local_went_back = false;
    for _ in 0..step::MAX_WRITES_PER_CONTACT {
        let decision = step::decide(&Contact {
            this,
            name: &name,
            copy: &copy,
            space_uid: &space_uid,
            space: &space,
            registry: &registry,
            sequence: space_sequence,
            datacenter: params.datacenter,
            used: used.clone(),
            in_use,
            now,
            reclaim_grace: timebase.ticks_in_ms(config.reclaim_grace.as_millis() as u64),
        })?;
        let reclaimed =
            observe::decided(&config.metrics, &member, &space, &registry, &decision, this);
        local_went_back |= decision.local_went_back;
        let Some(next) = decision.write else {
            return Ok(Contacted::Blocks(Kept {
                copy: decision.copy,
                space_uid,
                space,
                blocks_low: decision.blocks_low,
                in_use,
                local_went_back,
            }));
        };
        object.spec.registry = next.to_record();
        let post = PostParams::default();
        let write = bounded(
            &hub,
            "writing the IdSpace registry",
            spaces.replace(&spec.space.name, &post, &object),
        );
        object = config.metrics.call(&member, write).await.map_err(|e| {
            let reason = if e.is_conflict() {
                Reason::HubCheckPending
            } else {
                Reason::HubUnreachable
            };
            refused(reason, &e)
        })?;
        // The hub holds it now: the copy may use it.
        config.metrics.reclaimed(&member, reclaimed);
        copy.keep(&decision.copy);
        registry = object
            .spec
            .registry(&space)
            .map_err(|e| refused(Reason::BadRecord, &e))?;
    }
    let copy = copy
        .local_record(&space)
        .map_err(|e| refused(Reason::BadRecord, &e))?;
    Ok(Contacted::Blocks(Kept {
        copy,
        space_uid,
        space,
        blocks_low: None,
        in_use,
        local_went_back,
    }))
}

fn memberships(client: &Client, namespace: &Option<String>) -> Api<IdSpaceMembership> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
