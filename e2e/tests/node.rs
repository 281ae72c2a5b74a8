//! kubeflake on a real node: the chart's operator pods, the injected native sidecar and
//! the example app run in real pods (kubelet, containerd, runc) on images built from this
//! repository, the way a platform team meets it: `helm install`, a labelled Deployment,
//! IDs over `$KUBEFLAKE_URL`.
//!
//! One node and one release serve every test here; the tests take turns (2 cores).
//! The rules named are those of docs/safety.md.

mod chart_support;
mod node_support;
mod operator_support;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflake_crds::IdSequenceSpec;
use kubeflake_crds::contract;
use kubeflake_crds::slot_lease::{RELEASED_AT_ANNOTATION, SEQUENCE_LABEL, SlotLease};
use kubeflake_e2e::Cluster;
use kubeflake_e2e::addresses;
use kubeflake_e2e::node::{self, CONTAINERD_SOCKET};
use node_support::*;
use operator_support::{create_sequence, eventually, slot_leases};

fn cluster() -> &'static Cluster {
    Cluster::shared_with_node()
}

/// The injected sidecar's container name (operator `inject::SIDECAR_NAME`).
const SIDECAR: &str = "kubeflake-sidecar";

#[tokio::test]
async fn the_node_keeps_pod_traffic_on_this_machine_by_its_rules_and_routes() -> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    let network = cluster
        .network()
        .context("the node cluster has a network")?;
    let (ok, report) = network.check();
    assert!(ok, "a network rule is missing:\n{report}");

    // The API server and the kubelet listen on the bridge address only.
    let listeners = tcp_listeners()?;
    for port in [addresses::APISERVER_PORT, 10250] {
        let on: Vec<_> = listeners.iter().filter(|(_, p)| *p == port).collect();
        assert!(
            !on.is_empty(),
            "nothing listens on port {port}: {listeners:?}"
        );
        assert!(
            on.iter().all(|(ip, _)| *ip == addresses::BRIDGE_IP),
            "port {port} is bound beyond the bridge address: {on:?}"
        );
    }
    // The node is reached by its InternalIP, the bridge address.
    let addresses = cluster
        .kubectl(&[
            "get",
            "node",
            addresses::NODE_NAME,
            "-o",
            "jsonpath={.status.addresses}",
        ])
        .await?
        .ok()?;
    assert!(
        addresses.contains(&format!(
            "{{\"address\":\"{}\",\"type\":\"InternalIP\"}}",
            addresses::BRIDGE_IP
        )),
        "{addresses}"
    );
    let apiserver_flags = process_cmdline("kube-apiserver", cluster)?;
    assert!(
        apiserver_flags.contains("--kubelet-preferred-address-types=InternalIP"),
        "{apiserver_flags}"
    );
    // Cluster DNS answers cluster names and refuses every other name (never forwards).
    let answer = dns_query(addresses::BRIDGE_IP, "kubernetes.default.svc.cluster.local")?;
    assert_eq!(answer, DnsAnswer::A(vec![addresses::KUBERNETES_SERVICE_IP]));
    let outside = dns_query(addresses::BRIDGE_IP, "example.com")?;
    assert_eq!(
        outside,
        DnsAnswer::Refused,
        "a name outside the cluster must be refused"
    );
    let corefile = std::fs::read_to_string(cluster.dir().join("Corefile"))?;
    assert!(!corefile.contains("forward"), "{corefile}");

    // A running pod has no default route; it reaches Services through the bridge.
    shared_release(cluster).await?;
    let operator_pid = container_pid_of("/kubeflake-operator")?;
    let routes = std::fs::read_to_string(format!("/proc/{operator_pid}/net/route"))?;
    let routes = parse_routes(&routes);
    assert!(
        !routes.iter().any(|(dst, mask, _)| *dst == 0 && *mask == 0),
        "a pod has a default route: {routes:?}"
    );
    assert!(
        routes.iter().any(|(dst, mask, gw)| *dst
            == u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0))
            && *mask == 0xffff_0000
            && *gw == u32::from(addresses::BRIDGE_IP)),
        "no route to the Service range through the bridge: {routes:?}"
    );
    Ok(())
}

#[tokio::test]
async fn the_images_are_the_dockerfiles_static_non_root_and_without_a_shell() -> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile"))?;
    for (target, image) in [
        ("operator", node::OPERATOR_IMAGE),
        ("sidecar", node::SIDECAR_IMAGE),
        ("example-app", node::EXAMPLE_APP_IMAGE),
    ] {
        let exported = ExportedImage::export(image)?;
        let config = exported.config()?;
        let stage = dockerfile_stage(&dockerfile, target);
        let entrypoint = stage
            .iter()
            .find_map(|l| l.strip_prefix("ENTRYPOINT "))
            .with_context(|| format!("stage {target} has an ENTRYPOINT"))?;
        let entrypoint: Vec<String> = serde_json::from_str(entrypoint)?;
        assert_eq!(
            config["Entrypoint"],
            serde_json::json!(entrypoint),
            "{image}"
        );
        assert_eq!(config["User"], "65532:65532", "{image}");
        let exposed: BTreeSet<String> = stage
            .iter()
            .filter_map(|l| l.strip_prefix("EXPOSE "))
            .flat_map(|l| l.split_whitespace().map(|p| format!("{p}/tcp")))
            .collect();
        let in_image: BTreeSet<String> = config["ExposedPorts"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(
            in_image, exposed,
            "{image}: exposed ports differ from the Dockerfile"
        );
        let files = exported.files()?;
        let binary = entrypoint[0].trim_start_matches('/');
        let expected: BTreeSet<String> = [
            binary.to_owned(),
            "etc/ssl/certs/ca-certificates.crt".into(),
        ]
        .into();
        assert_eq!(
            files, expected,
            "{image} holds more than its binary and the CA roots"
        );
    }
    // The binaries need no C runtime from the image: fully static.
    let _ = cluster;
    Ok(())
}

