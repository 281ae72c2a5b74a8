//! Upgrades on the real node (docs/install.md, "Upgrades and version skew"): the previous
//! release (`releases.txt`, built from its commit) installed with its own chart and images,
//! apps taking IDs all the time, then `helm upgrade` to this tree and `helm rollback`.
//!
//! One scenario, in phases, because each phase starts from the state the last one left:
//! 1. `previous`: release N-1 runs; a Snowflake app (3 pods), a Segment app (2 pods) and
//!    an app of a strict sequence (2 pods) are injected with N-1's sidecar; the injected
//!    container is the one sidecar/tests/fixtures/injected-<N-1>.json describes.
//! 2. `upgrade`: CRDs applied, `helm upgrade` to this tree. The operator rolls.
//! 3. `old-sidecars`: N-1 sidecars under the N operator (skew: an upgrade half done); one
//!    pod added to the Snowflake app and one to the strict app, injected by the new webhook
//!    beside them. The strict app's N-1 sidecars write the counter one value at a time and
//!    know no oracle: the operator has taken them off the counter's claimants, so they
//!    answer 503, and the new pod's sidecar serves as the oracle (docs/strict.md,
//!    "Upgrading from 0.1.0").
//! 4. `restart`: `kubectl rollout restart` moves the apps to N sidecars.
//! 5. `rollback`: the strict app scaled to zero first, as docs/strict.md asks ("Rolling
//!    back"), then `helm rollback` to N-1's operator.
//! 6. `new-sidecars`: N sidecars under the N-1 operator (skew the other way); one pod added.
//! 7. `restart-back`: the apps move back to N-1 sidecars; the strict app comes back on
//!    N-1 sidecars, above every value the oracle served.
//!
//! Throughout: clients take IDs from every ready pod ([`upgrade_support::Traffic`]) and a
//! labelled pod goes through admission every second ([`upgrade_support::AdmissionProbe`]).
//! After each phase the state must settle: every pod of the app injected by the expected
//! version and holding exactly one slot, no slot held by anything else, the IdSequence's
//! status saying so, its slots renewed under the operator of the moment, and
//! `kubectl kubeflake slots` (this tree's) showing it. At the end: no duplicate ID, no
//! failed request other than documented retryable answers and pods on their way out (both
//! retried), every admission injected; one client of the strict app, asking its pods in
//! turn, never given a value below one it was given before (rule 13), and no N-1 pod of
//! the strict app serving once the oracle has; the figures are printed.

mod chart_support;
mod node_support;
mod operator_support;
mod upgrade_support;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kubeflake_crds::IdSequence;
use kubeflake_crds::conditions::{ConditionType, condition};
use kubeflake_crds::contract::{INJECTED_ANNOTATION, SIDECAR_NAME};
use kubeflake_crds::slot_lease::{SEQUENCE_LABEL, SlotLease};
use kubeflake_e2e::release::Release;
use kubeflake_e2e::{Cluster, TestNamespace};
use node_support::{
    LIMIT, app_deployment, apply, image_values, one_at_a_time, ready_pods, rollout,
};
use operator_support::{LeaseHistory, create_sequence, eventually, workspace_binary};
use serde_json::{Value, json};
use upgrade_support::{AdmissionProbe, Answer, Figures, Phases, Traffic, figures, out_of_order};

const RELEASE: &str = "kf";
const RELEASE_NAMESPACE: &str = "kubeflake-system";
const SNOWFLAKE: &str = "orders";
const SEGMENT: &str = "invoices";
const WEB: &str = "web";
const COUNTER: &str = "counter";
/// A strict sequence (docs/strict.md) and its app.
const STRICT: &str = "tickets";
const TICKETING: &str = "ticketing";
/// This tree's version: what the new webhook writes in the injected annotation.
const CURRENT: &str = env!("CARGO_PKG_VERSION");

/// `helm <verb> kf <chart> --wait` with images; on failure the pods and events say why.
async fn helm_with_images(
    cluster: &Cluster,
    verb: &str,
    chart: &str,
    values: &[String],
) -> Result<()> {
    node_support::helm_wait(cluster, verb, RELEASE, chart, RELEASE_NAMESPACE, values).await?;
    Ok(())
}

