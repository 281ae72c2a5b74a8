//! The oracle's dispatcher: its background task that serves each group of local strict
//! requests from the term or forwards it to the oracle. A forwarded group's answer is used
//! only if it comes from the term of the oracle Lease this sidecar follows, from a
//! connection whose welcome proved it is the Lease's holder, and is the range asked for
//! ([`Forwarder::forward`]); anything else is refused, counted in
//! `kubeflake_strict_forward_errors_total` and logged.

use super::*;

impl Oracle {
    /// The dispatcher: each group of local requests is served from the term or forwarded.
    pub(super) async fn dispatch(self: Arc<Self>) {
        let mut forwarder = Forwarder::new(&self.config.sequence, self.peers.clone());
        loop {
            let group = {
                let Some(group) = self.lock().requests.next_group() else {
                    return;
                };
                group
            };
            if group.is_empty() {
                self.wake.notified().await;
                continue;
            }
            let (total, min) = group::totals(&group);
            let route = match &self.lock().role {
                Role::Oracle { .. } => Ok(None),
                Role::Follower {
                    address,
                    term,
                    holder,
                } => Ok(Some((address.clone(), *term, holder.clone()))),
                Role::Unknown { why } => Err(SegmentRefusal::NoBlock(format!(
                    "strict: no oracle serves this sequence now ({why}); retry shortly"
                ))),
            };
            let answer = match route {
                Ok(None) => self.serve_here(total, min).await.map(|(block, _)| block),
                Ok(Some((address, term, holder))) => {
                    let request = ForwardRequest { count: total, min };
                    self.metrics.strict_forwards.inc();
                    forwarder
                        .forward(&address, term, &holder, request)
                        .await
                        .map(|r| Block {
                            start: r.start,
                            end: r.end,
                        })
                        .map_err(|e| {
                            self.metrics.strict_forward_errors.inc();
                            if e.is_bad_reply() {
                                tracing::warn!(error = %e, "strict: a forwarded group's answer was not used");
                            }
                            SegmentRefusal::NoBlock(format!("strict: {e}"))
                        })
                }
                Err(refused) => Err(refused),
            };
            match answer {
                Ok(block) => group::hand_out(group, block, &self.metrics),
                Err(refused) => group::refuse(group, &refused),
            }
        }
    }
}