#[tokio::test]
async fn helm_install_runs_both_operator_replicas_ready_and_helm_test_passes() -> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    shared_release(cluster).await?;
    let ready = cluster
        .kubectl(&[
            "get",
            "deployment",
            &format!("{RELEASE}-kubeflake"),
            "-n",
            RELEASE_NAMESPACE,
            "-o",
            "jsonpath={.status.readyReplicas}",
        ])
        .await?
        .ok()?;
    assert_eq!(ready.trim(), "2", "both operator replicas are Ready");
    let out = chart_support::helm(
        cluster,
        &[
            "test",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "--timeout",
            "3m",
        ],
    )
    .await?;
    assert!(
        out.success(),
        "helm test failed:\n{}{}",
        out.stdout,
        out.stderr
    );
    // The test pod is deleted once it succeeded (hook-succeeded), and helm's own report
    // of it is sometimes empty ("TEST SUITE: None"); the release records every hook's last
    // run, which is what is asserted.
    let status = chart_support::helm(
        cluster,
        &[
            "status",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "-o",
            "json",
        ],
    )
    .await?;
    let status: serde_json::Value = serde_json::from_str(&status.stdout)?;
    let test_runs: Vec<(String, String)> = status["hooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| {
            h["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e == "test"))
        })
        .map(|h| {
            let name = h["name"].as_str().unwrap_or_default().to_string();
            let phase = h["last_run"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (name, phase)
        })
        .collect();
    assert!(
        !test_runs.is_empty() && test_runs.iter().all(|(_, phase)| phase == "Succeeded"),
        "every helm test hook ran and succeeded: {test_runs:?}\n{}",
        out.stdout
    );
    Ok(())
}

