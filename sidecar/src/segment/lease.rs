//! The counter in a cluster: the sequence's `<name>-segment-counter` Lease. Reads are GETs
//! (quorum reads); writes are merge patches carrying the `resourceVersion` read, which the
//! API server turns into a compare-and-swap in etcd (409 Conflict when it moved on).
//! The API server lets only the sidecars of pods the operator lists on the counter
//! (`kubeflake.io/claimants`) write it, and only upwards (`kubeflake_crds::lease_policy`):
//! so a graceful stop gives nothing back here (its unused values stay a gap).
//!
//! The sidecar never creates the counter: only the operator does, and only for a sequence
//! that never had one. A missing counter (404) is an error that is retried, never a reason
//! to start again. Reads must stay quorum reads (no `resourceVersion=0`): a cached, older
//! counter would look like one that went backwards.
//!
//! A Lease with the counter's name but without its label was not made by kubeflake (a
//! tenant may create one before the operator does; docs/safety.md rule 16): its parse
//! refuses it, so the sidecar claims nothing from it and is not ready, saying what to do.
//!
//! Every `next` read or written is recorded ([`HighestSeen`]): the counter may only go up,
//! so a later read below it is a copy that went back, and claims refuse it. The cluster
//! sidecar also follows the counter with a watch ([`LeaseCounter::follow`]), so that a pod
//! that claimed nothing for a while knows how far the others got.
//!
//! Each claim also reads the IdSequence's `status.segment.blocksClaimed` (from the API
//! server's cache: an older status is only less strict), the claim count the operator last
//! saw: a counter with fewer claims is an older copy and is refused (see `claim`).

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{GetParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::{Api, Client};
use kubeflake_crds::segment_counter::{CLAIMS_ANNOTATION, Counter, NEXT_ANNOTATION, counter_name};
use kubeflake_crds::sequence::IdSequence;
use kubeflake_runtime::kube_error::{self, KubeErrorKind};
use serde_json::json;

use super::claim::{CounterStore, HighestSeen, StoreError};

/// The counter Lease of one sequence.
pub(crate) struct LeaseCounter {
    api: Api<Lease>,
    name: String,
    sequences: Api<IdSequence>,
    sequence: String,
    seen: HighestSeen,
}

impl LeaseCounter {
    /// The counter of `sequence` in `namespace`.
    pub(crate) fn new(client: Client, namespace: &str, sequence: &str) -> LeaseCounter {
        LeaseCounter {
            api: Api::namespaced(client.clone(), namespace),
            name: counter_name(sequence),
            sequences: Api::namespaced(client, namespace),
            sequence: sequence.to_owned(),
            seen: HighestSeen::default(),
        }
    }

    /// Follows the counter with a watch until the future is dropped: every `next` it
    /// delivers raises what this sidecar knows the counter reached ([`HighestSeen`]), so
    /// that a claim refuses a counter that went back (an etcd snapshot or a backup restored)
    /// even in a pod that claimed nothing since the others claimed (docs/safety.md rule 22).
    /// A watched copy may be older than what a claim already read (the API server's watch
    /// cache trails etcd), so it only ever raises the record: only a claim's quorum read is
    /// compared with it. A failing watch is retried with backoff and logged once per streak;
    /// claims go on meanwhile (each reads the counter itself).
    pub(crate) async fn follow(&self) {
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={}", self.name))
            .list_semantic(ListSemantic::MostRecent);
        let mut events = watcher::watcher(self.api.clone(), config)
            .default_backoff()
            .boxed();
        let mut failing = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(lease) | Event::InitApply(lease)) => {
                    failing = false;
                    match parse(&lease) {
                        Ok(counter) => {
                            self.seen.record(counter.next);
                        }
                        // The claim that reads it says why, on the pod and in the log.
                        Err(e) => {
                            tracing::debug!(error = %e, counter = %self.name, "the watched counter is not one to claim from")
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, counter = %self.name, "following the segment counter: the watch failed, retrying with backoff (claims still read the counter)");
                    }
                    failing = true;
                }
            }
        }
        tracing::warn!(counter = %self.name, "following the segment counter: the watch ended");
        std::future::pending::<()>().await
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

