//! `hub forget` and `hub recover` on a Segment space (docs/safety.md rule 22): the space
//! hands out ranges of one counter (`spec.segment.next`), never blocks, and its members'
//! entries in the registry hold no blocks (id, name, datacenter 0, a generation). Pure:
//! the member clusters are read by [`super::segment_read`], the write is [`super::store`]'s.
//!
//! **Recover.** A hub restored from a backup has its counter back below ranges it handed
//! out after the backup: handed out again, they would repeat values. The hub cannot know
//! how far it went (a range is never taken back and carries no bound in time, unlike a
//! block), so the bound comes from where the ranges went: every membership of the space in
//! the member clusters the administrator names, its counter Lease (`next`, the limit of
//! the range in use and of the queued one) and a range kept in its status between the take
//! and the queueing. A range taken on the hub and kept nowhere was never queued, so never
//! issued from. The counter is raised above all of them (never lowered), and the revision
//! moved up by `RECOVERY_REVISION_STEP` (2^32) as for blocks, so that members accept the
//! registry again. Refused, nothing written, unless every member the registry lists was
//! found in a named cluster, every named cluster holds a membership of the space, and every
//! membership that contacted the hub has a counter to read. Members that joined after the
//! backup are not listed: naming their clusters is the administrator's part; `--above`
//! adds a value the data holds (for a member that left since and whose ranges no cluster
//! records).
//!
//! Every member entry's generation is raised by the same step: a member's generation counts
//! up by at most 1 per write, so the new one is above every generation it wrote after the
//! backup, and it never meets again a generation an older snapshot of its etcd holds (rule
//! 22's check of records that went back compares them for equality). Each member sees its
//! status apart from its entry at its next contact and gives up the ranges it holds (a
//! gap, never a value twice), then takes fresh ones above the raised counter.
//!
//! **Forget.** Removes an entry that holds nothing. A member that still runs finds no entry
//! at its next contact: its status's generation is apart from the hub's (none), so it gives
//! its counter's ranges up and makes its entry again at the new revision; the hub's counter
//! does not move, so nobody else gets those ranges: a gap, never a value twice.

use kubeflake_crds::id_space::membership::RangeRecord;
use kubeflake_crds::id_space::registry::{MAX_REVISION, RECOVERY_REVISION_STEP};
use kubeflake_crds::id_space::segment_range::COUNTER_LIMIT;
use kubeflake_crds::id_space::{IdSpaceSpec, SpaceCounterRecord};
use kubeflake_crds::segment_counter::Counter;
use serde::Serialize;

use super::change::ForgetReport;
use crate::error::CliError;
use crate::output::{Report, fields, table};

/// One membership of the space found in a member cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Held {
    /// `namespace/name` of the IdSpaceMembership.
    pub membership: String,
    /// Its `status.memberId`: the cluster ID it joined as (none: it never contacted the hub).
    pub member_id: Option<String>,
    /// One past the highest value its counter Lease may hand out (`next`, the limit of the
    /// range in use, the queued range's limit); none: no counter Lease.
    pub counter_end: Option<u64>,
    /// The end of a range kept in its status (taken on the hub, not queued yet).
    pub kept_end: Option<u64>,
}

impl Held {
    /// One past the highest value this membership may issue from.
    pub fn highest(&self) -> u64 {
        self.counter_end.max(self.kept_end).unwrap_or(0)
    }
}

/// One past the highest value a counter may hand out: its `next`, its limit and its queued
/// range's limit.
pub fn counter_end(counter: &Counter) -> u64 {
    let ranged = counter
        .range
        .map_or(0, |r| r.limit.max(r.queued.map_or(0, |q| q.limit)));
    counter.next.max(ranged)
}

/// The end of a range kept in a membership's status.
pub fn kept_end(kept: Option<&RangeRecord>) -> Option<u64> {
    kept.map(|r| u64::try_from(r.end).unwrap_or(0))
}

/// A member cluster named on the command line and the memberships of the space in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reached {
    /// The flag that named it (`--member-context NAME`, `--member-kubeconfig PATH`).
    pub cluster: String,
    pub memberships: Vec<Held>,
}