#[tokio::test]
async fn an_app_gets_native_sidecars_slots_and_unique_ids_through_rollouts_scaling_and_deletes()
-> Result<()> {
    // A short lease, so that a force-deleted pod's slot is reclaimed within the test.
    let short_lease = serde_json::json!({"lease": {"durationSeconds": 15}});
    let node = on_the_node(cluster(), "node-app", "orders", short_lease).await?;
    let (cluster, ns) = (node.cluster, node.ns.clone());
    let layout = IdSequenceSpec::default().layout.to_layout()?;
    node.deploy_app("app", "orders", 3).await?;

    // Each pod: the native sidecar first, the URL in the app, a slot, and IDs of that slot.
    let pods = ready_pods(&ns, "app").await?;
    assert_eq!(pods.len(), 3);
    let ledger = Ledger::default();
    for pod in &pods {
        let spec = pod.spec.as_ref().context("spec")?;
        let init = spec.init_containers.as_deref().unwrap_or_default();
        assert_eq!(init.first().map(|c| c.name.as_str()), Some(SIDECAR));
        assert_eq!(
            init[0].restart_policy.as_deref(),
            Some("Always"),
            "a native sidecar"
        );
        let env = spec.containers[0].env.as_deref().unwrap_or_default();
        assert!(
            env.iter().any(|e| e.name == "KUBEFLAKE_URL"),
            "KUBEFLAKE_URL injected"
        );
        let ids = ids_from_pod(&ns, &pod.name_any(), 200).await?;
        let slot = held_slot(&ns, "orders", &pod.uid().context("uid")?).await?;
        for &id in &ids {
            assert_eq!(
                slot_of(&layout, id)?,
                slot,
                "ID {id} of {} carries its slot",
                pod.name_any()
            );
        }
        ledger.add(&pod.name_any(), &ids);
    }

    // Rule 1-4, 9: while pods come and go, every ID from every pod stays unique.
    let (stop, collector) = collect_in_background(ns.clone(), "app".into(), ledger.clone());
    cluster
        .kubectl(&["rollout", "restart", "deployment/app", "-n", &ns.name])
        .await?
        .ok()?;
    rollout(cluster, &ns.name, "app").await?;
    ids_of_every_ready_pod(&ns, "app", 3, &ledger).await?;
    for replicas in [6, 2] {
        cluster
            .kubectl(&[
                "scale",
                "deployment/app",
                "--replicas",
                &replicas.to_string(),
                "-n",
                &ns.name,
            ])
            .await?
            .ok()?;
        rollout(cluster, &ns.name, "app").await?;
        ids_of_every_ready_pod(&ns, "app", replicas, &ledger).await?;
    }

    // Graceful delete (rule 5): the app container stops first, then the native sidecar
    // gets SIGTERM and releases its slot.
    let victim = first_ready_pod(&ns, "app").await?;
    let victim_uid = victim.uid().context("uid")?;
    let victim_slot = held_slot(&ns, "orders", &victim_uid).await?;
    let last_status = watch_until_deleted(&ns, &victim.name_any(), || async {
        cluster
            .kubectl(&[
                "delete",
                "pod",
                &victim.name_any(),
                "-n",
                &ns.name,
                "--wait=false",
            ])
            .await?
            .ok()?;
        Ok(())
    })
    .await?;
    let (app_end, sidecar_end) = termination_times(&last_status)?;
    assert!(
        app_end <= sidecar_end,
        "the sidecar stopped ({sidecar_end}) before the app container ({app_end})"
    );
    let lease = lease_of_slot(&ns, "orders", victim_slot).await?;
    let released = lease.holder.as_deref() != Some(victim_uid.as_str())
        && history_shows_release(&ns, victim_slot).await?;
    assert!(
        released,
        "slot {victim_slot} was not released by its graceful holder: {lease:?}"
    );

    // Forced delete (rules 3, 4, 9): the pod object is gone at once, the old containers
    // may still run; the slot is reclaimed only once the holder pod is gone, fence kept.
    rollout(cluster, &ns.name, "app").await?;
    ids_of_every_ready_pod(&ns, "app", 2, &ledger).await?;
    let forced = first_ready_pod(&ns, "app").await?;
    let forced_uid = forced.uid().context("uid")?;
    let forced_slot = held_slot(&ns, "orders", &forced_uid).await?;
    cluster
        .kubectl(&[
            "delete",
            "pod",
            &forced.name_any(),
            "-n",
            &ns.name,
            "--force",
            "--grace-period=0",
        ])
        .await?
        .ok()?;
    eventually(LIMIT, "the forced pod's slot to be reclaimed", || async {
        let lease = lease_of_slot(&ns, "orders", forced_slot).await?;
        Ok((lease.holder.as_deref() != Some(forced_uid.as_str())).then_some(()))
    })
    .await?;
    rollout(cluster, &ns.name, "app").await?;
    ids_of_every_ready_pod(&ns, "app", 2, &ledger).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let _ = stop.send(());
    let (answers, failed) = collector.await?;
    eprintln!(
        "collected {} IDs from {} pods in {answers} answers ({failed} failed while pods changed)",
        ledger.len(),
        ledger.pods()
    );
    assert!(answers >= 20, "too few answers to mean anything: {answers}");
    // Every pod after each step was asked directly: the first three, the three of the
    // restarted rollout, three more when scaled to six, the graceful victim's and the
    // forced one's replacements (scaling to two keeps pods already asked).
    assert!(
        ledger.pods() >= 11,
        "IDs came from {} pods only",
        ledger.pods()
    );
    let duplicates = ledger.duplicates();
    assert!(duplicates.is_empty(), "duplicate IDs: {duplicates:?}");
    Ok(())
}

#[tokio::test]
async fn a_sidecar_killed_in_its_pod_is_restarted_by_the_kubelet_and_starts_above_its_fence_file()
-> Result<()> {
    let node = on_the_node(cluster(), "node-restart", "restart", serde_json::json!({})).await?;
    let (cluster, ns) = (node.cluster, node.ns.clone());
    node.deploy_app("app", "restart", 1).await?;
    let pod = first_ready_pod(&ns, "app").await?;
    let name = pod.name_any();
    let uid = pod.uid().context("uid")?;
    let slot = held_slot(&ns, "restart", &uid).await?;
    let before = ids_from_pod(&ns, &name, 500).await?;

    // Kill the sidecar's process through the container runtime, as an OOM kill would.
    let container = sidecar_container_id(&pod)?;
    ctr(&["tasks", "kill", "--signal", "SIGKILL", &container])?;
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        LIMIT,
        "the kubelet to restart the sidecar and the pod to be ready",
        || async {
            let pod = pods.get(&name).await?;
            let status = pod.status.unwrap_or_default();
            let sidecar = status
                .init_container_statuses
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.name == SIDECAR);
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(sidecar
                .filter(|s| s.restart_count >= 1 && s.ready && ready)
                .map(|_| ()))
        },
    )
    .await?;
    let after = ids_from_pod(&ns, &name, 500).await?;

    // Same pod, same slot (rule 6), and strictly above everything before (rule 7).
    assert_eq!(
        held_slot(&ns, "restart", &uid).await?,
        slot,
        "the pod keeps its slot"
    );
    let highest_before = before.iter().max().copied().unwrap_or(0);
    let lowest_after = after.iter().min().copied().unwrap_or(0);
    assert!(
        lowest_after > highest_before,
        "after the restart the sidecar issued {lowest_after}, not above {highest_before}"
    );
    let logs = cluster
        .kubectl(&["logs", &name, "-c", SIDECAR, "-n", &ns.name])
        .await?
        .ok()?;
    assert!(
        logs.contains(r#""from":"local fence file""#),
        "the restarted sidecar did not start from its fence file:\n{logs}"
    );
    Ok(())
}