/// Pods and events of the release's namespace, for failure messages.
async fn release_state(cluster: &Cluster) -> String {
    node_support::namespace_state(cluster, RELEASE_NAMESPACE).await
}

/// The operator Deployment's image, once its rollout is complete.
async fn operator_rolled_out(cluster: &Cluster, image: &str) -> Result<()> {
    let deployment = chart_support::fullname(RELEASE);
    cluster
        .kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{deployment}"),
            "-n",
            RELEASE_NAMESPACE,
            "--timeout=180s",
        ])
        .await?
        .ok()?;
    let running = cluster
        .kubectl(&[
            "get",
            "deployment",
            &deployment,
            "-n",
            RELEASE_NAMESPACE,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .await?
        .ok()?;
    ensure!(running == image, "the operator runs {running}, not {image}");
    Ok(())
}

/// Whether the webhook of release `version` injected `pod` (its `kubeflake.io/injected`).
fn injected_by(pod: &Pod, version: &str) -> bool {
    pod.annotations()
        .get(INJECTED_ANNOTATION)
        .map(String::as_str)
        == Some(version)
}

/// The injected sidecar container of a pod (a native sidecar: an init container).
fn sidecar_of(pod: &Pod) -> Option<&Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == SIDECAR_NAME)
}

/// The pods of `app` once its rollout is done: `replicas` ready pods, every one injected
/// by `version` with the sidecar image `sidecar_image`.
async fn app_pods(
    cluster: &Cluster,
    ns: &TestNamespace,
    app: &str,
    replicas: usize,
    version: &str,
    sidecar_image: &str,
) -> Result<Vec<Pod>> {
    rollout(cluster, &ns.name, app).await?;
    eventually(
        LIMIT,
        &format!("{replicas} ready pods of {app}"),
        || async {
            let pods = ready_pods(ns, app).await?;
            Ok((pods.len() == replicas).then_some(pods))
        },
    )
    .await
    .and_then(|pods| {
        for pod in &pods {
            let injected = pod.annotations().get(INJECTED_ANNOTATION);
            ensure!(
                injected.map(String::as_str) == Some(version),
                "{} was injected by {injected:?}, expected {version}",
                pod.name_any()
            );
            let image = sidecar_of(pod).and_then(|c| c.image.clone());
            ensure!(
                image.as_deref() == Some(sidecar_image),
                "{} runs sidecar {image:?}, expected {sidecar_image}",
                pod.name_any()
            );
        }
        Ok(pods)
    })
}

/// The Snowflake app's state has settled: every pod holds exactly one slot, no Lease
/// names anything else, every held slot is renewed after `since` (by the sidecars, under
/// the operator of the moment), the IdSequence's status counts them and is Ready, and
/// this tree's `kubectl kubeflake slots` shows the same holders.
async fn slots_settled(
    cluster: &Cluster,
    ns: &TestNamespace,
    pods: &[Pod],
    since: k8s_openapi::jiff::Timestamp,
) -> Result<()> {
    let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        LIMIT,
        "each pod holding one slot, renewed since the phase began",
        || async {
            let list = leases
                .list(&ListParams::default().labels(&format!("{SEQUENCE_LABEL}={SNOWFLAKE}")))
                .await?;
            let mut held: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            let mut renewed = 0;
            for lease in &list.items {
                let slot = SlotLease::parse(lease)?;
                if let Some(holder) = slot.holder {
                    let renew = lease
                        .spec
                        .as_ref()
                        .and_then(|s| s.renew_time.as_ref())
                        .map(|t| t.0);
                    if renew.is_some_and(|t| t > since) {
                        renewed += 1;
                    }
                    held.entry(holder).or_default().push(slot.slot.0);
                }
            }
            let holders: BTreeSet<String> = held.keys().cloned().collect();
            let once = held.values().all(|s| s.len() == 1);
            Ok((holders == uids && once && renewed == uids.len()).then_some(()))
        },
    )
    .await?;
    let sequences: Api<IdSequence> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        LIMIT,
        "the IdSequence status to count the held slots",
        || async {
            let seq = sequences.get(SNOWFLAKE).await?;
            let status = seq.status.as_ref();
            let ready = condition(status, ConditionType::Ready).is_some_and(|c| c.status == "True");
            let current = status.and_then(|s| s.observed_generation) == seq.metadata.generation;
            let assigned = status.and_then(|s| s.assigned) == Some(uids.len() as i64);
            Ok((ready && current && assigned).then_some(()))
        },
    )
    .await?;
    let out = cluster_plugin_slots(cluster, &ns.name).await?;
    let shown: BTreeSet<String> = out["slots"]
        .as_array()
        .context("slots array")?
        .iter()
        .filter(|row| row["status"] == "held")
        .filter_map(|row| row["holderUid"].as_str().map(str::to_owned))
        .collect();
    ensure!(
        shown == uids,
        "kubectl kubeflake slots shows {shown:?}, pods are {uids:?}"
    );
    Ok(())
}

