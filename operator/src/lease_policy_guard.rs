//! The operator fails closed without the Lease policy (docs/safety.md rule 14).
//!
//! The API server's ValidatingAdmissionPolicy and its binding (`charts/kubeflake/templates/
//! lease-policy.yaml`, spec from `kubeflake_crds::lease_policy`) are what keeps every
//! kubeflake Lease to the protocol: without them RBAC alone lets every account bound to
//! the sidecar Role write every kubeflake Lease of the namespace. So the operator reads
//! both by name every [`CHECK_EVERY`] ([`keep_checking`]), judges them against what this
//! release generates ([`judge`]), and publishes the result ([`LeasePolicyGate`]). While
//! either is missing, being deleted, or not what the chart installs (or cannot be read),
//! a pass of a live sequence hands out nothing (`controller/policy_gate.rs`): no slot is assigned or
//! reclaimed and no claimant is listed on a segment counter or strict oracle Lease;
//! holders keep their slots (the sidecars renew by themselves). The sequence says why
//! (`Ready=False LeasePolicyMissing`, a Warning Event), and so do the log and the gauge
//! `kubeflake_operator_lease_policy_missing` (the chart's alert
//! `KubeflakeLeasePolicyMissing`). Deletion goes on (it assigns nothing).
//!
//! Only the chart's explicit `leasePolicy.enabled=false` with
//! `leasePolicy.unsafeAssignWithoutPolicy=true` runs the operator with
//! `--unsafe-without-lease-policy`: then nothing is checked ([`PolicyState::NotRequired`]).
//!
//! What this cannot do: whoever may delete the policy acts before the next check (at most
//! [`CHECK_EVERY`]), and the policy's own content is trusted once it equals what this
//! release generates; the user name the chart fills in is checked to be a plain name, not
//! to be this operator's.

mod judge;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{Api, Client};
use tokio::sync::watch;

pub use self::judge::{Missing, PolicyNames, judge};
use crate::metrics::Metrics;

/// How often the policy and its binding are read.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// What the operator knows of the Lease policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyState {
    /// Not read yet: nothing is handed out.
    Unchecked,
    /// The policy and its binding are what the chart installs.
    InForce,
    /// Why they are not: nothing is handed out.
    Missing(Missing),
    /// `--unsafe-without-lease-policy`: not checked, everything handed out.
    NotRequired,
}

impl PolicyState {
    /// Why nothing may be handed out now; `None` when it may.
    pub fn refusal(&self) -> Option<String> {
        match self {
            PolicyState::InForce | PolicyState::NotRequired => None,
            PolicyState::Unchecked => {
                Some("the operator has not read the Lease policy and its binding yet".into())
            }
            PolicyState::Missing(why) => Some(why.to_string()),
        }
    }
}

/// The controller's view of the [`PolicyState`]: cheap to clone and to ask.
#[derive(Debug, Clone)]
pub struct LeasePolicyGate {
    state: watch::Receiver<PolicyState>,
}

impl LeasePolicyGate {
    /// A gate that always shows `state`.
    pub fn fixed(state: PolicyState) -> LeasePolicyGate {
        let (_, state) = watch::channel(state);
        LeasePolicyGate { state }
    }

    /// A gate fed by `sender` (see [`keep_checking`]).
    pub fn new(initial: PolicyState) -> (watch::Sender<PolicyState>, LeasePolicyGate) {
        let (sender, state) = watch::channel(initial);
        (sender, LeasePolicyGate { state })
    }

    pub fn state(&self) -> PolicyState {
        self.state.borrow().clone()
    }

    /// One item each time the state changes (for `Controller::reconcile_all_on`), so that
    /// held-back sequences are passed again at once when the policy is back.
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let mut state = self.state.clone();
        state.mark_unchanged();
        futures::stream::unfold(state, |mut state| async move {
            state.changed().await.ok()?;
            state.mark_unchanged();
            Some(((), state))
        })
    }
}

impl Default for LeasePolicyGate {
    /// Closed until a guard publishes a state. In this crate's unit tests it is open, so
    /// that the controller's tests of other rules need no policy (the guard's own tests
    /// close it).
    fn default() -> LeasePolicyGate {
        if cfg!(test) {
            LeasePolicyGate::fixed(PolicyState::NotRequired)
        } else {
            LeasePolicyGate::fixed(PolicyState::Unchecked)
        }
    }
}

/// Reads the policy and the binding named in `names` once, and judges them.
pub async fn check(client: &Client, names: &PolicyNames) -> PolicyState {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let unreadable = |what: String, e: kube::Error| {
        PolicyState::Missing(Missing::Unreadable {
            what,
            error: e.to_string(),
        })
    };
    let policy = match policies.get_opt(&names.policy).await {
        Ok(policy) => policy,
        Err(e) => {
            let what = format!("ValidatingAdmissionPolicy {:?}", names.policy);
            return unreadable(what, e);
        }
    };
    let binding = match bindings.get_opt(&names.binding).await {
        Ok(binding) => binding,
        Err(e) => {
            let what = format!("ValidatingAdmissionPolicyBinding {:?}", names.binding);
            return unreadable(what, e);
        }
    };
    match judge(names, policy.as_ref(), binding.as_ref()) {
        None => PolicyState::InForce,
        Some(why) => PolicyState::Missing(why),
    }
}

/// Checks every [`CHECK_EVERY`] and publishes each new state to `sender` (logged, and in
/// the gauge), until the gate's every receiver is gone.
pub async fn keep_checking(
    client: Client,
    names: PolicyNames,
    sender: watch::Sender<PolicyState>,
    metrics: Arc<Metrics>,
) {
    loop {
        let state = check(&client, &names).await;
        metrics
            .lease_policy_missing
            .set(i64::from(matches!(state, PolicyState::Missing(_))));
        let changed = sender.send_if_modified(|current| {
            if *current == state {
                return false;
            }
            *current = state.clone();
            true
        });
        if changed {
            match &state {
                PolicyState::InForce => {
                    tracing::info!(policy = %names.policy, binding = %names.binding, "the Lease policy is in force: slots and claims are handed out")
                }
                PolicyState::Missing(why) => {
                    tracing::error!(policy = %names.policy, binding = %names.binding, reason = %why, "no slot is assigned and no claimant listed until the Lease policy is in force")
                }
                PolicyState::Unchecked | PolicyState::NotRequired => {}
            }
        }
        if sender.is_closed() {
            return;
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// The running guard: [`keep_checking`] until dropped.
pub struct Guard(Option<tokio::task::JoinHandle<()>>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// The gate the controller consults, fed by a guard that checks `names` (closed until the
/// first check); with `None` (`--unsafe-without-lease-policy`), a gate always open.
pub fn start(
    client: &Client,
    names: Option<PolicyNames>,
    metrics: Arc<Metrics>,
) -> (LeasePolicyGate, Guard) {
    let Some(names) = names else {
        tracing::warn!(
            "--unsafe-without-lease-policy: slots and claims are handed out whether or not the \
             Lease policy is in force; without it any account the sidecar Role is bound to may \
             write every kubeflake Lease of its namespace (docs/safety.md rule 14)"
        );
        return (
            LeasePolicyGate::fixed(PolicyState::NotRequired),
            Guard(None),
        );
    };
    let (sender, gate) = LeasePolicyGate::new(PolicyState::Unchecked);
    let task = tokio::spawn(keep_checking(client.clone(), names, sender, metrics));
    (gate, Guard(Some(task)))
}
