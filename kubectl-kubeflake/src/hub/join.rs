//! `hub join`: in a member cluster, the `IdSpaceMembership` that makes the operator join a
//! sequence to the space (crds/src/id_space/membership.rs), named after the sequence, in
//! the sequence's namespace. The sequence must exist; the member name is checked as the
//! registry checks it. Run again with the same values it changes nothing; the fields are
//! immutable, so a membership with other values is an error naming them.

use kube::Client;
use kube::api::{Api, PostParams};
use kubeflake_crds::id_space::membership::SpaceRef;
use kubeflake_crds::id_space::{IdSpaceMembership, IdSpaceMembershipSpec, MemberName};
use serde::Serialize;

use crate::cluster;
use crate::error::CliError;
use crate::output::{Report, fields};

/// What `hub join` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinReport {
    pub membership: String,
    pub namespace: String,
    /// `created` or `unchanged`.
    pub result: String,
    pub spec: IdSpaceMembershipSpec,
}

/// The membership's spec from the flags; a bad member name is a usage error.
pub fn spec(
    sequence: &str,
    member: &str,
    (space, space_namespace): (&str, &str),
    hub_secret: &str,
) -> Result<IdSpaceMembershipSpec, CliError> {
    let name = MemberName::new(member).map_err(|e| CliError::BadHubFlag {
        flag: "MEMBER",
        reason: e.to_string(),
    })?;
    Ok(IdSpaceMembershipSpec {
        sequence: sequence.to_string(),
        member_name: name.to_string(),
        space: SpaceRef {
            namespace: space_namespace.to_string(),
            name: space.to_string(),
        },
        hub_secret: hub_secret.to_string(),
    })
}

/// Creates the membership of `spec.sequence` in `namespace` (the sequence must exist).
pub async fn join(
    client: &Client,
    namespace: &str,
    spec: IdSpaceMembershipSpec,
) -> Result<JoinReport, CliError> {
    let name = spec.sequence.clone();
    cluster::get_sequence(client, namespace, &name).await?;
    let api: Api<IdSpaceMembership> = Api::namespaced(client.clone(), namespace);
    let what = format!("idspacemembership {name} in namespace {namespace}");
    let existing = api.get_opt(&name).await.map_err(|source| CliError::Api {
        what: format!("read {what}"),
        source,
    })?;
    let result = match existing {
        Some(found) if found.spec == spec => "unchanged",
        Some(found) => {
            return Err(CliError::MembershipDiffers {
                membership: format!("{namespace}/{name}"),
                found: format!("{:?}", found.spec),
            });
        }
        None => {
            api.create(
                &PostParams::default(),
                &IdSpaceMembership::new(&name, spec.clone()),
            )
            .await
            .map_err(|source| CliError::Api {
                what: format!("create {what}"),
                source,
            })?;
            "created"
        }
    };
    Ok(JoinReport {
        membership: name,
        namespace: namespace.to_string(),
        result: result.to_string(),
        spec,
    })
}

impl Report for JoinReport {
    fn table(&self) -> String {
        fields(&[
            (
                "IDSPACEMEMBERSHIP",
                format!("{}/{} ({})", self.namespace, self.membership, self.result),
            ),
            ("MEMBER", self.spec.member_name.clone()),
            (
                "SPACE",
                format!(
                    "{}/{} on the hub",
                    self.spec.space.namespace, self.spec.space.name
                ),
            ),
            ("HUB SECRET", self.spec.hub_secret.clone()),
        ])
    }
}