/// `kubectl-kubeflake slots orders -n <ns> -o json` (this tree's plugin).
async fn cluster_plugin_slots(cluster: &Cluster, ns: &str) -> Result<Value> {
    let out = tokio::process::Command::new(workspace_binary("kubectl-kubeflake"))
        .args(["slots", SNOWFLAKE, "-n", ns, "-o", "json"])
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl kubeflake slots: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The sidecar container release `release`'s webhook injected matches what
/// sidecar/tests/fixtures/injected-<version>.json says it injects (so the sidecar test
/// that runs this tree's sidecar with that env and those args checks the real thing).
fn matches_fixture(release: &Release, pod: &Pod) -> Result<()> {
    let path = kubeflake_e2e::bin_dir::repo_file(&format!(
        "sidecar/tests/fixtures/injected-{}.json",
        release.version
    ));
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let fixture: Value = serde_json::from_str(&text)?;
    let container = sidecar_of(pod).context("no sidecar container")?;
    let live = serde_json::to_value(container)?;
    ensure!(
        live["args"] == fixture["args"],
        "args: the live {} sidecar has {}, {} says {}",
        release.version,
        live["args"],
        path.display(),
        fixture["args"]
    );
    let hook = &live["lifecycle"]["postStart"]["exec"]["command"];
    ensure!(
        *hook == fixture["postStart"],
        "postStart: the live {} sidecar runs {hook}, {} says {}",
        release.version,
        path.display(),
        fixture["postStart"]
    );
    // Names and sources of the variables; literal values may differ per pod or sequence.
    let shape = |env: &Value| -> Vec<(String, String)> {
        env.as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let source = e["valueFrom"]["fieldRef"]["fieldPath"]
                    .as_str()
                    .map(|p| format!("fieldRef {p}"))
                    .unwrap_or_else(|| "value".to_owned());
                (e["name"].as_str().unwrap_or_default().to_owned(), source)
            })
            .collect()
    };
    ensure!(
        shape(&live["env"]) == shape(&fixture["env"]),
        "env: the live {} sidecar has {:?}, {} says {:?}",
        release.version,
        shape(&live["env"]),
        path.display(),
        shape(&fixture["env"])
    );
    Ok(())
}

/// Scales `app` to `replicas` (one more than it has) and returns its ready pods once
/// the added pod is ready, injected by `version` (the webhook of the moment) beside the
/// others, which keep the sidecar they had.
async fn add_pod(
    cluster: &Cluster,
    ns: &TestNamespace,
    app: &str,
    replicas: usize,
    version: &str,
) -> Result<Vec<Pod>> {
    let before = ready_pods(ns, app).await?;
    let by_version = |pods: &[Pod]| pods.iter().filter(|p| injected_by(p, version)).count();
    let had = by_version(&before);
    scale(cluster, ns, app, replicas).await?;
    let added = eventually(
        LIMIT,
        &format!("pod {replicas} of {app}, injected by {version}"),
        || async {
            let pods = ready_pods(ns, app).await?;
            Ok((pods.len() == replicas && by_version(&pods) == had + 1).then_some(pods))
        },
    )
    .await;
    with_state(cluster, ns, added).await
}

/// `result`, or its error with the namespace's pods and events (what a timed-out wait
/// needs to be understood).
async fn with_state<T>(cluster: &Cluster, ns: &TestNamespace, result: Result<T>) -> Result<T> {
    match result {
        Ok(value) => Ok(value),
        Err(e) => Err(e.context(node_support::namespace_state(cluster, &ns.name).await)),
    }
}

