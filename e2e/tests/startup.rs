//! The app starts only once its sidecar can issue (issue 26), on the real node.
//!
//! The example app runs with `--first-id`: its very first action is one `GET /id` to its
//! sidecar, and on any failure it exits 1 without retrying, so an app container started
//! before its sidecar holds a slot would exit and be restarted by the kubelet. The
//! startup probe the webhook gives the native sidecar (a long poll of its `/readyz`) holds
//! the app containers until the sidecar is ready; `kubeflake.io/hold-app: "false"` opts a
//! pod out of it.
//!
//! One node and one release (the chart, helm-installed as in `node.rs`) serve every test
//! here; the tests take turns, each in its own namespace, deleted at its end.

mod chart_support;
mod node_support;
mod operator_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflake_crds::conditions::{ConditionStatus, ConditionType, has_condition};
use kubeflake_crds::contract;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_crds::{IdSequence, IdSequenceSpec};
use kubeflake_e2e::node::EXAMPLE_APP_IMAGE;
use kubeflake_e2e::{Cluster, TestNamespace};
use node_support::*;
use operator_support::{eventually, slot_leases};

fn cluster() -> &'static Cluster {
    Cluster::shared_with_node()
}

const SIDECAR: &str = contract::SIDECAR_NAME;
const APP: &str = "app";
/// The pods' grace period: what a delete may take, plus [`DELETE_MARGIN`].
const GRACE_SECONDS: u64 = 20;
const DELETE_MARGIN: Duration = Duration::from_secs(45);
/// How long pods held for want of a slot are watched to stay held (not crash-looping).
const OBSERVE_HELD: Duration = Duration::from_secs(20);
/// 50 pods created at once become Ready within this (generous; it happens at all).
const FIFTY_READY_LIMIT: Duration = Duration::from_secs(300);

/// 4 slots (`workerBits: 2`); timestamp and sequence bits keep the 63 bits.
fn four_slots() -> serde_json::Value {
    serde_json::json!({
        "layout": {"timestampBits": 41, "workerBits": 2, "sequenceBits": 20},
        "lease": {"durationSeconds": 15}
    })
}

/// 2 slots (`workerBits: 1`).
fn two_slots() -> serde_json::Value {
    serde_json::json!({
        "layout": {"timestampBits": 41, "workerBits": 1, "sequenceBits": 21},
        "lease": {"durationSeconds": 15}
    })
}

#[tokio::test]
async fn fifty_pods_created_at_once_each_take_their_first_id_with_no_app_restart() -> Result<()> {
    let node = on_the_node(cluster(), "startup-fifty", "fifty", serde_json::json!({})).await?;
    let result = fifty_pods(&node).await;
    delete_namespace(node.cluster, &node.ns).await;
    result
}

