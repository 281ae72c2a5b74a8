//! The IdSequence reconciler: an idempotent function of observed state (kube-rs style:
//! a [`Context`], [`reconcile`], [`error_policy`], one [`Error`] type).
//!
//! Each pass reads the sequence's pods and slot leases from the reflector stores, plans
//! releases and assignments ([`crate::slot::plan`]), performs them as compare-and-swap
//! writes (docs/safety.md rule 1), records Events, and writes the status when it changed.
//! A conflict is normal (another writer was first): the pass is simply repeated.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use kubeflake_crds::sequence::{IdSequence, IdSequenceStatus, SequenceParams, SpecError};
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, FINALIZER, HOLDER_POD_ANNOTATION, RELEASED_AT_ANNOTATION, SEQUENCE_LABEL,
    SlotLease, SlotLeaseError, lease_labels, lease_name,
};
use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Slot, Tick};
use serde_json::json;

use crate::metrics::Metrics;
use crate::slot::{self, Observed, PodInfo, ReleaseReason, Step};

/// Writes in flight at once within one pass.
const WRITE_CONCURRENCY: usize = 8;
/// A year: the `Expiring` condition turns true when less is left.
const EXPIRING_WITHIN_MS: u64 = 365 * 24 * 3600 * 1000;

/// Everything a pass needs. Shared by all passes.
pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub leases: Store<Lease>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// For each sequence (`namespace/name`), for each of its slot leases and holder: the
    /// resourceVersion last seen and since when (monotonic). A held lease whose version
    /// stays the same for a lease duration is silent (rule 9).
    silence: Mutex<HashMap<String, Silence>>,
}

impl Context {
    pub fn new(
        client: Client,
        pods: Store<Pod>,
        leases: Store<Lease>,
        metrics: Arc<Metrics>,
        reporter: Reporter,
    ) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            pods,
            leases,
            metrics,
            silence: Mutex::new(HashMap::new()),
        }
    }
}

/// One sequence's record of lease versions: `lease/holder` -> (resourceVersion, since).
type Silence = HashMap<String, (String, Instant)>;

/// Why a pass failed. Each message says what happened and, where it helps, what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("IdSequence has no namespace (the CRD is namespaced; this should not happen)")]
    NoNamespace,
    #[error("{0}; fix or delete that Lease (its fence is needed to keep IDs unique)")]
    BadLease(#[from] SlotLeaseError),
    #[error("invalid spec: {0}")]
    InvalidSpec(#[from] SpecError),
    #[error(transparent)]
    Counter(#[from] kubeflake_crds::segment_counter::CounterError),
}

impl Error {
    /// A bounded label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::NoNamespace => "no_namespace",
            Error::BadLease(_) => "bad_lease",
            Error::InvalidSpec(_) => "invalid_spec",
            Error::Counter(_) => "bad_counter",
        }
    }
}

fn now_ms() -> u64 {
    Utc::now().timestamp_millis().max(0) as u64
}

fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// What happened to one attempted write.
enum Outcome {
    Assigned {
        slot: Slot,
        pod: PodInfo,
    },
    Released {
        slot: Slot,
        pod: Option<String>,
        reason: ReleaseReason,
    },
    /// Nothing to do after all (the "gone" pod exists).
    Skipped,
    Conflict,
}

/// Every value [`result_label`] can give: pre-registered so each series exists from the
/// start (a test checks this against [`result_label`] on every [`Error`] variant).
pub const RESULT_LABELS: [&str; 6] = [
    "ok",
    "kube",
    "no_namespace",
    "bad_lease",
    "invalid_spec",
    "bad_counter",
];

/// The `result` label of `kubeflake_operator_reconciles_total` for one pass.
fn result_label(result: &Result<Action, Error>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.label(),
    }
}

/// Reconciles one IdSequence.
pub async fn reconcile(seq: Arc<IdSequence>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&seq, &ctx).await;
    ctx.metrics
        .reconciles
        .with_label_values(&[result_label(&result)])
        .inc();
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Backs off after a failed pass; conflicts and API errors are retried soon.
pub fn error_policy(seq: Arc<IdSequence>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(sequence = %seq.name_any(), namespace = seq.namespace().unwrap_or_default(), %error, "reconcile failed");
    match error {
        Error::Kube(_) => Action::requeue(Duration::from_secs(2)),
        _ => Action::requeue(Duration::from_secs(30)),
    }
}

