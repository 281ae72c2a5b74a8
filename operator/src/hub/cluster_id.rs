//! This cluster's ID as an ID space knows it (KEP-2149): the value of the cluster-scoped
//! `ClusterProperty` `cluster.clusterset.k8s.io` (`about.k8s.io`) when the cluster has one,
//! else the UID of the `kube-system` namespace. A cluster without the ClusterProperty CRD
//! installed simply has none: that is not an error.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use kubeflake_crds::id_space::{IdentityError, MemberId};
use kubeflake_runtime::kube_error;

use super::connect::CALL_TIMEOUT;

/// The ClusterProperty naming the cluster within its ClusterSet.
pub const CLUSTER_PROPERTY: &str = "cluster.clusterset.k8s.io";

/// Why this cluster's ID could not be read. Nothing is claimed or renewed until it is.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    #[error(
        "cannot read this cluster's ID ({what}): {reason}; the operator needs get on the \
         kube-system namespace and on clusterproperties.about.k8s.io"
    )]
    Unreadable { what: &'static str, reason: String },
    #[error("the kube-system namespace has no UID: this API server cannot name the cluster")]
    NoUid,
    #[error("ClusterProperty {CLUSTER_PROPERTY}: {0}")]
    BadProperty(IdentityError),
    #[error("kube-system namespace UID: {0}")]
    BadUid(IdentityError),
}

/// Reads this cluster's ID from its own API server.
pub async fn this_cluster(client: &Client) -> Result<MemberId, ClusterIdError> {
    if let Some(value) = cluster_property(client).await? {
        return MemberId::new(&value).map_err(ClusterIdError::BadProperty);
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let unreadable = |reason: String| ClusterIdError::Unreadable {
        what: "namespace kube-system",
        reason,
    };
    let ns = tokio::time::timeout(CALL_TIMEOUT, namespaces.get("kube-system"))
        .await
        .map_err(|_| unreadable("no answer in time".into()))?
        .map_err(|e| unreadable(e.to_string()))?;
    let uid = ns.metadata.uid.ok_or(ClusterIdError::NoUid)?;
    MemberId::new(&uid).map_err(ClusterIdError::BadUid)
}

/// The ClusterProperty's `spec.value`, or `None` when the cluster has none (the object or
/// its CRD is absent).
async fn cluster_property(client: &Client) -> Result<Option<String>, ClusterIdError> {
    let gvk = GroupVersionKind::gvk("about.k8s.io", "v1alpha1", "ClusterProperty");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterproperties");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let unreadable = |reason: String| ClusterIdError::Unreadable {
        what: "ClusterProperty cluster.clusterset.k8s.io",
        reason,
    };
    let found = match tokio::time::timeout(CALL_TIMEOUT, api.get(CLUSTER_PROPERTY)).await {
        Err(_) => return Err(unreadable("no answer in time".into())),
        Ok(Err(e)) if kube_error::is_not_found(&e) => return Ok(None),
        Ok(Err(e)) => return Err(unreadable(e.to_string())),
        Ok(Ok(object)) => object,
    };
    match found.data.pointer("/spec/value").and_then(|v| v.as_str()) {
        Some(value) => Ok(Some(value.to_string())),
        None => Err(ClusterIdError::BadProperty(IdentityError::BadId(
            "(no spec.value)".into(),
        ))),
    }
}
