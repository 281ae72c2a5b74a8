//! The NetworkPolicy the operator makes per IdSequence (`--sequence-network-policy`,
//! docs/install.md, "Network policies"), against the real API server and garbage
//! collector: the API server accepts the object as the operator builds it (ports, port
//! ranges, peers), it is owned by its sequence and goes with it, and a same-named policy
//! kubeflake did not make is never adopted (docs/safety.md rule 16's treatment of foreign
//! objects).
//!
//! Not tested here: enforcement. The test control plane has no node, and the test node's
//! CNI (bridge) does not enforce NetworkPolicy, so nothing here shows that a packet is
//! dropped; what is tested is the object the CNI would read.

mod operator_support;

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kubeflake_crds::IdSequence;
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::{Operator, create_sequence, eventually, install_crd};
use serde_json::{Value, json};

const LABEL: &str = "kubeflake.io/network-policy";

async fn policy(ns: &TestNamespace, name: &str) -> Result<Option<NetworkPolicy>> {
    let api: Api<NetworkPolicy> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(api.get_opt(name).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_sequence_gets_a_policy_the_api_server_accepts_and_it_goes_with_the_sequence()
-> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("netpol-owned").await?;
    let probe_from =
        r#"[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#;
    let _operator = Operator::start_with(
        cluster,
        &ns.name,
        "a",
        &[
            "--sequence-network-policy",
            "allow-other-ports",
            "--sequence-network-policy-probe-from",
            probe_from,
        ],
    )?;
    let seq = create_sequence(
        &ns,
        "tokens",
        json!({"mode": "Segment", "segment": {"start": 1, "strict": true}}),
    )
    .await?;
    let made = eventually(Duration::from_secs(60), "the policy is made", || async {
        policy(&ns, "tokens-kubeflake").await
    })
    .await?;
    let labels = made.metadata.labels.clone().unwrap_or_default();
    ensure!(
        labels.get(LABEL).map(String::as_str) == Some("tokens"),
        "{labels:?}"
    );
    let owner = made.metadata.owner_references.clone().unwrap_or_default();
    ensure!(
        owner.len() == 1
            && owner[0].kind == "IdSequence"
            && owner[0].uid == seq.metadata.uid.clone().unwrap_or_default()
            && owner[0].controller == Some(true),
        "owned by the sequence as controller: {owner:?}"
    );
    // As stored by the API server (defaults filled in), the rules the operator wrote.
    let spec = serde_json::to_value(&made.spec)?;
    ensure!(
        spec["podSelector"] == json!({"matchLabels": {"kubeflake.io/sequence": "tokens"}}),
        "{spec:#}"
    );
    let rules = spec["ingress"].as_array().cloned().unwrap_or_default();
    ensure!(rules.len() == 3, "oracle, probe, other ports: {spec:#}");
    ensure!(
        rules[0]["from"]
            == json!([{"podSelector": {"matchLabels": {"kubeflake.io/sequence": "tokens"}}}])
            && rules[0]["ports"] == json!([{"port": 7072, "protocol": "TCP"}]),
        "the oracle port only from the sequence's pods: {:#}",
        rules[0]
    );
    ensure!(
        rules[1]["from"] == serde_json::from_str::<Value>(probe_from)?
            && rules[1]["ports"] == json!([{"port": 7071, "protocol": "TCP"}]),
        "the probe port from the configured peers: {:#}",
        rules[1]
    );
    ensure!(
        rules[2].get("from").is_none()
            && rules[2]["ports"]
                == json!([
                    {"port": 1, "endPort": 7070, "protocol": "TCP"},
                    {"port": 7073, "endPort": 65535, "protocol": "TCP"},
                    {"protocol": "UDP"},
                    {"protocol": "SCTP"},
                ]),
        "every other port: {:#}",
        rules[2]
    );

    let sequences: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    sequences.delete("tokens", &DeleteParams::default()).await?;
    eventually(
        Duration::from_secs(90),
        "the garbage collector removes the policy with its sequence",
        || async {
            let gone = policy(&ns, "tokens-kubeflake").await?.is_none()
                && sequences.get_opt("tokens").await?.is_none();
            anyhow::Ok(gone.then_some(()))
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule16_a_same_named_policy_kubeflake_did_not_make_is_never_adopted() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("netpol-foreign").await?;
    // Someone's own policy that happens to (or means to) take the name: it lets in
    // everything on every port.
    let theirs: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "orders-kubeflake", "labels": {"team": "shop"}},
        "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]},
    }))?;
    let api: Api<NetworkPolicy> = Api::namespaced(ns.client.clone(), &ns.name);
    let created = api.create(&PostParams::default(), &theirs).await?;
    let operator = Operator::start_with(
        cluster,
        &ns.name,
        "a",
        &["--sequence-network-policy", "kubeflake-ports-only"],
    )?;
    create_sequence(&ns, "orders", json!({})).await?;
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    let note = eventually(Duration::from_secs(60), "a Warning Event", || async {
        let found = events.list(&ListParams::default()).await?.items;
        anyhow::Ok(found.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some("ForeignNetworkPolicy")
                && e.type_.as_deref() == Some("Warning"))
            .then(|| e.note.unwrap_or_default())
        }))
    })
    .await?;
    for part in [
        "orders-kubeflake",
        "not made by kubeflake",
        "kubectl delete networkpolicy",
    ] {
        ensure!(note.contains(part), "the Event says {part:?}: {note}");
    }
    let counted = eventually(Duration::from_secs(30), "the metric counts it", || async {
        let n = operator.metric_with(
            "kubeflake_operator_network_policies_total",
            "outcome=\"foreign\"",
        );
        anyhow::Ok((n >= 1.0).then_some(n))
    })
    .await?;
    ensure!(counted == 1.0, "counted once: {counted}");
    // A few passes later it is still exactly theirs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = api.get("orders-kubeflake").await?;
    ensure!(
        now.metadata.resource_version == created.metadata.resource_version
            && now.metadata.owner_references.is_none(),
        "the foreign policy was written or adopted: {:?}",
        now.metadata
    );

    // Deleted by its owner: the operator makes its own.
    api.delete("orders-kubeflake", &DeleteParams::default())
        .await?;
    let ours = eventually(
        Duration::from_secs(60),
        "kubeflake's own policy",
        || async {
            let found = policy(&ns, "orders-kubeflake").await?;
            anyhow::Ok(found.filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(LABEL))
            }))
        },
    )
    .await?;
    let rules = serde_json::to_value(&ours.spec)?["ingress"].clone();
    ensure!(
        rules == json!([{"ports": [{"port": 7071, "protocol": "TCP"}]}]),
        "only the probe port (not strict, kubeflake's ports only): {rules:#}"
    );
    Ok(())
}
