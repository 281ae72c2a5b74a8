//! Whether the Lease policy and its binding, as read from the API server, are what the chart
//! installs. Pure: [`judge`] takes what was read and says why not, if not.
//!
//! The policy is compared with the one this release generates
//! (`kubeflake_crds::lease_policy`), field by field after undoing the API server's defaults:
//! the same match rules and conditions, the same validations, the same variables, of which
//! only the two the chart fills in (the operator's user name, the exempt groups) may differ,
//! and only by a user name without quotes and a list of plain group names. The binding must
//! name that policy, deny (not only warn or audit), and cover every namespace the operator
//! watches.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubeflake_crds::lease_policy::{self, EXEMPT_GROUPS_PLACEHOLDER, OPERATOR_PLACEHOLDER};

/// Which policy and binding to look for (the chart names both `<fullname>-leases`), and
/// which namespace the operator watches (`None`: all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyNames {
    pub policy: String,
    pub binding: String,
    pub namespace: Option<String>,
}

/// Why the operator holds back: each message names the object and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error(
        "the ValidatingAdmissionPolicy {name:?} does not exist; `helm upgrade` with \
         leasePolicy.enabled=true installs it again (Kubernetes 1.30 or later)"
    )]
    PolicyNotFound { name: String },
    #[error(
        "the ValidatingAdmissionPolicy {name:?} is being deleted; `helm upgrade` installs it again"
    )]
    PolicyDeleting { name: String },
    #[error(
        "the ValidatingAdmissionPolicy {name:?} is not the one this release installs ({what}); \
         `helm upgrade` writes it back"
    )]
    PolicyChanged { name: String, what: String },
    #[error(
        "the ValidatingAdmissionPolicyBinding {name:?} does not exist, so the policy is not in \
         force; `helm upgrade` with leasePolicy.enabled=true installs it again"
    )]
    BindingNotFound { name: String },
    #[error(
        "the ValidatingAdmissionPolicyBinding {name:?} is being deleted; `helm upgrade` installs it again"
    )]
    BindingDeleting { name: String },
    #[error(
        "the ValidatingAdmissionPolicyBinding {name:?} binds the policy {found:?}, not {policy:?}; \
         `helm upgrade` writes it back"
    )]
    BindingElsewhere {
        name: String,
        found: String,
        policy: String,
    },
    #[error(
        "the ValidatingAdmissionPolicyBinding {name:?} has validationActions {actions:?} \
         without Deny, so nothing is refused; `helm upgrade` writes it back"
    )]
    BindingDoesNotDeny { name: String, actions: Vec<String> },
    #[error(
        "the ValidatingAdmissionPolicyBinding {name:?} does not cover every Lease the operator \
         manages ({what}); `helm upgrade` writes it back"
    )]
    BindingNarrowed { name: String, what: String },
    #[error(
        "cannot read the {what}: {error}; the operator needs get on it (the chart's ClusterRole \
         grants it) and Kubernetes 1.30 or later"
    )]
    Unreadable { what: String, error: String },
}

/// `None` when `policy` and `binding` (as read; `None`: not found) are what the chart
/// installs for `names`; otherwise the first reason why not.
pub fn judge(
    names: &PolicyNames,
    policy: Option<&ValidatingAdmissionPolicy>,
    binding: Option<&ValidatingAdmissionPolicyBinding>,
) -> Option<Missing> {
    let Some(policy) = policy else {
        return Some(Missing::PolicyNotFound {
            name: names.policy.clone(),
        });
    };
    if policy.metadata.deletion_timestamp.is_some() {
        return Some(Missing::PolicyDeleting {
            name: names.policy.clone(),
        });
    }
    if let Err(what) = same_policy(policy.spec.as_ref()) {
        return Some(Missing::PolicyChanged {
            name: names.policy.clone(),
            what,
        });
    }
    let Some(binding) = binding else {
        return Some(Missing::BindingNotFound {
            name: names.binding.clone(),
        });
    };
    if binding.metadata.deletion_timestamp.is_some() {
        return Some(Missing::BindingDeleting {
            name: names.binding.clone(),
        });
    }
    let spec = binding.spec.clone().unwrap_or_default();
    let found = spec.policy_name.unwrap_or_default();
    if found != names.policy {
        return Some(Missing::BindingElsewhere {
            name: names.binding.clone(),
            found,
            policy: names.policy.clone(),
        });
    }
    let actions = spec.validation_actions.unwrap_or_default();
    if !actions.iter().any(|a| a == "Deny") {
        return Some(Missing::BindingDoesNotDeny {
            name: names.binding.clone(),
            actions,
        });
    }
    if let Err(what) = covers(spec.match_resources, names.namespace.as_deref()) {
        return Some(Missing::BindingNarrowed {
            name: names.binding.clone(),
            what,
        });
    }
    None
}