fn store_error(e: kube::Error, name: &str) -> StoreError {
    match kube_error::kind(&e) {
        KubeErrorKind::Conflict => StoreError::Conflict,
        KubeErrorKind::NotFound => StoreError::NotFound(format!(
            "counter Lease {name} does not exist: the operator creates it for a new Segment \
             sequence; if it was deleted, the IdSequence's Ready condition (CounterLost) says \
             how to re-create it safely. The sidecar never creates it"
        )),
        // The API server's Lease policy (or RBAC) refused: most often this pod is not yet
        // among the counter's claimants, which the operator adds moments after the pod is
        // created. Retried like an unavailable counter.
        KubeErrorKind::Forbidden => StoreError::Unavailable(format!(
            "counter Lease {name} refused this sidecar's write: {e}; the operator lists a pod \
             labelled for the sequence as a claimant (kubeflake.io/claimants) soon after it is \
             created, so this is retried; if it lasts, is the operator running?"
        )),
        _ => StoreError::Unavailable(format!("counter Lease {name}: {e}")),
    }
}

impl CounterStore for LeaseCounter {
    fn may_lower(&self) -> bool {
        false
    }

    fn seen_next(&self) -> u64 {
        self.seen.get()
    }

    fn known_claims(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let seq = self
                .sequences
                .get_with(&self.sequence, &GetParams::any())
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!("IdSequence {}: {e}", self.sequence))
                })?;
            let known = seq
                .status
                .and_then(|s| s.segment)
                .and_then(|s| s.blocks_claimed)
                .unwrap_or(0);
            Ok(u64::try_from(known).unwrap_or(0))
        })
    }

    fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>> {
        Box::pin(async move {
            let lease = self
                .api
                .get(&self.name)
                .await
                .map_err(|e| store_error(e, &self.name))?;
            let counter = parse(&lease)?;
            self.seen.record(counter.next);
            Ok(counter)
        })
    }

    fn compare_and_swap<'a>(
        &'a self,
        seen: &'a Counter,
        new: Counter,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Without the version the patch would be unconditional: never send it.
            let Some(version) = seen.resource_version.as_deref().filter(|v| !v.is_empty()) else {
                return Err(StoreError::Corrupt(format!(
                    "counter Lease {} was read without a resourceVersion; not writing",
                    self.name
                )));
            };
            // A claim writes `next` and `claims` only, whatever the format: in format 3
            // (rule 22) moving to the queued range is raising `next` into it.
            let patch = json!({"metadata": {
                "resourceVersion": version,
                "annotations": {
                    NEXT_ANNOTATION: new.next.to_string(),
                    CLAIMS_ANNOTATION: new.claims.to_string(),
                },
            }});
            self.api
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| store_error(e, &self.name))?;
            self.seen.record(new.next);
            Ok(())
        })
    }
}