async fn scale(cluster: &Cluster, ns: &TestNamespace, app: &str, replicas: usize) -> Result<()> {
    cluster
        .kubectl(&[
            "scale",
            "deployment",
            app,
            "-n",
            &ns.name,
            &format!("--replicas={replicas}"),
        ])
        .await?
        .ok()?;
    Ok(())
}

/// Scales `app` to zero and waits until none of its pods is left, running or terminating.
async fn scale_to_zero(cluster: &Cluster, ns: &TestNamespace, app: &str) -> Result<()> {
    scale(cluster, ns, app, 0).await?;
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(LIMIT, &format!("every pod of {app} gone"), || async {
        let left = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?;
        Ok(left.items.is_empty().then_some(()))
    })
    .await
}

/// A ready pod of `app` injected by `version`: the one a scale-up added.
async fn ready_pod_of_version(
    cluster: &Cluster,
    ns: &TestNamespace,
    app: &str,
    version: &str,
) -> Result<Pod> {
    let found = eventually(
        LIMIT,
        &format!("a ready pod of {app} injected by {version}"),
        || async {
            Ok(ready_pods(ns, app)
                .await?
                .into_iter()
                .find(|p| injected_by(p, version)))
        },
    )
    .await;
    with_state(cluster, ns, found).await
}

/// Waits until `traffic`'s clients were given values by one of `pods`; on failure, the
/// last answers, the strict sequence's Leases and the pods' sidecar logs say why.
async fn served_by(
    cluster: &Cluster,
    ns: &TestNamespace,
    traffic: &Traffic,
    pods: &[Pod],
) -> Result<()> {
    let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let served = eventually(LIMIT, &format!("values from one of {names:?}"), || async {
        Ok(names
            .iter()
            .any(|name| !traffic.ledger.of(name).is_empty())
            .then_some(()))
    })
    .await;
    let Err(e) = served else { return Ok(()) };
    let mut why = format!("last answers:\n{}", traffic.last_answers(12));
    let leases = [
        kubeflake_crds::segment_counter::counter_name(STRICT),
        kubeflake_crds::strict_oracle::oracle_name(STRICT),
    ];
    let mut get = vec!["get", "lease", "-n", &ns.name, "-o", "yaml"];
    get.extend(leases.iter().map(String::as_str));
    let mut asks = vec![get];
    let all = ready_pods(ns, TICKETING).await.unwrap_or_default();
    let all: Vec<String> = all.iter().map(|p| p.name_any()).collect();
    for name in &all {
        for (container, tail) in [(SIDECAR_NAME, "--tail=20"), ("app", "--tail=10")] {
            asks.push(vec!["logs", "-n", &ns.name, name, "-c", container, tail]);
        }
    }
    for args in asks {
        match cluster.kubectl(&args).await {
            Ok(out) => why.push_str(&format!("{}{}", out.stdout, out.stderr)),
            Err(err) => why.push_str(&format!("kubectl {}: {err:#}\n", args.join(" "))),
        }
    }
    Err(e.context(why))
}

async fn restart(cluster: &Cluster, ns: &TestNamespace, app: &str) -> Result<()> {
    cluster
        .kubectl(&["rollout", "restart", "deployment", app, "-n", &ns.name])
        .await?
        .ok()?;
    Ok(())
}

/// The pods of `app` injected by `version` only: the ones of an earlier version gone.
async fn only_version(
    cluster: &Cluster,
    ns: &TestNamespace,
    app: &str,
    replicas: usize,
    version: &str,
    sidecar_image: &str,
) -> Result<Vec<Pod>> {
    eventually(
        LIMIT,
        &format!("{app}'s pods all injected by {version}"),
        || async {
            Ok(app_pods(cluster, ns, app, replicas, version, sidecar_image)
                .await
                .ok())
        },
    )
    .await
}

