//! The blue/green move of e2e/tests/id_space_clusters.rs (docs/design/2026-11-29-multicluster.md,
//! "Blue/green"): a client's requests move from blue's sidecar to green's; blue's pods
//! drain; blue leaves by the deletion of its IdSpaceMembership, whose finalizer
//! (`kubeflake.io/id-space-blocks`, rule 18, operator/src/hub/leave.rs) holds it until
//! blue's operator has given each of its blocks back on the hub with the floor at its bound.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use kubeflake_crds::id_space::IdSpaceMembership;

use crate::clusters_support::moving_client::MovingClient;
use crate::clusters_support::{LIMIT, Member, SEQUENCE, bounds_of};
use crate::hub_support::Hub;
use crate::operator_support::{all_assigned, eventually};

/// IDs the client must get from green before blue's pods drain.
const FROM_GREEN: usize = 500;

/// Moves `client` from blue to green's first sidecar, drains blue (its Collectors and
/// sidecars stopped) and deletes its membership; waits until the finalizer let it go.
/// Returns blue's blocks as released: (index, the bound the hub recorded for blue before
/// it left, the floor its release set), each floor at least that bound.
pub async fn move_drain_and_leave(
    hub: &Hub,
    blue: &mut Member,
    green: &Member,
    client: &MovingClient,
) -> Result<Vec<(i64, i64, i64)>> {
    let held = bounds_of(&hub.registry().await?, &blue.id);
    ensure!(held.len() == 2, "blue holds two blocks: {held:?}");
    let to = green.serving.first().context("green serves")?;
    client.switch(green.name, to.sidecar.port);
    eventually(LIMIT, "the client served by green", || async {
        Ok((client.count_from(green.name) > FROM_GREEN).then_some(()))
    })
    .await?;
    blue.finish();
    Api::<IdSpaceMembership>::namespaced(blue.ns.client.clone(), &blue.ns.name)
        .delete(SEQUENCE, &DeleteParams::default())
        .await
        .context("deleting blue's IdSpaceMembership")?;
    let memberships = Api::<IdSpaceMembership>::namespaced(blue.ns.client.clone(), &blue.ns.name);
    eventually(
        LIMIT,
        "blue's membership gone (its blocks released)",
        || async { Ok(memberships.get_opt(SEQUENCE).await?.is_none().then_some(())) },
    )
    .await
    .with_context(|| blue.log())?;
    let registry = hub.registry().await?;
    held.iter()
        .map(|(index, bound)| {
            let block = registry
                .blocks
                .iter()
                .find(|b| b.index == *index)
                .with_context(|| format!("blue's block {index} is listed"))?;
            ensure!(
                block.owner.is_none() && block.floor >= *bound,
                "blue's block {index} released with its floor at least blue's bound {bound}: \
                 owner {:?}, floor {}",
                block.owner,
                block.floor
            );
            Ok((*index, *bound, block.floor))
        })
        .collect()
}

impl Member {
    /// Waits up to `limit` until each of `pods` (created already) holds a slot; returns
    /// them with their slots.
    pub async fn assigned(&self, pods: Vec<Pod>, limit: Duration) -> Result<Vec<(Pod, u32)>> {
        let uids: Vec<String> = pods.iter().filter_map(|p| p.uid()).collect();
        let slots = all_assigned(&self.ns, SEQUENCE, &uids, limit)
            .await
            .with_context(|| self.log())?;
        pods.into_iter()
            .map(|p| {
                let slot = slots.get(&p.uid().unwrap_or_default()).copied();
                Ok((p, slot.context("an assigned pod has a slot")?))
            })
            .collect()
    }
}
