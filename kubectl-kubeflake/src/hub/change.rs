//! `hub forget` and `hub recover`: the registry's own transitions (`Registry::forget`,
//! `Registry::recover_after_restore` in the API crate), applied to the IdSpace as read,
//! and what they change, for people and scripts. Pure: the write (a compare-and-swap
//! `replace`) is [`super::store`]'s.

use kubeflake_crds::Tick;
use kubeflake_crds::id_space::{BlockState, IdSpaceSpec, MemberId, Registry, Space};
use serde::Serialize;

use super::view::TickTime;
use crate::error::CliError;
use crate::output::{Report, fields, table};

/// A block that changes hands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    pub index: u32,
    pub term: u64,
    /// The floor before, and after: the bound the hub recorded (never lower).
    pub old_floor: u64,
    pub new_floor: TickTime,
}

/// What `hub forget` did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForgetReport {
    pub space: String,
    pub namespace: String,
    pub member: String,
    pub id: String,
    pub dry_run: bool,
    pub revision_before: u64,
    pub revision_after: u64,
    pub handed_back: Vec<HandBack>,
    /// A Segment space's member: it held no blocks ([`super::segment::forget`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub segment: bool,
}

/// What `hub recover` did (or would do).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoverReport {
    pub space: String,
    pub namespace: String,
    pub dry_run: bool,
    pub revision_before: u64,
    pub revision_after: u64,
    /// Blocks that were held and are now free.
    pub freed: Vec<u32>,
    /// The lowest floor of any block after recovery: no member issues at or below it
    /// in a block it claims from now on.
    pub lowest_floor: TickTime,
    /// Members kept (they claim again).
    pub members: usize,
}

/// The member named `who` (its name, else its cluster ID).
pub fn find_member(
    registry: &Registry,
    who: &str,
    (space, namespace): (&str, &str),
) -> Result<MemberId, CliError> {
    registry
        .members()
        .find(|(id, m)| m.name.as_str() == who || id.as_str() == who)
        .map(|(id, _)| id.clone())
        .ok_or_else(|| {
            let names: Vec<String> = registry
                .members()
                .map(|(_, m)| m.name.to_string())
                .collect();
            CliError::UnknownMember {
                member: who.to_string(),
                space: format!("{namespace}/{space}"),
                name: space.to_string(),
                namespace: namespace.to_string(),
                known: if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                },
            }
        })
}

/// The spec with `registry` stored in it, everything else as read.
fn with_registry(spec: &IdSpaceSpec, registry: &Registry) -> IdSpaceSpec {
    let mut next = spec.clone();
    next.registry = registry.to_record();
    next
}

/// Forgets `who` with [`Registry::forget`]: the spec to write and the report.
pub fn forget(
    at: (&str, &str),
    spec: &IdSpaceSpec,
    space: &Space,
    registry: &Registry,
    who: &str,
    now_ms: u64,
) -> Result<(IdSpaceSpec, ForgetReport), CliError> {
    let id = find_member(registry, who, at)?;
    let name = registry
        .member(&id)
        .map(|m| m.name.to_string())
        .unwrap_or_default();
    let next = registry.forget(&id).map_err(CliError::Registry)?;
    let timebase = space.sequence().timebase;
    let handed_back = space
        .blocks()
        .filter_map(|b| match (registry.block(b), next.block(b)) {
            (BlockState::Held(c), after) if c.owner() == &id => Some(HandBack {
                index: b.get(),
                term: c.term(),
                old_floor: c.floor().0,
                new_floor: TickTime::new(&timebase, after.floor(), now_ms),
            }),
            _ => None,
        })
        .collect();
    let report = ForgetReport {
        space: at.0.to_string(),
        namespace: at.1.to_string(),
        member: name,
        id: id.to_string(),
        dry_run: false,
        revision_before: registry.revision(),
        revision_after: next.revision(),
        handed_back,
        segment: false,
    };
    Ok((with_registry(spec, &next), report))
}

/// Recovers a restored registry with [`Registry::recover_after_restore`].
pub fn recover(
    at: (&str, &str),
    spec: &IdSpaceSpec,
    space: &Space,
    registry: &Registry,
    skew_secs: u64,
    now_ms: u64,
) -> (IdSpaceSpec, RecoverReport) {
    let timebase = space.sequence().timebase;
    let now = timebase.tick_at(now_ms).unwrap_or(Tick(0));
    let skew = timebase.ticks_in_ms(skew_secs.saturating_mul(1000));
    let next = registry.recover_after_restore(space, now, skew);
    let freed = space
        .blocks()
        .filter(|b| matches!(registry.block(*b), BlockState::Held(_)))
        .map(|b| b.get())
        .collect();
    let lowest = space
        .blocks()
        .map(|b| next.block(b).floor())
        .min()
        .unwrap_or(Tick(0));
    let report = RecoverReport {
        space: at.0.to_string(),
        namespace: at.1.to_string(),
        dry_run: false,
        revision_before: registry.revision(),
        revision_after: next.revision(),
        freed,
        lowest_floor: TickTime::new(&timebase, lowest, now_ms),
        members: next.members().count(),
    };
    (with_registry(spec, &next), report)
}

fn done(dry_run: bool) -> &'static str {
    if dry_run { "would be" } else { "was" }
}

impl Report for ForgetReport {
    fn table(&self) -> String {
        if self.segment {
            return format!(
                "member {} ({}) {} forgotten in Segment idspace {}/{} (revision {} -> {}); it held \
                 no blocks. If it still runs, its next contact finds no entry: it gives up the \
                 ranges its counter holds (a gap, never a value twice) and makes its entry again\n",
                self.member,
                self.id,
                done(self.dry_run),
                self.namespace,
                self.space,
                self.revision_before,
                self.revision_after,
            );
        }
        let mut out = format!(
            "member {} ({}) {} forgotten in idspace {}/{} (revision {} -> {}); {} block(s) \
             handed back, each with its floor at its bound:\n",
            self.member,
            self.id,
            done(self.dry_run),
            self.namespace,
            self.space,
            self.revision_before,
            self.revision_after,
            self.handed_back.len()
        );
        if !self.handed_back.is_empty() {
            let rows: Vec<Vec<String>> = self
                .handed_back
                .iter()
                .map(|h| {
                    vec![
                        h.index.to_string(),
                        h.term.to_string(),
                        h.old_floor.to_string(),
                        format!("{} {}", h.new_floor.tick, h.new_floor.cell()),
                    ]
                })
                .collect();
            out.push_str(&table(&["BLOCK", "TERM", "OLD FLOOR", "NEW FLOOR"], &rows));
        }
        out
    }
}

impl Report for RecoverReport {
    fn table(&self) -> String {
        fields(&[
            ("IDSPACE", format!("{}/{}", self.namespace, self.space)),
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
                "FREED",
                format!("{} block(s) that were held", self.freed.len()),
            ),
            (
                "LOWEST FLOOR",
                format!("{} {}", self.lowest_floor.tick, self.lowest_floor.cell()),
            ),
            ("MEMBERS KEPT", self.members.to_string()),
        ])
    }
}