/// `kubectl rollout restart` of both apps; once every pod of both is injected by
/// `version` (`web` pods of the Snowflake app, 2 of the Segment app) and the slots have
/// settled, the Snowflake app's pods.
async fn restart_both(
    cluster: &Cluster,
    ns: &TestNamespace,
    web: usize,
    version: &str,
    sidecar_image: &str,
) -> Result<Vec<Pod>> {
    restart(cluster, ns, WEB).await?;
    restart(cluster, ns, COUNTER).await?;
    let since = k8s_openapi::jiff::Timestamp::now();
    let pods = only_version(cluster, ns, WEB, web, version, sidecar_image).await?;
    only_version(cluster, ns, COUNTER, 2, version, sidecar_image).await?;
    slots_settled(cluster, ns, &pods, since).await?;
    Ok(pods)
}

/// Stops `traffic`, prints its figures, adds its duplicates and failed requests to
/// `problems`; its records in time order, and its figures per phase.
async fn stopped(
    name: &str,
    traffic: Traffic,
    phases: &Phases,
    problems: &mut Vec<String>,
) -> (Vec<upgrade_support::Record>, Vec<(String, Figures)>) {
    let ledger = traffic.ledger.clone();
    let started = traffic.started;
    let records = traffic.stop().await;
    let (per_phase, total) = figures(&records, phases, started);
    print_figures(name, &per_phase, &total);
    eprintln!(
        "upgrade: {name}: {} IDs from {} pods, {} duplicates",
        ledger.len(),
        ledger.pods(),
        ledger.duplicates().len()
    );
    problems.extend(
        ledger
            .duplicates()
            .into_iter()
            .map(|d| format!("{name}: duplicate {d}")),
    );
    problems.extend(
        total
            .failed
            .iter()
            .map(|f| format!("{name}: failed request {f}")),
    );
    (records, per_phase)
}

fn print_figures(name: &str, phases: &[(String, Figures)], total: &Figures) {
    eprintln!(
        "upgrade: {name}: phase: requests / IDs / retryable / pod leaving / failed / longest pause"
    );
    for (phase, f) in phases
        .iter()
        .chain([("whole run".to_owned(), total.clone())].iter())
    {
        eprintln!(
            "upgrade: {name}: {phase}: {} / {} / {} / {} / {} / {} ms",
            f.requests,
            f.ids,
            f.retryable,
            f.pod_leaving,
            f.failed.len(),
            f.longest_pause.as_millis()
        );
    }
}

