//! The chart's alerts and dashboard on a real Prometheus (kubeflake_e2e::prometheus):
//! the operator and sidecars run as local processes against the throw-away control plane,
//! Prometheus scrapes them on loopback with the rules exactly as the chart renders them
//! (only `for:` shortened, see [`with_short_for_durations`]), and each test drives a real
//! fault and reads the outcome from Prometheus's HTTP API:
//!
//! - more pods than slots: `KubeflakeSlotsExhausted`;
//! - a sidecar's wall clock stepped back through libfaketime: `KubeflakeClockRollback`;
//! - the segment counter Lease deleted: `KubeflakeSegmentClaimsFailing`; then re-created
//!   from scratch (as a cleanup script or an old backup would): `KubeflakeSegmentCounterWentBack`;
//! - every query of the dashboard returns a series with a value (not NaN) once the operator
//!   (with its webhook) and Snowflake and Segment sidecars run, a pod waits for a slot (a
//!   refusal) and gets one reclaimed from a deleted pod.
//!
//! Each alert is first shown quiet: its input series are scraped and every rule group was
//! evaluated after that, and it is neither pending nor firing.

mod operator_support;
mod sidecar_support;

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kubeflake_crds::segment_counter::{counter_name, new_counter};
use kubeflake_e2e::dashboard;
use kubeflake_e2e::prometheus::{Prometheus, Target, chart_rules};
use kubeflake_e2e::{Cluster, TestNamespace};
use operator_support::*;
use serde_json::{Value, json};
use sidecar_support::{Sidecar, get, request};

/// The release the rules are rendered for; its fullname is "kubeflake", so the operator
/// alerts select `job="kubeflake-metrics",namespace="<test namespace>"` (the chart's
/// default operatorSelector), which is what [`operator_target`] labels the operator with.
const RELEASE: &str = "kubeflake";
const OPERATOR_JOB: &str = "kubeflake-metrics";
const SIDECAR_JOB: &str = "kubeflake-sidecar";
/// Every bounded wait of this file.
const LIMIT: Duration = Duration::from_secs(120);
/// The `for:` of every alert in the test's copy of the rules.
const SHORT_FOR: &str = "2s";

/// The test's copy of the rules with every `for:` set to [`SHORT_FOR`].
///
/// The shipped `for:` durations (2 minutes to 1 hour) make an alert wait that long in
/// `pending` before it fires; a test waiting for them would take an hour. Shortening them
/// still shows the whole path (scraped series, the expression as shipped, pending, firing),
/// and `promtool test rules` (charts/kubeflake/tests/promtool.sh) tests the real durations.
/// Nothing else is changed: expressions, labels and thresholds are what the chart renders.
fn with_short_for_durations(rules: &str) -> String {
    rules
        .lines()
        .map(|line| match line.trim_start().strip_prefix("for: ") {
            Some(_) => {
                let indent = &line[..line.len() - line.trim_start().len()];
                format!("{indent}for: {SHORT_FOR}\n")
            }
            None => format!("{line}\n"),
        })
        .collect()
}

/// The chart's rules for the test namespace (release [`RELEASE`]), `for:` shortened.
fn rules(cluster: &Cluster, ns: &str, sets: &[&str]) -> Result<String> {
    let rendered = chart_rules(&cluster.helm_path(), RELEASE, ns, sets)?;
    ensure!(
        rendered.contains("for: "),
        "the rendered rules have no for: at all"
    );
    Ok(with_short_for_durations(&rendered))
}

/// The operator as the chart's ServiceMonitor labels it.
fn operator_target(operator: &Operator, ns: &str) -> Target {
    Target::new(OPERATOR_JOB, operator.metrics_port).label("namespace", ns)
}

/// A sidecar labelled as Kubernetes pod discovery would (namespace and pod).
fn sidecar_target(sidecar: &Sidecar, ns: &str) -> Target {
    Target::new(SIDECAR_JOB, sidecar.port)
        .label("namespace", ns)
        .label("pod", &sidecar.pod)
}

