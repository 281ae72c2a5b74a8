//! The `Holding` state against a scripted fake API server (no control plane).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use kube::Client;
use kube::api::ObjectMeta;
use kubeflake_crds::slot_lease::{
    FENCE_ANNOTATION, FORMAT_ANNOTATION, SEQUENCE_SPEC_ANNOTATION, lease_labels,
};
use kubeflake_crds::{IdSequenceSpec, Slot};
use kubeflake_runtime::shutdown::ShutdownToken;

use super::*;
use crate::clock::{Clock, ManualClock, PanickingClock};
use crate::cluster::ClusterConfig;
use crate::cluster::events::SkewGate;
use crate::fence::{FenceFile, FenceFileError};
use crate::metrics::Metrics;
use crate::phase::Phase;
use crate::slot::PodIdentity;
use crate::state::ServingCell;
use crate::watch::Notify;
use kubeflake_runtime::fake_api::{self, FakeApi};

const NOW_MS: u64 = 1_800_000_000_000;
const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/orders-slot-3";

fn identity(acquisition: &str) -> FenceIdentity {
    FenceIdentity {
        sequence: "ns/orders".into(),
        slot: 0,
        holder: "uid-p".into(),
        acquisition: acquisition.into(),
    }
}

#[test]
fn rule6_a_restarted_container_starts_above_its_local_fence_for_the_same_acquisition() {
    let record = FenceRecord {
        identity: identity("orders-slot-0#1"),
        fence_tick: 500,
    };
    assert_eq!(
        start_fence(Some(&record), &identity("orders-slot-0#1"), Tick(9_000)),
        (Tick(500), true)
    );
}

#[test]
fn rule6_a_local_fence_from_another_acquisition_is_never_used() {
    // The pod held slot 0 (acquisition #1), lost it; another pod issued up to tick 9000
    // (acquisition #2); the slot came back (#3). The old file must not be used.
    let record = FenceRecord {
        identity: identity("orders-slot-0#1"),
        fence_tick: 500,
    };
    assert_eq!(
        start_fence(Some(&record), &identity("orders-slot-0#3"), Tick(9_000)),
        (Tick(9_000), false)
    );
    let other_holder = FenceRecord {
        identity: FenceIdentity {
            holder: "uid-q".into(),
            ..identity("orders-slot-0#3")
        },
        fence_tick: 500,
    };
    assert_eq!(
        start_fence(
            Some(&other_holder),
            &identity("orders-slot-0#3"),
            Tick(9_000)
        )
        .0,
        Tick(9_000)
    );
    assert_eq!(
        start_fence(None, &identity("orders-slot-0#3"), Tick(9_000)),
        (Tick(9_000), false)
    );
}

