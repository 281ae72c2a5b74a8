//! The API server's own guard of kubeflake's Leases: a `ValidatingAdmissionPolicy` that
//! lets a slot Lease change only in the ways [`crate::slot_lease`] changes it, and only by
//! the identity each transition belongs to (docs/safety.md, "Who may write a Lease").
//!
//! | who (request's user)                                   | slot Lease                                     | segment counter                  | strict oracle Lease |
//! |--------------------------------------------------------|------------------------------------------------|----------------------------------|---------------------|
//! | the operator's service account                         | anything ([`assign`], operator [`release`], create, delete) | anything but lowering   | anything            |
//! | a pod-bound token of the pod named in `holderIdentity` | [`renew`] or holder [`release`], nothing else  | -                                | -                   |
//! | a pod-bound token of a pod in [`CLAIMANTS_ANNOTATION`] (any pod while the counter has none: see below) | - | raise `next` and `claims` only, up to [`LIMIT`] | [`take`], [`renew`](OracleLease::renew) or [`release`](OracleLease::release) for itself only (see below) |
//! | the namespace and garbage collectors                   | delete                                         | delete                           | delete              |
//! | the exempt groups (break glass, `system:masters`)      | anything                                       | anything but lowering            | anything            |
//! | anyone else                                            | nothing                                        | nothing                          | nothing             |
//!
//! Nobody at all lowers a counter's `next` or `claims` in place: values below were issued.
//!
//! **Ranges** (docs/safety.md rule 22, [`crate::segment_counter::range`]): a counter of a
//! sequence joined to an ID space (format 3) has a limit and maybe a queued range; once it
//! has a limit, every writer but the exempt groups keeps one, with `next` at or below it or
//! inside the queued range, and a queued range above it. A claimant still changes only
//! `next` and `claims` (moving to the queued range is raising `next` into it), so 0.1.0
//! sidecars, which know no limit, are stopped at the ranges here ([`ranges`]).
//!
//! **Ranges, not digit counts** (docs/safety.md rules 14 and 16): nobody at all writes a
//! counter's `next` or `claims` above [`LIMIT`] (what [`Counter::parse`] reads), or a slot
//! Lease's fence above [`FENCE_LIMIT`] (the last tick any layout holds); a value already
//! there may stay. One such write used to make every sidecar and the operator refuse the
//! counter, or a slot, for good. The checks compare the text (length, then text order), so
//! they never fail on a value `uint()` cannot hold, and they come before the other checks
//! of their Lease, whose message the API server would otherwise give (it gives the first
//! refusal's). They are added beside the checks of earlier releases, which stay word for
//! word (rule 15).
//!
//! **The fence cap** (docs/safety.md rule 17, [`crate::slot_lease::fence_cap`]): on a slot
//! Lease only the operator (and the exempt groups) adds, changes or removes
//! [`FENCE_CAP_ANNOTATION`]; a cap the new object has must be a tick in range, and its fence
//! must not be above it, for every user but the exempt groups. The operator is held to
//! that too: its own writes never break it (`assign_in_block` starts below the cap,
//! `raise_cap` refuses a cap below the fence), so the check costs it nothing, and a bug
//! that broke it would let a holder issue ticks of another cluster's block. A cap is
//! removed only by the operator (a plain `assign`, the sequence no longer joined).
//!
//! A counter without [`CLAIMANTS_ANNOTATION`] was created by an operator before 0.2, which
//! did not keep the list: until this release's operator lists the claimants (its first pass
//! over the sequence), any pod-bound token that RBAC lets write the counter may claim, as
//! before 0.2, still only raising. Refusing them instead would stall every sidecar of the
//! sequence for the length of an upgrade (e2e/tests/upgrade.rs measured it). Operators
//! from 0.2 on create counters with the annotation (empty), so the gap exists only for
//! counters of older releases, and only until the operator's first pass.
//!
//! A claimant of a strict sequence's oracle Lease ([`crate::strict_oracle`], label
//! [`ORACLE_LABEL`]) changes only `spec.holderIdentity`, `acquireTime`, `renewTime`,
//! `leaseTransitions` and the [`ADDRESS_ANNOTATION`]: the holder it writes is its own pod
//! UID (take, renew), or none when it held it (release); `leaseTransitions` goes up by
//! exactly 1 when it takes the Lease from another holder or from nobody, may go up by 1
//! when it takes a new term of its own Lease (a restarted sidecar), and stays otherwise.
//! Its duration, labels, owners, claimants and format stay as the operator wrote them, and
//! it neither creates nor deletes the Lease. The oracle Lease has no claimants gap: only
//! operators from the release with the oracle create it, always with the list.
//!
//! The chart ships the policy's spec as a file generated from [`spec_yaml`] (a test fails
//! when it is stale), with two placeholders the chart fills in: the operator's user name
//! and the exempt groups. Tests build the same policy with real names through [`policy`].
//!
//! One piece (over 400 lines): the policy is one CEL program whose variables every
//! validation shares (who asks, which Lease, what changed); split, the rules for one kind of
//! Lease could no longer be read beside the variables they use.
//!
//! [`assign`]: crate::slot_lease::assign
//! [`release`]: crate::slot_lease::release
//! [`renew`]: crate::slot_lease::renew
//! [`take`]: crate::strict_oracle::OracleLease::take
//! [`OracleLease::renew`]: crate::strict_oracle::OracleLease::renew
//! [`OracleLease::release`]: crate::strict_oracle::OracleLease::release

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::layout::{MAX_TICK, TIMESTAMP_BITS};
#[cfg(doc)]
use crate::segment_counter::Counter;
use crate::segment_counter::{
    CLAIMANTS_ANNOTATION, CLAIMS_ANNOTATION, COUNTER_LABEL, LIMIT, NEXT_ANNOTATION,
};
use crate::slot_lease::{
    FENCE_ANNOTATION, FENCE_CAP_ANNOTATION, FORMAT_ANNOTATION, HOLDER_LABEL, HOLDER_POD_ANNOTATION,
    RELEASED_AT_ANNOTATION, SEQUENCE_LABEL,
};
#[cfg(doc)]
use crate::strict_oracle::OracleLease;
use crate::strict_oracle::{ADDRESS_ANNOTATION, ORACLE_LABEL};

