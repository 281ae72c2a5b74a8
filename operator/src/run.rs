//! How the operator runs: the probes and metrics server, the webhook, leader election, and
//! the IdSequence controller with its watches and readiness. Wiring only: what a pass does
//! is in [`crate::controller`].
//!
//! One piece (over 400 lines): the start and stop of one process, read in the order they
//! happen (servers, election, caches, the Lease-policy guard, the controller, the drain);
//! each part it starts is its own module.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{self as runtime_controller, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflake_crds::IdSequence;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;
use kubeflake_runtime::backoff;
use kubeflake_runtime::shutdown::ShutdownToken;

use crate::{
    CertSource, OperatorConfig, WebhookConfig, certs, controller, http, index, metrics, rbac,
    watches, webhook,
};

/// Starts the webhook's certificate keeper and HTTPS server; both end with the process.
/// Returns the serving certificate, which readiness waits for.
async fn start_webhook(
    client: &Client,
    namespace: &Option<String>,
    config: &WebhookConfig,
    metrics: Arc<metrics::Metrics>,
    health: &Arc<http::Health>,
) -> anyhow::Result<Arc<certs::ServingCert>> {
    let listener = webhook::bind(config.addr).await?;
    let serving = Arc::new(certs::ServingCert::default());
    match &config.certs {
        CertSource::SelfManaged(s) => {
            tokio::spawn(certs::keep_self_managed(
                client.clone(),
                s.clone(),
                serving.clone(),
            ));
        }
        CertSource::Dir(dir) => {
            tokio::spawn(certs::keep_from_dir(dir.clone(), serving.clone()));
        }
    }
    let acceptor = webhook::tls_acceptor(serving.clone())?;
    tracing::info!(webhook_addr = %listener.local_addr()?, path = webhook::PATH, "webhook serving");
    let (sequences, keep_sequences) =
        webhook::watch_sequences(api(client, namespace), metrics.clone(), health.clone());
    tokio::spawn(keep_sequences);
    let handler = Arc::new(webhook::Webhook {
        client: client.clone(),
        template: config.template.clone(),
        metrics,
        sequences,
    });
    tokio::spawn(webhook::serve(
        listener,
        acceptor,
        handler,
        webhook::Bounds::DEFAULT,
    ));
    Ok(serving)
}

fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs until `shutdown` completes: the probes and metrics server at once, the controller
/// when this replica leads (or at once without election). Losing leadership ends the run,
/// so the replica restarts as a follower. Election only avoids duplicated work: two
/// controllers at once stay correct, every write being a compare-and-swap.
///
/// On `shutdown` the controller stops at once, `/readyz` turns not ready, and the webhook
/// is served for `shutdown_drain` more (counted from the signal) before the run ends.
pub async fn run(
    client: Client,
    config: OperatorConfig,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    // Readiness turns false as soon as the shutdown begins (the token says so).
    let health = Arc::new(http::Health::new(shutdown.clone()));
    let listener = tokio::net::TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on --metrics-addr {}: {e}",
                config.metrics_addr
            )
        })?;
    tracing::info!(metrics_addr = %listener.local_addr()?, namespace = config.namespace.as_deref().unwrap_or("(all)"), "operator starting");
    let server = tokio::spawn(http::serve(listener, health.clone(), metrics.clone()));
    // Every replica serves the webhook, leader or not: it only reads.
    if let Some(webhook) = &config.webhook {
        let serving = start_webhook(
            &client,
            &config.namespace,
            webhook,
            metrics.clone(),
            &health,
        )
        .await?;
        let _ = health.webhook_cert.set(serving);
    }
    let result = match &config.leader_election_namespace {
        None => run_controller(client, &config, metrics, health.clone(), shutdown.clone()).await,
        Some(ns) => {
            let manager =
                kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &config.leader_lease)
                    .with_namespace(ns)
                    .with_identity(&config.instance)
                    .with_duration(15)
                    .with_grace(5)
                    .build()
                    .await?;
            let (mut leading, election) = manager.watch().await;
            // A follower is healthy and ready: it stands by.
            health.ready.store(true, Ordering::Release);
            tracing::info!(lease = %config.leader_lease, namespace = %ns, "waiting to become leader");
            let became_leader = loop {
                if *leading.borrow_and_update() {
                    break true;
                }
                tokio::select! {
                    changed = leading.changed() => if changed.is_err() { break false },
                    () = shutdown.triggered() => break false,
                }
            };
            let result = if became_leader {
                tracing::info!("became leader: starting the controller");
                // The controller stops with the shutdown, or alone when leadership is lost.
                let stop = shutdown.child();
                let controller_stop = stop.token();
                let lost = tokio::spawn(async move {
                    let token = stop.token();
                    let lost = async move {
                        while *leading.borrow_and_update() {
                            if leading.changed().await.is_err() {
                                break;
                            }
                        }
                    };
                    tokio::select! {
                        () = token.triggered() => {}
                        () = lost => {
                            tracing::warn!("lost leadership: stopping the controller");
                            stop.trigger("lost leadership");
                        }
                    }
                });
                let result =
                    run_controller(client, &config, metrics, health.clone(), controller_stop).await;
                lost.abort();
                result
            } else {
                Ok(())
            };
            election.abort();
            result
        }
    };
    if let Some(at) = shutdown.triggered_at()
        && config.webhook.is_some()
        && !config.shutdown_drain.is_zero()
    {
        tracing::info!(
            seconds = config.shutdown_drain.as_secs_f64(),
            "draining: still serving the webhook while the API server drops this endpoint"
        );
        tokio::time::sleep_until(at + config.shutdown_drain).await;
    }
    server.abort();
    tracing::info!("operator stopped");
    result
}