#[tokio::test]
async fn while_an_operator_pod_is_deleted_the_webhook_keeps_admitting_through_the_other_replica()
-> Result<()> {
    let node = on_the_node(cluster(), "node-webhook", "admit", serde_json::json!({})).await?;
    let (cluster, ns) = (node.cluster, node.ns.clone());
    let operators = cluster
        .kubectl(&[
            "get",
            "pods",
            "-n",
            RELEASE_NAMESPACE,
            "-l",
            "app.kubernetes.io/component=operator",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await?
        .ok()?;
    let victim = operators
        .split_whitespace()
        .next()
        .context("an operator pod")?
        .to_owned();
    let deleting = tokio::spawn(async move {
        cluster
            .kubectl(&["delete", "pod", &victim, "-n", RELEASE_NAMESPACE])
            .await
    });
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut created = Vec::new();
    for i in 0..20 {
        // Never scheduled (no node has the label): only admission is under test.
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("admitted-{i}"), "labels": {SEQUENCE_LABEL: "admit"}},
            "spec": {
                "nodeSelector": {"kubeflake.io/e2e-nowhere": "true"},
                "containers": [{"name": "app", "image": node::EXAMPLE_APP_IMAGE}]
            }
        }))?;
        let made = pods
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("pod {i} was not admitted while an operator pod stopped"))?;
        created.push(made);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    deleting.await??.ok()?;
    for pod in &created {
        let init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default();
        assert!(
            init.iter().any(|c| c.name == SIDECAR),
            "{} was created without its sidecar",
            pod.name_any()
        );
    }
    rollout(cluster, RELEASE_NAMESPACE, &format!("{RELEASE}-kubeflake")).await?;
    Ok(())
}

/// Also issue 18's socket check on the real node: the app (non-root, as the restricted
/// standard demands) reaches its sidecar over `KUBEFLAKE_SOCKET`, and the sidecar's state
/// volume, which holds the fence file, is not mounted in the app container at all.
#[tokio::test]
async fn a_namespace_enforcing_the_restricted_pod_security_standard_runs_injected_pods()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    shared_release(cluster).await?;
    let ns = cluster.namespace("node-restricted").await?;
    cluster
        .kubectl(&[
            "label",
            "namespace",
            &ns.name,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        ])
        .await?
        .ok()?;
    // The example users copy (README), as it is, with one replica.
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/app/deployment.yaml"
    ))?;
    let example = example.replace("replicas: 3", "replicas: 1");
    cluster
        .kubectl_with_stdin(&["apply", "-n", &ns.name, "-f", "-"], Some(&example))
        .await?
        .ok()?;
    rollout(cluster, &ns.name, "example-app").await?;
    let pod = first_ready_pod(&ns, "example-app").await?;
    let ids = ids_from_pod(&ns, &pod.name_any(), 10).await?;
    assert_eq!(ids.len(), 10);

    let answer = app_answer(&ns, &pod.name_any(), "/").await?;
    assert_eq!(
        answer["via"], "unix",
        "the app used the injected KUBEFLAKE_SOCKET: {answer}"
    );
    let pid = task_pid(&app_container_id(&pod)?)?;
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|e| e.starts_with(format!("{}=/", contract::SOCKET_ENV).as_bytes())),
        "KUBEFLAKE_SOCKET in the app's environment"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .context("Uid in /proc/<pid>/status")?;
    assert_ne!(uid, "0", "the app runs as a non-root user");
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    let mounts = parse_mountinfo(&mounts);
    let socket_mount = mounts
        .iter()
        .find(|m| m.point == contract::SOCKET_DIR)
        .with_context(|| format!("{} mounted in the app container", contract::SOCKET_DIR))?;
    assert!(
        socket_mount.options.split(',').any(|o| o == "ro"),
        "the socket volume is read-only for the app: {socket_mount:?}"
    );
    let state_volume = format!("kubernetes.io~empty-dir/{}", contract::STATE_VOLUME);
    let fence_mounts: Vec<_> = mounts
        .iter()
        .filter(|m| m.point == contract::STATE_DIR || m.root.contains(&state_volume))
        .collect();
    assert!(
        fence_mounts.is_empty(),
        "the fence file's volume must not reach the app container: {fence_mounts:?}"
    );
    Ok(())
}

/// One line of /proc/<pid>/mountinfo: the root within the mounted file system, where it
/// is mounted, and the per-mount options.
#[derive(Debug)]
struct Mount {
    root: String,
    point: String,
    options: String,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            Some(Mount {
                root: fields.get(3)?.to_string(),
                point: fields.get(4)?.to_string(),
                options: fields.get(5)?.to_string(),
            })
        })
        .collect()
}

/// The containerd container id of the pod's first app container.
fn app_container_id(pod: &Pod) -> Result<String> {
    let status = pod.status.as_ref().context("status")?;
    let app = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .first()
        .context("the app container's status")?;
    let id = app
        .container_id
        .as_deref()
        .context("the app container's id")?;
    Ok(id.trim_start_matches("containerd://").to_owned())
}

