use super::super::claim::{Backoff, claim, give_back};
use super::*;

#[tokio::test]
async fn the_counter_file_survives_reopen_and_never_goes_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let (counter, next) = FileCounter::open(dir.path(), "orders", 5).unwrap();
    assert_eq!(next, 5);
    let a = claim(&counter, 100, 0, &Backoff::default())
        .await
        .unwrap()
        .block;
    assert_eq!((a.start, a.end), (5, 105));
    drop(counter); // like kill -9: nothing but the file remains
    let (counter, next) = FileCounter::open(dir.path(), "orders", 1).unwrap();
    assert_eq!(next, 105, "a lower start never lowers the counter");
    let b = claim(&counter, 100, 0, &Backoff::default())
        .await
        .unwrap()
        .block;
    assert_eq!(b.start, 105);
    let (_, next) = FileCounter::open(dir.path(), "orders", 1000).unwrap();
    assert_eq!(next, 1000, "a higher start raises it");
}

#[tokio::test]
async fn two_processes_sharing_the_file_get_disjoint_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = FileCounter::open(dir.path(), "s", 0).unwrap();
    let (b, _) = FileCounter::open(dir.path(), "s", 0).unwrap();
    let seen = a.read().await.unwrap();
    claim(&b, 10, 0, &Backoff::default()).await.unwrap();
    let stale = Counter {
        next: 10,
        ..seen.clone()
    };
    assert_eq!(
        a.compare_and_swap(&seen, stale).await,
        Err(StoreError::Conflict)
    );
    assert_eq!(
        claim(&a, 10, 0, &Backoff::default())
            .await
            .unwrap()
            .block
            .start,
        10
    );
    assert!(give_back(&a, 15, 20).await.unwrap());
    assert_eq!(a.read().await.unwrap().next, 15);
}

#[tokio::test]
async fn a_file_claim_in_one_step_refuses_a_counter_below_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let (counter, _) = FileCounter::open(dir.path(), "s", 1).unwrap();
    let a = claim(&counter, 10, 0, &Backoff::default()).await.unwrap();
    assert_eq!((a.block.start, a.block.end), (1, 11));
    assert_eq!(counter.read().await.unwrap().claims, 1);
    std::fs::remove_file(dir.path().join("s.segment")).unwrap();
    let (counter, _) = FileCounter::open(dir.path(), "s", 1).unwrap();
    assert_eq!(
        claim(&counter, 10, a.block.end, &Backoff::default()).await,
        Err(ClaimError::CounterBehind { next: 1, floor: 11 })
    );
}

#[test]
fn a_corrupt_or_foreign_counter_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.segment"), b"{oops").unwrap();
    let err = FileCounter::open(dir.path(), "s", 1).unwrap_err();
    assert!(err.to_string().contains("unreadable"), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("s.segment")).unwrap(),
        b"{oops"
    );
    std::fs::write(
        dir.path().join("t.segment"),
        br#"{"sequence":"x","next":3,"claims":0}"#,
    )
    .unwrap();
    let err = FileCounter::open(dir.path(), "t", 1).unwrap_err();
    assert!(err.to_string().contains("belongs to sequence"), "{err}");
}

#[tokio::test]
async fn rule12_the_file_claim_raises_the_counter_to_at_least_the_minimum_under_its_lock() {
    use super::super::claim::claim_above;
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = FileCounter::open(dir.path(), "s", 1).unwrap();
    let (b, _) = FileCounter::open(dir.path(), "s", 1).unwrap();
    let first = claim(&a, 10, 0, &Backoff::default()).await.unwrap().block;
    assert_eq!(first.start, 1);
    let raised = claim_above(&b, 10, 0, 777, &Backoff::default())
        .await
        .unwrap()
        .block;
    assert_eq!((raised.start, raised.end), (777, 787));
    assert_eq!(a.read().await.unwrap().next, 787, "written durably");
    let next = claim_above(&a, 10, first.end, 5, &Backoff::default())
        .await
        .unwrap()
        .block;
    assert_eq!(next.start, 787, "never lowered");
    drop((a, b));
    let (_, next) = FileCounter::open(dir.path(), "s", 1).unwrap();
    assert_eq!(next, 797, "survives reopen");
}
