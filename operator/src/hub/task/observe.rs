//! What the membership task tells its metrics (`crate::metrics::hub`): the task's own types
//! (the contact's outcome, the decision, the hub client's errors) mapped onto the metrics'
//! inputs, so that `task.rs` calls in with a line each and the metrics module knows nothing
//! of this one.

use kubeflake_crds::id_space::MemberId;
use kubeflake_crds::id_space::membership::IdSpaceMembership;
use kubeflake_crds::id_space::registry::Registry;
use kubeflake_crds::id_space::space::Space;

use super::Kept;
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

/// What one contact of `membership` found: its Ready reason and, when it went through,
/// what it holds; a registry gone back is counted.
pub fn contacted(
    metrics: &HubMetrics,
    membership: &IdSpaceMembership,
    outcome: &Result<Kept, Refusal>,
) {
    let member = Member::of(membership);
    match outcome {
        Ok(kept) => metrics.joined(&member, Holding::of(&kept.copy, &kept.space, kept.in_use)),
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