mod cel;
mod ranges;

use cel::{
    annotations_of, in_range, labels_of, not_lowered, same_except, same_spec, written_in_range,
};

/// Where the chart puts the operator's user name (`system:serviceaccount:<ns>:<name>`).
pub const OPERATOR_PLACEHOLDER: &str = "__KUBEFLAKE_OPERATOR__";
/// Where the chart puts the exempt groups, as a JSON (and so CEL) list of strings.
pub const EXEMPT_GROUPS_PLACEHOLDER: &str = "__KUBEFLAKE_EXEMPT_GROUPS__";
/// The user-info extra the API server sets for a pod-bound service account token.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// Users that delete Leases when their namespace or owner goes: kube-controller-manager
/// with and without `--use-service-account-credentials`.
pub const CLEANUP_USERS: [&str; 3] = [
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
];

fn variable(name: &str, expression: String) -> Variable {
    Variable {
        name: name.into(),
        expression,
    }
}

/// The highest fence anyone may write on a slot Lease: [`MAX_TICK`], the last tick the
/// widest timestamp field ([`TIMESTAMP_BITS`]) holds, and the same bound the fence parser
/// ([`crate::slot_lease::MAX_FENCE`]) reads up to. A sequence's own layout may end sooner;
/// its sidecar refuses a fence beyond that layout's last tick (the slot is then unusable,
/// and says so).
pub const FENCE_LIMIT: u64 = MAX_TICK.0;

/// CEL: when the new object has a [`FENCE_CAP_ANNOTATION`], its fence (0 when absent) is
/// not above it. Both must be in range ([`in_range`]: at most as many digits as
/// [`FENCE_LIMIT`], 17, so `uint()` cannot fail on them, and `&&` stops before it); the
/// numbers are then compared, not the texts, so a leading zero ("010" against "11")
/// cannot pass a fence above the cap. A cap out of range fails this check too.
fn fence_within_cap() -> String {
    let fence = format!("variables.newAnnotations[?'{FENCE_ANNOTATION}'].orValue('0')");
    let cap = format!("variables.newAnnotations['{FENCE_CAP_ANNOTATION}']");
    format!(
        "(!('{FENCE_CAP_ANNOTATION}' in variables.newAnnotations) \
         || ({} && {} && uint({fence}) <= uint({cap})))",
        in_range(&fence, FENCE_LIMIT),
        in_range(&cap, FENCE_LIMIT),
    )
}