/// What `hub recover` did (or would do) on a Segment space.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentRecoverReport {
    pub space: String,
    pub namespace: String,
    pub dry_run: bool,
    pub revision_before: u64,
    pub revision_after: u64,
    /// `spec.segment.next` before and after (never lower).
    pub next_before: u64,
    pub next_after: u64,
    /// `--above`, when given.
    pub above: Option<u64>,
    pub clusters: Vec<Reached>,
    /// Member entries kept, each with its generation raised by the step.
    pub members: usize,
}

fn refused(at: (&str, &str), reason: String) -> CliError {
    CliError::SegmentRefused {
        space: format!("{}/{}", at.1, at.0),
        reason,
    }
}

/// Recovers a restored Segment space: the counter raised above every value the
/// memberships in `clusters` hold (and above `above`), the revision and every member's
/// generation moved up by [`RECOVERY_REVISION_STEP`]. Refuses when that cannot be shown
/// to cover every member the registry lists.
pub fn recover(
    at: (&str, &str),
    spec: &IdSpaceSpec,
    clusters: &[Reached],
    above: Option<u64>,
) -> Result<(IdSpaceSpec, SegmentRecoverReport), CliError> {
    let name_clusters = "name every member cluster of the space with --member-context (a \
                         context of the hub's kubeconfig) or --member-kubeconfig (a file), \
                         also clusters that joined after the backup";
    if clusters.is_empty() && above.is_none() {
        return Err(refused(
            at,
            format!(
                "the hub cannot tell how far its counter went after the backup (ranges carry no \
                 bound in time): {name_clusters}, so that the counter is raised above every \
                 range they hold"
            ),
        ));
    }
    if let Some(empty) = clusters.iter().find(|c| c.memberships.is_empty()) {
        return Err(refused(
            at,
            format!(
                "member cluster {} holds no IdSpaceMembership of this space (spec.space {}/{}): \
                 is it the right cluster? Leave it out, or name the cluster that joined",
                empty.cluster, at.1, at.0
            ),
        ));
    }
    let all: Vec<&Held> = clusters.iter().flat_map(|c| &c.memberships).collect();
    if let Some(h) = all
        .iter()
        .find(|h| h.member_id.is_some() && h.counter_end.is_none())
    {
        return Err(refused(
            at,
            format!(
                "membership {} contacted the hub but its sequence's counter Lease is missing: \
                 the values its sidecars claimed are not known. Restore the counter, or delete \
                 the membership and pass --above with the highest value your data holds",
                h.membership
            ),
        ));
    }
    let missing: Vec<String> = spec
        .registry
        .members
        .iter()
        .filter(|m| !all.iter().any(|h| h.member_id.as_deref() == Some(&m.id)))
        .map(|m| format!("{} ({})", m.name, m.id))
        .collect();
    if !missing.is_empty() {
        return Err(refused(
            at,
            format!(
                "no membership of member(s) {} was found in the clusters named: {name_clusters}. \
                 A member that left the space for good: `kubectl kubeflake hub forget` it first, \
                 and pass --above with the highest value your data holds (ranges it took after \
                 the backup are recorded nowhere else)",
                missing.join(", ")
            ),
        ));
    }
    let next_before = match spec.segment.as_ref().map_or(0, |s| s.next) {
        n if n < 0 => {
            return Err(refused(
                at,
                format!("spec.segment.next is {n}, below 0: the counter is broken"),
            ));
        }
        n => n as u64,
    };
    let wanted_above = match above {
        Some(v) if v >= COUNTER_LIMIT => {
            return Err(refused(
                at,
                format!("--above {v}: the counter cannot go beyond {COUNTER_LIMIT}"),
            ));
        }
        Some(v) => v + 1,
        None => 0,
    };
    let highest = all.iter().map(|h| h.highest()).max().unwrap_or(0);
    let next_after = next_before
        .max(highest)
        .max(wanted_above)
        .min(COUNTER_LIMIT);
    let revision_before = u64::try_from(spec.registry.revision).unwrap_or(0);
    let revision_after = revision_before
        .saturating_add(RECOVERY_REVISION_STEP)
        .min(MAX_REVISION);
    let mut next = spec.clone();
    next.segment = Some(SpaceCounterRecord {
        next: next_after as i64,
    });
    next.registry.revision = revision_after as i64;
    for m in &mut next.registry.members {
        m.generation = u64::try_from(m.generation)
            .unwrap_or(0)
            .saturating_add(RECOVERY_REVISION_STEP)
            .min(MAX_REVISION) as i64;
    }
    let report = SegmentRecoverReport {
        space: at.0.to_string(),
        namespace: at.1.to_string(),
        dry_run: false,
        revision_before,
        revision_after,
        next_before,
        next_after,
        above,
        clusters: clusters.to_vec(),
        members: next.registry.members.len(),
    };
    Ok((next, report))
}