#[test]
fn a_slot_outside_the_layout_is_its_own_error_naming_what_to_check() {
    let params = IdSequenceSpec::default().params().unwrap();
    let err = worker_config(&params, 5_000).unwrap_err();
    assert!(
        matches!(err, SlotError::SlotOutsideLayout { slot: 5_000, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("workerBits"), "{err}");
}

/// Events recorded instead of sent: their reasons, and their notes.
#[derive(Default)]
struct Recorded(Mutex<Vec<&'static str>>, Mutex<Vec<String>>);

impl Notify for Recorded {
    fn notify(&self, _warning: bool, reason: &'static str, note: String) {
        self.0.lock().unwrap().push(reason);
        self.1.lock().unwrap().push(note);
    }
}

fn lease(holder: &str, fence: u64, version: u64) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("orders-slot-3".into()),
            namespace: Some("ns".into()),
            resource_version: Some(version.to_string()),
            labels: Some(lease_labels("orders", Slot(3), Some(holder))),
            annotations: Some([(FENCE_ANNOTATION.to_string(), fence.to_string())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_transitions: Some(1),
            ..Default::default()
        }),
    }
}

/// A client whose every request `handler` answers, and the fake that records them.
fn answered(
    handler: impl Fn(&http::Method, &str, &[u8]) -> (u16, serde_json::Value) + Send + Sync + 'static,
) -> (Client, FakeApi) {
    let fake = FakeApi::answering(handler);
    (fake.client(), fake)
}

/// A fake API server holding slot lease 3 for `uid-p` until `taken` is set; then every
/// write conflicts and a read shows another holder. Anything else is 404 (so the clock
/// skew is not measured).
fn api_server(taken: Arc<AtomicBool>) -> (Client, FakeApi) {
    let version = AtomicU64::new(2);
    answered(move |method, path, body| {
        if !path.starts_with(LEASE_PATH) {
            return fake_api::status(404, "NotFound");
        }
        let taken = taken.load(Ordering::SeqCst);
        match (method.as_str(), taken) {
            ("PUT", false) => {
                let mut written: Lease = serde_json::from_slice(body).unwrap();
                let v = version.fetch_add(1, Ordering::SeqCst);
                written.metadata.resource_version = Some(v.to_string());
                (200, serde_json::to_value(written).unwrap())
            }
            ("PUT", true) => fake_api::status(409, "Conflict"),
            ("GET", true) => {
                let v = version.load(Ordering::SeqCst);
                (
                    200,
                    serde_json::to_value(lease("uid-other", u64::MAX >> 30, v)).unwrap(),
                )
            }
            _ => fake_api::status(405, "MethodNotAllowed"),
        }
    })
}

fn ctx(client: Client, clock: Arc<dyn Clock>, renew_every: Duration) -> (Ctx, Arc<Recorded>) {
    let metrics = Arc::new(Metrics::new());
    let events = Arc::new(Recorded::default());
    let ctx = Ctx {
        client,
        config: ClusterConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            probe_listen: None,
            pod: PodIdentity {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "uid-p".into(),
            },
            sequence: "orders".into(),
            state_dir: std::path::PathBuf::new(),
            listen_unix: None,
            max_batch: 10,
            max_range: 10,
            local_fence_ahead: Duration::from_secs(1),
            renew_every: Some(renew_every),
            max_clock_skew: Duration::from_secs(10),
            drain: Duration::from_millis(100),
            oracle_listen: None,
            oracle_token_file: "/nonexistent/token".into(),
            unsafe_take_over_without_waiting: false,
        },
        clock,
        state: ServingCell::new(Serving::Waiting(WaitReason::Starting), &metrics),
        metrics,
        events: events.clone(),
        // Never triggered: these tests end the states by other means.
        shutdown: ShutdownToken::default(),
        skew: SkewGate::new(Duration::from_secs(10)),
        format_told: Mutex::new(None),
    };
    (ctx, events)
}

async fn acquired(ctx: &Ctx, dir: &std::path::Path) -> Held {
    let (file, found) = FenceFile::open(dir, "orders.fence").unwrap();
    let params = IdSequenceSpec::default().params().unwrap();
    match ctx
        .acquire(Unheld { file, found }, &params, lease("uid-p", 0, 1))
        .await
    {
        Ok(held) => held,
        Err(Acquire::Retry(e, _)) => panic!("not acquired: {e}"),
        Err(Acquire::Fatal(e)) => panic!("not acquired: {e}"),
    }
}

#[tokio::test]
async fn a_renewal_that_finds_the_slot_lost_stops_the_generator_and_gets_the_fence_file_back() {
    let dir = tempfile::tempdir().unwrap();
    let taken = Arc::new(AtomicBool::new(false));
    let (client, seen) = api_server(taken.clone());
    let clock = Arc::new(ManualClock::at_millis(NOW_MS));
    let (ctx, events) = ctx(client, clock, Duration::from_millis(100));
    let held = acquired(&ctx, dir.path()).await;
    let generator = held.generator.clone();
    assert_eq!(ctx.state.load().phase(), Phase::Snowflake);
    assert!(
        generator.next_id().is_ok(),
        "serving once both fences are written"
    );

    taken.store(true, Ordering::SeqCst);
    seen.clear_seen();
    let next = tokio::time::timeout(Duration::from_secs(10), ctx.keep(held))
        .await
        .expect("keep returns once the slot is lost")
        .expect("losing the slot is not fatal");

    let Lifecycle::Waiting(Unheld { file, found }) = next else {
        panic!("back to waiting");
    };
    assert!(generator.is_stopped(), "rule 3: stopped at once");
    assert!(generator.next_id().is_err());
    assert!(matches!(
        &**ctx.state.load(),
        Serving::Waiting(WaitReason::SlotLost)
    ));
    assert!(
        found.is_none(),
        "the old record never serves a new acquisition"
    );
    // The file is back: still locked against anyone else, and lowered to the last tick.
    assert!(matches!(
        FenceFile::open(dir.path(), "orders.fence"),
        Err(FenceFileError::Locked(_))
    ));
    drop(file);
    let (_, record) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    assert_eq!(
        record.map(|r| r.fence_tick),
        Some(generator.high_water_tick().0)
    );
    // The API saw one conflicting write and the re-read that found another holder.
    let seen: Vec<String> = seen
        .seen()
        .iter()
        .filter(|s| s.path.starts_with(LEASE_PATH))
        .map(|s| s.method.to_string())
        .collect();
    assert_eq!(seen, ["PUT", "GET"]);
    assert_eq!(*events.0.lock().unwrap(), ["SlotAcquired", "SlotLost"]);
}

