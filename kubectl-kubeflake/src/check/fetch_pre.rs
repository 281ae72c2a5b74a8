//! Asks the API server what `check --pre` judges: `/version`, the resources of each
//! group/version the chart uses, and one SelfSubjectAccessReview per kind it creates.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::model::Finding;
use super::pre::{CHART_KINDS, Right, judge_rights, judge_served, judge_version};
use crate::error::CliError;

fn api_error(what: &str) -> impl FnOnce(kube::Error) -> CliError {
    let what = what.to_string();
    move |source| CliError::Api { what, source }
}

/// Every `--pre` finding; a request the API server refuses or cannot answer is an error.
pub async fn run(client: &Client, namespace: &str) -> Result<Vec<Finding>, CliError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(api_error("read the API server's version"))?;
    let mut findings = vec![judge_version(&info.major, &info.minor, &info.git_version)];

    let versions: BTreeSet<&str> = CHART_KINDS.iter().map(|k| k.group_version).collect();
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for gv in versions {
        let list = if gv == "v1" {
            client.list_core_api_resources(gv).await
        } else {
            client.list_api_group_resources(gv).await
        };
        match list {
            Ok(list) => {
                served.insert(
                    gv.to_string(),
                    list.resources.into_iter().map(|r| r.name).collect(),
                );
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => {
                return Err(CliError::Api {
                    what: format!("list the resources of {gv}"),
                    source,
                });
            }
        }
    }
    findings.push(judge_served(&served));

    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut rights = Vec::new();
    for kind in CHART_KINDS {
        let group = kind
            .group_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group);
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("create".to_string()),
                    group: Some(group.to_string()),
                    resource: Some(kind.resource.to_string()),
                    namespace: kind.namespaced.then(|| namespace.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(api_error(&format!(
                "ask whether you may create {} (SelfSubjectAccessReview)",
                kind.resource
            )))?;
        let status = answer.status.unwrap_or_default();
        rights.push(Right {
            kind,
            allowed: status.allowed,
        });
    }
    findings.push(judge_rights(&rights, namespace));
    Ok(findings)
}
