//! The API server can be killed with SIGKILL and started again while etcd keeps the data;
//! later tests use this to check how the operator and sidecar ride out an outage.
//!
//! In its own file (so its own test binary and cluster): it takes the API server away
//! from every other test of the binary.

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::PostParams;
use kubeflake_e2e::Cluster;

#[tokio::test]
async fn apiserver_survives_kill_9_and_restart() -> Result<()> {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("restart").await?;
    let maps: Api<ConfigMap> = Api::default_namespaced(ns.client.clone());
    let mut map = ConfigMap::default();
    map.metadata.name = Some("before-restart".into());
    maps.create(&PostParams::default(), &map).await?;
    let pids_before = cluster.pids();

    cluster.kill_apiserver();
    assert!(
        cluster
            .kubectl(&["get", "ns", "--request-timeout=2s"])
            .await?
            .status
            .code()
            != Some(0),
        "kubectl still works with the API server killed"
    );
    cluster.start_apiserver().await?;

    // Same address, same certificates, same data; a fresh client simply works again.
    let client = cluster.client()?;
    Api::<Namespace>::all(client.clone()).get(&ns.name).await?;
    Api::<ConfigMap>::namespaced(client, &ns.name)
        .get("before-restart")
        .await?;
    let pid =
        |pids: &[(String, u32)], name: &str| pids.iter().find(|(n, _)| n == name).map(|(_, p)| *p);
    let pids_after = cluster.pids();
    assert_ne!(
        pid(&pids_before, "kube-apiserver"),
        pid(&pids_after, "kube-apiserver"),
        "not a new process"
    );
    assert_eq!(
        pid(&pids_before, "etcd"),
        pid(&pids_after, "etcd"),
        "etcd must keep running"
    );

    // restart_apiserver does both steps at once.
    cluster.restart_apiserver().await?;
    cluster
        .kubectl(&["get", "configmap", "before-restart", "-n", &ns.name])
        .await?
        .ok()?;
    Ok(())
}