/// The host pid of a running containerd task (`ctr tasks ls`: TASK PID STATUS).
fn task_pid(container: &str) -> Result<u32> {
    let tasks = ctr(&["tasks", "ls"])?;
    tasks
        .lines()
        .skip(1)
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next() == Some(container)).then(|| fields.next())?
        })
        .with_context(|| format!("no task {container} in `ctr tasks ls`: {tasks}"))?
        .parse()
        .context("the task's pid")
}

#[tokio::test]
async fn helm_uninstall_leaves_only_the_crd_and_user_data() -> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = cluster();
    // A release of its own (webhook off, one replica), so the shared one keeps serving.
    let release = "gone";
    let namespace = "kubeflake-uninstall";
    helm_install(
        cluster,
        release,
        namespace,
        &[
            "webhook.enabled=false",
            "operator.replicas=1",
            "operator.podDisruptionBudget.enabled=false",
        ],
    )
    .await?;
    let ns = cluster.namespace("node-uninstall").await?;
    create_sequence(&ns, "kept", serde_json::json!({})).await?;
    chart_support::helm(
        cluster,
        &[
            "uninstall",
            release,
            "--namespace",
            namespace,
            "--wait",
            "--timeout",
            "3m",
        ],
    )
    .await?
    .ok()?;
    // Helm deletes the objects; their pods go with the garbage collector and the kubelet.
    let selector = format!("app.kubernetes.io/instance={release}");
    let kinds = "deployments,services,serviceaccounts,configmaps,secrets,roles,rolebindings,\
leases,poddisruptionbudgets,clusterroles,clusterrolebindings,mutatingwebhookconfigurations,\
flowschemas,prioritylevelconfigurations,pods";
    let gone = eventually(LIMIT, "every object of the release to be gone", || async {
        let left = cluster
            .kubectl(&["get", kinds, "-A", "-l", &selector, "-o", "name"])
            .await?
            .ok()?;
        Ok(left.trim().is_empty().then_some(()))
    })
    .await;
    if gone.is_err() {
        let listing = cluster
            .kubectl(&["get", kinds, "-A", "-l", &selector])
            .await?;
        panic!(
            "objects of the release left after uninstall:\n{}",
            listing.stdout
        );
    }
    let pods = cluster
        .kubectl(&["get", "pods", "-n", namespace, "-o", "name"])
        .await?
        .ok()?;
    assert_eq!(pods.trim(), "", "operator pods left after uninstall");
    cluster
        .kubectl(&["get", "crd", "idsequences.kubeflake.io"])
        .await?
        .ok()?;
    cluster
        .kubectl(&["get", "idsequence", "kept", "-n", &ns.name])
        .await?
        .ok()?;
    Ok(())
}

// ---- helpers that read the node itself ----

/// (address, port) of every IPv4 TCP listener on this machine.
fn tcp_listeners() -> Result<Vec<(std::net::Ipv4Addr, u16)>> {
    let text = std::fs::read_to_string("/proc/net/tcp")?;
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 || fields[3] != "0A" {
            continue; // not LISTEN
        }
        let (addr, port) = fields[1].split_once(':').context("addr:port")?;
        let addr = u32::from_str_radix(addr, 16)?;
        let port = u16::from_str_radix(port, 16)?;
        out.push((std::net::Ipv4Addr::from(u32::from_be(addr)), port));
    }
    // IPv6 listeners on :: would take IPv4 too: there must be none on these ports.
    let text6 = std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    for line in text6.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 4
            && fields[3] == "0A"
            && let Some((_, port)) = fields[1].split_once(':')
        {
            let port = u16::from_str_radix(port, 16)?;
            out.push((std::net::Ipv4Addr::UNSPECIFIED, port));
        }
    }
    Ok(out)
}

/// The command line of the cluster's process `name`.
fn process_cmdline(name: &str, cluster: &Cluster) -> Result<String> {
    let pid = cluster
        .pids()
        .into_iter()
        .find(|(n, _)| n == name)
        .with_context(|| format!("{name} runs"))?
        .1;
    Ok(std::fs::read_to_string(format!("/proc/{pid}/cmdline"))?.replace('\0', " "))
}

/// The host pid of a container process running `binary` (its command as the image names
/// it, e.g. `/kubeflake-operator`; containers' processes are visible from the host). Only a
/// process in another network namespace than this test's counts: with the lanes of
/// scripts/test.sh at once, other test binaries run the same programs on the host (a
/// standalone operator's routes are the host's, default route and all).
fn container_pid_of(binary: &str) -> Result<u32> {
    let own_netns = std::fs::read_link("/proc/self/ns/net")?;
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read_to_string(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split('\0').next() != Some(binary) {
            continue;
        }
        match std::fs::read_link(format!("/proc/{pid}/ns/net")) {
            Ok(netns) if netns != own_netns => return Ok(pid),
            _ => continue,
        }
    }
    bail!("no process in a pod's network namespace runs {binary}")
}

