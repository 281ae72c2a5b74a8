//! The Segment path's reads and guards of the local counter (docs/safety.md rule 22): its
//! read, the ranges of a counter the membership did not record given up, and a counter put
//! in format 3 only while no pod injected by 0.1.0 may claim from it; and what it holds,
//! shown in the metrics before the hub is reached.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::contract::{INJECTED_ANNOTATION, injected_before_0_2};
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::ownership::SEQUENCE_LABEL;
use kubeflake_crds::ownership::counter_name;
use kubeflake_crds::segment_counter::range::plan;
use kubeflake_crds::segment_counter::{CLAIMANTS_ANNOTATION, Counter, claimants};

use super::refused;
use crate::hub::conditions::Reason;
use crate::hub::connect::CALL_TIMEOUT;
use crate::hub::step::{MAX_WRITES_PER_CONTACT, Refusal};
use crate::metrics::hub::{HubMetrics, Member, RangesHeld};
use kubeflake_runtime::kube_error::is_conflict;

/// Shows what the counter of `membership`'s sequence holds of its ranges
/// (`kubeflake_operator_id_space_segment_values_left`), read before the hub is reached:
/// while the hub is unreachable, the values left keep falling in the metrics as the
/// sidecars claim, so that an alert can fire before they run out. A counter that cannot be
/// read leaves the figures of the last read.
pub async fn show_held(client: &Client, metrics: &HubMetrics, membership: &IdSpaceMembership) {
    let namespace = membership.namespace().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    match read_counter(&leases, &counter_name(&membership.spec.sequence)).await {
        Ok((_, counter)) => metrics.ranges_held(&Member::of(membership), RangesHeld::of(&counter)),
        Err(refusal) => {
            tracing::debug!(membership = %membership.name_any(), error = %refusal.message, "the segment counter does not read: its figures wait for the next contact");
        }
    }
}

/// Refuses to put a counter in format 3 while a pod whose sidecar was injected by 0.1.0
/// may claim from it (listed among its claimants, or any such pod of the sequence when the
/// counter lists none, as 0.1.0 left it: then every pod may claim): it knows no ranges, and
/// a claim of its from the limit into the queued range would hand out the values between,
/// which the hub gave to other clusters. The controller leaves such pods out of the
/// claimants of a sequence a membership names (`controller/segment`), so this waits for its
/// next pass, or for those pods to be re-created by this release.
pub(super) async fn no_0_1_claimants(
    client: &Client,
    namespace: &str,
    sequence: &str,
    counter: &Lease,
) -> Result<(), Refusal> {
    let has_list = counter
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CLAIMANTS_ANNOTATION));
    let listed = claimants(counter);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&format!("{SEQUENCE_LABEL}={sequence}"));
    let list = tokio::time::timeout(CALL_TIMEOUT, pods.list(&params))
        .await
        .map_err(|_| {
            refused(
                Reason::HubCheckPending,
                "listing the sequence's pods timed out",
            )
        })?
        .map_err(|e| refused(Reason::HubCheckPending, e))?;
    let old: Vec<String> = list
        .items
        .iter()
        .filter(|p| {
            injected_before_0_2(
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(INJECTED_ANNOTATION))
                    .map(String::as_str),
            )
        })
        .filter(|p| !has_list || p.metadata.uid.as_ref().is_some_and(|u| listed.contains(u)))
        .map(|p| p.name_any())
        .collect();
    if old.is_empty() {
        return Ok(());
    }
    Err(refused(
        Reason::HubCheckPending,
        format!(
            "pods {} run a sidecar injected by 0.1.0, which knows no ranges, and may still \
             claim from the segment counter: the counter is not put in format 3 (rule 22) \
             until the controller has taken them off its claimants (its next pass), or they \
             are re-created by this release",
            old.join(", ")
        ),
    ))
}