async fn fifty_pods(node: &OnTheNode) -> Result<()> {
    const PODS: usize = 50;
    let ns = &node.ns;
    let layout = IdSequenceSpec::default().layout.to_layout()?;
    let manifests: Vec<_> = (0..PODS)
        .map(|i| app_pod(&format!("first-{i:02}"), "fifty", &["--first-id"], &[]))
        .collect();
    let started = Instant::now();
    create_at_once(ns, manifests).await?;
    let created = started.elapsed();

    // Bounded: every 2 s until all are Ready; an app restart fails at once.
    let pods = wait_for_pods(ns, "all 50 pods to be Ready", FIFTY_READY_LIMIT, |pods| {
        let restarted = app_restarts(pods);
        if !restarted.is_empty() {
            bail!("app containers restarted: {restarted:?}");
        }
        Ok(pods.len() == PODS && pods.iter().all(is_ready))
    })
    .await?;
    let all_ready = started.elapsed();

    // No app container restarted, none ever ended, and no sidecar was restarted either.
    for pod in &pods {
        check_app_never_ended(pod)?;
        let sidecar = sidecar_status(pod).context("the sidecar's status")?;
        assert_eq!(
            sidecar.restart_count,
            0,
            "{}: the sidecar restarted",
            pod.name_any()
        );
    }

    // Each pod's first ID: answered, carries the slot the pod holds, below the pod's next
    // ID; all 50 are different.
    let slots = held_slots(ns, "fifty").await?;
    let firsts = first_ids(ns, &pods).await?;
    let mut distinct = BTreeSet::new();
    for pod in &pods {
        let name = pod.name_any();
        let first = firsts[&name];
        let uid = pod.uid().context("uid")?;
        let slot = slots
            .get(&uid)
            .with_context(|| format!("{name} holds no slot"))?;
        assert_eq!(
            slot_of(&layout, first)?,
            *slot,
            "{name}'s first ID {first} carries its slot"
        );
        let next = ids_from_pod(ns, &name, 1).await?[0];
        assert!(
            next > first,
            "{name}: the next ID {next} is not above the first {first}"
        );
        assert!(
            distinct.insert(first),
            "{name}'s first ID {first} was given twice"
        );
    }
    assert_eq!(distinct.len(), PODS);

    let to_ready = created_to_ready(&pods);
    eprintln!(
        "{PODS} pods created in {:.1} s, all Ready {:.1} s after the first create; \
         created -> Ready per pod (1 s resolution): p50 {} s, max {} s; \
         0 app restarts, {PODS} distinct first IDs",
        created.as_secs_f64(),
        all_ready.as_secs_f64(),
        to_ready.get(to_ready.len() / 2).copied().unwrap_or(-1),
        to_ready.last().copied().unwrap_or(-1),
    );
    Ok(())
}

#[tokio::test]
async fn with_fewer_slots_than_pods_the_extra_apps_stay_unstarted_until_slots_free_up_then_start_without_restarts()
-> Result<()> {
    let node = on_the_node(cluster(), "startup-fewer", "four", four_slots()).await?;
    let result = fewer_slots_than_pods(&node).await;
    delete_namespace(node.cluster, &node.ns).await;
    result
}

