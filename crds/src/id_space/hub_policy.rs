//! The hub's guard of the registry: a `ValidatingAdmissionPolicy` that lets a member's
//! ServiceAccount (`member-<name>` in the space's namespace, made by `kubectl kubeflake hub
//! add-member`) change an `IdSpace` only by the transitions of [`super::registry`] and
//! [`super::join`](mod@super::join), on its own entries, plus hand-backs of other members'
//! blocks (reclaims). RBAC cannot say "only your own entries"; this policy does, in the API
//! server itself, as [`crate::lease_policy`] does for slot Leases (docs/safety.md rule 14).
//!
//! | a member's write                       | allowed when (as [`Registry`](super::Registry) makes it)                        |
//! |----------------------------------------|---------------------------------------------------------------------------------|
//! | any                                    | an update (never create or delete); `registry.revision` counted up by exactly 1; labels and annotations kept; every listed block still listed |
//! | its member entry                       | join: a new entry under its own name, its generation the new `registry.revision`; later: same id, generation kept or counted up by 1; leave: removed, with every block it held handed back in the same write |
//! | other members' entries                 | unchanged                                                                       |
//! | claim ([`claim`], [`join`])            | a free (or never listed) block of its own datacenter now held by its own id, term counted up by 1, floor kept |
//! | renew ([`renew`])                      | its own block, same term and floor, bound not lowered                           |
//! | hand back ([`release`], [`reclaim`], [`forget`]) | owner and bound removed, term kept, floor at least the old bound      |
//! | a free block                           | term kept; its floor may go up (a join raises floors where it issued)          |
//! | `spec.segment.next` (Segment spaces)   | raised by at most [`MAX_RANGE`] per write ([`segment_range::take`]); never lowered nor removed (the CRD's rules, for everyone) |
//!
//! The CRD's own rules ([`super::resource`]) hold for everyone on top: the parameters are
//! immutable, no floor, revision or generation goes down, one entry per cluster ID, name
//! and block. The hub's administrator (any other user) is not held by this policy: `hub
//! forget` and `hub recover` are theirs.
//!
//! What the policy cannot check: whether a reclaimed block's bound has passed (CEL in an
//! admission policy has no clock, and the bound is in the space's ticks). A member that
//! reclaims a live block of another cannot make an ID repeat (the floor moves to the bound,
//! and the owner's renewals are then refused, so it stops at its bound); it only takes the
//! block away early. Such a write is visible on the hub (the registry keeps the revision).
//!
//! The checks find an entry's old version through maps keyed by block index and member ID
//! (`transformMapEntry`, Kubernetes 1.33 and later), so a write's CEL cost grows with the
//! size of the registry, not its square: pairwise comparisons exceeded the API server's
//! per-expression budget from about 500 listed blocks (measured on 1.35), and a write
//! over budget is refused (the policy fails closed).
//!
//! [`segment_range::take`]: super::segment_range::take
//! [`claim`]: super::Registry::claim
//! [`renew`]: super::Registry::renew
//! [`release`]: super::Registry::release
//! [`reclaim`]: super::Registry::reclaim
//! [`forget`]: super::Registry::forget
//! [`join`]: super::join()

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::segment_range::MAX_RANGE;

/// The name of a member's ServiceAccount on the hub is this prefix and the member's name.
pub const MEMBER_ACCOUNT_PREFIX: &str = "member-";
/// The name of the policy and its binding as the generated file ships them.
pub const POLICY_NAME: &str = "kubeflake-idspace-members";

/// CEL: 2^n for n from 0 to 16.
const POW2: &str =
    "[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]";

fn variable(name: &str, expression: impl Into<String>) -> Variable {
    Variable {
        name: name.into(),
        expression: expression.into(),
    }
}

fn validation(expression: impl Into<String>, message_expression: impl Into<String>) -> Validation {
    Validation {
        expression: expression.into(),
        message_expression: Some(message_expression.into()),
        reason: Some("Forbidden".into()),
        ..Default::default()
    }
}

/// CEL: block `b` of the new registry was listed in the old one ...
const LISTED: &str = "(b.index in variables.oldByIndex)";
/// ... and its old entry.
const OLD: &str = "variables.oldByIndex[b.index]";

/// CEL: the request is an update (every later check reads `oldObject`), or passes.
fn on_update(check: &str) -> String {
    format!("request.operation != 'UPDATE' || ({check})")
}

