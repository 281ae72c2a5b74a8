//! `hub recover` on a Segment space reads the member clusters the administrator names:
//! every IdSpaceMembership whose `spec.space` is the space, its sequence's counter Lease
//! and a range kept in its status ([`super::segment`] decides from them). Read-only.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::id_space::IdSpaceMembership;
use kubeflake_crds::ownership::counter_name;
use kubeflake_crds::segment_counter::Counter;

use super::segment::{Held, Reached, counter_end, kept_end};
use crate::cli::ClusterArgs;
use crate::cli::hub::RecoverArgs;
use crate::cluster;
use crate::error::CliError;

/// The member clusters `args` names: each `--member-context` in the hub's kubeconfig, each
/// `--member-kubeconfig` with its current context; labelled by the flag.
pub fn member_clusters(args: &RecoverArgs) -> Vec<(String, ClusterArgs)> {
    let contexts = args.member_context.iter().map(|c| {
        let at = ClusterArgs {
            context: Some(c.clone()),
            kubeconfig: args.space.cluster.kubeconfig.clone(),
            namespace: None,
        };
        (format!("--member-context {c}"), at)
    });
    let files = args.member_kubeconfig.iter().map(|p| {
        let at = ClusterArgs {
            context: None,
            kubeconfig: Some(p.clone()),
            namespace: None,
        };
        (format!("--member-kubeconfig {}", p.display()), at)
    });
    contexts.chain(files).collect()
}

/// Reads every named member cluster.
pub async fn reach(
    clusters: &[(String, ClusterArgs)],
    (space, namespace): (&str, &str),
) -> Result<Vec<Reached>, CliError> {
    let mut reached = Vec::new();
    for (label, args) in clusters {
        let (client, _) = cluster::connect(args).await?;
        reached.push(Reached {
            cluster: label.clone(),
            memberships: held_in(&client, label, (space, namespace)).await?,
        });
    }
    Ok(reached)
}

async fn held_in(
    client: &Client,
    label: &str,
    (space, namespace): (&str, &str),
) -> Result<Vec<Held>, CliError> {
    let api: Api<IdSpaceMembership> = Api::all(client.clone());
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        // No IdSpaceMembership CRD: no membership of any space there.
        Err(kube::Error::Api(s)) if s.is_not_found() => Vec::new(),
        Err(source) => {
            return Err(CliError::Api {
                what: format!("list idspacememberships in member cluster {label}"),
                source,
            });
        }
    };
    let mut held = Vec::new();
    for m in list
        .iter()
        .filter(|m| m.spec.space.namespace == namespace && m.spec.space.name == space)
    {
        let ns = m.namespace().unwrap_or_default();
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let lease = counter_name(&m.spec.sequence);
        let counter = match leases.get_opt(&lease).await {
            Ok(found) => found,
            Err(source) => {
                return Err(CliError::Api {
                    what: format!("read lease {lease} in namespace {ns} of member cluster {label}"),
                    source,
                });
            }
        };
        let counter_end = match counter.as_ref().map(Counter::parse) {
            None => None,
            Some(Ok(c)) => Some(counter_end(&c)),
            Some(Err(e)) => {
                return Err(CliError::SegmentRefused {
                    space: format!("{namespace}/{space}"),
                    reason: format!(
                        "the counter Lease {ns}/{lease} in member cluster {label} does not read \
                         ({e}): the values it handed out are not known; repair it first"
                    ),
                });
            }
        };
        let status = m.status.as_ref();
        held.push(Held {
            membership: format!("{ns}/{}", m.name_any()),
            member_id: status.and_then(|s| s.member_id.clone()),
            counter_end,
            kept_end: kept_end(status.and_then(|s| s.segment_range.as_ref())),
        });
    }
    Ok(held)
}
