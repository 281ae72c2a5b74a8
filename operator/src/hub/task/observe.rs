//! What the membership task tells its metrics (`crate::metrics::hub`): the task's own types
//! (the contact's outcome, the decision, the hub client's errors) mapped onto the metrics'
//! inputs, so that `task.rs` calls in with a line each and the metrics module knows nothing
//! of this one.

use kubeflake_crds::id_space::MemberId;
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::registry::Registry;
use kubeflake_crds::id_space::space::{Space, SpaceSequence};

use super::Contacted;
use crate::hub::conditions::Reason;
use crate::hub::connect::HubError;
use crate::hub::step::{Decision, Refusal};
use crate::metrics::hub::{
    CallError, CallOutcome, Holding, HubMetrics, Member, WentBack, reclaims,
};

impl CallError for HubError {
    fn outcome(&self) -> CallOutcome {
        match self {
            e if e.is_conflict() => CallOutcome::Conflict,
            HubError::Call {
                code: Some(code), ..
            } if (400..500).contains(code) => CallOutcome::Refused,
            _ => CallOutcome::Unreachable,
        }
    }
}

/// The memberships listed now: the series of the others go.
pub fn retain(metrics: &HubMetrics, memberships: &[IdSpaceMembership]) {
    metrics.retain(&memberships.iter().map(Member::of).collect());
}

/// What the copy stored in `membership`'s status holds, for `sequence` while pods hold
/// `in_use` slots: shown before the contact reaches the hub, so that the nearest bound is
/// there (and `KubeflakeIdSpaceBoundNear` can fire) when the first contact after a start
/// cannot reach it. Nothing without a readable copy.
pub fn stored(
    metrics: &HubMetrics,
    membership: &IdSpaceMembership,
    sequence: SpaceSequence,
    in_use: u64,
) {
    let Some(status) = membership.status.as_ref() else {
        return;
    };
    let Some(Ok(space)) = status.space(sequence) else {
        return;
    };
    match status.local_record(&space) {
        Ok(copy) if copy.grants().next().is_some() => {
            metrics.held(&Member::of(membership), Holding::of(&copy, &space, in_use));
        }
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(membership = %membership.metadata.name.as_deref().unwrap_or_default(), error = %e, "the stored copy does not read: its holdings wait for a contact");
        }
    }
}

/// What one contact of `membership` found: its Ready reason and, when it went through,
/// what it holds; a registry gone back is counted.
pub fn contacted(
    metrics: &HubMetrics,
    membership: &IdSpaceMembership,
    outcome: &Result<Contacted, Refusal>,
) {
    let member = Member::of(membership);
    match outcome {
        Ok(Contacted::Blocks(kept)) => {
            metrics.joined(&member, Holding::of(&kept.copy, &kept.space, kept.in_use))
        }
        // A Segment space holds ranges, not blocks: the segment path showed them.
        Ok(Contacted::Segment(kept)) => {
            if kept.went_back.is_some() {
                metrics.went_back(&member, WentBack::Copy);
            }
            metrics.segment_joined(&member, kept.tolerance_secs, kept.claim_rate)
        }
        Err(refusal) => {
            if refusal.reason == Reason::HubWentBack {
                metrics.went_back(&member, WentBack::Registry);
            }
            metrics.refused(&member, refusal.reason.as_str());
        }
    }
}