async fn fewer_slots_than_pods(node: &OnTheNode) -> Result<()> {
    let (cluster, ns) = (node.cluster, &node.ns);
    let manifests: Vec<_> = (0..6)
        .map(|i| app_pod(&format!("held-{i}"), "four", &["--first-id"], &[]))
        .collect();
    create_at_once(ns, manifests).await?;

    // 4 slots: 4 pods become Ready; the 2 others' sidecars run (their startup probe fails)
    // while their apps wait to be started.
    let pods = wait_for_pods(ns, "4 Ready pods and 2 not started", LIMIT, |pods| {
        let ready = pods.iter().filter(|p| is_ready(p)).count();
        if ready > 4 {
            bail!("{ready} pods Ready with 4 slots");
        }
        let held = pods.iter().filter(|p| app_held(p)).count();
        Ok(pods.len() == 6 && ready == 4 && held == 2)
    })
    .await?;
    let (ready, waiting): (Vec<Pod>, Vec<Pod>) = pods.into_iter().partition(is_ready);
    let waiting: Vec<String> = waiting.iter().map(ResourceExt::name_any).collect();
    let ready: Vec<String> = ready.iter().map(ResourceExt::name_any).collect();
    eprintln!("Ready: {ready:?}; held for a slot: {waiting:?}");
    for name in &waiting {
        until_held(ns, name).await?;
    }

    // They stay held, not crash-looping: watched for a while, every 2 s.
    let pods_api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let rounds = OBSERVE_HELD.as_secs() / 2;
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for name in &waiting {
            let pod = pods_api.get(name).await?;
            if !app_held(&pod) {
                bail!(
                    "{name}'s app is no longer held while no slot is free: {}",
                    describe(&pod)
                );
            }
        }
        // Never more Ready pods than slots. Fewer is allowed: on a loaded node a holder's
        // readiness probe can time out for a moment, which says nothing about the slots.
        let now_ready = pods_api
            .list(&ListParams::default().labels("app=startup"))
            .await?
            .items
            .iter()
            .filter(|p| is_ready(p))
            .count();
        assert!(
            now_ready <= 4,
            "{now_ready} Ready pods while 4 slots are held"
        );
    }

    // Each held pod says why (an Event by its sidecar), and so does the sequence.
    for name in &waiting {
        eventually(
            LIMIT,
            "a WaitingForSlot Warning Event on the held pod",
            || async { Ok(waiting_for_slot_event(ns, name).await?.map(|_| ())) },
        )
        .await
        .with_context(|| format!("no {} Event on {name}", contract::WAITING_FOR_SLOT_REASON))?;
    }
    let sequences: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        LIMIT,
        "the sequence's Exhausted condition to be True",
        || async {
            let seq = sequences.get("four").await?;
            Ok(has_condition(
                seq.status.as_ref(),
                ConditionType::Exhausted,
                ConditionStatus::True,
            )
            .then_some(()))
        },
    )
    .await?;

    let ready_pods: Vec<Pod> = pods_api
        .list(&ListParams::default().labels("app=startup"))
        .await?
        .items
        .into_iter()
        .filter(|p| ready.contains(&p.name_any()))
        .collect();
    let mut firsts = first_ids(ns, &ready_pods).await?;
    assert_eq!(firsts.len(), 4);

    // Two slots free up (graceful deletes: the sidecars release them): the held apps
    // start, take their first ID, and never restarted.
    let mut delete = vec!["delete", "pod", "-n", &ns.name, "--wait=false"];
    delete.extend(ready[..2].iter().map(String::as_str));
    cluster.kubectl(&delete).await?.ok()?;
    let freed_at = Instant::now();
    let pods = wait_for_pods(ns, "the held pods to start and be Ready", LIMIT, |pods| {
        let restarted = app_restarts(pods);
        if !restarted.is_empty() {
            bail!("app containers restarted: {restarted:?}");
        }
        Ok(waiting
            .iter()
            .all(|w| pods.iter().any(|p| &p.name_any() == w && is_ready(p))))
    })
    .await?;
    eprintln!(
        "the held pods were Ready {:.1} s after two Ready pods were deleted",
        freed_at.elapsed().as_secs_f64()
    );
    let live: Vec<Pod> = pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    for pod in &live {
        check_app_never_ended(pod)?;
    }
    let held: Vec<Pod> = live
        .into_iter()
        .filter(|p| waiting.contains(&p.name_any()))
        .collect();
    firsts.extend(first_ids(ns, &held).await?);
    for name in &waiting {
        assert!(firsts.contains_key(name), "{name} answered no first ID");
    }
    let distinct: BTreeSet<u64> = firsts.values().copied().collect();
    assert_eq!(
        distinct.len(),
        6,
        "6 pods, 6 different first IDs: {firsts:?}"
    );

    Ok(())
}

#[tokio::test]
async fn a_pod_whose_app_is_held_for_a_slot_is_deleted_within_its_grace_period() -> Result<()> {
    let node = on_the_node(cluster(), "startup-delete", "two", two_slots()).await?;
    let result = held_pod_deleted(&node).await;
    delete_namespace(node.cluster, &node.ns).await;
    result
}

