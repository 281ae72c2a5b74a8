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
    assert_eq!(seg.take_range(4).await.unwrap(), Block { start: 1, end: 5 });
    assert_eq!(
        seg.take_range(100).await.unwrap(),
        Block { start: 5, end: 11 },
        "what is left of the block, not across it"
    );
    let next = seg.take_range(3).await.unwrap();
    assert_eq!(next, Block { start: 11, end: 14 });
    assert_eq!(values_of(&seg.take(2).await.unwrap()), vec![14, 15]);
}

fn values_of(runs: &Runs) -> Vec<u64> {
    runs.iter().flat_map(|b| b.start..b.end).collect()
}
