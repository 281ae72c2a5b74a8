//! Group commit, shared by both strict sources ([`super::strict`] standalone and
//! [`crate::oracle`] in a cluster): a request queues a [`Waiting`], one task takes every
//! request queued so far, gets their values in one step (one counter write, or one take
//! from the oracle), and hands each its part in queue order. A request joins only a group
//! formed after it arrived, so its values are taken at a moment inside its call.

use std::time::Duration;

use tokio::sync::oneshot;

use super::buffer::{Runs, SegmentRefusal};
use super::claim::Block;
use crate::metrics::SegmentMetrics;

/// One request waiting for its values.
pub(crate) struct Waiting {
    pub(crate) want: u64,
    /// The smallest value allowed (`after + 1`; 0 without `after`).
    pub(crate) min: u64,
    pub(crate) reply: oneshot::Sender<Result<Block, SegmentRefusal>>,
}

impl Waiting {
    /// A request for `want` values of at least `min`, and where its answer arrives.
    pub(crate) fn new(want: u64, min: u64) -> (Waiting, Answer) {
        let (reply, answer) = oneshot::channel();
        (Waiting { want, min, reply }, answer)
    }
}

/// The answer a queued request waits for.
pub(crate) type Answer = oneshot::Receiver<Result<Block, SegmentRefusal>>;

/// The requests queued for the next group, until the source stops.
#[derive(Default)]
pub(crate) struct Queue {
    waiting: Vec<Waiting>,
    stopped: bool,
}

impl Queue {
    /// Queues a request for `want` values of at least `min`; refused once stopped.
    pub(crate) fn push(&mut self, want: u64, min: u64) -> Result<Answer, SegmentRefusal> {
        if self.stopped {
            return Err(SegmentRefusal::Stopping);
        }
        let (waiting, answer) = Waiting::new(want, min);
        self.waiting.push(waiting);
        Ok(answer)
    }

    /// The next group: every request queued so far (maybe none); `None` once stopped.
    pub(crate) fn next_group(&mut self) -> Option<Vec<Waiting>> {
        (!self.stopped).then(|| std::mem::take(&mut self.waiting))
    }

    /// Stops for good: the requests still queued, to be refused.
    pub(crate) fn stop(&mut self) -> Vec<Waiting> {
        self.stopped = true;
        std::mem::take(&mut self.waiting)
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }
}

/// How many values a group needs, and the smallest allowed (the largest `min` in it).
pub(crate) fn totals(group: &[Waiting]) -> (u64, u64) {
    let total = group.iter().fold(0u64, |sum, w| sum.saturating_add(w.want));
    let min = group.iter().map(|w| w.min).max().unwrap_or(0);
    (total, min)
}

/// Waits at most `limit` for a queued request's answer.
pub(crate) async fn answer(answer: Answer, limit: Duration) -> Result<Runs, SegmentRefusal> {
    match tokio::time::timeout(limit, answer).await {
        Ok(Ok(block)) => block.map(|b| vec![b]),
        // The task ended without answering: only when stopped.
        Ok(Err(_)) => Err(SegmentRefusal::Stopping),
        Err(_) => Err(SegmentRefusal::NoBlock(format!(
            "strict: no answer within {limit:?}; values taken for it later are a gap"
        ))),
    }
}

/// Gives each request its part of `block`, in queue order. The block is shorter than the
/// group's total only at the very end of the value range: requests left without values
/// are refused as exhausted.
pub(crate) fn hand_out(group: Vec<Waiting>, block: Block, metrics: &SegmentMetrics) {
    let mut next = block.start;
    for w in group {
        let answer = if block.end - next >= w.want {
            let part = Block {
                start: next,
                end: next + w.want,
            };
            next = part.end;
            Ok(part)
        } else {
            Err(SegmentRefusal::Exhausted)
        };
        if let Err(Ok(unused)) = w.reply.send(answer) {
            // The request gave up waiting: its values are a gap, never served.
            metrics.values_dropped.inc_by(unused.len());
        }
    }
}

/// Answers every request of `group` with `refusal`.
pub(crate) fn refuse(group: Vec<Waiting>, refusal: &SegmentRefusal) {
    for w in group {
        // The request may have given up already: nothing to tell it then.
        let _ = w.reply.send(Err(refusal.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_what_was_queued_before_it_and_a_stopped_queue_refuses_and_hands_back() {
        let mut q = Queue::default();
        let _a = q.push(2, 0).unwrap();
        let _b = q.push(3, 10).unwrap();
        let group = q.next_group().expect("running");
        assert_eq!(totals(&group), (5, 10));
        assert!(
            q.next_group().unwrap().is_empty(),
            "each request joins one group"
        );
        let _c = q.push(1, 0).unwrap();
        assert_eq!(
            q.stop().len(),
            1,
            "the queued request is handed back to be refused"
        );
        assert!(q.is_stopped() && q.next_group().is_none());
        assert!(matches!(q.push(1, 0), Err(SegmentRefusal::Stopping)));
    }
}
