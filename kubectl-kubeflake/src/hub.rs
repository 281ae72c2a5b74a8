//! `hub ...`: see and steer an ID space shared by clusters, on its hub
//! (docs/design/2026-11-29-multicluster.md).
//!
//! - [`crate::cli::hub`]: the flags; [`store`]: reading the IdSpace and writing it by
//!   compare-and-swap;
//! - [`view`]: `members` and `blocks` (read-only);
//! - [`change`]: `forget` and `recover`, each the API crate's registry transition, never
//!   one of its own; [`segment`]: the same two on a Segment space (ranges, no blocks),
//!   [`segment_read`] reading the member clusters its recovery is bounded by;
//! - [`setup`]: `init` and `add-member`, the hub's objects ([`init`] its inputs and
//!   report, [`member_secret`] the Secret a member cluster applies);
//! - [`join`]: `join`, the IdSpaceMembership in a member cluster.

mod change;
mod init;
mod join;
mod member_secret;
mod segment;
mod segment_read;
mod setup;
mod store;
mod view;

use kube::api::Api;
use kubeflake_crds::id_space::hub_policy::MEMBER_ACCOUNT_PREFIX;
use kubeflake_crds::id_space::{IdSpace, IdSpaceSpec, MemberName, SpaceSequenceSpec};

use crate::cli::Format;
use crate::cli::hub::{HubArgs, HubCommand};
use crate::cluster;
use crate::error::CliError;
use crate::output::render;

/// Runs one `hub` command at `now_ms` and returns its rendered output.
pub async fn run(args: &HubArgs, format: Format, now_ms: u64) -> Result<String, CliError> {
    match &args.command {
        HubCommand::Members(a) => {
            let (client, ns) = cluster::connect(&a.cluster).await?;
            let api: Api<IdSpace> = Api::namespaced(client, &ns);
            let read = store::read(&api, &ns, &a.space).await?;
            let (space, registry) = read.blocks()?;
            let report = view::members((&a.space, &ns), space, registry, now_ms);
            render(format, &report)
        }
        HubCommand::Blocks(a) => {
            let s = &a.space;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            let api: Api<IdSpace> = Api::namespaced(client, &ns);
            let read = store::read(&api, &ns, &s.space).await?;
            let (space, registry) = read.blocks()?;
            let report = view::blocks(
                (&s.space, &ns),
                &read.object.spec,
                space,
                registry,
                a.all,
                now_ms,
            );
            render(format, &report)
        }
        HubCommand::Forget(a) => {
            let s = &a.space;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            let at = (s.space.as_str(), ns.as_str());
            let mut report = store::change(&client, at, a.dry_run, |r| {
                if r.is_segment() {
                    return segment::forget(at, &r.object.spec, &a.member);
                }
                let (space, registry) = r.blocks()?;
                change::forget(at, &r.object.spec, space, registry, &a.member, now_ms)
            })
            .await?;
            report.dry_run = a.dry_run;
            render(format, &report)
        }
        HubCommand::Init(a) => {
            let s = &a.space;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            let sequence = match &a.from_sequence {
                Some(text) => init::sequence_of(&client, text).await?,
                None => SpaceSequenceSpec::default(),
            };
            let mut spec = IdSpaceSpec::new(sequence, a.block_slots);
            spec.tolerance_seconds = a.tolerance_seconds;
            spec.renew_every_seconds = a.renew_every_seconds;
            init::check(&spec)?;
            let applied = setup::init(&client, (&s.space, &ns), spec).await?;
            render(format, &init::InitReport::new(&s.space, &ns, applied))
        }
        HubCommand::AddMember(a) => {
            let s = &a.space;
            let name = MemberName::new(&a.member).map_err(|e| CliError::BadHubFlag {
                flag: "MEMBER",
                reason: e.to_string(),
            })?;
            if a.token_duration_hours < 1 {
                return Err(CliError::BadHubFlag {
                    flag: "--token-duration-hours",
                    reason: format!(
                        "{} is not a number of hours of at least 1",
                        a.token_duration_hours
                    ),
                });
            }
            let hub = member_secret::hub_address(&s.cluster, a.server.as_deref())?;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            // The space must exist (exit 3 otherwise) and be readable.
            let api: Api<IdSpace> = Api::namespaced(client.clone(), &ns);
            store::read(&api, &ns, &s.space).await?;
            let duration = a.token_duration_hours.saturating_mul(3600);
            let (token, expires) =
                setup::add_member(&client, (&s.space, &ns), name.as_str(), duration).await?;
            let account = format!("{MEMBER_ACCOUNT_PREFIX}{name}");
            eprintln!(
                "member {name}: serviceaccount {ns}/{account} bound to role {} (get, list, watch, update of idspace {}); its token expires at {expires}. Apply the Secret below in the member cluster (kubectl apply -f -) and name it in the IdSpaceMembership's hubSecret; deleting the serviceaccount on the hub revokes the member.",
                setup::MEMBER_ROLE,
                s.space
            );
            let secret = member_secret::member_secret(
                &hub,
                (&s.space, &account),
                &token,
                &a.member_namespace,
            );
            render(format, &secret)
        }
        HubCommand::Join(a) => {
            let secret = a
                .hub_secret
                .clone()
                .unwrap_or_else(|| member_secret::secret_name(&a.space));
            let spec = join::spec(
                &a.sequence,
                &a.member,
                (&a.space, &a.space_namespace),
                &secret,
            )?;
            let (client, ns) = cluster::connect(&a.cluster).await?;
            render(format, &join::join(&client, &ns, spec).await?)
        }
        HubCommand::Recover(a) => {
            let s = &a.space;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            let at = (s.space.as_str(), ns.as_str());
            let api: Api<IdSpace> = Api::namespaced(client.clone(), &ns);
            let members = segment_read::member_clusters(a);
            if store::read(&api, &ns, &s.space).await?.is_segment() {
                // Every member cluster is read before the hub is written (rule 22).
                let reached = segment_read::reach(&members, at).await?;
                let mut report = store::change(&client, at, a.dry_run, |r| {
                    segment::recover(at, &r.object.spec, &reached, a.above)
                })
                .await?;
                report.dry_run = a.dry_run;
                return render(format, &report);
            }
            if !members.is_empty() || a.above.is_some() {
                return Err(CliError::BadHubFlag {
                    flag: "--member-context, --member-kubeconfig, --above",
                    reason: format!(
                        "idspace {ns}/{} hands out blocks, not counter ranges: its recovery \
                         needs no member cluster (leave these flags out)",
                        s.space
                    ),
                });
            }
            let mut report = store::change(&client, at, a.dry_run, |r| {
                let (space, registry) = r.blocks()?;
                Ok(change::recover(
                    at,
                    &r.object.spec,
                    space,
                    registry,
                    a.skew_seconds,
                    now_ms,
                ))
            })
            .await?;
            report.dry_run = a.dry_run;
            render(format, &report)
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod setup_tests;

#[cfg(test)]
mod segment_tests;