async fn reconcile_inner(seq: &IdSequence, ctx: &Context) -> Result<Action, Error> {
    let ns = seq.namespace().ok_or(Error::NoNamespace)?;
    let name = seq.name_any();
    let deleting = seq.meta().deletion_timestamp.is_some();
    let params = match seq.spec.params() {
        Ok(p) => p,
        Err(e) => {
            update_status(
                seq,
                ctx,
                not_ready_status(seq, "InvalidSpec", &e.to_string()),
            )
            .await?;
            return Err(e.into());
        }
    };
    if !deleting && !seq.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(seq, ctx).await?;
    }
    // Segment mode has no slots: its own module keeps the counter (deletion below is the
    // same for both modes: no slot leases, the finalizer goes).
    match seq.spec.segment_params() {
        Ok(Some(segment)) if !deleting => {
            return crate::segment::reconcile(seq, ctx, &ns, &name, &segment).await;
        }
        Ok(_) => {}
        Err(e) => {
            update_status(
                seq,
                ctx,
                not_ready_status(seq, "InvalidSpec", &e.to_string()),
            )
            .await?;
            return Err(e.into());
        }
    }

    let leases = observed_leases(ctx, &ns, &name)?;
    let pods = observed_pods(ctx, &ns, &name);
    let lease_duration = Duration::from_secs(params.lease_duration_secs);
    let silent = silent_leases(ctx, &ns, &name, &leases, lease_duration);
    let now = params.timebase.tick_at(now_ms()).unwrap_or(Tick(0));
    let capacity = params.layout.slot_count();
    let plan = slot::plan(&Observed {
        capacity,
        leases: &leases,
        pods: &pods,
        silent: &silent,
        now,
        assign: !deleting,
    });

    let outcomes: Vec<Outcome> = futures::stream::iter(plan.steps.clone())
        .map(|step| execute(step, seq, &ns, &name, &params, ctx))
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect::<Vec<Result<Outcome, Error>>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let conflicts = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Conflict))
        .count();
    let assigned_now = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Assigned { .. }))
        .count() as i64;
    let released_now = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Released { .. }))
        .count() as i64;
    publish_events(seq, ctx, &outcomes, plan.still_waiting, capacity).await;

    let assigned = plan.assigned as i64 + assigned_now - released_now;
    ctx.metrics
        .set_slots(&ns, &name, assigned.max(0) as u64, capacity);

    if deleting {
        return finish_deletion(
            seq,
            ctx,
            &ns,
            &leases,
            now,
            conflicts + released_now as usize,
        )
        .await;
    }
    let status = ready_status(seq, &params, assigned.max(0), plan.still_waiting);
    update_status(seq, ctx, status).await?;
    if conflicts > 0 {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    // Look again in a while even without events: silence is noticed by time passing.
    Ok(Action::requeue(
        (lease_duration / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)),
    ))
}

/// The sequence's slot leases, from the store.
fn observed_leases(ctx: &Context, ns: &str, name: &str) -> Result<Vec<SlotLease>, Error> {
    let mut leases = Vec::new();
    for lease in ctx.leases.state() {
        let labelled = lease.labels().get(SEQUENCE_LABEL).map(String::as_str) == Some(name);
        if labelled && lease.namespace().as_deref() == Some(ns) {
            leases.push(SlotLease::parse(&lease)?);
        }
    }
    Ok(leases)
}

/// The sequence's pods, from the store.
fn observed_pods(ctx: &Context, ns: &str, name: &str) -> Vec<PodInfo> {
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| p.labels().get(SEQUENCE_LABEL).map(String::as_str) == Some(name))
        .filter_map(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            Some(PodInfo {
                name: p.name_any(),
                uid: p.uid()?,
                created: p
                    .creation_timestamp()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                leaving: p.meta().deletion_timestamp.is_some()
                    || matches!(phase, Some("Succeeded" | "Failed")),
            })
        })
        .collect()
}

/// Updates the operator's own record of the sequence's lease versions and returns the held
/// leases it has seen unchanged for a full lease duration on its monotonic clock (rule 9).
fn silent_leases(
    ctx: &Context,
    ns: &str,
    name: &str,
    leases: &[SlotLease],
    duration: Duration,
) -> BTreeSet<String> {
    let mut all = ctx.silence.lock().unwrap_or_else(|p| p.into_inner());
    let key = format!("{ns}/{name}");
    let seen = all.entry(key.clone()).or_default();
    let silent = track_silence(seen, leases, duration, Instant::now());
    if seen.is_empty() {
        all.remove(&key);
    }
    silent
}