/// (destination, mask, gateway) of each route in a /proc/<pid>/net/route table.
fn parse_routes(text: &str) -> Vec<(u32, u32, u32)> {
    let hex = |s: &str| u32::from_be(u32::from_str_radix(s, 16).unwrap_or(0));
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 8).then(|| (hex(f[1]), hex(f[7]), hex(f[2])))
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
enum DnsAnswer {
    A(Vec<std::net::Ipv4Addr>),
    Refused,
    Other(u8),
}

/// One DNS query for an A record over UDP to `server`:53.
fn dns_query(server: std::net::Ipv4Addr, name: &str) -> Result<DnsAnswer> {
    let socket = std::net::UdpSocket::bind((addresses::BRIDGE_IP, 0))?;
    socket.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut query = vec![0x4b, 0x46, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        query.push(u8::try_from(label.len())?);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&query, (server, 53))?;
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf)?;
    let answer = &buf[..n];
    if answer.len() < 12 || answer[..2] != query[..2] {
        bail!("not an answer to our query: {answer:?}");
    }
    match answer[3] & 0x0f {
        0 => {}
        5 => return Ok(DnsAnswer::Refused),
        code => return Ok(DnsAnswer::Other(code)),
    }
    let count = u16::from_be_bytes([answer[6], answer[7]]);
    // Skip the question (our own bytes), then read each answer record.
    let mut at = query.len();
    let mut addresses = Vec::new();
    for _ in 0..count {
        // A compressed name pointer (2 bytes) or labels ending in 0.
        if answer.get(at).is_some_and(|b| b & 0xc0 == 0xc0) {
            at += 2;
        } else {
            while answer.get(at).is_some_and(|&b| b != 0) {
                at += 1 + usize::from(answer[at]);
            }
            at += 1;
        }
        let header = answer.get(at..at + 10).context("a short record")?;
        let (kind, len) = (
            u16::from_be_bytes([header[0], header[1]]),
            usize::from(u16::from_be_bytes([header[8], header[9]])),
        );
        let data = answer
            .get(at + 10..at + 10 + len)
            .context("a short record")?;
        if kind == 1 && len == 4 {
            addresses.push(std::net::Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += 10 + len;
    }
    Ok(DnsAnswer::A(addresses))
}

/// An image as containerd holds it, exported to an OCI archive (`ctr images export`).
struct ExportedImage {
    _dir: tempfile::TempDir,
    archive: std::path::PathBuf,
    manifest: serde_json::Value,
}

impl ExportedImage {
    fn export(image: &str) -> Result<ExportedImage> {
        let dir = tempfile::tempdir()?;
        let archive = dir.path().join("image.tar");
        ctr(&["images", "export", &archive.to_string_lossy(), image])?;
        let index: serde_json::Value = serde_json::from_slice(&tar_file(&archive, "index.json")?)?;
        let digest = index["manifests"][0]["digest"]
            .as_str()
            .context("manifest digest")?;
        let manifest = serde_json::from_slice(&tar_file(&archive, &blob(digest))?)?;
        Ok(ExportedImage {
            _dir: dir,
            archive,
            manifest,
        })
    }

    /// The image's runtime config (entrypoint, user, exposed ports).
    fn config(&self) -> Result<serde_json::Value> {
        let digest = self.manifest["config"]["digest"]
            .as_str()
            .context("config digest")?;
        let config: serde_json::Value =
            serde_json::from_slice(&tar_file(&self.archive, &blob(digest))?)?;
        Ok(config["config"].clone())
    }

    /// Every regular file in the image's layers.
    fn files(&self) -> Result<BTreeSet<String>> {
        let mut files = BTreeSet::new();
        for layer in self.manifest["layers"].as_array().context("layers")? {
            let digest = layer["digest"].as_str().context("layer digest")?;
            let layer_tar = self.archive.with_file_name("layer.tar");
            std::fs::write(&layer_tar, tar_file(&self.archive, &blob(digest))?)?;
            let listing = std::process::Command::new("tar")
                .arg("-tvf")
                .arg(&layer_tar)
                .output()?;
            for line in String::from_utf8_lossy(&listing.stdout).lines() {
                if (line.starts_with('-') || line.starts_with('h'))
                    && let Some(path) = line.split_whitespace().last()
                {
                    files.insert(path.trim_start_matches("./").to_owned());
                }
            }
        }
        Ok(files)
    }
}

fn blob(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

/// One member of a tar archive (`tar -xOf`).
fn tar_file(archive: &std::path::Path, member: &str) -> Result<Vec<u8>> {
    let out = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(member)
        .output()?;
    if !out.status.success() {
        bail!(
            "no {member} in {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// The lines of one Dockerfile stage (`FROM ... AS <name>` up to the next `FROM`).
fn dockerfile_stage<'a>(dockerfile: &'a str, name: &str) -> Vec<&'a str> {
    let mut inside = false;
    let mut lines = Vec::new();
    for line in dockerfile.lines().map(str::trim) {
        if line.starts_with("FROM ") {
            inside = line.ends_with(&format!(" AS {name}"));
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            lines.push(line);
        }
    }
    lines
}

/// `ctr` against the node's containerd, in the Kubernetes namespace.
fn ctr(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("ctr")
        .args(["--address", CONTAINERD_SOCKET, "--namespace", "k8s.io"])
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!(
            "ctr {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The containerd container id of the pod's sidecar.
fn sidecar_container_id(pod: &Pod) -> Result<String> {
    let status = pod.status.as_ref().context("status")?;
    let sidecar = status
        .init_container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| c.name == SIDECAR)
        .context("the sidecar's status")?;
    let id = sidecar
        .container_id
        .as_deref()
        .context("the sidecar's container id")?;
    Ok(id.trim_start_matches("containerd://").to_owned())
}

/// The slot the pod with `uid` holds.
async fn held_slot(ns: &kubeflake_e2e::TestNamespace, sequence: &str, uid: &str) -> Result<u32> {
    eventually(LIMIT, "the pod to hold a slot", || async {
        let leases = slot_leases(ns, sequence).await?;
        Ok(leases
            .iter()
            .find(|l| l.holder.as_deref() == Some(uid))
            .map(|l| l.slot.0))
    })
    .await
}

async fn lease_of_slot(
    ns: &kubeflake_e2e::TestNamespace,
    sequence: &str,
    slot: u32,
) -> Result<SlotLease> {
    slot_leases(ns, sequence)
        .await?
        .into_iter()
        .find(|l| l.slot.0 == slot)
        .with_context(|| format!("no lease for slot {slot}"))
}

/// Whether the slot's lease carries the mark of a graceful release (rule 5).
async fn history_shows_release(ns: &kubeflake_e2e::TestNamespace, slot: u32) -> Result<bool> {
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let list = leases
        .list(&ListParams::default().labels(SEQUENCE_LABEL))
        .await?;
    Ok(list.items.iter().any(|l| {
        SlotLease::parse(l).is_ok_and(|s| s.slot.0 == slot)
            && l.annotations().contains_key(RELEASED_AT_ANNOTATION)
    }))
}

/// Runs `delete`, watches the pod until it is gone, and returns its last status.
async fn watch_until_deleted<F, Fut>(
    ns: &kubeflake_e2e::TestNamespace,
    name: &str,
    delete: F,
) -> Result<Pod>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    use futures::StreamExt;
    use kube::runtime::watcher;
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(pods, config).boxed();
    let mut last: Option<Pod> = None;
    let mut deleting = Some(delete);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .with_context(|| format!("pod {name} not gone within {LIMIT:?}"))?;
        match event {
            Some(Ok(watcher::Event::InitDone)) => {
                if let Some(delete) = deleting.take() {
                    delete().await?;
                }
            }
            Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                last = Some(pod)
            }
            Some(Ok(watcher::Event::Delete(pod))) => return Ok(pod),
            Some(Ok(watcher::Event::Init)) => {}
            Some(Err(e)) => eprintln!("watch error (retried): {e}"),
            None => bail!("the watch of {name} ended; last seen {last:?}"),
        }
    }
}

/// When the app container and the sidecar finished, from a pod's last status.
fn termination_times(pod: &Pod) -> Result<(String, String)> {
    let status = pod.status.as_ref().context("status")?;
    let finished = |statuses: Option<&Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
                    name: &str| {
        statuses
            .into_iter()
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
            .map(|t| t.0.to_string())
            .with_context(|| format!("no termination of {name} in the last status: {status:?}"))
    };
    Ok((
        finished(status.container_statuses.as_ref(), "app")?,
        finished(status.init_container_statuses.as_ref(), SIDECAR)?,
    ))
}

#[test]
fn route_tables_are_read_in_host_byte_order() {
    assert_eq!(
        parse_routes(
            "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n eth0\t0000600A\t0100F40A\t0003\t0\t0\t0\t0000FFFF\n"
        ),
        vec![(
            u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)),
            0xffff_0000,
            u32::from(std::net::Ipv4Addr::new(10, 244, 0, 1))
        )]
    );
}

