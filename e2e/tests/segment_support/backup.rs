//! A Segment hub's IdSpace restored from a backup (docs/safety.md rule 22, e2e
//! `id_space_segment`): the object kept as a backup tool keeps it, restored as one
//! restores it (deleted, then created from the copy without its UID, resourceVersion or
//! other server-set metadata), what each member holds (what `kubectl kubeflake hub
//! recover` must raise the counter above), and the documented step after a recovery of a
//! re-created IdSpace: the membership's `status.idSpaceUid` removed. A member issues from
//! ranges taken after the backup sooner than its load alone would take it there (ranges
//! last an hour at the claim rate): [`issue_above`] asks one of its sidecars for values
//! `after` the end of the range in use (docs/api.md), as a client passing an ID along does.

use anyhow::{Context, Result, ensure};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubeflake_crds::id_space::{IdSpace, IdSpaceMembership};
use serde_json::json;

use super::{LIMIT, Member, counter};
use crate::hub_support::{Hub, SEQUENCE, SPACE};
use crate::operator_support::eventually;
use crate::sidecar_support::get;

/// The space's counter, `spec.segment.next` (0 before the first take).
pub fn space_next(space: &IdSpace) -> u64 {
    space
        .spec
        .segment
        .as_ref()
        .map_or(0, |s| u64::try_from(s.next).unwrap_or(0))
}

/// The hub's IdSpace as a backup tool keeps it: the object as read.
pub async fn backup(hub: &Hub) -> Result<IdSpace> {
    Ok(hub.spaces().get(SPACE).await?)
}

/// Restores the hub's IdSpace from `kept` as a backup tool restores an object: the live one
/// deleted, then created from the copy with its name, labels and annotations only (no
/// UID, resourceVersion, creation time or managed fields: the API server sets new ones).
/// Done by the hub's administrator, whom the hub's admission policy does not hold.
pub async fn restore(hub: &Hub, kept: &IdSpace) -> Result<()> {
    let spaces = hub.spaces();
    spaces.delete(SPACE, &DeleteParams::default()).await?;
    eventually(LIMIT, "the IdSpace deleted for the restore", || async {
        Ok(spaces.get_opt(SPACE).await?.is_none().then_some(()))
    })
    .await?;
    let mut restored = IdSpace::new(SPACE, kept.spec.clone());
    restored.metadata = ObjectMeta {
        name: kept.metadata.name.clone(),
        labels: kept.metadata.labels.clone(),
        annotations: kept.metadata.annotations.clone(),
        ..ObjectMeta::default()
    };
    spaces.create(&PostParams::default(), &restored).await?;
    Ok(())
}

/// The largest value `m` collected so far (0 before the first).
pub fn highest_issued(m: &Member) -> u64 {
    m.collectors
        .iter()
        .filter_map(|c| {
            let data = c.data.lock().ok()?;
            data.segments.iter().flatten().max().copied()
        })
        .max()
        .unwrap_or(0)
}

/// One past the highest value `m` may issue from, read from its own cluster: its counter
/// Lease (`next`, the limit of the range in use and of the queued one) and a range kept in
/// its membership's status (taken from the hub, not queued yet).
pub async fn holds_below(m: &Member) -> Result<u64> {
    let c = counter(&m.ns).await?;
    let ranged = c
        .range
        .map_or(0, |r| r.limit.max(r.queued.map_or(0, |q| q.limit)));
    let api = Api::<IdSpaceMembership>::namespaced(m.ns.client.clone(), &m.ns.name);
    let kept = api
        .get(SEQUENCE)
        .await?
        .status
        .and_then(|s| s.segment_range)
        .map_or(0, |r| u64::try_from(r.end).unwrap_or(0));
    Ok(c.next.max(ranged).max(kept))
}

/// After `hub recover` of a re-created IdSpace: `status.idSpaceUid` removed from `m`'s
/// membership by its cluster's administrator (what the refusal's message says to do), so
/// that its operator takes the new space's UID at its next contact.
pub async fn forget_space_uid(m: &Member) -> Result<()> {
    let api = Api::<IdSpaceMembership>::namespaced(m.ns.client.clone(), &m.ns.name);
    // A merge patch's null removes the field.
    let remove = json!({"status": {"idSpaceUid": null}});
    api.patch_status(SEQUENCE, &PatchParams::default(), &Patch::Merge(&remove))
        .await
        .with_context(|| format!("{}: removing status.idSpaceUid", m.name))?;
    Ok(())
}

/// Until `m`'s counter claims above `value`: each time a range is queued behind the one in
/// use, one of its sidecars asked for `/id?after=<the range's last value>` (its claim moves
/// the counter into the queued range, and its operator takes the next range from the hub).
/// The values those requests returned, to be checked with the rest.
pub async fn issue_above(m: &Member, value: u64) -> Result<Vec<u64>> {
    let port = m.sidecars.first().context("a sidecar to ask")?.port;
    let mut issued = Vec::new();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let c = counter(&m.ns).await?;
        if c.next > value {
            return Ok(issued);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{}: its counter at {} after {LIMIT:?}, not above {value}\n{}",
            m.name,
            c.next,
            m.log()
        );
        let in_use = c.range.and_then(|r| r.in_use(c.next));
        if let Some((limit, Some(_))) = in_use {
            let target = format!("/id?after={}", limit - 1);
            let (status, body) = tokio::task::spawn_blocking(move || get(port, &target)).await??;
            if status == 200 {
                issued.push(body.trim().parse()?);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// What the restore phase of e2e `id_space_segment` saw: the backup's counter, what both members held and
/// had issued when `hub recover` ran, and the counter it wrote.
pub struct Recovered {
    /// What the first member's sidecar returned when asked for values `after` its ranges.
    pub driven: Vec<u64>,
    pub backup_next: u64,
    pub held: u64,
    pub issued: u64,
    pub next_after: u64,
}

impl Recovered {
    /// `hub recover` raised the counter above every value both members held and issued.
    /// Checked after the duplicates, so that a recovery too low shows what it costs first.
    pub fn check(&self) -> Result<()> {
        let Recovered {
            backup_next,
            held,
            issued,
            next_after,
            ..
        } = self;
        ensure!(
            next_after >= held && next_after > issued && next_after > backup_next,
            "hub recover raised segment.next from the backup's {backup_next} to {next_after}, \
             not above every range the members hold (below {held}) and every value they \
             issued (up to {issued})"
        );
        Ok(())
    }
}
