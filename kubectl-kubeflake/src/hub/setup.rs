//! `hub init` and `hub add-member`: the hub's objects for one space, made idempotently
//! (docs/design/2026-11-29-multicluster.md, "How a member authenticates"):
//!
//! - `init`: the space's namespace, its `IdSpace` (the parameters checked by the API
//!   crate's `IdSpaceSpec::space` first), the generated hub admission policy with its
//!   binding (crds/src/id_space/hub_policy.rs), and the Role members are bound to: get,
//!   list, watch and update of that one IdSpace, nothing else;
//! - `add-member`: the member's ServiceAccount (`member-<name>`, the prefix the policy
//!   holds), its RoleBinding to that Role, and a token for it
//!   ([`super::member_secret`] turns it into the Secret the member cluster applies).
//!
//! Cluster-scoped and RBAC objects are server-side applied (field manager
//! `kubectl-kubeflake`), so running a command again changes nothing; an IdSpace that
//! exists is never overwritten: its parameters are immutable, so one that differs is an
//! error naming the fields.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use kubeflake_crds::id_space::hub_policy::{self, MEMBER_ACCOUNT_PREFIX, POLICY_NAME};
use kubeflake_crds::id_space::{IdSpace, IdSpaceSpec};
use serde::Serialize;

use crate::error::CliError;

/// The Role every member of a space's namespace is bound to.
pub const MEMBER_ROLE: &str = "kubeflake-member";
const MANAGER: &str = "kubectl-kubeflake";

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    }
}

fn api_error(what: String) -> impl FnOnce(kube::Error) -> CliError {
    move |source| CliError::Api { what, source }
}

/// Server-side applies `object` (its own name) through `api`.
async fn apply<K>(api: &Api<K>, object: &K) -> Result<(), CliError>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&()).to_string();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
    .map_err(api_error(format!("apply {kind} {name}")))
}

/// The design's Role: the one IdSpace, get, list, watch and update (a compare-and-swap:
/// an update carries the resourceVersion read; no patch, create or delete).
pub fn member_role(namespace: &str, space: &str) -> Role {
    Role {
        metadata: meta(MEMBER_ROLE, Some(namespace)),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![kubeflake_crds::GROUP.to_string()]),
            resources: Some(vec!["idspaces".to_string()]),
            resource_names: Some(vec![space.to_string()]),
            verbs: ["get", "list", "watch", "update"]
                .map(str::to_string)
                .to_vec(),
            ..Default::default()
        }]),
    }
}

/// The RoleBinding of member `account` to [`MEMBER_ROLE`].
pub fn member_binding(namespace: &str, account: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(account, Some(namespace)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: MEMBER_ROLE.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: account.to_string(),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        }]),
    }
}

/// What `init` found or made, one line per object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    pub kind: String,
    pub name: String,
    /// `created`, `applied` (server-side apply: unchanged when it was already so) or
    /// `unchanged`.
    pub result: String,
}

fn applied(kind: &str, name: &str, result: &str) -> Applied {
    Applied {
        kind: kind.to_string(),
        name: name.to_string(),
        result: result.to_string(),
    }
}

/// Makes the namespace, the policy and binding, the Role and the IdSpace with `spec`.
pub async fn init(
    client: &Client,
    (space, namespace): (&str, &str),
    spec: IdSpaceSpec,
) -> Result<Vec<Applied>, CliError> {
    let mut done = Vec::new();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_read = namespaces
        .get_opt(namespace)
        .await
        .map_err(api_error(format!("read namespace {namespace}")))?;
    if ns_read.is_none() {
        namespaces
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: meta(namespace, None),
                    ..Default::default()
                },
            )
            .await
            .map_err(api_error(format!("create namespace {namespace}")))?;
        done.push(applied("Namespace", namespace, "created"));
    } else {
        done.push(applied("Namespace", namespace, "unchanged"));
    }
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    apply(&policies, &hub_policy::policy(POLICY_NAME)).await?;
    done.push(applied("ValidatingAdmissionPolicy", POLICY_NAME, "applied"));
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    apply(
        &bindings,
        &hub_policy::binding(POLICY_NAME, POLICY_NAME, None),
    )
    .await?;
    done.push(applied(
        "ValidatingAdmissionPolicyBinding",
        POLICY_NAME,
        "applied",
    ));
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    apply(&roles, &member_role(namespace, space)).await?;
    done.push(applied("Role", MEMBER_ROLE, "applied"));
    let spaces: Api<IdSpace> = Api::namespaced(client.clone(), namespace);
    let what = || format!("idspace {space} in namespace {namespace}");
    match spaces
        .get_opt(space)
        .await
        .map_err(api_error(format!("read {}", what())))?
    {
        Some(existing) => {
            let differ = differences(&existing.spec, &spec);
            if !differ.is_empty() {
                return Err(CliError::SpaceDiffers {
                    space: format!("{namespace}/{space}"),
                    fields: differ.join(", "),
                });
            }
            done.push(applied("IdSpace", space, "unchanged"));
        }
        None => {
            spaces
                .create(&PostParams::default(), &IdSpace::new(space, spec))
                .await
                .map_err(api_error(format!("create {}", what())))?;
            done.push(applied("IdSpace", space, "created"));
        }
    }
    Ok(done)
}

/// The immutable parameters in which `stored` and `wanted` differ.
pub fn differences(stored: &IdSpaceSpec, wanted: &IdSpaceSpec) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name} is {a}, not {b}"));
        }
    };
    field(
        "sequence",
        format!("{:?}", stored.sequence),
        format!("{:?}", wanted.sequence),
    );
    field(
        "blockSlots",
        stored.block_slots.to_string(),
        wanted.block_slots.to_string(),
    );
    field(
        "toleranceSeconds",
        stored.tolerance_seconds.to_string(),
        wanted.tolerance_seconds.to_string(),
    );
    field(
        "renewEverySeconds",
        stored.renew_every_seconds.to_string(),
        wanted.renew_every_seconds.to_string(),
    );
    out
}

/// Member `name`'s ServiceAccount, the Role and its RoleBinding; returns a token for the
/// account lasting `duration_secs` (the API server may cap it) and its expiry.
pub async fn add_member(
    client: &Client,
    (space, namespace): (&str, &str),
    name: &str,
    duration_secs: i64,
) -> Result<(String, String), CliError> {
    let account = format!("{MEMBER_ACCOUNT_PREFIX}{name}");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    apply(
        &accounts,
        &ServiceAccount {
            metadata: meta(&account, Some(namespace)),
            ..Default::default()
        },
    )
    .await?;
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    apply(&roles, &member_role(namespace, space)).await?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    apply(&bindings, &member_binding(namespace, &account)).await?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(duration_secs),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(api_error(format!(
            "create a token for serviceaccount {account} in namespace {namespace}"
        )))?;
    let status = token.status.ok_or(CliError::NoToken { account })?;
    Ok((status.token, status.expiration_timestamp.0.to_string()))
}