async fn held_pod_deleted(node: &OnTheNode) -> Result<()> {
    let (cluster, ns) = (node.cluster, &node.ns);
    let pods_api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    // Both slots taken; a third pod's app is held by its sidecar's startup probe.
    create_at_once(
        ns,
        (0..2)
            .map(|i| app_pod(&format!("holder-{i}"), "two", &[], &[]))
            .collect(),
    )
    .await?;
    wait_for_pods(ns, "both holders to be Ready", LIMIT, |pods| {
        Ok(pods.len() == 2 && pods.iter().all(is_ready))
    })
    .await?;
    create_at_once(ns, vec![app_pod("held", "two", &["--first-id"], &[])]).await?;
    until_held(ns, "held").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = pods_api.get("held").await?;
    assert!(app_held(&held), "{}", describe(&held));
    // Unlike inside a postStart hook, the kubelet publishes the waiting sidecar as running
    // (not started) and its logs can be read.
    let sidecar_running = sidecar_status(&held)
        .and_then(|s| s.state.as_ref())
        .is_some_and(|s| s.running.is_some());
    assert!(
        sidecar_running,
        "the held pod's sidecar is not shown running: {}",
        describe(&held)
    );
    let logs = pods_api
        .logs(
            "held",
            &LogParams {
                container: Some(SIDECAR.into()),
                ..Default::default()
            },
        )
        .await
        .context("the held pod's sidecar logs")?;
    assert!(
        !logs.trim().is_empty(),
        "the held pod's sidecar logged nothing"
    );

    // A startup probe, unlike a postStart hook (which the kubelet runs inside its sync of
    // the pod and cannot interrupt), does not keep the kubelet from stopping the pod: the
    // sidecar gets SIGTERM and exits, the app was never started.
    let deleting = Instant::now();
    cluster
        .kubectl(&["delete", "pod", "held", "-n", &ns.name, "--wait=false"])
        .await?
        .ok()?;
    let bound = Duration::from_secs(GRACE_SECONDS) + DELETE_MARGIN;
    let gone = eventually(
        bound,
        "the held pod to be gone after its delete",
        || async { Ok(pods_api.get_opt("held").await?.is_none().then_some(())) },
    )
    .await;
    if let Err(e) = gone {
        let pod = pods_api.get_opt("held").await?;
        // Out of the way for the namespace's deletion (the node is torn down with the
        // test binary).
        let _ = cluster
            .kubectl(&[
                "delete",
                "pod",
                "held",
                "-n",
                &ns.name,
                "--force",
                "--grace-period=0",
            ])
            .await;
        bail!(
            "{e}: a pod held by its sidecar's startup probe was not deleted within its grace \
             period ({GRACE_SECONDS} s) + {DELETE_MARGIN:?}: the sidecar should have exited on \
             SIGTERM while it waited for a slot; last status: {}",
            pod.as_ref().map(describe).unwrap_or_default()
        );
    }
    eprintln!(
        "a held pod was gone {:.1} s after its delete (grace period {GRACE_SECONDS} s)",
        deleting.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::test]
async fn a_pod_with_hold_app_false_starts_its_app_at_once_and_its_sidecar_has_no_startup_probe()
-> Result<()> {
    let node = on_the_node(cluster(), "startup-optout", "two", two_slots()).await?;
    let result = opt_out(&node).await;
    delete_namespace(node.cluster, &node.ns).await;
    result
}

async fn opt_out(node: &OnTheNode) -> Result<()> {
    let ns = &node.ns;
    let pods_api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    // Both slots taken by pods that do not opt out: their sidecars carry the startup probe.
    create_at_once(
        ns,
        (0..2)
            .map(|i| app_pod(&format!("holder-{i}"), "two", &[], &[]))
            .collect(),
    )
    .await?;
    let holders = wait_for_pods(ns, "both holders to be Ready", LIMIT, |pods| {
        Ok(pods.len() == 2 && pods.iter().all(is_ready))
    })
    .await?;
    for pod in &holders {
        let path = startup_probe_path(pod).with_context(|| {
            format!("{}: the sidecar has no HTTP startup probe", pod.name_any())
        })?;
        assert!(
            path.starts_with(&format!(
                "{}?{}=",
                contract::READYZ_PATH,
                contract::READYZ_WAIT_PARAM
            )),
            "{}: the startup probe asks {path}, not a long poll of /readyz",
            pod.name_any()
        );
    }

    // No slot is free. The opted-out pod's app starts at once and runs while its sidecar
    // waits for a slot (not ready): the behaviour from before the hold.
    let opt_out = [(contract::HOLD_APP_ANNOTATION, "false")];
    create_at_once(ns, vec![app_pod("free", "two", &[], &opt_out)]).await?;
    let free = eventually(LIMIT, "the opted-out app to run", || async {
        let pod = pods_api.get("free").await?;
        let running = app_status(&pod)
            .is_some_and(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()));
        Ok(running.then_some(pod))
    })
    .await?;
    let sidecar = sidecar_spec(&free).context("the opted-out pod still gets its sidecar")?;
    assert!(
        sidecar.startup_probe.is_none() && sidecar.lifecycle.is_none(),
        "the opted-out pod's sidecar holds its app: startup probe {:?}, lifecycle {:?}",
        sidecar.startup_probe,
        sidecar.lifecycle
    );
    for _ in 0..3 {
        let pod = pods_api.get("free").await?;
        let sidecar = sidecar_status(&pod).context("the sidecar's status")?;
        assert!(
            !sidecar.ready,
            "the sidecar is ready without a free slot: {}",
            describe(&pod)
        );
        let app = app_status(&pod).context("the app's status")?;
        assert!(
            app.state.as_ref().is_some_and(|s| s.running.is_some()) && app.restart_count == 0,
            "the plain app runs beside a sidecar without a slot: {}",
            describe(&pod)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // What the hold prevents: the same opt-out with an app that takes an ID first exits 1
    // (and is restarted by the kubelet) while its sidecar has no slot.
    create_at_once(
        ns,
        vec![app_pod("free-first", "two", &["--first-id"], &opt_out)],
    )
    .await?;
    let exit = eventually(LIMIT, "the opted-out --first-id app to exit", || async {
        let pod = pods_api.get("free-first").await?;
        let Some(app) = app_status(&pod) else {
            return Ok(None);
        };
        let ended = [app.state.as_ref(), app.last_state.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        Ok(ended)
    })
    .await?;
    assert_eq!(
        exit, 1,
        "the --first-id app exits 1 when its first call fails"
    );
    Ok(())
}

// ---- helpers ----

/// A bare pod of the example app in `sequence` (label `app=startup`), with `args` and
/// pod `annotations`; the restricted-standard security settings of the Deployment in
/// `node_support`, a grace period of [`GRACE_SECONDS`].
fn app_pod(
    name: &str,
    sequence: &str,
    args: &[&str],
    annotations: &[(&str, &str)],
) -> serde_json::Value {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "startup", SEQUENCE_LABEL: sequence},
            "annotations": annotations,
        },
        "spec": {
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": APP,
                "image": EXAMPLE_APP_IMAGE,
                "imagePullPolicy": "Never",
                "args": args,
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 2},
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }]
        }
    })
}