/// [`silent_leases`] on one sequence's record `seen`, at `now`.
fn track_silence(
    seen: &mut Silence,
    leases: &[SlotLease],
    duration: Duration,
    now: Instant,
) -> BTreeSet<String> {
    let key =
        |lease: &SlotLease| format!("{}/{}", lease.name, lease.holder.as_deref().unwrap_or(""));
    // Forget leases that are gone and holders that no longer hold them. Forgetting only
    // ever delays a reclaim: a record made again starts its silence from `now`.
    let current: BTreeSet<String> = leases.iter().map(key).collect();
    seen.retain(|k, _| current.contains(k));
    let mut silent = BTreeSet::new();
    for lease in leases {
        let version = lease.resource_version.clone().unwrap_or_default();
        let entry = seen
            .entry(key(lease))
            .or_insert_with(|| (version.clone(), now));
        if entry.0 != version {
            *entry = (version, now);
        } else if lease.holder.is_some() && now.duration_since(entry.1) >= duration {
            silent.insert(lease.name.clone());
        }
    }
    silent
}

async fn execute(
    step: Step,
    seq: &IdSequence,
    ns: &str,
    name: &str,
    params: &SequenceParams,
    ctx: &Context,
) -> Result<Outcome, Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let write = match &step {
        Step::Release { lease, reason } => {
            if *reason == ReleaseReason::PodGone && holder_pod_exists(ctx, ns, lease).await? {
                return Ok(Outcome::Skipped);
            }
            leases
                .replace(
                    &lease.name,
                    &PostParams::default(),
                    &released(seq, name, lease),
                )
                .await
        }
        Step::Assign {
            slot,
            pod,
            existing: Some(lease),
        } => {
            leases
                .replace(
                    &lease.name,
                    &PostParams::default(),
                    &assigned(seq, name, *slot, pod, Some(lease), params),
                )
                .await
        }
        Step::Assign {
            slot,
            pod,
            existing: None,
        } => {
            leases
                .create(
                    &PostParams::default(),
                    &assigned(seq, name, *slot, pod, None, params),
                )
                .await
        }
    };
    match write {
        Ok(_) => Ok(match step {
            Step::Release { lease, reason } => {
                ctx.metrics
                    .reclaims
                    .with_label_values(&[reason.label()])
                    .inc();
                Outcome::Released {
                    slot: lease.slot,
                    pod: lease.holder_pod,
                    reason,
                }
            }
            Step::Assign { slot, pod, .. } => {
                ctx.metrics.assignments.inc();
                if let Ok(created) = DateTime::parse_from_rfc3339(&pod.created) {
                    let waited = Utc::now()
                        .signed_duration_since(created)
                        .num_milliseconds()
                        .max(0);
                    ctx.metrics.pod_to_slot.observe(waited as f64 / 1000.0);
                }
                Outcome::Assigned { slot, pod }
            }
        }),
        Err(e) if is_conflict(&e) => {
            ctx.metrics.conflicts.inc();
            Ok(Outcome::Conflict)
        }
        Err(e) => Err(e.into()),
    }
}

