//! Consecutive values from one block, for `/range` (docs/segment.md, "Ranges"): the
//! same cursor as every other take, so a value is still taken once.

use std::sync::Arc;

use super::{Runs, Segment, SegmentRefusal};
use crate::segment::claim::Block;

impl Segment {
    /// Up to `want` consecutive values, `[first, first + n)` with `1 <= n <= want`, all
    /// from one block (`/range`, docs/segment.md): what is left of the current block when
    /// that is fewer. When nothing is buffered it waits for a claim like
    /// [`take_one`](Self::take_one) and answers that one value. Handed out exactly like
    /// [`take`](Self::take)'s values (docs/safety.md's segment rules): the buffer's cursor
    /// moves past them, so no other request is given any of them.
    pub(crate) async fn take_range(self: &Arc<Self>, want: u64) -> Result<Block, SegmentRefusal> {
        let mut runs = Runs::with_capacity(1);
        let (taken, fetch) = self.take_buffered(want, 0, 1, &mut runs);
        if fetch {
            self.clone().spawn_fetch();
        }
        if let (1.., Some(run)) = (taken, runs.first()) {
            return Ok(*run);
        }
        // Nothing buffered: wait for a claim as `/id` does, and answer its one value (the
        // caller's next range starts the new block).
        let first = self.take_one_from(0).await?;
        Ok(Block {
            start: first,
            end: first + 1,
        })
    }
}