/// Rule 13 on the real node: a strict sequence's pods elect one oracle through the Lease
/// `<seq>-strict-oracle`; the others forward to it over the pod network (the oracle's pod
/// IP and port, published in the Lease); a client asking the pods in turn always gets a
/// larger value; every sidecar follows the Lease through a watch (with its pod's token);
/// when the oracle's sidecar is killed in its pod, the kubelet restarts it and it takes its
/// own Lease back at once; when the oracle's pod is deleted (SIGTERM: it stops
/// serving and releases the Lease), another pod takes over and values still only grow.
#[tokio::test]
async fn rule13_a_strict_sequence_is_served_by_one_oracle_pod_over_the_pod_network_and_survives_its_sidecars_restart_and_its_deletion()
-> Result<()> {
    use kubeflake_crds::strict_oracle::{OracleLease, oracle_name};
    let spec = serde_json::json!({"mode": "Segment", "segment": {"strict": true}});
    let node = on_the_node(cluster(), "node-strict", "tickets", spec).await?;
    let ns = node.ns.clone();
    node.deploy_app("app", "tickets", 3).await?;
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);

    let oracle_of = |leases: Api<Lease>| async move {
        let lease = OracleLease::parse(leases.get(&oracle_name("tickets")).await?)?;
        anyhow::Ok(lease)
    };
    let pods = ready_pods(&ns, "app").await?;
    assert_eq!(pods.len(), 3);
    let oracle = eventually(
        Duration::from_secs(60),
        "a pod holds the oracle lease",
        || {
            let leases = leases.clone();
            async move {
                let l = oracle_of(leases).await?;
                Ok(l.holder.is_some().then_some(l))
            }
        },
    )
    .await?;
    let holder = oracle.holder.clone().context("holder")?;
    let oracle_pod = pods
        .iter()
        .find(|p| p.uid().as_deref() == Some(holder.as_str()))
        .context("the oracle lease names one of the app's pods")?;
    let pod_ip = oracle_pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("pod IP")?;
    assert_eq!(
        oracle.address.as_deref(),
        Some(format!("{pod_ip}:{}", contract::DEFAULT_ORACLE_PORT).as_str()),
        "the oracle publishes its pod IP and the injected oracle port"
    );

    // A client asking each pod in turn: every answer above the last (forwarded or not).
    let mut last = 0u64;
    let mut asked = BTreeSet::new();
    for round in 0..30 {
        let pod = &pods[round % pods.len()];
        let values = ids_from_pod(&ns, &pod.name_any(), 3).await?;
        assert!(
            values.windows(2).all(|w| w[0] < w[1]) && values[0] > last,
            "round {round}: {values:?} from {} after {last}",
            pod.name_any()
        );
        last = values[2];
        asked.insert(pod.name_any());
    }
    assert_eq!(
        asked.len(),
        3,
        "every pod answered, two of them by forwarding"
    );

    // Every sidecar follows the oracle Lease through its watch (the sidecar Role's list and
    // watch on Leases, with the pod's own token), not by reading it every D/12.
    for pod in &pods {
        let pod = pod.name_any();
        eventually(
            Duration::from_secs(30),
            &format!("the sidecar of {pod} to say its watch knows the oracle lease"),
            || {
                let (ns, pod) = (ns.clone(), pod.clone());
                async move {
                    let watched =
                        sidecar_metric(&ns, &pod, "kubeflake_strict_oracle_lease_watched").await?;
                    Ok((watched == Some(1.0)).then_some(()))
                }
            },
        )
        .await?;
    }

    // The oracle's sidecar killed in its pod, as an OOM kill would: the kubelet restarts
    // it, and the new process, which gets the pod's oracle lock (its predecessor is dead)
    // and finds the current term recorded there as its own, takes the Lease back at once
    // (docs/safety.md rule 13, a restart in the same pod). The Lease is made a minute long
    // first: a take-over that waits for it to lapse (63 s) cannot be what the wait sees.
    let name = oracle_name("tickets");
    let duration = |secs: i32| {
        kube::api::Patch::Merge(serde_json::json!({"spec": {"leaseDurationSeconds": secs}}))
    };
    leases
        .patch(&name, &Default::default(), &duration(60))
        .await?;
    let before = oracle_of(leases.clone()).await?;
    ctr(&[
        "tasks",
        "kill",
        "--signal",
        "SIGKILL",
        &sidecar_container_id(oracle_pod)?,
    ])?;
    eventually(
        Duration::from_secs(45),
        "the restarted sidecar of the oracle's pod to take the oracle Lease back in a new term",
        || {
            let leases = leases.clone();
            let (holder, term) = (holder.clone(), before.term);
            async move {
                let l = oracle_of(leases).await?;
                Ok(
                    (l.holder.as_deref() == Some(holder.as_str()) && l.term == term + 1)
                        .then_some(()),
                )
            }
        },
    )
    .await?;
    leases
        .patch(&name, &Default::default(), &duration(5))
        .await?;
    for round in 0..40 {
        let pod = &pods[round % pods.len()];
        // The restarted sidecar may answer 503 until it is ready again.
        if let Ok(values) = ids_from_pod(&ns, &pod.name_any(), 3).await {
            assert!(
                values[0] > last,
                "after the restart in place: {values:?} from {} after {last}",
                pod.name_any()
            );
            last = values[2];
        }
    }

    // The oracle's pod deleted: another takes over (released: no wait), order kept.
    let pod_api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    pod_api
        .delete(&oracle_pod.name_any(), &Default::default())
        .await?;
    eventually(
        Duration::from_secs(60),
        "another pod holds the oracle lease",
        || {
            let leases = leases.clone();
            let old = holder.clone();
            async move {
                let l = oracle_of(leases).await?;
                Ok(l.holder.is_some_and(|h| h != old).then_some(()))
            }
        },
    )
    .await?;
    let survivors: Vec<Pod> = pods
        .iter()
        .filter(|p| p.uid().as_deref() != Some(holder.as_str()))
        .cloned()
        .collect();
    let mut served_after = 0;
    for round in 0..40 {
        let pod = &survivors[round % survivors.len()];
        // During the hand-over a pod may answer 503; an answer with values must be larger.
        if let Ok(values) = ids_from_pod(&ns, &pod.name_any(), 3).await {
            assert!(
                values[0] > last,
                "after the hand-over: {values:?} after {last}"
            );
            last = values[2];
            served_after += 1;
        }
    }
    assert!(served_after > 0, "the new oracle served");
    Ok(())
}