/// The counter a Lease holds, or why it holds none this release can claim from.
pub(crate) fn parse(lease: &Lease) -> Result<Counter, StoreError> {
    Counter::parse(lease).map_err(|e| {
        if e.is_format() {
            StoreError::UnsupportedFormat(e.to_string())
        } else {
            StoreError::Corrupt(e.to_string())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::segment_counter::new_counter;
    use kubeflake_crds::slot_lease::FORMAT_ANNOTATION;
    use kubeflake_runtime::fake_api::FakeApi;

    /// Issue 23: a counter Lease a newer kubeflake wrote is its own refusal (not "corrupt"),
    /// naming the Lease, the format and what to do.
    #[tokio::test]
    async fn a_counter_lease_in_a_newer_format_is_refused_as_such() {
        let mut newer = new_counter("orders", "ns", 7);
        newer
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(FORMAT_ANNOTATION.into(), "4".into());
        let body = serde_json::to_value(&newer).unwrap();
        let client = FakeApi::answering(move |_, _, _| (200, body.clone())).client();
        let err = LeaseCounter::new(client, "ns", "orders")
            .read()
            .await
            .unwrap_err();
        let StoreError::UnsupportedFormat(message) = err else {
            panic!("another error: {err}");
        };
        assert!(
            message.contains("orders-segment-counter") && message.contains("format 4"),
            "{message}"
        );
    }

    /// Rule 22: every `next` a read finds is recorded as seen, and a later read below it
    /// leaves the record where it was (the claim that reads it refuses it).
    #[tokio::test]
    async fn rule22_reads_record_the_highest_next_seen_and_a_lower_read_does_not_lower_it() {
        let next = std::sync::Arc::new(std::sync::Mutex::new(5_000u64));
        let answer = next.clone();
        let api = FakeApi::answering(move |_, _, _| {
            let lease = new_counter("orders", "ns", *answer.lock().unwrap());
            (200, serde_json::to_value(&lease).unwrap())
        });
        let counter = LeaseCounter::new(api.client(), "ns", "orders");
        assert_eq!(counter.seen_next(), 0);
        assert_eq!(counter.read().await.unwrap().next, 5_000);
        assert_eq!(counter.seen_next(), 5_000);
        *next.lock().unwrap() = 101; // an etcd snapshot restored
        assert_eq!(counter.read().await.unwrap().next, 101);
        assert_eq!(counter.seen_next(), 5_000);
    }

    /// Rule 22: a claim of a format 3 counter, a move to its queued range included, patches
    /// `next` and `claims` only, as for every counter (what the Lease policy of earlier
    /// releases lets a claimant write).
    #[tokio::test]
    async fn rule22_a_claim_that_moves_to_the_queued_range_patches_next_and_claims_only() {
        use kubeflake_crds::segment_counter::{
            QUEUED_LIMIT_ANNOTATION, QUEUED_START_ANNOTATION, RANGE_LIMIT_ANNOTATION, take,
        };
        let mut lease = new_counter("orders", "ns", 1000);
        lease.metadata.resource_version = Some("5".into());
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in [
            (FORMAT_ANNOTATION, "3"),
            (RANGE_LIMIT_ANNOTATION, "1000"),
            (QUEUED_START_ANNOTATION, "5000"),
            (QUEUED_LIMIT_ANNOTATION, "6000"),
        ] {
            annotations.insert(k.into(), v.into());
        }
        let plain = {
            let mut l = new_counter("orders", "ns", 7);
            l.metadata.resource_version = Some("5".into());
            l
        };
        for (lease, want) in [
            (
                lease,
                json!({NEXT_ANNOTATION: "5010", CLAIMS_ANNOTATION: "1"}),
            ),
            (
                plain,
                json!({NEXT_ANNOTATION: "17", CLAIMS_ANNOTATION: "1"}),
            ),
        ] {
            let body = serde_json::to_value(&lease).unwrap();
            let api = FakeApi::answering(move |_, _, _| (200, body.clone()));
            let counter = LeaseCounter::new(api.client(), "ns", "orders");
            let seen = counter.read().await.unwrap();
            let taken = take(&seen, 10, 0).unwrap();
            counter
                .compare_and_swap(&seen, taken.counter)
                .await
                .unwrap();
            let patch = api.seen().pop().unwrap().body;
            assert_eq!(patch["metadata"]["annotations"], want);
            assert_eq!(patch["metadata"]["resourceVersion"], "5");
        }
    }

    /// Rule 16: a Lease with the counter's name that a tenant made before the operator
    /// (no kubeflake label, so the Lease policy never guarded it) is not the counter: the
    /// sidecar claims nothing from it, whatever `next` it says, and says what to do.
    #[tokio::test]
    async fn rule16_a_counter_lease_a_tenant_precreated_is_never_claimed_from() {
        let mut forged = new_counter("orders", "ns", 7);
        forged.metadata.labels = None;
        let body = serde_json::to_value(&forged).unwrap();
        let seen = FakeApi::answering(move |_, _, _| (200, body.clone()));
        let client = seen.client();
        let err = LeaseCounter::new(client, "ns", "orders")
            .read()
            .await
            .unwrap_err();
        let StoreError::Corrupt(message) = err else {
            panic!("another error: {err}");
        };
        for part in [
            "orders-segment-counter",
            "not made by kubeflake",
            "Delete Lease",
        ] {
            assert!(message.contains(part), "{part:?}: {message}");
        }
        assert_eq!(seen.seen().len(), 1, "one read, no write");
    }
}