/// Confirms with a direct read (not the cache) whether the holder pod still exists.
async fn holder_pod_exists(ctx: &Context, ns: &str, lease: &SlotLease) -> Result<bool, Error> {
    let Some(pod_name) = lease.holder_pod.as_deref() else {
        return Ok(false);
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match pods.get_opt(pod_name).await? {
        Some(pod) => Ok(pod.uid().as_deref() == lease.holder.as_deref()),
        None => Ok(false),
    }
}

fn owner_meta(
    seq: &IdSequence,
    lease_name: String,
    labels: std::collections::BTreeMap<String, String>,
    annotations: std::collections::BTreeMap<String, String>,
    resource_version: Option<String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(lease_name),
        namespace: seq.namespace(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: seq.controller_owner_ref(&()).map(|o| vec![o]),
        resource_version,
        ..Default::default()
    }
}

/// The lease with the slot given to `pod`; the fence is kept (rule 9).
fn assigned(
    seq: &IdSequence,
    name: &str,
    slot: Slot,
    pod: &PodInfo,
    existing: Option<&SlotLease>,
    params: &SequenceParams,
) -> Lease {
    let fence = existing.map(|l| l.fence).unwrap_or(Tick(0));
    let mut annotations = std::collections::BTreeMap::from([
        (FENCE_ANNOTATION.to_string(), fence.0.to_string()),
        (HOLDER_POD_ANNOTATION.to_string(), pod.name.clone()),
    ]);
    if let Some(released) = existing.and_then(|l| l.released_at.clone()) {
        annotations.insert(RELEASED_AT_ANNOTATION.to_string(), released);
    }
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    Lease {
        metadata: owner_meta(
            seq,
            lease_name(name, slot),
            lease_labels(name, slot, Some(&pod.uid)),
            annotations,
            existing.and_then(|l| l.resource_version.clone()),
        ),
        spec: Some(LeaseSpec {
            holder_identity: Some(pod.uid.clone()),
            lease_duration_seconds: Some(params.lease_duration_secs as i32),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(existing.map(|l| l.transitions).unwrap_or(0) + 1),
            ..Default::default()
        }),
    }
}

/// The lease with its slot freed; the fence is kept (rule 9).
fn released(seq: &IdSequence, name: &str, lease: &SlotLease) -> Lease {
    let annotations = std::collections::BTreeMap::from([
        (FENCE_ANNOTATION.to_string(), lease.fence.0.to_string()),
        (RELEASED_AT_ANNOTATION.to_string(), now_rfc3339()),
    ]);
    Lease {
        metadata: owner_meta(
            seq,
            lease.name.clone(),
            lease_labels(name, lease.slot, None),
            annotations,
            lease.resource_version.clone(),
        ),
        spec: Some(LeaseSpec {
            lease_transitions: Some(lease.transitions),
            ..Default::default()
        }),
    }
}

/// Writes the sequence's finalizers. The resourceVersion in the merge patch makes it
/// conditional: a compare-and-swap like every other write (a conflict means someone else
/// changed the object; the pass repeats).
async fn write_finalizers(
    seq: &IdSequence,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<IdSequence> =
        Api::namespaced(ctx.client.clone(), &seq.namespace().unwrap_or_default());
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": seq.resource_version()}});
    api.patch(
        &seq.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn add_finalizer(seq: &IdSequence, ctx: &Context) -> Result<(), Error> {
    let mut finalizers = seq.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    write_finalizers(seq, ctx, finalizers).await
}

/// Rule 10: the sequence goes only when no slot has a holder or a fence in the future;
/// then its leases are deleted (each conditionally on its version) and the finalizer removed.
async fn finish_deletion(
    seq: &IdSequence,
    ctx: &Context,
    ns: &str,
    leases: &[SlotLease],
    now: Tick,
    changed: usize,
) -> Result<Action, Error> {
    if !seq.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let held = leases.iter().filter(|l| l.holder.is_some()).count();
    let fenced = leases.iter().filter(|l| l.fence > now).count();
    if held > 0 || fenced > 0 || changed > 0 {
        let message =
            format!("deletion waits: {held} slots still held, {fenced} fences still in the future");
        let mut status = seq.status.clone().unwrap_or_default();
        set_condition(
            &mut status.conditions,
            seq,
            "Ready",
            "False",
            "Deleting",
            &message,
        );
        update_status(seq, ctx, status).await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    for lease in leases {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.resource_version.clone(),
                uid: None,
            }),
            ..Default::default()
        };
        match api.delete(&lease.name, &params).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) if is_conflict(&e) => return Ok(Action::requeue(Duration::from_millis(500))),
            Err(e) => return Err(e.into()),
        }
    }
    let finalizers = seq
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    write_finalizers(seq, ctx, finalizers).await?;
    ctx.metrics.forget(ns, &seq.name_any());
    ctx.silence
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&format!("{ns}/{}", seq.name_any()));
    tracing::info!(sequence = %seq.name_any(), namespace = ns, leases = leases.len(), "sequence deleted after its slots were released");
    Ok(Action::await_change())
}

pub(crate) fn set_condition(
    conditions: &mut Vec<Condition>,
    seq: &IdSequence,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) {
    let generation = seq.meta().generation;
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::now());
        }
        c.status = status.to_string();
        c.reason = reason.to_string();
        c.message = message.to_string();
        c.observed_generation = generation;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    });
}

