//! The counter in a cluster: the sequence's `<name>-segment-counter` Lease. Reads are GETs
//! (quorum reads); writes are merge patches carrying the `resourceVersion` read, which the
//! API server turns into a compare-and-swap in etcd (409 Conflict when it moved on).
//! Sidecars may already update Leases in their namespace: no new RBAC.
//!
//! The sidecar never creates the counter: only the operator does, and only for a sequence
//! that never had one. A missing counter (404) is an error that is retried, never a reason
//! to start again. Reads must stay quorum reads (no `resourceVersion=0`): a cached, older
//! counter would look like one that went backwards.

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubeflake_crds::segment_counter::{CLAIMS_ANNOTATION, Counter, NEXT_ANNOTATION, counter_name};
use serde_json::json;

use super::claim::{CounterStore, StoreError};

/// The counter Lease of one sequence.
pub struct LeaseCounter {
    api: Api<Lease>,
    name: String,
}

impl LeaseCounter {
    pub fn new(api: Api<Lease>, sequence: &str) -> LeaseCounter {
        LeaseCounter {
            api,
            name: counter_name(sequence),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

fn store_error(e: kube::Error, name: &str) -> StoreError {
    match e {
        kube::Error::Api(s) if s.code == 409 => StoreError::Conflict,
        kube::Error::Api(s) if s.code == 404 => StoreError::NotFound(format!(
            "counter Lease {name} does not exist: the operator creates it for a new Segment \
             sequence; if it was deleted, the IdSequence's Ready condition (CounterLost) says \
             how to re-create it safely. The sidecar never creates it"
        )),
        e => StoreError::Unavailable(format!("counter Lease {name}: {e}")),
    }
}

impl CounterStore for LeaseCounter {
    fn read(&self) -> BoxFuture<'_, Result<Counter, StoreError>> {
        Box::pin(async move {
            let lease = self
                .api
                .get(&self.name)
                .await
                .map_err(|e| store_error(e, &self.name))?;
            Counter::parse(&lease).map_err(|e| StoreError::Corrupt(e.to_string()))
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
                .map(|_| ())
                .map_err(|e| store_error(e, &self.name))
        })
    }
}
