use super::held::ID_HOLD;
use super::*;
use crate::state::{ServingCell, WaitReason};
use http_body_util::BodyExt;
use kubeflake_crds::contract::READYZ_MAX_WAIT_MS;
use std::time::Duration;

pub(super) async fn get(api: &Api, path: &str) -> (u16, serde_json::Value) {
    let req = Request::get(path).body(()).unwrap();
    let reply = api.handle(&req).await;
    let status = reply.status().as_u16();
    let bytes = reply.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

#[tokio::test]
async fn readyz_names_the_phase_and_what_it_waits_for() {
    let metrics = Arc::new(Metrics::new());
    let cell = ServingCell::new(
        Serving::Waiting(WaitReason::SlotAssignment {
            sequence: "orders".into(),
        }),
        &metrics,
    );
    let api = Api::new(cell.reader(), metrics.clone(), 10);
    let (status, body) = get(&api, "/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(body["phase"], "waiting");
    assert_eq!(body["reason"], "no_slot");
    assert_eq!(body["waiting_for"], "slot_assignment");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("assign a slot of orders"),
        "{body}"
    );
    let (status, body) = get(&api, "/id").await;
    assert_eq!((status, &body["reason"]), (503, &json!("no_slot")));

    cell.publish(Serving::Stopping);
    let (status, body) = get(&api, "/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(body["phase"], "stopping");
    assert_eq!(body["reason"], "stopping");
    let text = metrics.render(None);
    assert!(
        text.contains("kubeflake_sidecar_phase{phase=\"stopping\"} 1"),
        "{text}"
    );
    assert!(text.contains("kubeflake_sidecar_phase{phase=\"waiting\"} 0"));
}

/// A generator that can issue now (its fence far ahead), on a fixed clock.
pub(super) fn ready_generator() -> Arc<Generator> {
    ready_generator_with_fence(Some(kubeflake_crds::Tick(u64::MAX >> 2)))
}

/// A generator on a fixed clock, its fence raised to `fence` if given.
fn ready_generator_with_fence(fence: Option<kubeflake_crds::Tick>) -> Arc<Generator> {
    use kubeflake_crds::{DatacenterId, IdSequenceSpec, Slot, Tick};
    let p = IdSequenceSpec::default().params().unwrap();
    let clock = Arc::new(crate::clock::ManualClock::at_millis(
        p.timebase.epoch_unix_ms() + 1_000_000,
    ));
    let config = crate::generator::WorkerConfig {
        layout: p.layout,
        timebase: p.timebase,
        datacenter: DatacenterId(0),
        slot: Slot(1),
        max_drift_ms: 2000,
    };
    let g = Generator::start_above(config, Tick(0), clock).unwrap();
    if let Some(fence) = fence {
        g.raise_fence(fence);
    }
    Arc::new(g)
}

/// A generator on a fixed clock whose fence is still at its start: it refuses with
/// `fence_reached` until [`Generator::raise_fence`] is called, as when renewals lag.
fn generator_at_its_fence() -> Arc<Generator> {
    let g = ready_generator_with_fence(None);
    assert!(matches!(
        g.next_id(),
        Err(crate::generator::Refusal::FenceReached { .. })
    ));
    g
}

pub(super) fn snowflake_api(generator: Arc<Generator>) -> Arc<Api> {
    let metrics = Arc::new(Metrics::new());
    let cell = ServingCell::new(Serving::Snowflake(generator), &metrics);
    Arc::new(Api::new(cell.reader(), metrics, 10))
}

#[tokio::test(start_paused = true)]
async fn rule3_an_id_refused_at_the_fence_is_held_until_a_late_renewal_raises_it() {
    let generator = generator_at_its_fence();
    let api = snowflake_api(generator.clone());
    let asked = tokio::time::Instant::now();
    let request = tokio::spawn({
        let api = api.clone();
        async move { get(&api, "/id").await }
    });
    tokio::time::sleep(ID_HOLD / 2).await;
    assert!(!request.is_finished(), "held, not refused at once");
    generator.raise_fence(kubeflake_crds::Tick(u64::MAX >> 2));
    let (status, _) = request.await.unwrap();
    assert_eq!(status, 200, "answered once the fence was raised");
    assert!(asked.elapsed() < ID_HOLD, "before the hold was over");
    let metrics = api.metrics.render(None);
    assert!(
        metrics.contains("kubeflake_held_requests_total{reason=\"fence_reached\"} 1"),
        "{metrics}"
    );
    // Batches too.
    let (status, body) = get(&api, "/ids?count=3").await;
    assert_eq!(status, 200, "{body}");
}

/// A held request waits on the raise itself, not for its next look: an ID that met an
/// idle sidecar's fence costs one write, not a write and a pause (`Refusal::clears_after`).
#[tokio::test(start_paused = true)]
async fn an_id_held_at_the_fence_is_answered_the_moment_the_fence_goes_up() {
    let generator = generator_at_its_fence();
    let api = snowflake_api(generator.clone());
    let request = tokio::spawn({
        let api = api.clone();
        async move { get(&api, "/id").await }
    });
    // Let the request be refused and held (paused time: no pause has passed).
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let raised_at = tokio::time::Instant::now();
    generator.raise_fence(kubeflake_crds::Tick(u64::MAX >> 2));
    let (status, _) = request.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        raised_at.elapsed(),
        std::time::Duration::ZERO,
        "answered without waiting out a pause"
    );
}

#[tokio::test(start_paused = true)]
async fn rule3_an_id_refused_at_a_fence_never_raised_is_a_503_once_the_hold_is_over() {
    let api = snowflake_api(generator_at_its_fence());
    let asked = tokio::time::Instant::now();
    let (status, body) = get(&api, "/id").await;
    assert_eq!(
        (status, &body["reason"]),
        (503, &json!("fence_reached")),
        "{body}"
    );
    let held = asked.elapsed();
    assert!(
        held >= ID_HOLD / 2 && held <= ID_HOLD,
        "held for the hold, not forever: {held:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_id_refused_for_good_is_answered_at_once() {
    let generator = ready_generator();
    generator.stop();
    let api = snowflake_api(generator);
    let asked = tokio::time::Instant::now();
    let (status, body) = get(&api, "/id").await;
    assert_eq!(
        (status, &body["reason"]),
        (503, &json!("stopped")),
        "{body}"
    );
    assert_eq!(asked.elapsed(), Duration::ZERO, "not held");
}

fn waiting_api() -> (Arc<Api>, ServingCell) {
    let metrics = Arc::new(Metrics::new());
    let cell = ServingCell::new(
        Serving::Waiting(WaitReason::SlotAssignment {
            sequence: "orders".into(),
        }),
        &metrics,
    );
    (Arc::new(Api::new(cell.reader(), metrics, 10)), cell)
}

// These tests, like the held-ID ones above, run on paused time: `tokio::time::Instant`
// advances only by the sleeps, so "held for so long" and "answered at once" are exact,
// not wall-clock bounds.

#[tokio::test(start_paused = true)]
async fn readyz_with_wait_is_held_until_the_sidecar_turns_ready_and_answered_that_moment() {
    let (api, cell) = waiting_api();
    let asked = tokio::time::Instant::now();
    let held = tokio::spawn({
        let api = api.clone();
        async move { get(&api, "/readyz?wait=5000").await }
    });
    // An odd moment: a request that looked again on a timer would answer after it.
    tokio::time::sleep(Duration::from_millis(103)).await;
    assert!(!held.is_finished(), "held while waiting for a slot");
    cell.publish(Serving::Snowflake(ready_generator()));
    let (status, body) = held.await.unwrap();
    assert_eq!((status, &body["status"]), (200, &json!("ready")), "{body}");
    assert_eq!(
        asked.elapsed(),
        Duration::from_millis(103),
        "woken by the published state, not by a timer"
    );
    // Ready: answered at once, wait or not.
    let asked = tokio::time::Instant::now();
    assert_eq!(get(&api, "/readyz?wait=5000").await.0, 200);
    assert_eq!(asked.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn readyz_with_wait_answers_503_with_the_reason_when_the_wait_is_over() {
    let (api, _cell) = waiting_api();
    let asked = tokio::time::Instant::now();
    let (status, body) = get(&api, "/readyz?wait=150").await;
    let held = asked.elapsed();
    assert!(
        held >= Duration::from_millis(150) && held < Duration::from_millis(200),
        "{held:?}"
    );
    assert_eq!(
        (status, &body["waiting_for"]),
        (503, &json!("slot_assignment"))
    );
    // Without wait, at once, as always (the kubelet's readiness probe).
    let asked = tokio::time::Instant::now();
    assert_eq!(get(&api, "/readyz").await.0, 503);
    assert_eq!(asked.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn readyz_with_wait_is_not_held_by_a_stopping_sidecar() {
    let (api, cell) = waiting_api();
    cell.publish(Serving::Stopping);
    let asked = tokio::time::Instant::now();
    let (status, body) = get(&api, "/readyz?wait=5000").await;
    assert_eq!((status, &body["reason"]), (503, &json!("stopping")));
    assert_eq!(asked.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn readyz_holds_only_a_few_waits_at_once_and_answers_the_rest_now() {
    let (api, _cell) = waiting_api();
    let held: Vec<_> = (0..READYZ_WAITERS)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { get(&api, "/readyz?wait=2000").await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let asked = tokio::time::Instant::now();
    assert_eq!(get(&api, "/readyz?wait=2000").await.0, 503);
    assert_eq!(
        asked.elapsed(),
        Duration::ZERO,
        "one more than the waiters is answered at once"
    );
    for h in held {
        assert_eq!(h.await.unwrap().0, 503);
    }
}

#[test]
fn readyz_wait_is_milliseconds_up_to_the_contracts_maximum_else_a_bad_request() {
    assert_eq!(readyz_wait(None).unwrap(), None);
    assert_eq!(
        readyz_wait(Some("other=1")).unwrap(),
        None,
        "others ignored"
    );
    assert_eq!(
        readyz_wait(Some("wait=250")).unwrap(),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        readyz_wait(Some(&format!("wait={READYZ_MAX_WAIT_MS}"))).unwrap(),
        Some(Duration::from_millis(READYZ_MAX_WAIT_MS))
    );
    // As docs/openapi.yaml says (its maximum), so Schemathesis finds a refusal.
    assert!(readyz_wait(Some(&format!("wait={}", READYZ_MAX_WAIT_MS + 1))).is_err());
    assert!(readyz_wait(Some("wait=soon")).is_err());
    assert!(readyz_wait(Some("wait=-1")).is_err());
}
