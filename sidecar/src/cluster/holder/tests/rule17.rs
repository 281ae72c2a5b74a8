//! Rule 17 (docs/safety.md): a holder whose slot Lease carries a fence cap (the bound of the
//! ID-space block the slot lies in) never issues a tick above it, says why it stops there,
//! and goes on once the operator raises the cap. Against a fake API server that keeps one
//! Lease and answers writes conditionally on its version, as the real one does.

use std::collections::BTreeMap;

use kubeflake_crds::slot_lease::FENCE_CAP_ANNOTATION;

use super::*;
use crate::generator::Refusal;

/// A fake API server keeping slot lease 3 (`stored`): a PUT on the version stored is kept
/// (its fence recorded in `fences`), on another one conflicts; a GET reads it.
fn keeping(stored: Arc<Mutex<Lease>>, fences: Arc<Mutex<Vec<u64>>>) -> (Client, FakeApi) {
    answered(move |method, path, body| {
        if !path.starts_with(LEASE_PATH) {
            return fake_api::status(404, "NotFound");
        }
        let mut lease = stored.lock().unwrap();
        match method.as_str() {
            "PUT" => {
                let mut written: Lease = serde_json::from_slice(body).unwrap();
                if written.metadata.resource_version != lease.metadata.resource_version {
                    return fake_api::status(409, "Conflict");
                }
                fences.lock().unwrap().push(fence_of(&written));
                let v: u64 = lease
                    .metadata
                    .resource_version
                    .as_ref()
                    .unwrap()
                    .parse()
                    .unwrap();
                written.metadata.resource_version = Some((v + 1).to_string());
                *lease = written;
                (200, serde_json::to_value(&*lease).unwrap())
            }
            "GET" => (200, serde_json::to_value(&*lease).unwrap()),
            _ => fake_api::status(405, "MethodNotAllowed"),
        }
    })
}

fn fence_of(lease: &Lease) -> u64 {
    let annotations = lease.metadata.annotations.as_ref().unwrap();
    annotations[FENCE_ANNOTATION].parse().unwrap()
}

fn annotations(lease: &mut Lease) -> &mut BTreeMap<String, String> {
    lease.metadata.annotations.get_or_insert_with(BTreeMap::new)
}

/// The operator raises the cap (the hub renewed the block): a new version of the Lease.
fn raise_cap(stored: &Mutex<Lease>, cap: u64) {
    let mut lease = stored.lock().unwrap();
    annotations(&mut lease).insert(FENCE_CAP_ANNOTATION.into(), cap.to_string());
    let v: u64 = lease
        .metadata
        .resource_version
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    lease.metadata.resource_version = Some((v + 1).to_string());
}

/// The local fence file's record (rule 6), read beside the lock its owner holds.
fn local_fence(dir: &std::path::Path) -> u64 {
    let text = std::fs::read(dir.join("orders.fence")).unwrap();
    serde_json::from_slice::<FenceRecord>(&text)
        .unwrap()
        .fence_tick
}

/// Issues IDs until refused (at most `bound` of them) and returns the refusal.
fn issue_until_refused(generator: &Generator, bound: usize) -> Refusal {
    for _ in 0..bound {
        if let Err(refusal) = generator.next_id() {
            return refusal;
        }
    }
    panic!("{bound} IDs issued without a refusal");
}

struct Capped {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    stored: Arc<Mutex<Lease>>,
    fences: Arc<Mutex<Vec<u64>>>,
    seen: FakeApi,
    ctx: Ctx,
    params: SequenceParams,
    held: Held,
    cap: u64,
}

/// A holder of slot 3 whose Lease has fence `now - 10` and cap `now + 3` (ticks), after
/// its acquisition: the lease's duration would take the fence far beyond the cap.
async fn holding_a_capped_slot() -> Capped {
    let params = IdSequenceSpec::default().params().unwrap();
    let now = params.timebase.tick_at(NOW_MS).unwrap().0;
    let cap = now + 3;
    let mut first = lease("uid-p", now - 10, 1);
    annotations(&mut first).insert(FENCE_CAP_ANNOTATION.into(), cap.to_string());
    let stored = Arc::new(Mutex::new(first.clone()));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let (client, seen) = keeping(stored.clone(), fences.clone());
    let clock = Arc::new(ManualClock::at_millis(NOW_MS));
    let (ctx, _) = ctx(client, clock.clone(), Duration::from_millis(100));
    let dir = tempfile::tempdir().unwrap();
    let (file, found) = FenceFile::open(dir.path(), "orders.fence").unwrap();
    let held = match ctx.acquire(Unheld { file, found }, &params, first).await {
        Ok(held) => held,
        Err(Acquire::Retry(e, _)) => panic!("not acquired: {e}"),
        Err(Acquire::Fatal(e)) => panic!("not acquired: {e}"),
    };
    Capped {
        dir,
        clock,
        stored,
        fences,
        seen,
        ctx,
        params,
        held,
        cap,
    }
}

