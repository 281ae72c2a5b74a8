//! `hub ...`: see and steer an ID space shared by clusters, on its hub
//! (docs/design/2026-11-29-multicluster.md).
//!
//! - [`crate::cli::hub`]: the flags; [`store`]: reading the IdSpace and writing it by
//!   compare-and-swap;
//! - [`view`]: `members` and `blocks` (read-only);
//! - [`change`]: `forget` and `recover`, each the API crate's registry transition, never
//!   one of its own.

mod change;
mod store;
mod view;

use kube::api::Api;
use kubeflake_crds::id_space::IdSpace;

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
            let report = view::members((&a.space, &ns), &read.space, &read.registry, now_ms);
            render(format, &report)
        }
        HubCommand::Blocks(a) => {
            let s = &a.space;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            let api: Api<IdSpace> = Api::namespaced(client, &ns);
            let read = store::read(&api, &ns, &s.space).await?;
            let report = view::blocks(
                (&s.space, &ns),
                &read.object.spec,
                &read.space,
                &read.registry,
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
                change::forget(at, &r.object.spec, &r.space, &r.registry, &a.member, now_ms)
            })
            .await?;
            report.dry_run = a.dry_run;
            render(format, &report)
        }
        HubCommand::Recover(a) => {
            let s = &a.space;
            let (client, ns) = cluster::connect(&s.cluster).await?;
            let at = (s.space.as_str(), ns.as_str());
            let mut report = store::change(&client, at, a.dry_run, |r| {
                Ok(change::recover(
                    at,
                    &r.object.spec,
                    &r.space,
                    &r.registry,
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