#[tokio::test]
async fn a_dead_local_fence_renewal_stops_the_generator_and_ends_with_an_exit_error() {
    let dir = tempfile::tempdir().unwrap();
    let (client, _) = api_server(Arc::new(AtomicBool::new(false)));
    let clock = Arc::new(PanickingClock::at_millis(NOW_MS));
    let (ctx, _) = ctx(client, clock.clone(), Duration::from_secs(3600));
    let held = acquired(&ctx, dir.path()).await;
    let generator = held.generator.clone();
    // An ID makes the next local fence renewal due, and it panics.
    generator.next_id().unwrap();
    clock.arm();
    let ended = tokio::time::timeout(Duration::from_secs(10), ctx.keep(held))
        .await
        .expect("keep returns once the renewal died");
    let Err(err) = ended else {
        panic!("a dead renewal must be fatal");
    };
    assert!(matches!(err, ClusterError::Renewer(_)), "{err}");
    assert_eq!(err.exit_code(), 1, "the process exits non-zero");
    assert!(generator.is_stopped());
    assert_eq!(ctx.state.load().phase(), Phase::Stopping);
}

/// At shutdown a holder releases only a slot its lease still names it for: a lease the
/// operator gave to another pod is refused by the release transition itself (the holder
/// check is in the protocol, `Releaser::Holder { uid, .. }`), and nothing is written.
#[tokio::test]
async fn a_holder_whose_slot_went_to_another_pod_releases_nothing_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let taken = Arc::new(AtomicBool::new(false));
    let (client, seen) = api_server(taken.clone());
    let clock = Arc::new(ManualClock::at_millis(NOW_MS));
    let (ctx, _) = ctx(client, clock, Duration::from_secs(3600));
    let held = acquired(&ctx, dir.path()).await;
    taken.store(true, Ordering::SeqCst);
    seen.clear_seen();
    ctx.release(held)
        .await
        .expect("nothing to release is no error");
    let writes: Vec<String> = seen
        .seen()
        .iter()
        .filter(|s| s.path.starts_with(LEASE_PATH))
        .map(|s| s.method.to_string())
        .collect();
    // The release conflicted (the lease changed), the re-read names another pod: no
    // second write lowers that pod's fence.
    assert_eq!(writes, ["PUT", "GET"]);
}

/// A fake API server for a pod that waits: the sequence exists, no lease names the pod, and
/// from `refuse_after` GETs of the sequence on, the pod's token is refused (401), as the
/// API server does a minute after a pod's deletion time.
fn waiting_api(refuse_after: u64) -> (Client, FakeApi) {
    let gets = Arc::new(AtomicU64::new(0));
    answered(move |method, path, _| {
        if method == http::Method::GET && path.starts_with("/apis/kubeflake.io/") {
            if gets.fetch_add(1, Ordering::SeqCst) >= refuse_after {
                return fake_api::status(401, "Unauthorized");
            }
            let seq = serde_json::json!({
                "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
                "metadata": {"name": "orders", "namespace": "ns"}, "spec": {}
            });
            return (200, seq);
        }
        if path.contains("watch=true") {
            // Nothing ever names the pod.
            return fake_api::status(500, "InternalError");
        }
        (
            200,
            serde_json::json!({"apiVersion": "v1", "kind": "LeaseList", "metadata": {"resourceVersion": "1"}, "items": []}),
        )
    })
}