/// Waits until a reflector store holds its first full list; false if its writer is gone.
///
/// kube-runtime's readiness signal remembers only the latest waiter's waker (a oneshot
/// channel), and the controller itself waits on its own store: a second waiter on that
/// store may never be woken, which left replicas not ready for good. Asking afresh every
/// 100 ms does not depend on being woken.
async fn synced<K>(store: &reflector::Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        if let Ok(ready) =
            tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready()).await
        {
            return ready.is_ok();
        }
    }
}

async fn run_controller(
    client: Client,
    config: &OperatorConfig,
    metrics: Arc<metrics::Metrics>,
    health: Arc<http::Health>,
    stop: ShutdownToken,
) -> anyhow::Result<()> {
    health.ready.store(false, Ordering::Release);
    // Only labelled pods and leases are watched and cached, slimmed; renewals and pod
    // status updates fill the caches without waking the controller (see `watches`).
    let selected = watcher::Config::default().labels(SEQUENCE_LABEL);
    // Indexed by sequence: a pass reads its own sequence's objects only (`index`).
    let (pods, pod_writer) = index::index::<Pod>();
    let pod_stream = watches::reflect_triggers(
        watcher(api::<Pod>(&client, &config.namespace), selected.clone())
            .backoff(backoff::WatchBackoff::default())
            .modify(watches::slim_pod),
        pod_writer,
        watches::pod_trigger,
    );
    let (leases, lease_writer) = index::index::<Lease>();
    let lease_stream = watches::reflect_triggers(
        watcher(api::<Lease>(&client, &config.namespace), selected)
            .backoff(backoff::WatchBackoff::default())
            .modify(watches::slim_lease),
        lease_writer,
        watches::lease_trigger,
    );

    // Which sequences share an ID space (issue 55): none without the CRD.
    // The membership task tells the controller which copies it compared with the hub since
    // the start or the last re-list (rule 21): none are used before.
    let hub_checks = config
        .id_spaces
        .as_ref()
        .map(|_| Arc::new(crate::hub::checks::HubChecks::default()));
    let (id_spaces, membership_stream) =
        controller::id_spaces::watch(&client, &config.namespace, hub_checks.clone()).await;

    let reporter = Reporter {
        controller: "kubeflake-operator".into(),
        instance: Some(config.instance.clone()),
    };
    let ctx_metrics = metrics.clone();
    // Nothing is handed out until the guard has seen the Lease policy in force.
    let (gate, _guard) =
        crate::lease_policy_guard::start(&client, config.lease_policy.clone(), metrics.clone());
    // No debounce: kube-runtime's debounce restarts its wait on every new trigger, so a
    // sequence whose pods arrive faster than the debounce (a mass start) was not passed
    // until a pause. Triggers still coalesce: one pass at a time per sequence, and what
    // arrives meanwhile makes one more pass when it ends.
    let controller = Controller::new(
        api::<IdSequence>(&client, &config.namespace),
        watcher::Config::default(),
    )
    .with_config(runtime_controller::Config::default().debounce(Duration::ZERO))
    .trigger_backoff(backoff::WatchBackoff::default())
    // Every sequence is passed again when the Lease policy's state changes.
    .reconcile_all_on(gate.changes())
    .owns_stream(lease_stream)
    .watches_stream(pod_stream, |pod: Pod| {
        let sequence = pod.labels().get(SEQUENCE_LABEL)?.clone();
        Some(ObjectRef::<IdSequence>::new(&sequence).within(&pod.namespace()?))
    })
    // A membership's copy changes what its sequence may hand out.
    .watches_stream(membership_stream, |m| {
        Some(ObjectRef::<IdSequence>::new(&m.spec.sequence).within(&m.namespace()?))
    })
    .graceful_shutdown_on(stop.triggered());
    let sequences = controller.store();
    // The IdSequence cache too: per-sequence memory follows it (`Context::forget_gone`).
    let ctx = Arc::new(
        controller::Context::new(
            client.clone(),
            pods.clone(),
            leases.clone(),
            sequences.clone(),
            metrics,
            reporter,
        )
        .with_lease_policy(gate)
        .with_id_spaces(id_spaces)
        .with_network_policies(
            config
                .network_policies
                .clone()
                .map(|c| Arc::new(crate::network_policies::SequencePolicies::new(c))),
        )
        .with_flow_schema(
            config
                .sidecar_flow_schema
                .clone()
                .map(|name| Arc::new(controller::flow_schema::FlowSchemaKeeper::new(name))),
        ),
    );
    let bindings = config.sidecar_cluster_role.clone().map(|role| {
        tokio::spawn(rbac::keep_sidecar_bindings(
            client.clone(),
            config.namespace.clone(),
            role,
            pods.store().clone(),
            ctx_metrics.clone(),
            health.clone(),
        ))
    });
    // Off the pod path: a pod's start reads only the copy this task keeps.
    let id_spaces = config.id_spaces.clone().map(|mut c| {
        c.metrics = ctx_metrics.hub.clone();
        c.checks = hub_checks.clone();
        let reporter = Reporter {
            controller: "kubeflake-operator".into(),
            instance: Some(config.instance.clone()),
        };
        tokio::spawn(crate::hub::task::run(
            client.clone(),
            c,
            reporter,
            stop.clone(),
        ))
    });

    let ready = {
        let health = health.clone();
        tokio::spawn(async move {
            let synced = tokio::join!(
                synced(pods.store()),
                synced(leases.store()),
                synced(&sequences)
            );
            if synced == (true, true, true) {
                health.ready.store(true, Ordering::Release);
                health.watch_recovered("controller");
                tracing::info!("caches synced: ready");
            }
        })
    };
    let watches = (health.clone(), ctx_metrics.clone());
    controller
        .run(controller::reconcile, controller::error_policy, ctx)
        .for_each(|result| {
            let (health, metrics) = watches.clone();
            async move {
                match result {
                    Ok((object, _)) => {
                        tracing::debug!(sequence = %object.name, "reconciled");
                        health.watch_recovered("controller");
                    }
                    // A watch that keeps failing holds readiness back: say why (log, metric,
                    // and `/readyz`).
                    Err(e @ runtime_controller::Error::QueueError(_)) => {
                        tracing::warn!(error = %e, "watch error (retried with back-off)");
                        metrics
                            .watch_errors
                            .with_label_values(&["controller"])
                            .inc();
                        // Cleared when the caches sync or a pass succeeds; the time tells
                        // a stale entry (no sequences, so no passes) from a current one.
                        let at =
                            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                        health.watch_failed("controller", format!("{e} (at {at})"));
                    }
                    Err(e) => tracing::debug!(error = %e, "reconcile error"),
                }
            }
        })
        .await;
    health.ready.store(false, Ordering::Release);
    ready.abort();
    if let Some(bindings) = bindings {
        bindings.abort();
    }
    if let Some(id_spaces) = id_spaces {
        id_spaces.abort();
        // A replica that no longer leads keeps no membership's figures (they would age).
        ctx_metrics.hub.clear();
    }
    // Asked to stop, or it ended by itself, which is a failure.
    controller_ended(&health, stop.is_triggered())
}