fn validation(expression: String, message_expression: String) -> Validation {
    Validation {
        expression,
        message_expression: Some(message_expression),
        reason: Some("Forbidden".into()),
        ..Default::default()
    }
}

/// The policy's spec; `operator` and `exempt_groups` are CEL: a string literal and a list.
fn spec(operator: &str, exempt_groups: &str) -> ValidatingAdmissionPolicySpec {
    let kubeflake_labels = |side: &str| {
        format!(
            "({side} != null && has({side}.metadata.labels) && \
             ('{SEQUENCE_LABEL}' in {side}.metadata.labels || '{COUNTER_LABEL}' in {side}.metadata.labels \
             || '{ORACLE_LABEL}' in {side}.metadata.labels))"
        )
    };
    let cleanup = CLEANUP_USERS
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let variables = vec![
        variable("oldLabels", labels_of("oldObject")),
        variable("newLabels", labels_of("object")),
        variable("oldAnnotations", annotations_of("oldObject")),
        variable("newAnnotations", annotations_of("object")),
        variable(
            "isSlot",
            format!("'{SEQUENCE_LABEL}' in variables.oldLabels || '{SEQUENCE_LABEL}' in variables.newLabels"),
        ),
        variable(
            "isCounter",
            format!("'{COUNTER_LABEL}' in variables.oldLabels || '{COUNTER_LABEL}' in variables.newLabels"),
        ),
        variable(
            "isOracle",
            format!("'{ORACLE_LABEL}' in variables.oldLabels || '{ORACLE_LABEL}' in variables.newLabels"),
        ),
        variable("isOperator", format!("request.userInfo.username == {operator}")),
        variable(
            "isExempt",
            format!("request.userInfo.?groups.orValue([]).exists(g, g in {exempt_groups})"),
        ),
        variable(
            "isCleanup",
            format!("request.operation == 'DELETE' && request.userInfo.username in [{cleanup}]"),
        ),
        variable(
            "trusted",
            "variables.isOperator || variables.isExempt || variables.isCleanup".into(),
        ),
        variable(
            "podUids",
            format!("request.userInfo.?extra[?'{POD_UID_EXTRA}'].orValue([])"),
        ),
        variable(
            "podUid",
            "variables.podUids.size() == 1 ? variables.podUids[0] : ''".into(),
        ),
        variable(
            "oldHolder",
            "oldObject == null ? '' : oldObject.spec.?holderIdentity.orValue('')".into(),
        ),
        variable(
            "newHolder",
            "object == null ? '' : object.spec.?holderIdentity.orValue('')".into(),
        ),
        variable(
            "isHolder",
            "request.operation == 'UPDATE' && variables.podUid != '' && variables.oldHolder == variables.podUid"
                .into(),
        ),
        variable(
            "kept",
            format!(
                "{} && {} && {} && object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences",
                same_spec("leaseTransitions"),
                same_spec("leaseDurationSeconds"),
                same_spec("preferredHolder"),
            ),
        ),
        variable(
            "isRenewal",
            format!(
                "variables.kept && variables.newHolder == variables.oldHolder && {} && {} && {} \
                 && uint(variables.newAnnotations[?'{FENCE_ANNOTATION}'].orValue('0')) \
                 >= uint(variables.oldAnnotations[?'{FENCE_ANNOTATION}'].orValue('0'))",
                same_spec("acquireTime"),
                same_except("Labels", &[]),
                same_except("Annotations", &[FENCE_ANNOTATION]),
            ),
        ),
        variable(
            "isRelease",
            format!(
                "variables.kept && variables.newHolder == '' && !('{HOLDER_LABEL}' in variables.newLabels) \
                 && !('{HOLDER_POD_ANNOTATION}' in variables.newAnnotations) \
                 && '{RELEASED_AT_ANNOTATION}' in variables.newAnnotations \
                 && variables.newAnnotations[?'{FENCE_ANNOTATION}'].orValue('0').matches('^[0-9]{{1,19}}$') \
                 && {} && {}",
                same_except("Labels", &[HOLDER_LABEL]),
                same_except(
                    "Annotations",
                    &[FENCE_ANNOTATION, HOLDER_POD_ANNOTATION, RELEASED_AT_ANNOTATION],
                ),
            ),
        ),
        variable(
            "claimants",
            format!("variables.oldAnnotations[?'{CLAIMANTS_ANNOTATION}'].orValue('').split(',')"),
        ),
        // A counter of a release before 0.2 has no claimants list yet (see the top).
        variable(
            "claimantsListed",
            format!("'{CLAIMANTS_ANNOTATION}' in variables.oldAnnotations"),
        ),
        variable(
            "isClaim",
            format!(
                "request.operation == 'UPDATE' && variables.podUid != '' \
                 && (!variables.claimantsListed || variables.podUid in variables.claimants) \
                 && {} && {} && object.spec == oldObject.spec \
                 && object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences",
                same_except("Labels", &[]),
                same_except("Annotations", &[NEXT_ANNOTATION, CLAIMS_ANNOTATION]),
            ),
        ),
        // The oracle Lease: only listed pods, and only updates (no gap: see the top).
        variable(
            "isOracleClaimant",
            "request.operation == 'UPDATE' && variables.podUid != '' && variables.podUid in variables.claimants"
                .into(),
        ),
        variable(
            "oldTerm",
            "oldObject == null ? 0 : oldObject.spec.?leaseTransitions.orValue(0)".into(),
        ),
        variable(
            "newTerm",
            "object == null ? 0 : object.spec.?leaseTransitions.orValue(0)".into(),
        ),
        // Take (its own UID, from another holder or none: a new term), renew (its own UID
        // kept; a restarted sidecar may start a new term), release (none, from its own UID).
        variable(
            "isOracleTurn",
            "(variables.newHolder == variables.podUid && variables.oldHolder != variables.podUid \
             && variables.newTerm == variables.oldTerm + 1) \
             || (variables.newHolder == variables.podUid && variables.oldHolder == variables.podUid \
             && (variables.newTerm == variables.oldTerm || variables.newTerm == variables.oldTerm + 1)) \
             || (variables.newHolder == '' && variables.oldHolder == variables.podUid \
             && variables.newTerm == variables.oldTerm)"
                .into(),
        ),
        variable(
            "oracleKept",
            format!(
                "{} && {} && {} && object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences \
                 && {} && {}",
                same_spec("leaseDurationSeconds"),
                same_spec("preferredHolder"),
                same_spec("strategy"),
                same_except("Labels", &[]),
                same_except("Annotations", &[ADDRESS_ANNOTATION]),
            ),
        ),
    ];
    let who = "request.userInfo.username + (variables.podUid == '' ? ' (no pod-bound token)' : ' (pod ' + variables.podUid + ')')";
    let validations = vec![
        // Ranges first: the API server gives the first refusal's message, so it names the
        // range whoever writes, and no later check meets a value `uint()` cannot hold.
        validation(
            format!(
                "!variables.isSlot || {}",
                written_in_range(FENCE_ANNOTATION, FENCE_LIMIT)
            ),
            format!(
                "'slot Lease ' + request.name + ': {FENCE_ANNOTATION} must be a whole number of \
                 ticks from 0 to {FENCE_LIMIT} (2^{bits} - 1, the last tick any layout holds), for \
                 every user (docs/safety.md rule 14); this write has \"' \
                 + variables.newAnnotations[?'{FENCE_ANNOTATION}'].orValue('') + '\"'",
                bits = TIMESTAMP_BITS.1,
            ),
        ),
        // The fence cap (rule 17): readable, the operator's alone, and never below the fence.
        validation(
            format!(
                "!variables.isSlot || variables.isExempt || !('{FENCE_CAP_ANNOTATION}' in variables.newAnnotations) \
                 || {}",
                in_range(
                    &format!("variables.newAnnotations['{FENCE_CAP_ANNOTATION}']"),
                    FENCE_LIMIT
                )
            ),
            format!(
                "'slot Lease ' + request.name + ': {FENCE_CAP_ANNOTATION} must be a whole number of \
                 ticks from 0 to {FENCE_LIMIT}, the bound of the ID-space block the slot lies in \
                 (docs/safety.md rule 17); this write has \"' \
                 + variables.newAnnotations[?'{FENCE_CAP_ANNOTATION}'].orValue('') + '\"'"
            ),
        ),
        validation(
            format!(
                "!variables.isSlot || variables.trusted \
                 || variables.newAnnotations[?'{FENCE_CAP_ANNOTATION}'] == variables.oldAnnotations[?'{FENCE_CAP_ANNOTATION}']"
            ),
            format!(
                "'slot Lease ' + request.name + ': {FENCE_CAP_ANNOTATION} (the bound of the ID-space \
                 block the slot lies in, docs/safety.md rule 17) is written by the kubeflake operator \
                 only; ' + {who} + ' may not add, change or remove it (\"' \
                 + variables.oldAnnotations[?'{FENCE_CAP_ANNOTATION}'].orValue('') + '\" -> \"' \
                 + variables.newAnnotations[?'{FENCE_CAP_ANNOTATION}'].orValue('') + '\")'"
            ),
        ),
        validation(
            format!("!variables.isSlot || variables.isExempt || {}", fence_within_cap()),
            format!(
                "'slot Lease ' + request.name + ': the fence \"' \
                 + variables.newAnnotations[?'{FENCE_ANNOTATION}'].orValue('0') + '\" is above \
                 {FENCE_CAP_ANNOTATION} \"' + variables.newAnnotations[?'{FENCE_CAP_ANNOTATION}'].orValue('') \
                 + '\", the bound of the ID-space block the slot lies in; nobody but the exempt \
                 groups writes a fence above it (docs/safety.md rule 17): a holder stops at the \
                 cap until the operator raises it, after the hub renewed the block'"
            ),
        ),
        validation(
            "!variables.isSlot || variables.trusted || variables.isHolder".into(),
            format!(
                "'slot Lease ' + request.name + ' may be changed only by the kubeflake operator or by the \
                 sidecar of the pod that holds it, with the token of that pod (docs/safety.md); ' + {who} \
                 + (variables.podUid != '' && variables.podUid == variables.oldHolder ? ' holds it, but a \
                 holder may only update it (renew or release), never create or delete it' : ' is neither: ' \
                 + (variables.oldHolder == '' ? 'the slot is free, and only the operator assigns slots' \
                 : 'it is held by pod ' + variables.oldHolder))"
            ),
        ),
        validation(
            "!variables.isSlot || variables.trusted || !variables.isHolder || variables.isRenewal || variables.isRelease"
                .into(),
            "'the holder of slot Lease ' + request.name + ' may only renew it (a new renewTime, the \
             kubeflake.io/fence annotation kept or raised) or release it (no holder, no holder label \
             or holder-pod annotation, kubeflake.io/released-at set); this change touches more, or \
             lowers the fence while keeping the slot'"
                .into(),
        ),
        validation(
            "!variables.isCounter || variables.trusted || variables.isClaim".into(),
            format!(
                "'segment counter Lease ' + request.name + ' may be changed only by the kubeflake \
                 operator, and by the sidecars of pods labelled for its sequence with their own token \
                 (listed in {CLAIMANTS_ANNOTATION} by the operator), which may only raise \
                 {NEXT_ANNOTATION} and {CLAIMS_ANNOTATION}; ' + {who} + ' may not'"
            ),
        ),
        validation(
            format!(
                "!variables.isCounter || ({} && {})",
                written_in_range(NEXT_ANNOTATION, LIMIT),
                written_in_range(CLAIMS_ANNOTATION, LIMIT),
            ),
            format!(
                "'segment counter Lease ' + request.name + ': {NEXT_ANNOTATION} and \
                 {CLAIMS_ANNOTATION} must be whole numbers from 0 to {LIMIT} (2^{bits}; the \
                 counter parser refuses more), for every user (docs/safety.md rule 14); this \
                 write has \"' \
                 + variables.newAnnotations[?'{NEXT_ANNOTATION}'].orValue('') + '\" and \"' \
                 + variables.newAnnotations[?'{CLAIMS_ANNOTATION}'].orValue('') + '\"'",
                bits = LIMIT.trailing_zeros(),
            ),
        ),
        ranges::within_ranges(),
        validation(
            format!(
                "!variables.isCounter || request.operation != 'UPDATE' || (({}) && ({}))",
                not_lowered(NEXT_ANNOTATION),
                not_lowered(CLAIMS_ANNOTATION),
            ),
            format!(
                "'segment counter Lease ' + request.name + ': {NEXT_ANNOTATION} and {CLAIMS_ANNOTATION} \
                 may only go up, for every user (the values below were handed out, docs/segment.md); \
                 write whole numbers at least ' + variables.oldAnnotations[?'{NEXT_ANNOTATION}'].orValue('0') \
                 + ' and ' + variables.oldAnnotations[?'{CLAIMS_ANNOTATION}'].orValue('0')"
            ),
        ),
        validation(
            "!variables.isOracle || variables.trusted || variables.isOracleClaimant".into(),
            format!(
                "'strict oracle Lease ' + request.name + ' may be changed only by the kubeflake \
                 operator, and by the sidecars of pods labelled for its sequence with their own token \
                 (listed in {CLAIMANTS_ANNOTATION} by the operator), which may only take, renew or \
                 release it for themselves, never create or delete it; ' + {who} + ' may not'"
            ),
        ),
        validation(
            "!variables.isOracle || variables.trusted || !variables.isOracleClaimant || variables.isOracleTurn"
                .into(),
            "'a claimant of strict oracle Lease ' + request.name + ' may only take it for itself \
             (holderIdentity its own pod UID, leaseTransitions raised by exactly 1), renew it (its own \
             pod UID kept) or release it (no holder, after it held it; leaseTransitions kept); pod ' \
             + variables.podUid + ' wrote holder \"' + variables.newHolder + '\" over \"' \
             + variables.oldHolder + '\" with leaseTransitions ' + string(variables.oldTerm) + ' -> ' \
             + string(variables.newTerm)"
                .into(),
        ),
        validation(
            "!variables.isOracle || variables.trusted || !variables.isOracleClaimant || variables.oracleKept"
                .into(),
            format!(
                "'a claimant of strict oracle Lease ' + request.name + ' may change only \
                 spec.holderIdentity, spec.acquireTime, spec.renewTime, spec.leaseTransitions and the \
                 {ADDRESS_ANNOTATION} annotation; leaseDurationSeconds, labels, owners, \
                 {CLAIMANTS_ANNOTATION} and {FORMAT_ANNOTATION} stay as the operator wrote them'"
            ),
        ),
    ];
    ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: Some(vec!["coordination.k8s.io".into()]),
                api_versions: Some(vec!["*".into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]),
                resources: Some(vec!["leases".into()]),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        match_conditions: Some(vec![MatchCondition {
            name: "kubeflake-leases".into(),
            expression: format!(
                "{} || {}",
                kubeflake_labels("object"),
                kubeflake_labels("oldObject")
            ),
        }]),
        variables: Some(variables),
        validations: Some(validations),
        ..Default::default()
    }
}

