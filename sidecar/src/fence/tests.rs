use super::testing::{generator_at, written_once};
use super::*;

fn record(fence_tick: u64) -> FenceRecord {
    FenceRecord {
        identity: FenceIdentity {
            sequence: "orders".into(),
            slot: 3,
            holder: "standalone".into(),
            acquisition: "layout 41/0/10/12".into(),
        },
        fence_tick,
    }
}

#[test]
fn rule6_fence_record_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (file, found) = FenceFile::open(dir.path(), "orders-3.fence").unwrap();
        assert_eq!(found, None);
        file.write(&record(42)).unwrap();
        file.write(&record(99)).unwrap();
    }
    let (_, found) = FenceFile::open(dir.path(), "orders-3.fence").unwrap();
    assert_eq!(found, Some(record(99)));
}

#[test]
fn a_second_process_cannot_serve_the_same_slot_from_one_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (_held, _) = FenceFile::open(dir.path(), "orders-3.fence").unwrap();
    let err = FenceFile::open(dir.path(), "orders-3.fence").unwrap_err();
    assert!(matches!(err, FenceFileError::Locked(_)), "{err}");
    assert!(err.to_string().contains("--state-dir"));
}

#[test]
fn a_corrupt_fence_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.fence"), b"{not json").unwrap();
    let err = FenceFile::open(dir.path(), "x.fence").unwrap_err();
    assert!(matches!(err, FenceFileError::Corrupt { .. }), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("x.fence")).unwrap(),
        b"{not json"
    );
}

#[test]
fn targets_in_one_directory_never_share_a_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    // Standalone: a segment counter and a snowflake fence; in a pod: the fence file.
    let targets = [
        "orders.segment",
        "orders.fence",
        "orders-worker-3.fence",
        "orders-worker-3.segment",
        "orders",
    ];
    let temps: Vec<PathBuf> = targets
        .iter()
        .map(|t| temp_path(&dir.path().join(t)))
        .collect();
    for (i, a) in temps.iter().enumerate() {
        assert_eq!(
            a.parent(),
            Some(dir.path()),
            "same directory: rename stays atomic"
        );
        assert!(
            !targets.iter().any(|t| dir.path().join(t) == *a),
            "{a:?} is a target itself"
        );
        for b in &temps[i + 1..] {
            assert_ne!(a, b, "two targets share a temporary file");
        }
    }
    for (n, t) in targets.iter().enumerate() {
        write_durably(&dir.path().join(t), n.to_string().as_bytes()).unwrap();
    }
    for (n, t) in targets.iter().enumerate() {
        assert_eq!(
            std::fs::read(dir.path().join(t)).unwrap(),
            n.to_string().as_bytes()
        );
        assert!(!temps[n].exists(), "no temporary file is left behind");
    }
}

#[test]
fn rule2_the_local_fence_never_lets_the_generator_past_the_lease_fence() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = 1_735_689_600_000;
    let (mut local, g, clock) = written_once(dir.path(), epoch + 10_000, 10_100);
    assert_eq!(g.fence(), Tick(10_100), "capped by the lease fence written");
    clock.advance_millis(200); // the API server is down: the lease fence is not raised
    local.renew().unwrap();
    assert!(
        g.next_id().is_err(),
        "stops at the lease fence though the file could go on"
    );
    local.set_cap(Tick(20_000));
    local.renew().unwrap();
    assert!(g.next_id().is_ok(), "a renewed lease fence lets it go on");
    assert_eq!(
        g.fence(),
        Tick(10_200 + 2000 + 1000),
        "now the local fence is the lower one"
    );
}

/// The fence in the file, as a restarted container would find it.
fn fence_on_disk(dir: &std::path::Path) -> u64 {
    let bytes = std::fs::read(dir.join("s.fence")).unwrap();
    serde_json::from_slice::<FenceRecord>(&bytes)
        .unwrap()
        .fence_tick
}

#[test]
fn rule6_the_local_fence_is_written_at_half_its_margin_and_never_lets_the_generator_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = FenceFile::open(dir.path(), "s.fence").unwrap();
    let epoch = 1_735_689_600_000;
    let (g, clock) = generator_at(epoch + 10_000);
    let (drift, ahead) = (2000, 1000);
    let mut local = LocalFence::new(
        file,
        record(0).identity,
        g.clone(),
        ahead,
        Tick(0),
        None,
        None,
    );
    assert_eq!(
        local.due(),
        Some(10_000 + drift + ahead),
        "the first renewal writes"
    );
    local.renew().unwrap();
    let mut writes = 1;
    let mut last_on_disk = fence_on_disk(dir.path());
    // 40 renewals a quarter of the margin apart, each after an ID: a steady sidecar.
    for step in 1..=40u64 {
        clock.advance_millis(ahead / 4);
        let now = 10_000 + step * (ahead / 4);
        g.next_id()
            .expect("renewals keep the generator clear of the fence");
        local.renew().unwrap();
        let on_disk = fence_on_disk(dir.path());
        if on_disk != last_on_disk {
            writes += 1;
            last_on_disk = on_disk;
        }
        assert_eq!(
            g.fence(),
            Tick(on_disk),
            "the generator uses what the file holds"
        );
        assert!(
            on_disk >= now + drift + ahead / 2,
            "at least half the margin is left after a renewal (step {step})"
        );
        assert!(
            on_disk <= now + drift + ahead,
            "a restart never waits more than the margin (step {step})"
        );
    }
    // Half the margin is used up after two or three renewals a quarter apart.
    assert!(
        writes <= 1 + 40 / 2,
        "at most every other renewal writes (fsyncs), not every one: {writes} writes"
    );
}