fn ready_status(
    seq: &IdSequence,
    p: &SequenceParams,
    assigned: i64,
    waiting: u64,
) -> IdSequenceStatus {
    let mut status = seq.status.clone().unwrap_or_default();
    let capacity = p.layout.slot_count() as i64;
    let exhausts_at = p.timebase.exhausts_at_ms(&p.layout);
    let now = now_ms();
    status.observed_generation = seq.meta().generation;
    status.capacity = Some(capacity);
    status.assigned = Some(assigned);
    status.exhausts_at = Some(rfc3339(exhausts_at));
    if p.timebase.epoch_unix_ms() > now {
        let message = format!(
            "epoch {} is in the future: sidecars refuse to issue IDs until then; choose an epoch in the past (create a new IdSequence, epoch is immutable)",
            seq.spec.epoch
        );
        set_condition(
            &mut status.conditions,
            seq,
            "Ready",
            "False",
            "EpochInFuture",
            &message,
        );
    } else {
        let message = format!("{assigned} of {capacity} slots assigned");
        set_condition(
            &mut status.conditions,
            seq,
            "Ready",
            "True",
            "Reconciled",
            &message,
        );
    }
    if waiting > 0 {
        let message = format!(
            "{waiting} pods wait for a free slot: all {capacity} slots are held; raise layout.workerBits in a new IdSequence or run fewer pods"
        );
        set_condition(
            &mut status.conditions,
            seq,
            "Exhausted",
            "True",
            "PodsWaiting",
            &message,
        );
    } else {
        set_condition(
            &mut status.conditions,
            seq,
            "Exhausted",
            "False",
            "SlotsAvailable",
            "every labelled pod has a slot",
        );
    }
    if exhausts_at.saturating_sub(now) < EXPIRING_WITHIN_MS {
        let message = format!(
            "the timestamp bits run out at {}; plan a new IdSequence",
            rfc3339(exhausts_at)
        );
        set_condition(
            &mut status.conditions,
            seq,
            "Expiring",
            "True",
            "TimestampBitsRunningOut",
            &message,
        );
    } else {
        set_condition(
            &mut status.conditions,
            seq,
            "Expiring",
            "False",
            "TimestampBitsLast",
            &format!("the timestamp bits last until {}", rfc3339(exhausts_at)),
        );
    }
    status
}

/// The sequence's status with `Ready=False` for `reason`; everything else kept.
pub(crate) fn not_ready_status(seq: &IdSequence, reason: &str, message: &str) -> IdSequenceStatus {
    let mut status = seq.status.clone().unwrap_or_default();
    status.observed_generation = seq.meta().generation;
    set_condition(
        &mut status.conditions,
        seq,
        "Ready",
        "False",
        reason,
        message,
    );
    status
}

