//! Rule 1 on the sidecar's write path, against the real API server: a holder whose view of
//! its slot lease is stale (the slot was given to another pod meanwhile) can neither raise
//! the fence nor release the slot; its compare-and-swap fails and it learns it lost the slot.

mod operator_support;

use std::collections::BTreeMap;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kubeflake_crds::slot_lease::{FENCE_ANNOTATION, SlotLease, lease_labels};
use kubeflake_crds::{Slot, Tick};
use kubeflake_e2e::Cluster;
use kubeflake_sidecar::slot::{HeldSlot, SlotError};

fn lease(holder: &str, fence: u64) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("cas-slot-0".into()),
            labels: Some(lease_labels("cas", Slot(0), Some(holder))),
            annotations: Some(BTreeMap::from([(
                FENCE_ANNOTATION.to_string(),
                fence.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_transitions: Some(1),
            ..Default::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule1_a_holder_with_a_stale_view_cannot_overwrite_the_new_holder() -> Result<()> {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("lease-cas").await?;
    let api: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let as_read_by_a = api
        .create(&PostParams::default(), &lease("pod-a", 100))
        .await?;
    let mut a = HeldSlot::new(api.clone(), "pod-a", as_read_by_a.clone())?;

    // Meanwhile the slot goes to pod B (as the operator would write it, fence kept).
    let mut to_b = lease("pod-b", 100);
    to_b.metadata.resource_version = as_read_by_a.metadata.resource_version.clone();
    api.replace("cas-slot-0", &PostParams::default(), &to_b)
        .await?;

    let raised = a.raise_fence(Tick(5_000)).await;
    assert!(
        matches!(raised, Err(SlotError::Lost)),
        "stale holder must learn it lost the slot: {raised:?}"
    );
    a.release(Tick(100)).await?;
    let now = SlotLease::parse(&api.get("cas-slot-0").await?)?;
    assert_eq!(now.holder.as_deref(), Some("pod-b"), "the new holder stays");
    assert_eq!(now.fence, Tick(100), "the stale holder changed nothing");
    Ok(())
}