/// Creates every pod concurrently (all requests in flight at once).
async fn create_at_once(ns: &TestNamespace, manifests: Vec<serde_json::Value>) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let count = manifests.len();
    futures::stream::iter(manifests)
        .map(|manifest| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(manifest)?;
                create_retrying_the_webhook(&api, &pod).await
            }
        })
        .buffer_unordered(count.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Creates `pod`, retrying (as a ReplicaSet controller would) while the API server cannot
/// reach the injection webhook: up to 5 tries, 3 s apart. Each retry is printed; any other
/// error, or the fifth, fails the test.
async fn create_retrying_the_webhook(api: &Api<Pod>, pod: &Pod) -> Result<()> {
    for attempt in 1..=5 {
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e))
                if attempt < 5 && e.message.contains("failed calling webhook") =>
            {
                eprintln!(
                    "startup: creating {} (try {attempt}): the webhook was unreachable, retrying: {}",
                    pod.name_any(),
                    e.message
                );
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("creating {}", pod.name_any()));
            }
        }
    }
    unreachable!("the fifth try returns")
}

/// Lists the test's pods every 2 s until `done` says so (an error from `done` ends the
/// wait at once), for at most `limit`; on timeout, the pods and Events say why.
async fn wait_for_pods<F>(
    ns: &TestNamespace,
    what: &str,
    limit: Duration,
    mut done: F,
) -> Result<Vec<Pod>>
where
    F: FnMut(&[Pod]) -> Result<bool>,
{
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let rounds = limit.as_secs().div_ceil(2).max(1);
    let mut last = Vec::new();
    for _ in 0..rounds {
        last = api
            .list(&ListParams::default().labels("app=startup"))
            .await?
            .items;
        match done(&last) {
            Ok(true) => return Ok(last),
            Ok(false) => {}
            Err(e) => bail!(
                "while waiting for {what}: {e:#}\n{}{}",
                describe_all(&last),
                restart_logs(ns, &last).await
            ),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let events = events_text(ns).await;
    bail!(
        "timed out after {limit:?} waiting for {what}\n{}\nevents:\n{events}",
        describe_all(&last)
    )
}

fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn app_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == APP)
}