#[tokio::test]
async fn an_upgrade_from_the_previous_release_and_its_rollback_lose_no_request_and_repeat_no_id()
-> Result<()> {
    let _turn = one_at_a_time().await;
    let cluster = Cluster::shared_with_node();
    let previous = tokio::task::spawn_blocking(|| -> Result<Release> {
        let release = Release::previous()?;
        release.load_into_node()?;
        Ok(release)
    })
    .await??;
    ensure!(
        previous.version != CURRENT,
        "releases.txt's newest is this tree"
    );
    let old_chart = previous.chart().to_string_lossy().into_owned();
    let old_images = image_values(&previous.image("operator"), &previous.image("sidecar"));
    let new_images = image_values(
        kubeflake_e2e::node::OPERATOR_IMAGE,
        kubeflake_e2e::node::SIDECAR_IMAGE,
    );
    let (old_sidecar, new_sidecar) = (
        previous.image("sidecar"),
        kubeflake_e2e::node::SIDECAR_IMAGE,
    );
    let phases = Phases::default();

    // 1. The previous release, its apps and its injected sidecars.
    phases.begin("previous");
    helm_with_images(cluster, "install", &old_chart, &old_images).await?;
    operator_rolled_out(cluster, &previous.image("operator")).await?;
    let ns = cluster.namespace("upgrade").await?;
    // Every version of every slot Lease, from before the first pod: a slot held by two
    // pods, or taken from a live pod, at any moment of the run is found afterwards.
    let (history, recorder) = LeaseHistory::record(ns.client.clone(), &ns.name).await?;
    let mut seen_pods: BTreeSet<String> = BTreeSet::new();
    create_sequence(&ns, SNOWFLAKE, json!({})).await?;
    create_sequence(
        &ns,
        SEGMENT,
        json!({"mode": "Segment", "segment": {"blockSize": 100}}),
    )
    .await?;
    create_sequence(
        &ns,
        STRICT,
        json!({"mode": "Segment", "segment": {"strict": true}}),
    )
    .await?;
    apply(cluster, &ns.name, &app_deployment(WEB, SNOWFLAKE, 3)).await?;
    apply(cluster, &ns.name, &app_deployment(COUNTER, SEGMENT, 2)).await?;
    apply(cluster, &ns.name, &app_deployment(TICKETING, STRICT, 2)).await?;
    let since = k8s_openapi::jiff::Timestamp::now();
    let pods = app_pods(cluster, &ns, WEB, 3, &previous.version, &old_sidecar).await?;
    app_pods(cluster, &ns, COUNTER, 2, &previous.version, &old_sidecar).await?;
    let old_tickets = app_pods(cluster, &ns, TICKETING, 2, &previous.version, &old_sidecar)
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect::<BTreeSet<String>>();
    let mut problems = Vec::new();
    if let Err(e) = matches_fixture(&previous, &pods[0]) {
        problems.push(format!("the injected container: {e:#}"));
    }
    slots_settled(cluster, &ns, &pods, since).await?;
    seen_pods.extend(pods.iter().filter_map(|p| p.uid()));
    let web = Traffic::start(cluster, &ns, WEB, 3)?;
    let counter = Traffic::start(cluster, &ns, COUNTER, 2)?;
    // One client for the strict app: it asks again only once answered, so each value it
    // gets must be above the last, whichever pod (and version) answers.
    let tickets = Traffic::start(cluster, &ns, TICKETING, 1)?;
    let admission = AdmissionProbe::start(cluster, &ns.name, SNOWFLAKE);
    eventually(LIMIT, "IDs flowing from the three apps", || async {
        Ok((web.ids() > 0 && counter.ids() > 0 && tickets.ids() > 0).then_some(()))
    })
    .await?;

    // 2. Upgrade: CRDs first (helm never upgrades a chart's crds/), then the chart.
    phases.begin("upgrade");
    cluster
        .kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &format!("{}/crds", chart_support::CHART),
        ])
        .await?
        .ok()?;
    helm_with_images(cluster, "upgrade", chart_support::CHART, &new_images).await?;
    operator_rolled_out(cluster, kubeflake_e2e::node::OPERATOR_IMAGE).await?;

    // 3. Old sidecars under the new operator, and a new sidecar beside them.
    phases.begin("old-sidecars");
    let since = k8s_openapi::jiff::Timestamp::now();
    let old = app_pods(cluster, &ns, WEB, 3, &previous.version, &old_sidecar).await?;
    slots_settled(cluster, &ns, &old, since).await?;
    seen_pods.extend(old.iter().filter_map(|p| p.uid()));
    let mixed = add_pod(cluster, &ns, WEB, 4, CURRENT).await?;
    slots_settled(cluster, &ns, &mixed, since).await?;
    seen_pods.extend(mixed.iter().filter_map(|p| p.uid()));
    // The strict app: a pod of this release beside the old ones serves, as the oracle.
    scale(cluster, &ns, TICKETING, 3).await?;
    let first_oracle = ready_pod_of_version(cluster, &ns, TICKETING, CURRENT).await?;
    served_by(cluster, &ns, &tickets, std::slice::from_ref(&first_oracle)).await?;

    // 4. The apps move to this release's sidecars.
    phases.begin("restart");
    let new = restart_both(cluster, &ns, 4, CURRENT, new_sidecar).await?;
    seen_pods.extend(new.iter().filter_map(|p| p.uid()));
    restart(cluster, &ns, TICKETING).await?;
    let new_tickets = only_version(cluster, &ns, TICKETING, 3, CURRENT, new_sidecar).await?;
    served_by(cluster, &ns, &tickets, &new_tickets).await?;

    // 5. Rollback to the previous operator, the strict app scaled to zero first.
    phases.begin("rollback");
    scale_to_zero(cluster, &ns, TICKETING).await?;
    let out = chart_support::helm(
        cluster,
        &[
            "rollback",
            RELEASE,
            "1",
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
        ],
    )
    .await?;
    ensure!(
        out.success(),
        "helm rollback: {}{}\n{}",
        out.stdout,
        out.stderr,
        release_state(cluster).await
    );
    operator_rolled_out(cluster, &previous.image("operator")).await?;

    // 6. This release's sidecars under the previous operator, and an old one beside them.
    phases.begin("new-sidecars");
    let since = k8s_openapi::jiff::Timestamp::now();
    let new = app_pods(cluster, &ns, WEB, 4, CURRENT, new_sidecar).await?;
    slots_settled(cluster, &ns, &new, since).await?;
    seen_pods.extend(new.iter().filter_map(|p| p.uid()));
    let mixed = add_pod(cluster, &ns, WEB, 5, &previous.version).await?;
    slots_settled(cluster, &ns, &mixed, since).await?;
    seen_pods.extend(mixed.iter().filter_map(|p| p.uid()));

    // 7. Back to the previous release's sidecars.
    phases.begin("restart-back");
    let back = restart_both(cluster, &ns, 5, &previous.version, &old_sidecar).await?;
    seen_pods.extend(back.iter().filter_map(|p| p.uid()));
    scale(cluster, &ns, TICKETING, 2).await?;
    let back_tickets =
        app_pods(cluster, &ns, TICKETING, 2, &previous.version, &old_sidecar).await?;
    served_by(cluster, &ns, &tickets, &back_tickets).await?;
    phases.begin("end");

    let admissions = admission.stop().await;
    recorder.abort();
    // Pods seen at a checkpoint but gone at the end were deleted by the rollouts; a slot
    // may pass from them through a release, never from a live pod.
    let live: BTreeSet<String> = back.iter().filter_map(|p| p.uid()).collect();
    let deleted: Vec<String> = seen_pods.difference(&live).cloned().collect();
    let violations = history.violations(&deleted);
    eprintln!(
        "upgrade: {} slot Lease versions recorded, {} violations",
        history.len(),
        violations.len()
    );
    problems.extend(violations.into_iter().map(|v| format!("slot Leases: {v}")));
    for (name, traffic) in [(WEB, web), (COUNTER, counter)] {
        let (_, per_phase) = stopped(name, traffic, &phases, &mut problems).await;
        for (phase, f) in &per_phase {
            if phase != "end" && f.ids == 0 {
                problems.push(format!("{name}: no ID at all in phase {phase}"));
            }
        }
    }
    let (records, per_phase) = stopped(TICKETING, tickets, &phases, &mut problems).await;
    problems.extend(
        out_of_order(&records)
            .into_iter()
            .map(|p| format!("{TICKETING}: out of order: {p}")),
    );
    for (phase, f) in &per_phase {
        // Its pods are gone during the rollback and the new sidecars under the old operator.
        let served_in = !matches!(phase.as_str(), "rollback" | "new-sidecars" | "end");
        if served_in && f.ids == 0 {
            problems.push(format!("{TICKETING}: no value at all in phase {phase}"));
        }
    }
    // Once the oracle served, a sidecar of the previous release that still wrote the
    // counter one value at a time could serve a value the oracle's window is about to
    // serve again: the API server's Lease policy must refuse it (docs/strict.md).
    let oracle_served = records
        .iter()
        .find(|r| r.pod == first_oracle.name_any() && matches!(r.answer, Answer::Ids(_)))
        .map(|r| r.at);
    let mut old_refused = 0;
    for r in records
        .iter()
        .filter(|r| old_tickets.contains(&r.pod) && oracle_served.is_some_and(|at| r.at > at))
    {
        match &r.answer {
            Answer::Ids(ids) => problems.push(format!(
                "{TICKETING}: {} of the previous release served {ids:?} after the oracle served",
                r.pod
            )),
            _ => old_refused += 1,
        }
    }
    eprintln!(
        "upgrade: {TICKETING}: {old_refused} requests refused by the previous release's pods after the oracle served"
    );
    let mut injected_by: BTreeMap<String, usize> = BTreeMap::new();
    for (at, result) in &admissions {
        match result {
            Ok(version) => *injected_by.entry(version.clone()).or_default() += 1,
            Err(why) => problems.push(format!("admission in phase {}: {why}", phases.of(*at))),
        }
    }
    eprintln!(
        "upgrade: admissions: {} probes, injected by {injected_by:?}",
        admissions.len()
    );
    ensure!(
        injected_by.contains_key(CURRENT) && injected_by.contains_key(&previous.version),
        "both webhooks should have injected: {injected_by:?}"
    );
    node_support::delete_namespace(cluster, &ns).await;
    ensure!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}