/// What one decision of a contact shows: a copy gone back is counted; returns the reclaims
/// its write makes, to count once the hub took it.
pub fn decided(
    metrics: &HubMetrics,
    member: &Member,
    space: &Space,
    registry: &Registry,
    decision: &Decision,
    this: &MemberId,
) -> u64 {
    if decision.local_went_back {
        metrics.went_back(member, WentBack::Copy);
    }
    decision
        .write
        .as_ref()
        .map_or(0, |next| reclaims(space, registry, next, this))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::id_space::membership::{
        GrantRecord, IdSpaceMembershipSpec, IdSpaceMembershipStatus, SpaceRef,
    };
    use kubeflake_crds::id_space::{IdSpaceSpec, SpaceSequenceSpec};

    /// A membership whose stored copy holds block 2 up to tick `bound` (default layout,
    /// 1 ms ticks), or no copy.
    fn membership(bound: Option<i64>) -> (IdSpaceMembership, SpaceSequence) {
        let space = IdSpaceSpec::new(SpaceSequenceSpec::default(), 64)
            .space()
            .expect("a space");
        let mut m = IdSpaceMembership::new(
            "orders-in-space",
            IdSpaceMembershipSpec {
                sequence: "orders".into(),
                member_name: "prod".into(),
                space: SpaceRef {
                    namespace: "kubeflake-space-orders".into(),
                    name: "orders".into(),
                },
                hub_secret: "kubeflake-hub-orders".into(),
            },
        );
        m.metadata.namespace = Some("shop".into());
        m.status = bound.map(|bound| {
            let mut status = IdSpaceMembershipStatus {
                grants: vec![GrantRecord {
                    block: 2,
                    term: 1,
                    floor: 0,
                    bound,
                }],
                ..Default::default()
            };
            status.keep_space(&space);
            status
        });
        (m, *space.sequence())
    }

    /// An operator that starts while its hub is away must still show the nearest bound of
    /// the blocks its cluster holds, or `KubeflakeIdSpaceBoundNear` cannot fire before
    /// the member stops issuing at that bound.
    #[test]
    fn the_stored_copy_shows_its_holdings_and_bound_before_any_contact_goes_through() {
        let metrics = crate::metrics::Metrics::new();
        let (m, sequence) = membership(Some(1_000_000));
        stored(&metrics.hub, &m, sequence, 3);
        metrics.hub.refused(&Member::of(&m), "HubUnreachable");
        let rendered = metrics.render_at(0);
        let series = |name: &str| {
            rendered
                .lines()
                .find(|l| l.starts_with(name) && l.contains(r#"membership="orders-in-space""#))
                .map(str::to_owned)
        };
        let bound = series("kubeflake_operator_id_space_nearest_bound_seconds{")
            .expect("the bound of the stored copy");
        // The bound passes at the start of the tick after it: 1,000,001 ms after the epoch.
        let epoch_ms = sequence.timebase.start_of(kubeflake_crds::Tick(0));
        let expected = (epoch_ms + 1_000_001) as f64 / 1000.0;
        assert!(bound.ends_with(&format!(" {expected}")), "{bound}");
        let held = series("kubeflake_operator_id_space_blocks_held{").expect("blocks held");
        assert!(held.ends_with(" 1"), "{held}");
        assert!(
            series("kubeflake_operator_id_space_ready_reason{")
                .is_some_and(|l| l.contains("HubUnreachable")),
            "{rendered}"
        );
    }

    #[test]
    fn no_stored_copy_shows_no_holdings() {
        let metrics = crate::metrics::Metrics::new();
        let (m, sequence) = membership(None);
        stored(&metrics.hub, &m, sequence, 0);
        let rendered = metrics.render_at(0);
        assert!(
            !rendered.contains("kubeflake_operator_id_space_nearest_bound_seconds{"),
            "{rendered}"
        );
    }

    /// A Segment contact that went through shows Ready `Joined`, the tolerance and the
    /// claim rate (docs/safety.md rule 22), and no blocks.
    #[test]
    fn rule22_a_segment_contact_shows_joined_the_tolerance_and_the_claim_rate() {
        let metrics = crate::metrics::Metrics::new();
        let (m, _) = membership(None);
        let kept = crate::hub::segment::Kept {
            membership: m.clone(),
            waiting: None,
            claim_rate: 250.0,
            tolerance_secs: 600,
            went_back: None,
        };
        contacted(&metrics.hub, &m, &Ok(Contacted::Segment(Box::new(kept))));
        let rendered = metrics.render_at(0);
        let has = |needle: &str| rendered.lines().any(|l| l.starts_with(needle));
        assert!(
            has("kubeflake_operator_id_space_segment_claim_rate{") && rendered.contains("} 250\n"),
            "{rendered}"
        );
        assert!(
            rendered.lines().any(|l| l
                .starts_with("kubeflake_operator_id_space_tolerance_seconds{")
                && l.ends_with(" 600")),
            "{rendered}"
        );
        assert!(
            rendered.lines().any(
                |l| l.starts_with("kubeflake_operator_id_space_ready_reason{")
                    && l.contains(r#"reason="Joined""#)
            ),
            "{rendered}"
        );
        assert!(
            !has("kubeflake_operator_id_space_blocks_held{"),
            "{rendered}"
        );
    }

    #[test]
    fn a_hub_error_is_conflict_refused_or_unreachable() {
        let call = |code: Option<u16>| HubError::Call {
            server: "https://hub".into(),
            what: "writing the IdSpace registry",
            reason: "no".into(),
            code,
        };
        assert_eq!(call(Some(409)).outcome(), CallOutcome::Conflict);
        assert_eq!(call(Some(403)).outcome(), CallOutcome::Refused);
        assert_eq!(call(Some(422)).outcome(), CallOutcome::Refused);
        assert_eq!(call(Some(503)).outcome(), CallOutcome::Unreachable);
        assert_eq!(call(None).outcome(), CallOutcome::Unreachable);
        let timeout = HubError::Timeout {
            server: "https://hub".into(),
            what: "reading the IdSpace",
        };
        assert_eq!(timeout.outcome(), CallOutcome::Unreachable);
    }
}
