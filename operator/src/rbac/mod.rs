//! The sidecar's rights, granted without anyone writing RBAC by hand, and no wider than
//! what the sidecars of a namespace use.
//!
//! A sidecar runs as its pod's service account, which the app owner chose. In every
//! namespace that has an IdSequence the operator keeps two objects named [`BINDING`]:
//! - a **Role** that lets a sidecar read Leases, write only the Leases of that namespace's
//!   sequences (by name: every slot Lease a Snowflake sequence can have, each Segment
//!   sequence's counter, and each strict sequence's oracle Lease), read those sequences by
//!   name, and post Events; see [`role`];
//! - a **RoleBinding** of that Role to exactly the service accounts that the namespace's
//!   labelled pods run as (read from the controller's pod cache); see [`binding`].
//!
//! So an app's own leader-election Lease in the namespace stays closed to every sidecar,
//! and a service account that runs no kubeflake pod gets nothing. Which write to a
//! kubeflake Lease succeeds is decided further by the API server's Lease policy
//! (`kubeflake_crds::lease_policy`: only the holder's own slot, only as a holder may).
//!
//! Both objects are owned (`ownerReferences`) by the sidecar ClusterRole installed by the
//! chart (`--sidecar-cluster-role`): a cluster-scoped owner of namespaced dependents, so
//! `helm uninstall` deletes the role and the garbage collector every Role and binding with
//! it, even though the operator is gone by then. While that ClusterRole does not exist
//! nothing is created. (Releases before this one bound the ClusterRole itself to the
//! namespace's group: such a binding has another `roleRef`, which cannot be changed in
//! place, so it is deleted and created again.)
//!
//! Like the main reconciler, this is an idempotent function of observed state: [`plan`]
//! compares what each namespace needs with the Roles and bindings that exist; creates,
//! updates (conditional on the version read) and deletes (conditional on the uid) follow.
//! This file is the pure part (what a namespace needs, the Role, the binding, the plan);
//! the watches and the writes that carry a plan out are in `rbac/keep.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::Slot;
use kubeflake_crds::segment_counter::counter_name;
use kubeflake_crds::sequence::Mode;
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, lease_name};
use kubeflake_crds::strict_oracle::oracle_name;

/// Name of the Role and the RoleBinding the operator keeps in each namespace with
/// IdSequences.
pub const BINDING: &str = "kubeflake-sidecar";
/// Label that marks Roles and bindings the operator owns (and the only ones it watches).
pub const MANAGED_LABEL: &str = "kubeflake.io/sidecar-binding";
/// At most this many Lease names in one namespace's Role (about 200 KiB). A namespace whose
/// sequences have more slots gets Lease writes without names (every Lease of the
/// namespace, as before this narrowing), with a warning: use fewer worker bits.
pub const MAX_NAMED_LEASES: usize = 8192;

/// The sidecar ClusterRole as found: its name and uid (the owner of every Role and binding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub uid: String,
}

/// What the sidecars of one namespace need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The namespace's sequences, by name.
    pub sequences: BTreeSet<String>,
    /// The Leases they may write, by name; `None` when there are more than
    /// [`MAX_NAMED_LEASES`] (then every Lease of the namespace).
    pub leases: Option<BTreeSet<String>>,
    /// The service accounts the namespace's labelled pods run as.
    pub accounts: BTreeSet<String>,
}

/// The Leases a sequence's sidecars write: its counter in Segment mode (and its oracle
/// Lease when strict: the operator creates it, sidecars take, renew and release it),
/// otherwise every slot Lease its layout allows. `None` for a spec that is not valid (its
/// sidecars wait).
pub fn sequence_leases(seq: &IdSequence) -> Option<Vec<String>> {
    let name = seq.name_any();
    if seq.spec.mode == Mode::Segment {
        let strict = seq.spec.segment.as_ref().is_some_and(|s| s.strict);
        return Some(if strict {
            vec![counter_name(&name), oracle_name(&name)]
        } else {
            vec![counter_name(&name)]
        });
    }
    let slots = seq.spec.params().ok()?.layout.slot_count();
    Some(
        (0..slots)
            .map(|n| lease_name(&name, Slot(n as u32)))
            .collect(),
    )
}

