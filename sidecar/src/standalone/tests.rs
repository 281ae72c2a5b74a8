use super::*;
use crate::clock::{ManualClock, PanickingClock};

fn config(dir: &std::path::Path) -> StandaloneConfig {
    StandaloneConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_unix: None,
        state_dir: dir.to_path_buf(),
        worker_id: 0,
        sequence_name: "t".into(),
        sequence: IdSequenceSpec::default().params().unwrap(),
        max_batch: 10,
        fence_ahead: Duration::from_millis(100),
        drain: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn a_panic_in_the_fence_renewal_ends_the_run_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(PanickingClock::at_millis(1_800_000_000_000));
    let sidecar = Standalone::start(config(dir.path()), clock.clone())
        .await
        .unwrap();
    let generator = sidecar.generator();
    // Never triggered: the run ends only through the dead renewal.
    let run = tokio::spawn(sidecar.run(ShutdownToken::default()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // An ID makes the next fence renewal (every 25 ms) due, and it panics.
    generator.next_id().unwrap();
    clock.arm();
    let ended = tokio::time::timeout(Duration::from_secs(5), run).await;
    assert!(
        matches!(ended, Ok(Ok(Err(StandaloneError::Renewer(_))))),
        "a dead fence renewal must end the run with an error, not limp on: {ended:?}"
    );
    assert!(generator.is_stopped(), "nothing more is issued");
}

/// The first fence write runs off the async worker: on a one-thread runtime, a write
/// that waits for another task (here: a FIFO that is opened for reading only once an
/// async task has run) completes.
#[test]
fn the_first_fence_write_does_not_block_the_async_worker() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("t-worker-0.fence.tmp");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (alive_tx, alive_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        if alive_rx.recv_timeout(Duration::from_secs(10)).is_ok() {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::fs::File::open(&fifo).unwrap(), &mut sink);
        }
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let config = config(dir.path());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let _ = alive_tx.send(());
            });
            let clock = Arc::new(ManualClock::at_millis(1_800_000_000_000));
            // The write fails (a FIFO cannot be synced); only that it returns matters.
            let _ = Standalone::start(config, clock).await;
            let _ = done_tx.send(());
        });
    });
    let done = done_rx.recv_timeout(Duration::from_secs(10));
    assert!(
        done.is_ok(),
        "the fence write blocked the only async worker"
    );
    reader.join().unwrap();
}

#[test]
fn rule6_a_fence_file_of_one_key_form_is_refused_by_another_but_old_files_still_match() {
    // Fence files written before key forms existed name only the bits; a time-ordered layout
    // must still match them, and any key form must not (its IDs are other numbers).
    let plain = IdSequenceSpec::default().params().unwrap();
    let plain_identity = fence_identity("t", 0, &plain);
    assert_eq!(
        plain_identity.acquisition,
        format!(
            "layout 41/0/10/12 epoch {} unit 1ms datacenter 0",
            plain.timebase.epoch_unix_ms()
        )
    );
    let mut spec = IdSequenceSpec::default();
    spec.layout.bit_reversed = true;
    let reversed = fence_identity("t", 0, &spec.params().unwrap());
    assert_ne!(reversed, plain_identity);
    assert!(
        reversed
            .acquisition
            .ends_with("form bitReversed sequenceStart Zero")
    );
}
