//! The sequence's slot Leases as a contact reads them: the slots the join carries as first
//! claims, and how many a pod holds now (the blocks a member needs).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::id_space::join::SlotUse;
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, SlotLease};

use crate::hub::conditions::Reason;
use crate::hub::connect::CALL_TIMEOUT;
use crate::hub::step::Refusal;

/// The sequence's slot Leases as the join reads them, and how many a pod holds now.
pub(super) async fn slot_uses(
    client: &Client,
    namespace: &str,
    sequence: &str,
) -> Result<(Vec<SlotUse>, u64), Refusal> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&format!("{SEQUENCE_LABEL}={sequence}"));
    let list = tokio::time::timeout(CALL_TIMEOUT, leases.list(&params))
        .await
        .map_err(|_| Refusal {
            reason: Reason::HubCheckPending,
            message: "listing the sequence's slot Leases timed out".into(),
        })?
        .map_err(|e| Refusal {
            reason: Reason::HubCheckPending,
            message: format!("cannot list the sequence's slot Leases: {e}"),
        })?;
    let mut used = Vec::new();
    for lease in &list.items {
        let slot = SlotLease::parse(lease).map_err(|e| Refusal {
            reason: Reason::BadRecord,
            message: format!("slot Lease {}: {e}", lease.name_any()),
        })?;
        used.push(SlotUse {
            slot: slot.slot,
            fence: slot.fence,
            held: slot.holder.is_some(),
        });
    }
    let in_use = used.iter().filter(|u| u.held).count() as u64;
    Ok((used, in_use))
}