/// Blocking code (the Prometheus client sleeps between polls) off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// Waits until `scraped` returns series and every rule group has been evaluated after
/// that; then `alerts` must be neither pending nor firing.
async fn assert_quiet(prom: &Arc<Prometheus>, scraped: &str, alerts: &[&str]) -> Result<()> {
    let (prom, scraped) = (prom.clone(), scraped.to_owned());
    let alerts: Vec<String> = alerts.iter().map(|a| a.to_string()).collect();
    blocking(move || {
        prom.wait_series(&scraped, LIMIT)?;
        let now = prom.now()?;
        prom.wait_evaluated_after(now, LIMIT)?;
        for alert in &alerts {
            let states = prom.alert_states(alert)?;
            ensure!(
                states.is_empty(),
                "{alert} is {states:?} before the fault; /api/v1/alerts:\n{:#?}",
                prom.alerts()?
            );
        }
        Ok(())
    })
    .await
}

async fn wait_firing(prom: &Arc<Prometheus>, alert: &str) -> Result<Value> {
    let (prom, alert) = (prom.clone(), alert.to_owned());
    blocking(move || prom.wait_firing(&alert, LIMIT)).await
}

/// Paced `GET /ids?count=10` calls against one sidecar until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, per_second: f64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let pace = Duration::from_secs_f64(1.0 / per_second);
            while !s.load(Ordering::Relaxed) {
                let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(pace);
                    continue;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut conn = BufReader::new(stream);
                while !s.load(Ordering::Relaxed) {
                    if request(&mut conn, "/ids?count=10").is_none() {
                        break;
                    }
                    std::thread::sleep(pace);
                }
            }
        });
        Load {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn wait_sidecars_ready(sidecars: &[&Sidecar]) -> Result<()> {
    eventually(LIMIT, "every sidecar ready", || async {
        for s in sidecars {
            s.process.check_running()?;
        }
        Ok(sidecars.iter().all(|s| s.ready()).then_some(()))
    })
    .await
}

fn uids(pods: &[Pod]) -> Vec<String> {
    pods.iter().filter_map(|p| p.uid()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_pods_than_slots_fire_kubeflake_slots_exhausted() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("prom-slots").await?;
    let operator = Operator::start(cluster, &ns.name, "prom-slots")?;
    // 2 worker bits: 4 slots.
    let layout = json!({"timestampBits": 49, "workerBits": 2, "sequenceBits": 12});
    create_sequence(&ns, "ids", json!({"layout": layout})).await?;
    let first = create_pods(&ns, "ids", "app", 2).await?;
    all_assigned(&ns, "ids", &uids(&first), LIMIT).await?;
    let prom = Arc::new(Prometheus::start(
        &[operator_target(&operator, &ns.name)],
        Some(&rules(cluster, &ns.name, &[])?),
    )?);

    // 2 of 4 slots held (below the 0.8 of KubeflakeSlotUsageHigh too).
    let selector = format!(r#"job="{OPERATOR_JOB}",namespace="{}""#, ns.name);
    assert_quiet(
        &prom,
        &format!("kubeflake_operator_slots_assigned{{{selector}}} == 2 and kubeflake_operator_slots_free{{{selector}}} == 2"),
        &["KubeflakeSlotsExhausted", "KubeflakeSlotUsageHigh"],
    )
    .await?;

    // The fault: 5 pods for 4 slots.
    create_pods(&ns, "ids", "more", 3).await?;
    let alert = wait_firing(&prom, "KubeflakeSlotsExhausted").await?;
    assert_eq!(alert["labels"]["job"], OPERATOR_JOB, "{alert}");
    assert_eq!(alert["labels"]["namespace"], ns.name.as_str(), "{alert}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");
    let free = prom.query(&format!("kubeflake_operator_slots_free{{{selector}}}"))?;
    assert_eq!(free[0]["value"][1], "0", "no slot is free: {free:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_step_back_on_a_sidecar_fires_kubeflake_clock_rollback() -> Result<()> {
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("prom-clock").await?;
    let operator = Operator::start(cluster, &ns.name, "prom-clock")?;
    create_sequence(&ns, "ids", json!({})).await?;
    let pods = create_pods(&ns, "ids", "app", 1).await?;
    // Under libfaketime with an offset file (sidecar_support), its clock can be stepped.
    let sidecar = Sidecar::start(cluster, &ns.name, &pods[0], "ids", true)?;
    wait_sidecars_ready(&[&sidecar]).await?;
    let prom = Arc::new(Prometheus::start(
        &[
            operator_target(&operator, &ns.name),
            sidecar_target(&sidecar, &ns.name),
        ],
        Some(&rules(cluster, &ns.name, &[])?),
    )?);

    // At least two samples of the counter at 0, so that increase() sees the step.
    let series = format!(
        r#"kubeflake_clock_rollbacks_total{{namespace="{}",pod="{}"}}"#,
        ns.name, sidecar.pod
    );
    assert_quiet(
        &prom,
        &format!("count_over_time({series}[1m]) >= 2 and {series} == 0"),
        &["KubeflakeClockRollback", "KubeflakeClockForwardJump"],
    )
    .await?;

    // The fault: the sidecar's wall clock steps back 5 s.
    sidecar.set_clock("-5");
    let alert = wait_firing(&prom, "KubeflakeClockRollback")
        .await
        .with_context(|| format!("sidecar log:\n{}", sidecar.process.log_tail(20)))?;
    assert_eq!(alert["labels"]["pod"], sidecar.pod.as_str(), "{alert}");
    assert_eq!(alert["labels"]["namespace"], ns.name.as_str(), "{alert}");
    let size = prom.query(&format!(
        r#"kubeflake_clock_rollback_last_seconds{{pod="{}"}}"#,
        sidecar.pod
    ))?;
    let size: f64 = size[0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{size:?}"))?;
    assert!(
        (4.0..6.0).contains(&size),
        "the rollback's size is about 5 s: {size}"
    );
    sidecar.set_clock("+0");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_segment_counter_fires_claims_failing_and_a_recreated_one_counter_went_back()
-> Result<()> {
    const SEQUENCE: &str = "blocks";
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("prom-segment").await?;
    let operator = Operator::start(cluster, &ns.name, "prom-segment")?;
    // Small blocks, so that the sidecars claim every few seconds under the load below.
    create_sequence(
        &ns,
        SEQUENCE,
        json!({"mode": "Segment", "segment": {"blockSize": 100}}),
    )
    .await?;
    let pods = create_pods(&ns, SEQUENCE, "app", 2).await?;
    let mut sidecars = Vec::new();
    for pod in &pods {
        sidecars.push(Sidecar::start(cluster, &ns.name, pod, SEQUENCE, false)?);
    }
    wait_sidecars_ready(&sidecars.iter().collect::<Vec<_>>()).await?;
    let _loads: Vec<Load> = sidecars.iter().map(|s| Load::start(s.port, 20.0)).collect();
    let mut targets = vec![operator_target(&operator, &ns.name)];
    targets.extend(sidecars.iter().map(|s| sidecar_target(s, &ns.name)));
    let prom = Arc::new(Prometheus::start(
        &targets,
        Some(&rules(cluster, &ns.name, &[])?),
    )?);

    let alerts = [
        "KubeflakeSegmentClaimsFailing",
        "KubeflakeSegmentCounterWentBack",
    ];
    assert_quiet(
        &prom,
        &format!(
            r#"increase(kubeflake_segment_blocks_claimed_total{{namespace="{}"}}[1m]) > 0"#,
            ns.name
        ),
        &alerts,
    )
    .await?;

    // The fault: the counter Lease is deleted while the sidecars claim from it (the
    // operator does not re-create it).
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    leases
        .delete(&counter_name(SEQUENCE), &DeleteParams::default())
        .await?;
    let alert = wait_firing(&prom, alerts[0])
        .await
        .with_context(|| format!("sidecar log:\n{}", sidecars[0].process.log_tail(20)))?;
    assert_eq!(alert["labels"]["namespace"], ns.name.as_str(), "{alert}");

    // Then it comes back from scratch, as a cleanup script or an old backup would bring
    // it: below what was claimed, with fewer claims than the IdSequence recorded.
    leases
        .create(&PostParams::default(), &new_counter(SEQUENCE, &ns.name, 1))
        .await?;
    let alert = wait_firing(&prom, alerts[1])
        .await
        .with_context(|| format!("sidecar log:\n{}", sidecars[0].process.log_tail(20)))?;
    assert_eq!(alert["labels"]["namespace"], ns.name.as_str(), "{alert}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");
    Ok(())
}

/// The ClusterRole the operator binds sidecars to (the chart installs its own).
const SIDECAR_ROLE: &str = "kubeflake-sidecar-e2e-prometheus";

/// The operator's webhook on 127.0.0.1, trusted by a MutatingWebhookConfiguration that
/// selects labelled pods of the namespace; the operator writes the caBundle.
async fn operator_with_webhook(cluster: &Cluster, ns: &TestNamespace) -> Result<Operator> {
    let roles: Api<ClusterRole> = Api::all(ns.client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": SIDECAR_ROLE},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}],
    }))?;
    match roles.create(&PostParams::default(), &role).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let port = free_port();
    let config_name = format!("kubeflake-{}", ns.name);
    let configs: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": config_name},
        "webhooks": [{
            "name": "inject.kubeflake.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-v1-pod")},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "objectSelector": {"matchExpressions": [{"key": "kubeflake.io/sequence", "operator": "Exists"}]},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }))?;
    configs.create(&PostParams::default(), &config).await?;
    let operator = Operator::start_with(
        cluster,
        &ns.name,
        "prom-dashboard",
        &[
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-namespace",
            &ns.name,
            "--webhook-config",
            &config_name,
            "--webhook-extra-san",
            "127.0.0.1",
            "--sidecar-image",
            "kubeflake-sidecar:e2e",
            "--sidecar-cluster-role",
            SIDECAR_ROLE,
        ],
    )?;
    eventually(LIMIT, "the operator to write the caBundle", || async {
        operator.process.check_running()?;
        let c = configs.get(&config_name).await?;
        Ok(c.webhooks
            .unwrap_or_default()
            .iter()
            .all(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| !b.0.is_empty())
            })
            .then_some(()))
    })
    .await?;
    Ok(operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_series_with_the_operator_and_both_kinds_of_sidecars()
-> Result<()> {
    let started = Instant::now();
    let cluster = Cluster::shared();
    install_crd(cluster).await?;
    let ns = cluster.namespace("prom-dashboard").await?;
    let operator = operator_with_webhook(cluster, &ns).await?;
    // Snowflake with 2 slots for 3 pods (one waits: refusals, then a reclaim hands it the
    // slot of a deleted pod, once the lease of its killed sidecar expired: a short lease),
    // and Segment.
    let layout = json!({"timestampBits": 49, "workerBits": 1, "sequenceBits": 13});
    create_sequence(
        &ns,
        "ids",
        json!({"layout": layout, "lease": {"durationSeconds": 15}}),
    )
    .await?;
    create_sequence(
        &ns,
        "blocks",
        json!({"mode": "Segment", "segment": {"blockSize": 100}}),
    )
    .await?;
    // Created through the webhook (its outcomes and the sidecar RoleBinding).
    let snowflake = create_pods(&ns, "ids", "app", 3).await?;
    let segment = create_pods(&ns, "blocks", "seg", 1).await?;
    let held = eventually(LIMIT, "two of the three pods to hold a slot", || async {
        let holders: Vec<String> = slot_leases(&ns, "ids")
            .await?
            .into_iter()
            .filter_map(|l| l.holder)
            .collect();
        Ok((holders.len() == 2).then_some(holders))
    })
    .await?;
    let mut sidecars = Vec::new();
    for pod in &snowflake {
        sidecars.push(Sidecar::start(cluster, &ns.name, pod, "ids", false)?);
    }
    let segment_sidecar = Sidecar::start(cluster, &ns.name, &segment[0], "blocks", false)?;
    let (holders, waiting): (Vec<&Sidecar>, Vec<&Sidecar>) =
        sidecars.iter().partition(|s| held.contains(&s.uid));
    let waiting = waiting[0];
    let mut serving = holders.clone();
    serving.push(&segment_sidecar);
    wait_sidecars_ready(&serving).await?;
    let loads: Vec<Load> = serving.iter().map(|s| Load::start(s.port, 10.0)).collect();
    let mut targets = vec![operator_target(&operator, &ns.name)];
    targets.extend(sidecars.iter().map(|s| sidecar_target(s, &ns.name)));
    targets.push(sidecar_target(&segment_sidecar, &ns.name));
    let prom = Arc::new(Prometheus::start(
        &targets,
        Some(&rules(cluster, &ns.name, &[])?),
    )?);
    {
        let prom = prom.clone();
        blocking(move || prom.wait_series(r#"up{job="kubeflake-sidecar"} == 1"#, LIMIT)).await?;
    }
    // The hand-over below must move a counter Prometheus already holds a sample of:
    // `increase` needs a sample before the change, and the operator's first scrape may
    // come after the sidecars' (a fast reclaim would otherwise be its first sample).
    {
        let prom = prom.clone();
        blocking(move || {
            prom.wait_series("kubeflake_operator_pod_to_slot_seconds_count >= 2", LIMIT)
        })
        .await
        .context("the operator's first two assignments in Prometheus")?;
    }
    eprintln!("prometheus: scraping after {:?}", started.elapsed());

    // The waiting pod's sidecar refuses (no_slot) ...
    eventually(LIMIT, "the waiting sidecar to refuse an ID", || async {
        Ok(get(waiting.port, "/id")
            .is_ok_and(|(status, _)| status == 503)
            .then_some(()))
    })
    .await?;
    // ... until a holder's pod is deleted: the operator reclaims its slot for it.
    let gone = holders[0];
    gone.process.kill();
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    pods.delete(&gone.pod, &DeleteParams::default().grace_period(0))
        .await?;
    eventually(LIMIT, "the waiting sidecar to get the slot", || async {
        Ok(waiting.ready().then_some(()))
    })
    .await?;
    // The hand-over was an assignment Prometheus saw (pod-to-slot time observed).
    {
        let prom = prom.clone();
        blocking(move || {
            prom.wait_series(
                "increase(kubeflake_operator_pod_to_slot_seconds_count[1m]) > 0",
                LIMIT,
            )
        })
        .await
        .context("the waiting pod's assignment within the last minute")?;
    }
    let _more_load = Load::start(waiting.port, 10.0);
    // One more pod through the webhook while Prometheus watches (the admission-time
    // histogram moves within the rate window).
    create_pods(&ns, "blocks", "late", 1).await?;
    eprintln!("prometheus: faults driven after {:?}", started.elapsed());

    // Every row but the ID space's, whose series exist only where a sequence joined a hub
    // (e2e id_space_join and id_space_segment check those).
    let queries = dashboard::queries(|row| {
        row != dashboard::ID_SPACE_ROW && row != dashboard::ID_SPACE_SEGMENT_ROW
    })?;
    ensure!(
        queries.len() >= 20,
        "only {} dashboard queries",
        queries.len()
    );
    {
        let prom = prom.clone();
        let ns = ns.name.clone();
        blocking(move || dashboard::wait_every_query(&prom, &queries, &ns, LIMIT)).await?;
    }
    eprintln!(
        "prometheus: every dashboard query returned series with a value after {:?}",
        started.elapsed()
    );
    drop(loads);
    Ok(())
}
