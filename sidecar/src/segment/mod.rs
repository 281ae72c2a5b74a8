//! Segment mode: dense integers like a database `SEQUENCE`, handed out in blocks.
//!
//! One counter per sequence holds the first value not yet claimed. A sidecar claims a
//! block `[next, next + size)` with a compare-and-swap write and only then hands its
//! values out, so two sidecars never get overlapping blocks whatever the interleaving;
//! values of a block not used when a sidecar stops are lost (gaps, never duplicates).
//!
//! - [`claim`]: the counter store interface, the CAS claim loop with jittered backoff.
//! - [`buffer`]: the per-sidecar double buffer (prefetch, adaptive block size).
//! - [`strict`]: strict sequences standalone, one counter write per group of concurrent
//!   requests (why it is here and not in [`crate::oracle`]: its module doc).
//! - [`group`]: group commit, shared by both strict sources (this room's [`strict`] and
//!   [`crate::oracle`], strict sequences in a cluster, which builds on this room).
//! - [`lease`]: the counter as a Lease (cluster mode).
//! - [`file`]: the counter as a file in the state directory (standalone).
//!
//! Which source a sidecar serves from (blocks, strict, the oracle) is [`crate::source`],
//! above this room and the oracle's.

pub(crate) mod buffer;
pub(crate) mod claim;
pub(crate) mod file;
pub(crate) mod group;
pub(crate) mod lease;
pub(crate) mod seen_file;
pub(crate) mod strict;

pub(crate) use buffer::SegmentRefusal;
pub(crate) use claim::{Block, CounterStore};

/// How long a request may wait for a block when none is buffered (API server slow or
/// down, or a burst larger than the buffer) before it is refused with 503.
pub(crate) const DEFAULT_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