#[tokio::test(start_paused = true)]
async fn a_waiting_sidecar_whose_pod_token_is_refused_exits_so_the_kubelet_can_delete_the_held_pod()
{
    let dir = tempfile::tempdir().unwrap();
    let (client, seen) = waiting_api(2);
    let (ctx, events) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_secs(1),
    );
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_secs(600),
        ctx.hold(Lifecycle::Waiting(Unheld { file, found })),
    )
    .await
    .expect("the wait ends by itself");
    match outcome {
        Err(e @ ClusterError::TokenRefused(_)) => {
            assert_eq!(e.exit_code(), 1);
            assert!(e.to_string().contains("the pod was deleted"), "{e}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("the wait ended without an error"),
    }
    assert_eq!(
        events.0.lock().unwrap().as_slice(),
        ["WaitingForSlot"],
        "told once why it waits, before the token was refused"
    );
    let gets = seen
        .seen()
        .iter()
        .filter(|s| s.method == "GET" && s.path.starts_with("/apis/kubeflake.io/"))
        .count();
    assert_eq!(
        gets, 3,
        "the start, the 10 s check, then the refused check 5 s later"
    );
}

#[tokio::test]
async fn a_sidecar_whose_token_is_refused_before_it_read_its_sequence_exits_too() {
    let dir = tempfile::tempdir().unwrap();
    let (client, _) = waiting_api(0);
    let (ctx, events) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_secs(1),
    );
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    let outcome = ctx.hold(Lifecycle::Waiting(Unheld { file, found })).await;
    assert!(matches!(outcome, Err(ClusterError::TokenRefused(_))));
    assert!(events.0.lock().unwrap().is_empty());
}

/// `lease` marked as written in Lease format `format` (a newer kubeflake's, here).
fn in_format(mut lease: Lease, format: &str) -> Lease {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(FORMAT_ANNOTATION.to_string(), format.to_string());
    lease
}

/// The requests on slot leases other than reads.
fn lease_writes(seen: &FakeApi) -> Vec<String> {
    seen.seen()
        .iter()
        .filter(|s| s.path.contains("/leases") && s.method != "GET")
        .map(|s| format!("{} {}", s.method, s.target()))
        .collect()
}

/// What `/readyz` would say while waiting, or a panic if the sidecar serves.
fn waiting_reason(ctx: &Ctx) -> String {
    match &**ctx.state.load() {
        Serving::Waiting(reason) => reason.to_string(),
        _ => panic!("the sidecar serves"),
    }
}

/// Issue 23: the operator named this pod holder of a slot lease that a newer kubeflake
/// wrote (format 2): the sidecar never takes it (no write, nothing served), stays not
/// ready saying why, counts a failed fence write and records one Warning Event, however
/// often it looks again.
#[tokio::test(start_paused = true)]
async fn a_slot_lease_in_a_newer_format_is_never_taken_and_the_pod_is_told_why() {
    let dir = tempfile::tempdir().unwrap();
    let (client, seen) = answered(move |method, path, _| {
        if method == http::Method::GET && path.starts_with("/apis/kubeflake.io/") {
            let seq = serde_json::json!({
                "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
                "metadata": {"name": "orders", "namespace": "ns"}, "spec": {}
            });
            return (200, seq);
        }
        if method == http::Method::GET && path.contains("/leases?") && !path.contains("watch=true")
        {
            let newer = in_format(lease("uid-p", 0, 7), "2");
            return (
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "LeaseList", "metadata": {"resourceVersion": "7"}, "items": [newer]}),
            );
        }
        fake_api::status(500, "InternalError")
    });
    let (ctx, events) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_secs(1),
    );
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    let mut now = Lifecycle::Waiting(Unheld { file, found });
    for _ in 0..2 {
        let Lifecycle::Waiting(unheld) = now else {
            panic!("the sidecar took the slot");
        };
        now = ctx.find_work(unheld).await.expect("not fatal");
        let why = waiting_reason(&ctx);
        for part in ["orders-slot-3", "newer kubeflake", "format 2", "Upgrade"] {
            assert!(why.contains(part), "{part:?} missing from /readyz: {why}");
        }
    }
    assert!(matches!(now, Lifecycle::Waiting(_)));
    assert_eq!(lease_writes(&seen), Vec::<String>::new(), "never written");
    assert_eq!(
        events.0.lock().unwrap().as_slice(),
        ["LeaseFormatUnsupported"],
        "told once, not on every look"
    );
    let note = events.1.lock().unwrap()[0].clone();
    assert!(
        note.contains("orders-slot-3") && note.contains("format 2"),
        "{note}"
    );
    assert_eq!(
        ctx.metrics.fence_writes.with_label_values(&["error"]).get(),
        2
    );
}