fn sidecar_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == SIDECAR)
}

fn sidecar_spec(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::Container> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == SIDECAR)
}

/// The path of the sidecar's HTTP startup probe, if it has one.
fn startup_probe_path(pod: &Pod) -> Option<String> {
    sidecar_spec(pod)?
        .startup_probe
        .as_ref()?
        .http_get
        .as_ref()?
        .path
        .clone()
}

/// The app container was never started (not running, never ended, no restart), and the
/// sidecar has not *started* (its startup probe has not passed) nor restarted;
/// [`sidecar_started_event`] tells a sidecar whose process runs apart from one the kubelet
/// has not started yet.
fn app_held(pod: &Pod) -> bool {
    let sidecar_unstarted = sidecar_status(pod)
        .is_none_or(|s| s.started != Some(true) && s.restart_count == 0 && !s.ready);
    let app_unstarted = app_status(pod).is_none_or(|a| {
        a.restart_count == 0
            && a.last_state.as_ref().is_none_or(|s| s.terminated.is_none())
            && a.state
                .as_ref()
                .is_none_or(|s| s.running.is_none() && s.terminated.is_none())
    });
    pod.metadata.deletion_timestamp.is_none() && sidecar_unstarted && app_unstarted
}

/// Whether the kubelet recorded that it started the sidecar container of `pod` (its
/// `Started` Event, on `spec.initContainers{kubeflake-sidecar}`).
async fn sidecar_started_event(ns: &TestNamespace, pod: &str) -> Result<bool> {
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    let field = format!("spec.initContainers{{{SIDECAR}}}");
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .any(|e| {
            e.involved_object.name.as_deref() == Some(pod)
                && e.involved_object.field_path.as_deref() == Some(field.as_str())
                && e.reason.as_deref() == Some("Started")
        }))
}

/// Waits until `pod`'s sidecar runs (the kubelet started it) while its app is held.
async fn until_held(ns: &TestNamespace, name: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        LIMIT,
        "the sidecar to run and the app to be held",
        || async {
            let pod = pods.get(name).await?;
            if !app_held(&pod) {
                bail!("{name}'s app is not held: {}", describe(&pod));
            }
            Ok(sidecar_started_event(ns, name).await?.then_some(()))
        },
    )
    .await
    .with_context(|| format!("{name} held"))
}

/// For each pod whose app container restarted: what the app printed before it ended, and
/// the last lines of its sidecar's log (why its first ID failed).
async fn restart_logs(ns: &TestNamespace, pods: &[Pod]) -> String {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut out = String::new();
    for pod in pods
        .iter()
        .filter(|p| app_status(p).is_some_and(|a| a.restart_count > 0))
    {
        let name = pod.name_any();
        for (container, previous) in [(APP, true), (SIDECAR, false)] {
            let params = LogParams {
                container: Some(container.into()),
                previous,
                tail_lines: Some(30),
                ..Default::default()
            };
            let text = api
                .logs(&name, &params)
                .await
                .unwrap_or_else(|e| format!("(could not read the log: {e})"));
            out += &format!("--- {name} {container} (previous: {previous}):\n{text}\n");
        }
    }
    out
}