#[tokio::test]
async fn rule17_a_holder_never_issues_past_its_leases_fence_cap_and_says_the_block_bound_is_reached()
 {
    let c = holding_a_capped_slot().await;
    let generator = c.held.generator.clone();
    assert_eq!(
        *c.fences.lock().unwrap(),
        [c.cap],
        "the fence written stops at the cap (the lease's duration asked far more)"
    );
    assert!(
        local_fence(c.dir.path()) <= c.cap,
        "rule 6: the local fence file records nothing above the lease's fence"
    );
    assert_eq!(c.ctx.metrics.fence_at_block_bound.get(), 1);

    // Every tick up to the cap is served, none above it.
    let refusal = issue_until_refused(&generator, 100_000);
    assert_eq!(
        generator.high_water_tick().0,
        c.cap,
        "rule 2: up to the cap, no further"
    );
    assert!(
        matches!(refusal, Refusal::BlockBoundReached { bound, .. } if bound == c.cap),
        "{refusal:?}"
    );
    assert_eq!(refusal.reason(), "block_bound_reached");
    assert!(
        refusal
            .to_string()
            .contains("could not renew its ID-space block on the hub"),
        "{refusal}"
    );
    // Rule 3: ready while the clock is below the bound, not ready once it reaches it.
    c.clock.advance_millis(10);
    let not_ready = generator
        .check_ready()
        .expect_err("the clock passed the bound");
    assert_eq!(not_ready.reason(), "block_bound_reached");

    // It keeps renewing at its pace, never spinning, and never writes past the cap.
    c.seen.clear_seen();
    let kept = tokio::time::timeout(Duration::from_millis(600), c.ctx.keep(c.held)).await;
    assert!(kept.is_err(), "still holding the slot");
    let puts = c
        .seen
        .seen()
        .iter()
        .filter(|s| s.method == http::Method::PUT)
        .count();
    assert!(
        (1..=10).contains(&puts),
        "{puts} renewals in 600 ms at a 100 ms pace"
    );
    assert!(
        c.fences.lock().unwrap().iter().all(|f| *f <= c.cap),
        "{:?}",
        c.fences.lock().unwrap()
    );
    assert_eq!(generator.high_water_tick().0, c.cap);
}

#[tokio::test]
async fn rule17_a_raised_cap_lets_the_holder_go_on_issuing() {
    let mut c = holding_a_capped_slot().await;
    let generator = c.held.generator.clone();
    issue_until_refused(&generator, 100_000);
    assert_eq!(generator.high_water_tick().0, c.cap);

    // The hub renewed the block; the operator raises the cap.
    let raised = c.cap + 1_000;
    raise_cap(&c.stored, raised);
    let Held {
        slot,
        generator: g,
        gate,
        ..
    } = &mut c.held;
    c.ctx
        .renew_lease(slot, g, gate, &c.params)
        .await
        .expect("the renewal after a conflict");
    assert_eq!(fence_of(&c.stored.lock().unwrap()), raised);
    assert_eq!(
        c.ctx.metrics.fence_at_block_bound.get(),
        1,
        "still short of the target"
    );

    // Issuing goes on past the old cap (once the local fence follows), never past the new one.
    let mut issued = None;
    for _ in 0..500 {
        if generator.next_id().is_ok() {
            issued = Some(generator.high_water_tick().0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tick = issued.expect("an ID within 5 s of the raised cap");
    assert!(tick > c.cap && tick <= raised, "tick {tick}");
    assert!(local_fence(c.dir.path()) <= raised, "rule 6");

    // A cap far enough ahead no longer holds the fence: the bound is no longer reported.
    raise_cap(&c.stored, u64::from(u32::MAX) * 1_000);
    let Held {
        slot,
        generator: g,
        gate,
        ..
    } = &mut c.held;
    c.ctx.renew_lease(slot, g, gate, &c.params).await.unwrap();
    assert_eq!(c.ctx.metrics.fence_at_block_bound.get(), 0);
    assert!(generator.next_id().is_ok());
}