/// What the end of the controller's run means: nothing when it was asked to stop (the
/// shutdown signal, lost leadership); otherwise the replica is dead: `/healthz` says so
/// and the run ends with an error (the process exits non-zero and is restarted).
fn controller_ended(health: &http::Health, stop_requested: bool) -> anyhow::Result<()> {
    if stop_requested {
        return Ok(());
    }
    let reason = "controller stopped without being asked to (its watch streams ended); \
                  restart the operator";
    tracing::error!(reason, "controller failed");
    health.fail(reason);
    Err(anyhow::anyhow!(reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_controller_that_ends_unasked_fails_the_liveness_probe_and_the_run() {
        let health = http::Health::default();
        assert!(controller_ended(&health, true).is_ok());
        assert_eq!(
            health.liveness(),
            Ok(()),
            "a requested stop is not a failure"
        );
        let err = controller_ended(&health, false).expect_err("an unasked end is an error");
        let reason = health.liveness().expect_err("/healthz must report it");
        assert!(reason.contains("controller stopped"), "{reason}");
        assert!(err.to_string().contains("controller stopped"), "{err}");
    }

    /// The controller waits on its own store too; a second waiter must still see it synced.
    #[tokio::test]
    async fn readiness_sees_a_store_synced_even_when_another_task_waits_on_it_as_well() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let ours = tokio::spawn({
            let store = store.clone();
            async move { synced(&store).await }
        });
        tokio::task::yield_now().await;
        // The controller's own wait, registered after ours.
        let theirs = tokio::spawn({
            let store = store.clone();
            async move { store.wait_until_ready().await.is_ok() }
        });
        tokio::task::yield_now().await;
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let limit = Duration::from_secs(10);
        assert!(
            tokio::time::timeout(limit, theirs)
                .await
                .is_ok_and(|r| r.is_ok_and(|ok| ok))
        );
        assert!(
            tokio::time::timeout(limit, ours)
                .await
                .is_ok_and(|r| r.is_ok_and(|ok| ok)),
            "our readiness was never told the store synced"
        );
    }
}
