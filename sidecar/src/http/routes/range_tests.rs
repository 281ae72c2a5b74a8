//! `/range` (docs/segment.md, "Ranges"): consecutive values from one block, never handed
//! out twice (docs/safety.md, segment mode rules 1 and 2), only in a segment sequence that
//! is not strict.

use std::collections::HashSet;
use std::time::Duration;

use super::tests::{get, ready_generator, snowflake_api};
use super::*;
use crate::metrics::SegmentMetrics;
use crate::segment::claim::Backoff;
use crate::segment::claim::fake::FakeStore;
use crate::segment::strict::Strict;
use crate::state::ServingCell;
use http_body_util::BodyExt;
use kubeflake_crds::sequence::SegmentParams;

const BLOCK: u64 = 100;

/// A segment sidecar of fixed blocks of [`BLOCK`] values from 1: blocks are
/// `[1 + k * BLOCK, 1 + (k + 1) * BLOCK)`; `/ids` takes up to 1,000 values, `/range` up to
/// `max_range`.
fn segment_api(max_range: u64) -> (Arc<Api>, Arc<Metrics>) {
    segment_api_of(BLOCK, 1000, max_range)
}

/// A segment sidecar of fixed blocks of `block` values from 1.
fn segment_api_of(block: u64, max_batch: u64, max_range: u64) -> (Arc<Api>, Arc<Metrics>) {
    let params = SegmentParams {
        start: 1,
        block_size: block,
        max_block_size: block,
        prefetch_percent: 50,
        target_claim_interval_secs: 60,
        strict: false,
    };
    let segment = Segment::start(
        Arc::new(FakeStore::starting_at(1)),
        params,
        Duration::from_secs(5),
        SegmentMetrics::unregistered(),
    );
    let metrics = Arc::new(Metrics::new());
    let cell = ServingCell::new(Serving::Segment(Source::Blocks(segment)), &metrics);
    let api = Api::new(cell.reader(), metrics.clone(), max_batch).with_max_range(max_range);
    (Arc::new(api), metrics)
}

/// `/range`'s `[first, first + count)`.
async fn range(api: &Api, count: u64) -> (u64, u64) {
    let (status, body) = get(api, &format!("/range?count={count}")).await;
    assert_eq!(status, 200, "{body}");
    let first: u64 = body["first"]
        .as_str()
        .expect("first is a string")
        .parse()
        .unwrap();
    let n = body["count"].as_u64().expect("count is a number");
    assert!((1..=count).contains(&n), "{body}");
    (first, first + n)
}