/// Gives up the ranges of a counter this membership did not record ([`plan::abandon`]),
/// before the membership records this cluster: a counter restored or copied from another
/// cluster holds ranges that cluster still uses. Its pods claim nothing meanwhile (the
/// controller lists no claimants of a ranged counter no membership of this cluster made).
/// Also for a counter whose records went back (its etcd restored: `member.rs`). Read again
/// after a conflict (a sidecar claimed meanwhile), a few times.
pub(super) async fn abandon_ranges(leases: &Api<Lease>, name: &str) -> Result<(), Refusal> {
    for _ in 0..MAX_WRITES_PER_CONTACT {
        let (lease, counter) = read_counter(leases, name).await?;
        let Some(given_up) = plan::abandon(&counter) else {
            return Ok(());
        };
        if write_counter(leases, name, &given_up.write_into(lease)).await? == Write::Conflict {
            continue;
        }
        tracing::warn!(
            counter = name,
            next = counter.next,
            "gave up the ranges of a segment counter"
        );
        return Ok(());
    }
    Err(refused(
        Reason::HubCheckPending,
        "the segment counter changed at each try to give its ranges up: tried again at the \
         next contact",
    ))
}

/// Raises the claim count of a counter whose ranges were given up after its records went
/// back to at least `known`, the IdSequence's `status.segment.blocksClaimed` (raising is
/// all the Lease policy lets anyone do to it). The controller kept the count it saw before
/// the restore, and every sidecar refuses a counter with fewer claims (`CounterWentBack`):
/// after the give-up that counter's `next` lies in a fresh range above every value handed
/// out, so its count may be raised. Read again after a conflict, a few times.
pub(super) async fn raise_claims(
    leases: &Api<Lease>,
    name: &str,
    known: u64,
) -> Result<(), Refusal> {
    for _ in 0..MAX_WRITES_PER_CONTACT {
        let (lease, counter) = read_counter(leases, name).await?;
        if counter.claims >= known {
            return Ok(());
        }
        let raised = Counter {
            claims: known,
            ..counter.clone()
        };
        if write_counter(leases, name, &raised.write_into(lease)).await? == Write::Conflict {
            continue;
        }
        tracing::warn!(
            counter = name,
            from = counter.claims,
            to = known,
            "raised the claim count of a segment counter whose ranges were given up after an etcd restore"
        );
        return Ok(());
    }
    Ok(())
}

/// What a compare-and-swap write of the counter Lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Write {
    Written,
    /// The Lease changed since it was read (a sidecar claimed meanwhile): read it again.
    Conflict,
}

/// Writes the counter Lease `lease` (as read, changed) by compare-and-swap on its
/// resourceVersion, within [`CALL_TIMEOUT`]. The one place the Segment path writes it.
pub(super) async fn write_counter(
    leases: &Api<Lease>,
    name: &str,
    lease: &Lease,
) -> Result<Write, Refusal> {
    let post = PostParams::default();
    let write = leases.replace(name, &post, lease);
    match tokio::time::timeout(CALL_TIMEOUT, write).await {
        Ok(Ok(_)) => Ok(Write::Written),
        Ok(Err(e)) if is_conflict(&e) => Ok(Write::Conflict),
        Ok(Err(e)) => Err(refused(Reason::HubCheckPending, e)),
        Err(_) => Err(refused(
            Reason::HubCheckPending,
            "writing the segment counter timed out",
        )),
    }
}

pub(super) async fn read_counter(
    leases: &Api<Lease>,
    name: &str,
) -> Result<(Lease, Counter), Refusal> {
    let lease = match tokio::time::timeout(CALL_TIMEOUT, leases.get_opt(name)).await {
        Ok(Ok(Some(lease))) => lease,
        Ok(Ok(None)) => {
            return Err(refused(
                Reason::HubCheckPending,
                format!(
                    "the sequence's segment counter Lease {name} does not exist yet: the \
                     controller creates it; no range is taken until it has"
                ),
            ));
        }
        Ok(Err(e)) => return Err(refused(Reason::HubCheckPending, e)),
        Err(_) => {
            return Err(refused(
                Reason::HubCheckPending,
                "reading the segment counter timed out",
            ));
        }
    };
    let counter = Counter::parse(&lease).map_err(|e| refused(Reason::BadRecord, e))?;
    Ok((lease, counter))
}