/// The policy's spec.
pub fn spec() -> ValidatingAdmissionPolicySpec {
    let prefix = MEMBER_ACCOUNT_PREFIX;
    let variables = vec![
        variable(
            "me",
            format!(
                "request.userInfo.username.split(':')[3].substring({})",
                prefix.len()
            ),
        ),
        variable("oldMembers", "oldObject.spec.registry.members"),
        variable("newMembers", "object.spec.registry.members"),
        variable("oldBlocks", "oldObject.spec.registry.blocks"),
        variable("newBlocks", "object.spec.registry.blocks"),
        // Entries by key, so that every check below costs one pass over the lists.
        variable(
            "oldByIndex",
            "variables.oldBlocks.transformMapEntry(i, b, {b.index: b})",
        ),
        variable(
            "newByIndex",
            "variables.newBlocks.transformMapEntry(i, b, {b.index: b})",
        ),
        variable(
            "oldById",
            "variables.oldMembers.transformMapEntry(i, m, {m.id: m})",
        ),
        variable(
            "newById",
            "variables.newMembers.transformMapEntry(i, m, {m.id: m})",
        ),
        variable(
            "oldMine",
            "variables.oldMembers.filter(m, m.name == variables.me)",
        ),
        variable(
            "newMine",
            "variables.newMembers.filter(m, m.name == variables.me)",
        ),
        variable(
            "myId",
            "variables.newMine.size() > 0 ? variables.newMine[0].id \
             : (variables.oldMine.size() > 0 ? variables.oldMine[0].id : '')",
        ),
        variable(
            "myDc",
            "variables.newMine.size() > 0 ? variables.newMine[0].datacenterId : -1",
        ),
        variable(
            "perDc",
            format!("{POW2}[object.spec.sequence.layout.workerBits] / object.spec.blockSlots"),
        ),
    ];
    let who = "'member ' + variables.me + ' (' + request.userInfo.username + ')'";
    let validations = vec![
        validation(
            "request.operation == 'UPDATE'",
            format!(
                "{who} + ' may only update IdSpace ' + request.name + ' (a compare-and-swap of its \
                 registry); creating or deleting an ID space is the hub administrator\\'s'"
            ),
        ),
        validation(
            on_update("object.spec.registry.revision == oldObject.spec.registry.revision + 1"),
            format!(
                "{who} + ': every write of the registry counts spec.registry.revision up by exactly \
                 1, from ' + string(oldObject.spec.registry.revision) + ': read the IdSpace again and \
                 make the change on what was read'"
            ),
        ),
        validation(
            on_update(
                "object.metadata.?labels == oldObject.metadata.?labels \
                 && object.metadata.?annotations == oldObject.metadata.?annotations",
            ),
            format!("{who} + ' may not change the IdSpace\\'s labels or annotations'"),
        ),
        validation(
            on_update(
                "variables.oldMembers.all(m, m.name == variables.me \
                 || (m.id in variables.newById && variables.newById[m.id] == m)) \
                 && variables.newMembers.all(m, m.name == variables.me \
                 || (m.id in variables.oldById && variables.oldById[m.id] == m))",
            ),
            format!(
                "{who} + ' may change only its own entry of spec.registry.members (name ' + \
                 variables.me + '); this write adds, removes or changes another member\\'s'"
            ),
        ),
        validation(
            on_update(
                "variables.oldMine.size() == 0 \
                 ? (variables.newMine.size() == 0 \
                 || variables.newMine[0].generation == object.spec.registry.revision) \
                 : (variables.newMine.size() == 0 || (variables.newMine[0].id == variables.oldMine[0].id \
                 && (variables.newMine[0].generation == variables.oldMine[0].generation \
                 || variables.newMine[0].generation == variables.oldMine[0].generation + 1)))",
            ),
            format!(
                "{who} + ': its own member entry is written with the new spec.registry.revision as \
                 its generation when it joins, and \
                 afterwards keeps its id and counts its generation up by at most 1 per write'"
            ),
        ),
        validation(
            on_update(
                "variables.newMine.size() > 0 || variables.oldMine.size() == 0 \
                 || variables.newBlocks.all(b, !has(b.owner) || b.owner != variables.oldMine[0].id)",
            ),
            format!(
                "{who} + ': a member that leaves (removes its own entry) hands back every block it \
                 holds in the same write: owner and bound removed, floor raised to the bound'"
            ),
        ),
        validation(
            on_update("variables.oldBlocks.all(o, o.index in variables.newByIndex)"),
            format!(
                "{who} + ': no entry of spec.registry.blocks may be removed: a block not listed has \
                 floor 0, so ticks its last owner issued could be issued again; keep every block, \
                 a free one with its floor'"
            ),
        ),
        validation(
            on_update(&format!(
                "variables.newBlocks.all(b, !has(b.owner) || b.owner == variables.myId \
                 || ({LISTED} && {OLD} == b))"
            )),
            format!(
                "{who} + ': a member may claim or renew blocks only for itself (owner ' + \
                 variables.myId + '); this write gives a block to another owner or changes \
                 another member\\'s claim'"
            ),
        ),
        validation(
            on_update(&format!(
                "variables.newBlocks.all(b, !{LISTED} || !has({OLD}.owner) \
                 || (has(b.owner) && b.owner == {OLD}.owner && b.term == {OLD}.term) \
                 || (!has(b.owner) && b.term == {OLD}.term && b.floor >= {OLD}.bound))"
            )),
            format!(
                "{who} + ': a held block leaves its owner only by a hand-over (release, reclaim, \
                 forget): owner and bound removed, term kept, floor raised to at least the old \
                 bound, so the next owner starts above every tick the last one could issue'"
            ),
        ),
        validation(
            on_update(&format!(
                "variables.newBlocks.all(b, !has(b.owner) || b.owner != variables.myId \
                 || ({LISTED} && has({OLD}.owner)) \
                 || ((({LISTED} && b.term == {OLD}.term + 1 && b.floor == {OLD}.floor) \
                 || (!{LISTED} && b.term == 1 && b.floor == 0)) \
                 && b.index / variables.perDc == variables.myDc))"
            )),
            format!(
                "{who} + ': a claim takes a free block of the member\\'s own datacenter (' + \
                 string(variables.myDc) + '), counts its term up by 1 and keeps its floor'"
            ),
        ),
        validation(
            on_update(&format!(
                "variables.newBlocks.all(b, !has(b.owner) || b.owner != variables.myId \
                 || !{LISTED} || !has({OLD}.owner) \
                 || (b.term == {OLD}.term && b.floor == {OLD}.floor && b.bound >= {OLD}.bound))"
            )),
            format!(
                "{who} + ': a renewal keeps the block\\'s term and floor and never lowers its bound'"
            ),
        ),
        validation(
            on_update(&format!(
                "variables.newBlocks.all(b, has(b.owner) \
                 || ({LISTED} && (has({OLD}.owner) || {OLD}.term == b.term)) \
                 || (!{LISTED} && b.term == 0))"
            )),
            format!(
                "{who} + ': a free block keeps its term (only a claim counts it up); its floor may \
                 only go up'"
            ),
        ),
        // A Segment space's counter (docs/safety.md rule 22): one range per write at most,
        // so that one member cannot use up the space's values for the others.
        validation(
            on_update(&format!(
                "!has(object.spec.segment) || (has(oldObject.spec.segment) \
                 ? object.spec.segment.next - oldObject.spec.segment.next <= {MAX_RANGE} \
                 : object.spec.segment.next <= {MAX_RANGE})"
            )),
            format!(
                "{who} + ': a member raises spec.segment.next by at most {MAX_RANGE} values \
                 (one range) per write; this write raises it from ' + \
                 (has(oldObject.spec.segment) ? string(oldObject.spec.segment.next) : 'none') \
                 + ' to ' + string(object.spec.segment.next)"
            ),
        ),
    ];
    ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: Some(vec![crate::GROUP.into()]),
                api_versions: Some(vec!["*".into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]),
                resources: Some(vec!["idspaces".into()]),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        match_conditions: Some(vec![MatchCondition {
            name: "member-accounts".into(),
            expression: format!(
                "request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':{prefix}')"
            ),
        }]),
        variables: Some(variables),
        validations: Some(validations),
        ..Default::default()
    }
}

/// The policy named `name`.
pub fn policy(name: &str) -> ValidatingAdmissionPolicy {
    ValidatingAdmissionPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(spec()),
        ..Default::default()
    }
}

/// The binding that puts the policy in force (`Deny`), in `namespace` only or in every
/// namespace (IdSpaces live only in the hub's space namespaces): the same binding as the
/// Lease policy's, so it is that one function.
pub use crate::lease_policy::binding;

/// The policy and its binding (every namespace) as checked in at
/// `crds/idspace-hub-policy.yaml`, for `kubectl apply -f` on the hub.
pub fn policy_yaml() -> String {
    let render = |value: Result<String, serde_saphyr::ser::Error>| {
        value.unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    };
    let policy = render(crate::to_yaml(&policy(POLICY_NAME)));
    let binding = render(crate::to_yaml(&binding(POLICY_NAME, POLICY_NAME, None)));
    format!(
        "# Generated from crds/src/id_space/hub_policy.rs by `cargo run -p kubeflake-crds --bin policygen -- --hub crds/idspace-hub-policy.yaml`; do not edit by hand.\n{policy}---\n{binding}"
    )
}