/// `pod: restarts` of every app container that restarted or ended.
fn app_restarts(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| {
            let app = app_status(p)?;
            let ended = app.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            (app.restart_count > 0 || ended.is_some()).then(|| {
                format!(
                    "{}: {} restart(s), last ended {:?}",
                    p.name_any(),
                    app.restart_count,
                    ended.map(|t| (t.exit_code, t.reason.clone(), t.message.clone()))
                )
            })
        })
        .collect()
}

/// The app container runs and never ended or restarted.
fn check_app_never_ended(pod: &Pod) -> Result<()> {
    let name = pod.name_any();
    let app = app_status(pod).with_context(|| format!("{name}: no app status"))?;
    assert_eq!(app.restart_count, 0, "{name}: {}", describe(pod));
    assert!(
        app.last_state
            .as_ref()
            .is_none_or(|s| s.terminated.is_none()),
        "{name}'s app ended before: {}",
        describe(pod)
    );
    assert!(
        app.state.as_ref().is_some_and(|s| s.running.is_some()),
        "{name}'s app does not run: {}",
        describe(pod)
    );
    Ok(())
}

/// uid -> slot of every pod holding one in `sequence`.
async fn held_slots(ns: &TestNamespace, sequence: &str) -> Result<HashMap<String, u32>> {
    Ok(slot_leases(ns, sequence)
        .await?
        .into_iter()
        .filter_map(|l| Some((l.holder?, l.slot.0)))
        .collect())
}

/// Each pod's answer to `GET /first`: the ID its app took at start.
async fn first_ids(ns: &TestNamespace, pods: &[Pod]) -> Result<BTreeMap<String, u64>> {
    futures::stream::iter(pods.iter().map(ResourceExt::name_any))
        .map(|name| async move {
            let body = app_answer(ns, &name, "/first").await?;
            let id = body["id"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .with_context(|| format!("{name}: no first ID in {body}"))?;
            anyhow::Ok((name, id))
        })
        .buffer_unordered(8)
        .try_collect()
        .await
}

/// Seconds from each pod's creation to its Ready condition, sorted.
fn created_to_ready(pods: &[Pod]) -> Vec<i64> {
    let mut out: Vec<i64> = pods
        .iter()
        .filter_map(|p| {
            let created = p.metadata.creation_timestamp.as_ref()?.0;
            let ready = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")?
                .last_transition_time
                .as_ref()?
                .0;
            Some(ready.as_second() - created.as_second())
        })
        .collect();
    out.sort();
    out
}

/// The sidecar's `WaitingForSlot` Warning Event on `pod`, if recorded.
async fn waiting_for_slot_event(ns: &TestNamespace, pod: &str) -> Result<Option<Event>> {
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|e| {
            e.involved_object.name.as_deref() == Some(pod)
                && e.reason.as_deref() == Some(contract::WAITING_FOR_SLOT_REASON)
                && e.type_.as_deref() == Some("Warning")
        }))
}

/// One line per container of the pod: state, readiness, restarts.
fn describe(pod: &Pod) -> String {
    let mut out = format!("pod {}:", pod.name_any());
    let status = pod.status.clone().unwrap_or_default();
    for c in status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
    {
        out.push_str(&format!(
            "\n  {}: ready {} started {:?} restarts {} state {} last {}",
            c.name,
            c.ready,
            c.started,
            c.restart_count,
            serde_json::to_string(&c.state).unwrap_or_default(),
            serde_json::to_string(&c.last_state).unwrap_or_default(),
        ));
    }
    out
}

fn describe_all(pods: &[Pod]) -> String {
    pods.iter().map(describe).collect::<Vec<_>>().join("\n")
}

async fn events_text(ns: &TestNamespace) -> String {
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    match events.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}: {}",
                    e.type_.as_deref().unwrap_or_default(),
                    e.involved_object.name.as_deref().unwrap_or_default(),
                    e.reason.as_deref().unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("(events not listed: {e})"),
    }
}