/// Removes the entry of `who` (its name or cluster ID) from a Segment space's registry.
pub fn forget(
    at: (&str, &str),
    spec: &IdSpaceSpec,
    who: &str,
) -> Result<(IdSpaceSpec, ForgetReport), CliError> {
    let members = &spec.registry.members;
    let Some(entry) = members.iter().find(|m| m.name == who || m.id == who) else {
        let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        return Err(CliError::UnknownMember {
            member: who.to_string(),
            space: format!("{}/{}", at.1, at.0),
            name: at.0.to_string(),
            namespace: at.1.to_string(),
            known: if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
        });
    };
    if let Some(b) = spec
        .registry
        .blocks
        .iter()
        .find(|b| b.owner.as_deref() == Some(&entry.id))
    {
        return Err(refused(
            at,
            format!(
                "block {} lists member {} as its owner, but a Segment space hands out no blocks: \
                 the registry is not one this release wrote; nothing was changed",
                b.index, entry.name
            ),
        ));
    }
    let mut next = spec.clone();
    next.registry.members.retain(|m| m.id != entry.id);
    next.registry.revision = spec.registry.revision.saturating_add(1);
    let report = ForgetReport {
        space: at.0.to_string(),
        namespace: at.1.to_string(),
        member: entry.name.clone(),
        id: entry.id.clone(),
        dry_run: false,
        revision_before: u64::try_from(spec.registry.revision).unwrap_or(0),
        revision_after: u64::try_from(next.registry.revision).unwrap_or(0),
        handed_back: Vec::new(),
        segment: true,
    };
    Ok((next, report))
}

impl Report for SegmentRecoverReport {
    fn table(&self) -> String {
        let found: usize = self.clusters.iter().map(|c| c.memberships.len()).sum();
        let mut out = fields(&[
            (
                "IDSPACE",
                format!("{}/{} (Segment)", self.namespace, self.space),
            ),
            (
                "RECOVERED",
                format!(
                    "{} (revision {} -> {})",
                    if self.dry_run { "no: --dry-run" } else { "yes" },
                    self.revision_before,
                    self.revision_after
                ),
            ),
            (
                "COUNTER",
                format!(
                    "segment.next {} -> {}: above every value the {found} membership(s) in {} \
                     member cluster(s) hold{}",
                    self.next_before,
                    self.next_after,
                    self.clusters.len(),
                    self.above
                        .map_or(String::new(), |v| format!(", and above {v} (--above)"))
                ),
            ),
            (
                "MEMBERS KEPT",
                format!(
                    "{} (generations raised: each gives up the ranges it holds at its next \
                     contact, a gap, and takes fresh ones)",
                    self.members
                ),
            ),
        ]);
        let rows: Vec<Vec<String>> = self
            .clusters
            .iter()
            .flat_map(|c| {
                c.memberships.iter().map(|h| {
                    vec![
                        c.cluster.clone(),
                        h.membership.clone(),
                        h.member_id.clone().unwrap_or_else(|| "-".into()),
                        h.highest().to_string(),
                    ]
                })
            })
            .collect();
        if !rows.is_empty() {
            out.push('\n');
            out.push_str(&table(
                &["CLUSTER", "MEMBERSHIP", "MEMBER ID", "HOLDS BELOW"],
                &rows,
            ));
        }
        out
    }
}