/// Issue 23: a holder whose slot lease is rewritten by a newer kubeflake (format 2, still
/// naming this pod) can no longer read its holder or fence: it stops issuing at once, as
/// for a lost slot (rule 3), writes nothing more, and says why.
#[tokio::test]
async fn a_holder_whose_lease_turns_to_a_newer_format_stops_issuing_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let rewritten = Arc::new(AtomicBool::new(false));
    let switch = rewritten.clone();
    let version = AtomicU64::new(2);
    let (client, seen) = answered(move |method, path, body| {
        if !path.starts_with(LEASE_PATH) {
            return fake_api::status(404, "NotFound");
        }
        match (method.as_str(), switch.load(Ordering::SeqCst)) {
            ("PUT", false) => {
                let mut written: Lease = serde_json::from_slice(body).unwrap();
                let v = version.fetch_add(1, Ordering::SeqCst);
                written.metadata.resource_version = Some(v.to_string());
                (200, serde_json::to_value(written).unwrap())
            }
            ("PUT", true) => fake_api::status(409, "Conflict"),
            ("GET", true) => {
                let v = version.load(Ordering::SeqCst);
                let newer = in_format(lease("uid-p", u64::MAX >> 30, v), "2");
                (200, serde_json::to_value(newer).unwrap())
            }
            _ => fake_api::status(405, "MethodNotAllowed"),
        }
    });
    let (ctx, events) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_millis(100),
    );
    let held = acquired(&ctx, dir.path()).await;
    let generator = held.generator.clone();
    assert!(generator.next_id().is_ok(), "serving");

    rewritten.store(true, Ordering::SeqCst);
    seen.clear_seen();
    let next = tokio::time::timeout(Duration::from_secs(10), ctx.keep(held))
        .await
        .expect("keep returns at once, not when the fence runs out")
        .expect("not fatal");
    assert!(matches!(next, Lifecycle::Waiting(_)));
    assert!(
        generator.is_stopped(),
        "stopped at once, as for a lost slot"
    );
    assert!(generator.next_id().is_err());
    let why = waiting_reason(&ctx);
    assert!(why.contains("format 2") && why.contains("Upgrade"), "{why}");
    let methods: Vec<String> = seen
        .seen()
        .iter()
        .filter(|s| s.path.starts_with(LEASE_PATH))
        .map(|s| s.method.to_string())
        .collect();
    assert_eq!(
        methods,
        ["PUT", "GET"],
        "the stale write, the re-read, no more"
    );
    assert_eq!(
        *events.0.lock().unwrap(),
        ["SlotAcquired", "LeaseFormatUnsupported"]
    );
}

/// A sequence whose IDs carry datacenter `datacenter` (2 bits of it in the layout).
fn with_datacenter(datacenter: i64) -> IdSequenceSpec {
    let mut spec = IdSequenceSpec::default();
    spec.layout.datacenter_bits = 2;
    spec.layout.worker_bits = 8;
    spec.datacenter_id = datacenter;
    spec
}

/// `lease` with the operator's note of the sequence spec for its assignment (the Lease's
/// `leaseTransitions`, 1 in [`lease`]), a spec with datacenter `datacenter`.
fn noted(mut lease: Lease, datacenter: i64) -> Lease {
    let spec = with_datacenter(datacenter);
    let note = serde_json::json!({"leaseTransitions": 1, "spec": spec}).to_string();
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(SEQUENCE_SPEC_ANNOTATION.to_string(), note);
    lease
}

