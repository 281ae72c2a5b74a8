//! The oracle token volume the webhook adds to every labelled pod, mounted by the sidecar
//! alone (`super::sidecar`), never by an app container.

use k8s_openapi::api::core::v1::{
    ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use kubeflake_crds::contract;

/// The projected service-account token the sidecar shows the other sidecars of a strict
/// sequence on the oracle port (docs/safety.md rule 16): bound to the pod, for the oracle's
/// own audience (so it is good for nothing else, and the pod's API token is not it), an
/// hour long (the kubelet rewrites the file before it expires).
pub fn volume() -> Volume {
    Volume {
        name: contract::ORACLE_TOKEN_VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(contract::ORACLE_TOKEN_AUDIENCE.into()),
                    expiration_seconds: Some(contract::ORACLE_TOKEN_EXPIRATION_SECONDS),
                    path: contract::ORACLE_TOKEN_FILE_NAME.into(),
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