/// Writes the status only when it differs from what is stored (no write per pass).
pub(crate) async fn update_status(
    seq: &IdSequence,
    ctx: &Context,
    status: IdSequenceStatus,
) -> Result<(), Error> {
    if seq.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<IdSequence> =
        Api::namespaced(ctx.client.clone(), &seq.namespace().unwrap_or_default());
    let patch = json!({"status": status});
    api.patch_status(
        &seq.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// One aggregated Event per kind and pass, so a burst of pods does not become a burst of
/// Events.
async fn publish_events(
    seq: &IdSequence,
    ctx: &Context,
    outcomes: &[Outcome],
    waiting: u64,
    capacity: u64,
) {
    let reference = seq.object_ref(&());
    let mut assigned = Vec::new();
    let mut released = Vec::new();
    for o in outcomes {
        match o {
            Outcome::Assigned { slot, pod } => assigned.push(format!("{}->{}", pod.name, slot.0)),
            Outcome::Released { slot, pod, reason } => released.push(format!(
                "{} from {} ({})",
                slot.0,
                pod.as_deref().unwrap_or("?"),
                reason.label()
            )),
            _ => {}
        }
    }
    let summarize = |items: &[String]| {
        let shown: Vec<&str> = items.iter().take(10).map(String::as_str).collect();
        let more = items.len().saturating_sub(shown.len());
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    let mut events = Vec::new();
    if !assigned.is_empty() {
        events.push((
            EventType::Normal,
            "SlotsAssigned",
            "Assign",
            format!(
                "assigned {} slots: {}",
                assigned.len(),
                summarize(&assigned)
            ),
        ));
    }
    if !released.is_empty() {
        events.push((
            EventType::Normal,
            "SlotsReclaimed",
            "Reclaim",
            format!(
                "released {} slots, fences kept: {}",
                released.len(),
                summarize(&released)
            ),
        ));
    }
    let was_exhausted = seq
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Exhausted"))
        .is_some_and(|c| c.status == "True");
    if waiting > 0 && !was_exhausted {
        events.push((
            EventType::Warning,
            "Exhausted",
            "Assign",
            format!("{waiting} pods wait: all {capacity} slots are held"),
        ));
    }
    for (type_, reason, action, note) in events {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "could not record an Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::segment_counter::CounterError;

    /// Every label a pass can produce, derived from [`result_label`] on one sample of each
    /// [`Error`] variant, is pre-registered, and nothing else is.
    #[test]
    fn every_reconcile_result_label_is_pre_registered_and_nothing_else() {
        let samples = vec![
            Error::Kube(kube::Error::Api(Box::new(
                kube::core::Status::failure("conflict", "Conflict").with_code(409),
            ))),
            Error::NoNamespace,
            Error::BadLease(SlotLeaseError::BadSlot { name: "x".into() }),
            Error::InvalidSpec(SpecError::NegativeDatacenter(-1)),
            Error::Counter(CounterError::Missing { name: "x".into() }),
        ];
        // No wildcard: a new variant does not compile here; give it an index and a sample.
        let mut covered = [false; 5];
        for e in &samples {
            covered[match e {
                Error::Kube(_) => 0,
                Error::NoNamespace => 1,
                Error::BadLease(_) => 2,
                Error::InvalidSpec(_) => 3,
                Error::Counter(_) => 4,
            }] = true;
        }
        assert!(
            covered.iter().all(|c| *c),
            "a variant has no sample: {covered:?}"
        );
        let produced: BTreeSet<String> = std::iter::once(Ok(Action::await_change()))
            .chain(samples.into_iter().map(Err))
            .map(|r| result_label(&r).to_string())
            .collect();
        let rendered = Metrics::new().render();
        let registered: BTreeSet<String> = rendered
            .lines()
            .filter_map(|l| l.strip_prefix("kubeflake_operator_reconciles_total{result=\""))
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_string)
            .collect();
        assert_eq!(registered, produced);
        assert_eq!(
            RESULT_LABELS
                .iter()
                .map(|l| l.to_string())
                .collect::<BTreeSet<_>>(),
            produced
        );
    }

    fn lease(name: &str, holder: Option<&str>, version: &str) -> SlotLease {
        SlotLease {
            name: name.into(),
            slot: Slot(0),
            holder: holder.map(str::to_string),
            holder_pod: holder.map(|h| format!("pod-{h}")),
            fence: Tick(0),
            transitions: 1,
            resource_version: Some(version.into()),
            released_at: None,
        }
    }

    #[test]
    fn silence_records_of_deleted_leases_and_former_holders_are_pruned() {
        let duration = Duration::from_secs(15);
        let t0 = Instant::now();
        let mut seen = Silence::new();
        let a = lease("s-slot-0", Some("uid-a"), "1");
        let b = lease("s-slot-1", Some("uid-b"), "5");
        track_silence(&mut seen, &[a, b], duration, t0);
        assert_eq!(seen.len(), 2);
        // Slot 1's lease was deleted; slot 0 went to another pod.
        let c = lease("s-slot-0", Some("uid-c"), "2");
        track_silence(&mut seen, &[c], duration, t0 + Duration::from_secs(1));
        let keys: Vec<&str> = seen.keys().map(String::as_str).collect();
        assert_eq!(keys, ["s-slot-0/uid-c"]);
        // No leases left: nothing left.
        track_silence(&mut seen, &[], duration, t0 + Duration::from_secs(2));
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[test]
    fn a_lease_is_silent_only_after_a_full_duration_unchanged_and_a_pruned_one_starts_over() {
        let duration = Duration::from_secs(15);
        let t0 = Instant::now();
        let mut seen = Silence::new();
        let a = lease("s-slot-0", Some("uid-a"), "1");
        let free = lease("s-slot-1", None, "3");
        let both = [a.clone(), free.clone()];
        assert!(track_silence(&mut seen, &both, duration, t0).is_empty());
        let almost = t0 + duration - Duration::from_millis(1);
        assert!(track_silence(&mut seen, &both, duration, almost).is_empty());
        let silent = track_silence(&mut seen, &both, duration, t0 + duration);
        assert_eq!(
            silent,
            BTreeSet::from(["s-slot-0".to_string()]),
            "a free lease is never silent"
        );
        // Gone from one pass (pruned), back in the next: its clock starts again.
        track_silence(&mut seen, &[free], duration, t0 + duration);
        let back = t0 + duration + Duration::from_secs(1);
        assert!(track_silence(&mut seen, std::slice::from_ref(&a), duration, back).is_empty());
        let later = back + duration;
        assert_eq!(track_silence(&mut seen, &[a], duration, later).len(), 1);
    }
}