/// The policy's spec as this release generates it, with the chart's placeholders where the
/// chart fills in the operator's user name and the exempt groups.
fn generated() -> ValidatingAdmissionPolicySpec {
    let mut spec = lease_policy::policy("x", OPERATOR_PLACEHOLDER, &[EXEMPT_GROUPS_PLACEHOLDER])
        .spec
        .unwrap_or_default();
    // `policy` writes the groups as a JSON list; the chart's placeholder stands for the list.
    let listed = format!("[\"{EXEMPT_GROUPS_PLACEHOLDER}\"]");
    for variable in spec.variables.iter_mut().flatten() {
        variable.expression = variable
            .expression
            .replace(&listed, EXEMPT_GROUPS_PLACEHOLDER);
    }
    spec
}

/// Whether `found` equals `template` with its placeholder (each variable has at most one)
/// replaced by an allowed value.
fn fills(template: &str, found: &str) -> bool {
    for placeholder in [OPERATOR_PLACEHOLDER, EXEMPT_GROUPS_PLACEHOLDER] {
        if let Some((prefix, suffix)) = template.split_once(placeholder) {
            let value = found
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix));
            return value.is_some_and(|v| allowed(placeholder, v));
        }
    }
    template == found
}

/// A value the chart may put in for `placeholder`: nothing that ends the CEL literal.
fn allowed(placeholder: &str, value: &str) -> bool {
    if value.contains('\n') {
        return false;
    }
    if placeholder == OPERATOR_PLACEHOLDER {
        // Inside a CEL string in single quotes.
        !value.is_empty() && !value.contains(['\'', '\\'])
    } else {
        // A JSON (and CEL) list of plain strings, as the chart's toJson writes it.
        serde_json::from_str::<Vec<String>>(value).is_ok_and(|groups| {
            groups
                .iter()
                .all(|g| !g.is_empty() && !g.contains(['"', '\\']))
        })
    }
}

/// The API server's defaults undone, so that a policy read back equals what was written.
fn normalize(mut m: MatchResources) -> MatchResources {
    let empty =
        |s: &Option<LabelSelector>| s.as_ref().is_none_or(|s| *s == LabelSelector::default());
    if empty(&m.namespace_selector) {
        m.namespace_selector = None;
    }
    if empty(&m.object_selector) {
        m.object_selector = None;
    }
    if m.match_policy.as_deref() == Some("Equivalent") {
        m.match_policy = None;
    }
    let rules = |rules: Option<Vec<NamedRuleWithOperations>>| {
        rules.filter(|r| !r.is_empty()).map(|rules| {
            rules
                .into_iter()
                .map(|mut r| {
                    if r.scope.as_deref() == Some("*") {
                        r.scope = None;
                    }
                    if r.resource_names.as_ref().is_some_and(Vec::is_empty) {
                        r.resource_names = None;
                    }
                    r
                })
                .collect()
        })
    };
    m.resource_rules = rules(m.resource_rules);
    m.exclude_resource_rules = rules(m.exclude_resource_rules);
    m
}

fn same_policy(found: Option<&ValidatingAdmissionPolicySpec>) -> Result<(), String> {
    let want = generated();
    let found = found.ok_or("it has no spec")?;
    if !matches!(found.failure_policy.as_deref(), None | Some("Fail")) {
        return Err(format!(
            "failurePolicy is {:?}, not Fail",
            found.failure_policy.as_deref().unwrap_or_default()
        ));
    }
    if found.param_kind.is_some() {
        return Err("it has a paramKind".into());
    }
    let matching = |m: &Option<MatchResources>| m.clone().map(normalize);
    if matching(&found.match_constraints) != matching(&want.match_constraints) {
        return Err("its matchConstraints differ".into());
    }
    if found.match_conditions != want.match_conditions {
        return Err("its matchConditions differ".into());
    }
    if found.validations != want.validations {
        return Err("its validations differ".into());
    }
    let (found_vars, want_vars) = (
        found.variables.as_deref().unwrap_or_default(),
        want.variables.as_deref().unwrap_or_default(),
    );
    if found_vars.len() != want_vars.len() {
        return Err("its variables differ".into());
    }
    for (f, w) in found_vars.iter().zip(want_vars) {
        if f.name != w.name || !fills(&w.expression, &f.expression) {
            return Err(format!("its variable {:?} differs", w.name));
        }
    }
    Ok(())
}

/// Whether a binding's `matchResources` lets the policy apply to every Lease in the
/// operator's namespace (`None`: in every namespace).
fn covers(found: Option<MatchResources>, namespace: Option<&str>) -> Result<(), String> {
    let Some(m) = found.map(normalize) else {
        return Ok(());
    };
    if m.object_selector.is_some() {
        return Err("it has an objectSelector".into());
    }
    if m.resource_rules.is_some() {
        return Err("it has resourceRules".into());
    }
    if m.exclude_resource_rules.is_some() {
        return Err("it has excludeResourceRules".into());
    }
    let Some(selector) = m.namespace_selector else {
        return Ok(());
    };
    let only = |ns: &str| LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            ns.to_string(),
        )])),
        ..Default::default()
    };
    match namespace {
        Some(ns) if selector == only(ns) => Ok(()),
        Some(ns) => Err(format!(
            "its namespaceSelector is not the namespace {ns:?} the operator watches"
        )),
        None => Err("it has a namespaceSelector, and the operator watches every namespace".into()),
    }
}
