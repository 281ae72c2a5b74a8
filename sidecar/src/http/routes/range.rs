//! `GET /range?count=N`: segment mode's values as one range, `{"first":"F","count":n}` for
//! the values `F` to `F + n - 1` (docs/segment.md, "Ranges"). `n` is at most `N` and never
//! crosses the end of the block the sidecar holds, so the values are consecutive; they
//! leave the buffer as `/ids` values do (its cursor moves past them, docs/safety.md's
//! segment rules), so no other request is ever given one of them. A client holds a range
//! as a counter in memory instead of parsing `N` values (clients/SPEC.md).
//!
//! Only a segment sequence that is not strict serves ranges: Snowflake IDs are not
//! consecutive, and a strict sequence hands out every value in its own counter write.
//! Both answer 409, reason `not_segment`, naming `/ids` instead.

use std::sync::Arc;

use super::super::reply::{HttpError, Reply, range_reply};
use super::{Api, Planned, parse_count, query_params};
use crate::segment::buffer::Segment;
use crate::source::Source;
use crate::state::Serving;

/// What `/range` will answer in `state`: the values to take, or why not.
pub(super) fn planned(
    query: Option<&str>,
    max: u64,
    state: &Serving,
) -> Result<Planned, HttpError> {
    let params = query_params(query, &["count"])?;
    let raw = params.iter().find(|(k, _)| *k == "count").map(|(_, v)| *v);
    let count = parse_count(raw, max, "/range?count=N")?;
    match state {
        Serving::Segment(Source::Blocks(segment)) => Ok(Planned::Range(segment.clone(), count)),
        Serving::Segment(Source::Strict(_) | Source::Oracle(_)) => {
            Err(HttpError::NotSegment("a strict segment sequence"))
        }
        Serving::Snowflake(_) => Err(HttpError::NotSegment("Snowflake IDs")),
        other => Err(super::not_ready(other)),
    }
}

impl Api {
    /// Takes the range: counted in `kubeflake_ids_issued_total` like `/ids`'s values.
    pub(super) async fn range(
        &self,
        segment: &Arc<Segment>,
        count: u64,
    ) -> Result<Reply, HttpError> {
        let block = segment.take_range(count).await?;
        self.metrics.ids_issued.inc_by(block.len());
        Ok(range_reply(block.start, block.len()))
    }
}