async fn ids(api: &Api, count: u64) -> Vec<u64> {
    let req = Request::get(format!("/ids?count={count}"))
        .body(())
        .unwrap();
    let reply = api.handle(&req).await;
    assert_eq!(reply.status(), 200);
    let bytes = reply.into_body().collect().await.unwrap().to_bytes();
    std::str::from_utf8(&bytes)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// Until `/readyz` is 200: a block is buffered (a range asked of a dry buffer is one value,
/// the first of the block it waited for).
async fn ready(api: &Api) {
    for _ in 0..250 {
        if get(api, "/readyz").await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no block buffered within 5 s");
}

fn block_of(value: u64) -> u64 {
    (value - 1) / BLOCK
}

#[tokio::test]
async fn a_range_is_consecutive_values_of_one_block_starting_after_everything_handed_out() {
    let (api, metrics) = segment_api(1000);
    ready(&api).await;
    assert_eq!(range(&api, 30).await, (1, 31), "the first 30 values");
    assert_eq!(ids(&api, 5).await, vec![31, 32, 33, 34, 35]);
    assert_eq!(
        range(&api, 1000).await,
        (36, 101),
        "up to the end of the block, never across it"
    );
    ready(&api).await;
    let (first, end) = range(&api, 10).await;
    assert_eq!((first, end), (101, 111), "the next block, from its start");
    assert_eq!(
        metrics.ids_issued.get(),
        30 + 5 + 65 + 10,
        "counted like /ids values"
    );
    let text = metrics.render(None);
    assert!(
        text.contains(r#"kubeflake_http_requests_total{code="200",route="range"} 3"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule1_concurrent_ranges_ids_and_single_values_never_share_a_value() {
    let (api, _) = segment_api(1000);
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..150u64 {
                let n = 1 + (i * 7 + t * 13) % 40;
                match (i + t) % 3 {
                    0 => {
                        let (first, end) = range(&api, n).await;
                        assert_eq!(
                            block_of(first),
                            block_of(end - 1),
                            "[{first}, {end}) crosses a block"
                        );
                        got.extend(first..end);
                    }
                    1 => got.extend(ids(&api, n).await),
                    _ => {
                        let (status, body) = get(&api, "/id").await;
                        assert_eq!(status, 200, "{body}");
                        got.push(body.as_u64().unwrap());
                    }
                }
            }
            got
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for task in tasks {
        for v in task.await.unwrap() {
            total += 1;
            assert!(seen.insert(v), "{v} was handed out twice");
        }
    }
    assert!(total > 8 * 100, "{total} values");
}

#[tokio::test]
async fn a_count_out_of_range_or_a_stray_parameter_is_a_400_naming_the_bounds() {
    let (api, metrics) = segment_api(1000);
    for (path, says) in [
        (
            "/range?count=0",
            "count must be a whole number from 1 to 1000, got \"0\"",
        ),
        ("/range?count=1001", "from 1 to 1000, got \"1001\""),
        ("/range?count=-1", "from 1 to 1000"),
        (
            "/range",
            "missing query parameter count: use /range?count=N with 1 <= N <= 1000",
        ),
        (
            "/range?count=5&after=3",
            "unknown query parameter \"after\"",
        ),
        (
            "/range?count=5&format=base32",
            "unknown query parameter \"format\"",
        ),
    ] {
        let (status, body) = get(&api, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(says), "{path}: {error}");
    }
    assert_eq!(metrics.ids_issued.get(), 0, "nothing was handed out");
    assert_eq!(range(&api, 1000).await.0, 1, "no value was used up");
}

#[tokio::test]
async fn a_range_may_be_far_longer_than_max_batch_up_to_max_range_and_the_block() {
    const BIG: u64 = 1_000_000;
    let (api, metrics) = segment_api_of(BIG, 10, BIG);
    ready(&api).await;
    let (status, body) = get(&api, "/ids?count=11").await;
    assert_eq!(status, 400, "/ids keeps --max-batch: {body}");
    assert_eq!(
        range(&api, BIG).await,
        (1, BIG + 1),
        "a whole block of a million values in one answer"
    );
    let (status, body) = get(&api, &format!("/range?count={}", BIG + 1)).await;
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("from 1 to 1000000"), "{error}");
    assert_eq!(metrics.ids_issued.get(), BIG, "the range counted whole");

    let (small, _) = segment_api(crate::http::DEFAULT_MAX_RANGE);
    ready(&small).await;
    assert_eq!(
        range(&small, crate::http::DEFAULT_MAX_RANGE).await,
        (1, BLOCK + 1),
        "a range asked past the block ends with it"
    );
}

#[tokio::test]
async fn a_snowflake_or_strict_sidecar_answers_409_not_segment_and_names_ids() {
    let snowflake = snowflake_api(ready_generator());
    let metrics = Arc::new(Metrics::new());
    let strict = Strict::start(
        Arc::new(FakeStore::starting_at(1)),
        Duration::from_secs(1),
        Backoff::default(),
        SegmentMetrics::unregistered(),
    );
    let cell = ServingCell::new(Serving::Segment(Source::Strict(strict)), &metrics);
    let strict = Api::new(cell.reader(), metrics, 10);
    for (api, serves) in [
        (&*snowflake, "Snowflake IDs"),
        (&strict, "a strict segment"),
    ] {
        let (status, body) = get(api, "/range?count=5").await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["reason"], "not_segment");
        let error = body["error"].as_str().unwrap();
        assert!(
            error.contains(serves) && error.contains("ask /ids?count=N"),
            "{error}"
        );
    }
}