/// A fake API server where `listed` is this pod's slot lease: the list returns it, a PUT
/// of it succeeds, and the IdSequence can be read (datacenter 2).
fn assigned_api(listed: Lease) -> (Client, FakeApi) {
    let version = AtomicU64::new(10);
    answered(move |method, path, body| {
        if method == http::Method::GET && path.starts_with("/apis/kubeflake.io/") {
            let seq = serde_json::json!({
                "apiVersion": "kubeflake.io/v1alpha1", "kind": "IdSequence",
                "metadata": {"name": "orders", "namespace": "ns"}, "spec": with_datacenter(2)
            });
            return (200, seq);
        }
        if method == http::Method::GET && path.contains("/leases?") && !path.contains("watch=true")
        {
            return (
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "LeaseList", "metadata": {"resourceVersion": "7"}, "items": [listed.clone()]}),
            );
        }
        if method == http::Method::PUT && path.starts_with(LEASE_PATH) {
            let mut written: Lease = serde_json::from_slice(body).unwrap();
            let v = version.fetch_add(1, Ordering::SeqCst);
            written.metadata.resource_version = Some(v.to_string());
            return (200, serde_json::to_value(written).unwrap());
        }
        fake_api::status(500, "InternalError")
    })
}

/// The requests made, in order, without their queries.
fn asked(seen: &FakeApi) -> Vec<String> {
    seen.seen()
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

/// The datacenter of the IDs a held slot issues.
fn datacenter_served(held: &Held) -> u64 {
    let id = held.generator.next_id().expect("an ID");
    let layout = with_datacenter(0).params().unwrap().layout;
    u64::from(layout.decode(id).expect("an ID of the layout").datacenter.0)
}

const SEQUENCE_GET: &str = "GET /apis/kubeflake.io/v1alpha1/namespaces/ns/idsequences/orders";
const LEASE_LIST: &str = "GET /apis/coordination.k8s.io/v1/namespaces/ns/leases";

/// A pod's first sidecar on an assignment whose Lease carries the operator's note of the
/// sequence spec: it lists the Lease, writes its fence and serves with the noted settings,
/// and never reads the IdSequence (one request and one connection less per pod start).
#[tokio::test]
async fn a_slot_lease_noting_the_sequence_spec_is_taken_without_reading_the_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let (client, seen) = assigned_api(noted(lease("uid-p", 0, 7), 1));
    let (ctx, _) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_secs(1),
    );
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    let Lifecycle::Holding(held) = ctx.find_work(Unheld { file, found }).await.unwrap() else {
        panic!(
            "the slot was not taken: {}; asked {:?}",
            waiting_reason(&ctx),
            asked(&seen)
        );
    };
    assert_eq!(datacenter_served(&held), 1, "the noted spec's datacenter");
    assert_eq!(asked(&seen), [LEASE_LIST, &format!("PUT {LEASE_PATH}")]);
}

/// The note is for the first container on an assignment only; without one (a Lease of an
/// earlier operator), or for a restarted container, the sidecar reads the sequence, as
/// before the note existed, and serves with what it read.
#[tokio::test]
async fn without_a_note_or_after_a_container_restart_the_sidecar_reads_the_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let (client, seen) = assigned_api(lease("uid-p", 0, 7));
    let (unnoted, _) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_secs(1),
    );
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    let Lifecycle::Holding(held) = unnoted.find_work(Unheld { file, found }).await.unwrap() else {
        panic!("the slot was not taken");
    };
    assert_eq!(datacenter_served(&held), 2, "the sequence's datacenter");
    assert_eq!(
        asked(&seen),
        [LEASE_LIST, SEQUENCE_GET, &format!("PUT {LEASE_PATH}")]
    );
    drop(held);

    // A restarted container finds its earlier container's fence record; the Lease now
    // carries a note, which it does not use.
    let dir = tempfile::tempdir().unwrap();
    let (client, seen) = assigned_api(noted(lease("uid-p", 0, 7), 1));
    let (restarted, _) = ctx(
        client,
        Arc::new(ManualClock::at_millis(NOW_MS)),
        Duration::from_secs(1),
    );
    let first = acquired(&restarted, dir.path()).await;
    assert!(restarted.release(first).await.is_ok());
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    assert!(found.is_some(), "the earlier container left its record");
    seen.clear_seen();
    let Lifecycle::Holding(held) = restarted.find_work(Unheld { file, found }).await.unwrap()
    else {
        panic!("the slot was not taken");
    };
    assert_eq!(datacenter_served(&held), 2, "the sequence's datacenter");
    assert!(
        asked(&seen).contains(&SEQUENCE_GET.to_string()),
        "{:?}",
        asked(&seen)
    );
}

mod rule17;