/// The spec as the chart ships it, with [`OPERATOR_PLACEHOLDER`] and
/// [`EXEMPT_GROUPS_PLACEHOLDER`] where the chart puts the operator's user name and the
/// exempt groups.
pub fn spec_yaml() -> String {
    let spec = spec(
        &format!("'{OPERATOR_PLACEHOLDER}'"),
        EXEMPT_GROUPS_PLACEHOLDER,
    );
    let body = crate::to_yaml(&spec).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"));
    format!(
        "# Generated from crds/src/lease_policy.rs by `cargo run -p kubeflake-crds --bin policygen -- charts/kubeflake/files/lease-policy-spec.yaml`; do not edit by hand.\n{body}"
    )
}

/// The policy with real names, as the chart renders it: `operator` is the operator's user
/// name, `exempt_groups` the groups that may change Leases by hand.
pub fn policy(name: &str, operator: &str, exempt_groups: &[&str]) -> ValidatingAdmissionPolicy {
    let groups = serde_json::to_string(exempt_groups).unwrap_or_else(|_| "[]".into());
    ValidatingAdmissionPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(spec(&format!("'{operator}'"), &groups)),
        ..Default::default()
    }
}

/// The binding that puts the policy in force (`Deny`), in `namespace` only or everywhere.
pub fn binding(
    name: &str,
    policy: &str,
    namespace: Option<&str>,
) -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(policy.into()),
            validation_actions: Some(vec!["Deny".into()]),
            match_resources: namespace.map(|ns| MatchResources {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([(
                        "kubernetes.io/metadata.name".to_string(),
                        ns.to_string(),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}
