//! `Segment::take_range`: consecutive values of one block, taken once (docs/safety.md,
//! segment mode rules 1 and 2).

use super::super::claim::fake::FakeStore;
use super::*;
use crate::segment::claim::Block;

fn fixed_blocks(block: u64) -> Arc<Segment> {
    Segment::start(
        Arc::new(FakeStore::starting_at(1)),
        SegmentParams {
            start: 1,
            block_size: block,
            max_block_size: block,
            prefetch_percent: 50,
            target_claim_interval_secs: 60,
            strict: false,
        },
        Duration::from_secs(5),
        SegmentMetrics::unregistered(),
    )
}

#[tokio::test]
async fn a_range_stops_at_the_end_of_its_block_and_the_next_starts_the_next_block() {
    let seg = fixed_blocks(10);
    ready(&seg).await;
    assert_eq!(seg.take_range(4).await.unwrap(), Block { start: 1, end: 5 });
    assert_eq!(
        seg.take_range(100).await.unwrap(),
        Block { start: 5, end: 11 },
        "what is left of the block, not across it"
    );
    ready(&seg).await;
    let next = seg.take_range(3).await.unwrap();
    assert_eq!(next, Block { start: 11, end: 14 });
    assert_eq!(values_of(&seg.take(2).await.unwrap()), vec![14, 15]);
}

/// Until a block is buffered: a range asked of a dry buffer is the one value waited for.
async fn ready(seg: &Segment) {
    for _ in 0..250 {
        if seg.check_ready().is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no block buffered within 5 s");
}

#[tokio::test]
async fn a_range_asked_of_a_dry_buffer_is_the_one_value_it_waited_for() {
    let seg = fixed_blocks(10);
    assert_eq!(seg.take_range(5).await.unwrap(), Block { start: 1, end: 2 });
    ready(&seg).await;
    assert_eq!(seg.take_range(5).await.unwrap(), Block { start: 2, end: 7 });
}

fn values_of(runs: &Runs) -> Vec<u64> {
    runs.iter().flat_map(|b| b.start..b.end).collect()
}