#[test]
fn rule6_an_idle_local_fence_writes_nothing_yet_its_sidecar_stays_ready() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = 1_735_689_600_000;
    let (mut local, g, clock) = written_once(dir.path(), epoch + 10_000, 60_000);
    let first = fence_on_disk(dir.path());
    assert_eq!(
        first,
        10_000 + 2000 + 1000,
        "the first write is always made"
    );
    // 40 renewals a quarter of the margin apart, 10 s in all, and no ID asked.
    for _ in 0..40 {
        clock.advance_millis(250);
        assert_eq!(local.due(), None, "nothing asked: nothing to write");
        local.renew().unwrap();
    }
    assert_eq!(fence_on_disk(dir.path()), first, "no fsync while idle");
    assert_eq!(
        g.fence(),
        Tick(first),
        "the clock has passed the fence in force"
    );
    assert_eq!(
        g.check_ready(),
        Ok(()),
        "ready: one write of the file brings the next ID under the lease fence"
    );
    assert_eq!(
        g.fence_headroom_ms(),
        Some(60_000 - 20_000),
        "up to the lease fence"
    );
}

#[test]
fn rule6_an_id_that_meets_an_idle_fence_asks_for_one_write_and_is_served_above_nothing_unwritten() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = 1_735_689_600_000;
    let (mut local, g, clock) = written_once(dir.path(), epoch + 10_000, 60_000);
    clock.advance_millis(10_000);
    let refused = g.next_id();
    assert_eq!(
        refused,
        Err(crate::generator::Refusal::FenceReached {
            fence: 13_000,
            needed: 20_000
        }),
        "the ID is refused until the file is written"
    );
    assert_eq!(g.wanted_tick(), Tick(20_000), "and asks for a write");
    assert_eq!(local.due(), Some(20_000 + 2000 + 1000), "which is due");
    local.renew().unwrap();
    assert_eq!(fence_on_disk(dir.path()), 23_000, "written before use");
    let id = g.next_id().expect("served once written");
    let tick = g.config().layout.decode(id).unwrap().tick.0;
    assert!(
        tick <= fence_on_disk(dir.path()),
        "rule 6: never above the file"
    );
    // IDs keep coming: the fence is kept ahead as before, with no ID refused.
    for _ in 0..20 {
        clock.advance_millis(250);
        g.next_id().expect("a busy sidecar never meets its fence");
        local.renew().unwrap();
    }
}

/// The renewal task's periodic looks stop once no ID can be issued without asking: an idle
/// sidecar wakes for nothing, and a flow that starts below the fence is still written
/// ahead of (rule 6: nothing is served above the file either way).
#[test]
fn rule6_a_fence_the_clock_has_reached_needs_no_look_until_an_id_asks() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = 1_735_689_600_000;
    let (mut local, g, clock) = written_once(dir.path(), epoch + 10_000, 60_000);
    assert_eq!(fence_on_disk(dir.path()), 13_000);
    clock.advance_millis(2_999);
    assert!(
        !local.quiet_until_asked(),
        "an ID may still be issued below the fence unasked: keep looking"
    );
    clock.advance_millis(1);
    assert!(
        local.quiet_until_asked(),
        "the clock has reached the fence: the next ID must ask"
    );
    clock.advance_millis(7_000);
    assert!(g.next_id().is_err(), "met the fence");
    assert!(!local.quiet_until_asked(), "asked: look again");
    local.renew().unwrap();
    g.next_id().expect("served once written");
    clock.advance_millis(3_000);
    assert!(
        !local.quiet_until_asked(),
        "IDs were issued since the last write: a flow may go on"
    );
    local.renew().unwrap();
    clock.advance_millis(3_001);
    assert!(
        local.quiet_until_asked(),
        "nothing issued since the last write, and the clock has passed it"
    );
    let blocker = dir.path().join("s.fence.tmp");
    std::fs::create_dir(&blocker).unwrap();
    assert!(g.next_id().is_err());
    assert!(local.renew().is_err(), "the write asked for fails");
    assert!(
        !local.quiet_until_asked(),
        "a failed write is looked at every period until one succeeds"
    );
}

#[test]
fn a_local_fence_that_cannot_be_written_makes_its_sidecar_unready_until_a_write_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let epoch = 1_735_689_600_000;
    let (mut local, g, clock) = written_once(dir.path(), epoch + 10_000, 60_000);
    clock.advance_millis(10_000);
    let blocker = dir.path().join("s.fence.tmp");
    std::fs::create_dir(&blocker).unwrap();
    assert!(g.next_id().is_err());
    assert!(local.renew().is_err(), "the write asked for fails");
    assert!(
        matches!(
            g.check_ready(),
            Err(crate::generator::Refusal::FenceReached { .. })
        ),
        "not ready: no write can be counted on"
    );
    assert_eq!(g.fence_headroom_ms(), Some(0));
    std::fs::remove_dir(&blocker).unwrap();
    assert!(
        local.due().is_some(),
        "a failed write is tried again unasked"
    );
    local.renew().unwrap();
    assert_eq!(g.check_ready(), Ok(()));
    assert!(g.next_id().is_ok());
}