/// What each namespace that has a sequence needs, from the sequences and the labelled pods.
pub fn needs(sequences: &[Arc<IdSequence>], pods: &[Arc<Pod>]) -> BTreeMap<String, Needs> {
    let mut all: BTreeMap<String, Needs> = BTreeMap::new();
    for seq in sequences {
        let Some(ns) = seq.namespace() else { continue };
        let needs = all.entry(ns).or_insert_with(|| Needs {
            leases: Some(BTreeSet::new()),
            ..Needs::default()
        });
        needs.sequences.insert(seq.name_any());
        if let (Some(names), Some(more)) = (needs.leases.as_mut(), sequence_leases(seq)) {
            names.extend(more);
            if names.len() > MAX_NAMED_LEASES {
                needs.leases = None;
            }
        }
    }
    for (ns, accounts) in accounts(pods) {
        if let Some(needs) = all.get_mut(&ns) {
            needs.accounts = accounts;
        }
    }
    all
}

/// The service accounts the labelled pods run as, by namespace (a pod without
/// `serviceAccountName` runs as `default`). Cheap enough to look at every second.
pub fn accounts(pods: &[Arc<Pod>]) -> BTreeMap<String, BTreeSet<String>> {
    let mut all: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in pods {
        let Some(ns) = pod.namespace() else { continue };
        if pod.labels().contains_key(SEQUENCE_LABEL) {
            let account = pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| "default".into());
            all.entry(ns).or_default().insert(account);
        }
    }
    all
}

fn rule(
    group: &str,
    resource: &str,
    verbs: &[&str],
    names: Option<&BTreeSet<String>>,
) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: names.map(|n| n.iter().cloned().collect()),
        ..Default::default()
    }
}

fn managed_meta(namespace: &str, owner: &Owner) -> ObjectMeta {
    ObjectMeta {
        name: Some(BINDING.into()),
        namespace: Some(namespace.into()),
        owner_references: Some(vec![OwnerReference {
            api_version: ClusterRole::api_version(&()).into(),
            kind: ClusterRole::kind(&()).into(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
            ..Default::default()
        }]),
        labels: Some(BTreeMap::from([
            (MANAGED_LABEL.to_string(), "true".to_string()),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "kubeflake-operator".to_string(),
            ),
        ])),
        ..Default::default()
    }
}

/// The rules a namespace's sidecars get: find their slot Lease (get, list, watch every
/// Lease: a label-selected list cannot be narrowed by name), write only their sequences'
/// Leases (update for a renewal or release, patch for a segment claim), read their
/// sequences by name, post Events. No create or delete of anything.
pub fn rules(needs: &Needs) -> Vec<PolicyRule> {
    vec![
        rule(
            "coordination.k8s.io",
            "leases",
            &["get", "list", "watch"],
            None,
        ),
        rule(
            "coordination.k8s.io",
            "leases",
            &["update", "patch"],
            needs.leases.as_ref(),
        ),
        rule(
            "kubeflake.io",
            "idsequences",
            &["get"],
            Some(&needs.sequences),
        ),
        rule("events.k8s.io", "events", &["create", "patch"], None),
    ]
}

/// The Role for `namespace`, owned by the sidecar ClusterRole. No `blockOwnerDeletion`:
/// deleting the ClusterRole need not wait for it, and setting it would need more rights.
pub fn role(namespace: &str, needs: &Needs, owner: &Owner) -> Role {
    Role {
        metadata: managed_meta(namespace, owner),
        rules: Some(rules(needs)),
    }
}

/// The binding of the namespace's Role to the service accounts its labelled pods run as.
pub fn binding(namespace: &str, accounts: &BTreeSet<String>, owner: &Owner) -> RoleBinding {
    RoleBinding {
        metadata: managed_meta(namespace, owner),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: BINDING.into(),
        },
        subjects: Some(
            accounts
                .iter()
                .map(|account| Subject {
                    api_group: None,
                    kind: "ServiceAccount".into(),
                    name: account.clone(),
                    namespace: Some(namespace.into()),
                })
                .collect(),
        ),
    }
}

/// Which of the two objects a change is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Object {
    Role,
    Binding,
}

/// One write to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create {
        namespace: String,
        object: Object,
    },
    /// Replace the object read at `version` with what the namespace needs now.
    Update {
        namespace: String,
        object: Object,
        version: String,
    },
    /// Delete the object with this uid: unneeded, or not owned by the current ClusterRole,
    /// or a binding whose `roleRef` is not this Role (it cannot be changed in place, and is
    /// created again on the next pass).
    Delete {
        namespace: String,
        object: Object,
        uid: String,
    },
}

/// One managed Role or binding as observed.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub namespace: String,
    pub uid: String,
    pub version: String,
    /// The uid of the ClusterRole that owns it, if any.
    pub owner_uid: Option<String>,
    /// For a Role, its rules; for a binding, its subjects (and whether its roleRef is the
    /// namespace's Role).
    pub content: Content,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Rules(Vec<PolicyRule>),
    Binding {
        subjects: Vec<Subject>,
        refers_to_role: bool,
    },
}

impl Content {
    /// Which object this is the content of.
    pub fn object(&self) -> Object {
        match self {
            Content::Rules(_) => Object::Role,
            Content::Binding { .. } => Object::Binding,
        }
    }
}

/// The writes that make the Roles and bindings match `needs`. `owner` is `None` while
/// the ClusterRole does not exist: then nothing is created or updated, and objects are
/// only deleted where no sequence is left.
pub fn plan(
    needs: &BTreeMap<String, Needs>,
    observed: &[Observed],
    owner: Option<&Owner>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    // Objects seen in namespaces that need them: kept, updated, or deleted now and created
    // again on the next pass (never deleted and created in one pass).
    let mut seen: BTreeSet<(&str, Object)> = BTreeSet::new();
    for o in observed {
        let (ns, object) = (o.namespace.as_str(), o.content.object());
        let delete = Change::Delete {
            namespace: ns.to_string(),
            object,
            uid: o.uid.clone(),
        };
        let Some(need) = needs.get(ns) else {
            changes.push(delete);
            continue;
        };
        let Some(owner) = owner else { continue };
        seen.insert((ns, object));
        let change = match &o.content {
            _ if o.owner_uid.as_deref() != Some(owner.uid.as_str()) => Some(delete),
            Content::Binding {
                refers_to_role: false,
                ..
            } => Some(delete),
            Content::Rules(now) => (*now != rules(need)).then(|| update(o)),
            Content::Binding { subjects, .. } => {
                let wanted = binding(ns, &need.accounts, owner).subjects;
                (*subjects != wanted.unwrap_or_default()).then(|| update(o))
            }
        };
        changes.extend(change);
    }
    if owner.is_none() {
        return changes;
    }
    for ns in needs.keys() {
        for object in [Object::Role, Object::Binding] {
            if !seen.contains(&(ns.as_str(), object)) {
                changes.push(Change::Create {
                    namespace: ns.clone(),
                    object,
                });
            }
        }
    }
    changes
}

/// Replace `o` (read at its version) with what its namespace needs now.
fn update(o: &Observed) -> Change {
    Change::Update {
        namespace: o.namespace.clone(),
        object: o.content.object(),
        version: o.version.clone(),
    }
}

mod keep;
pub use keep::keep_sidecar_bindings;

#[cfg(test)]
mod tests;
