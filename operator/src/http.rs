//! Health, readiness and metrics endpoints of the operator, on a port of their own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use std::time::Duration;

use hyper::StatusCode;
use kube::runtime::watcher;
use kubeflake_runtime::reply::Reply;
use kubeflake_runtime::serve::{Limits, ServeOptions};
use kubeflake_runtime::shutdown::ShutdownToken;
use tokio::net::TcpListener;

use crate::certs::ServingCert;
use crate::metrics::Metrics;

/// What the probes report.
#[derive(Default)]
pub struct Health {
    /// The caches have synced and the controller runs (or this replica stands by).
    pub ready: AtomicBool,
    /// Why the replica is dead (the controller loop ended unasked), once it is: `/healthz`
    /// then answers 503 with this reason. Set through [`Health::fail`].
    failure: OnceLock<String>,
    /// The webhook's serving certificate, when this replica serves the webhook. Until it
    /// is loaded every TLS handshake fails, so the replica must not be in the Service's
    /// endpoints: with `failurePolicy: Fail` the API server would reject labelled pods.
    pub webhook_cert: OnceLock<Arc<ServingCert>>,
    /// Triggered on SIGTERM: the replica drains (see `--shutdown-drain-seconds`) and reports
    /// not ready so that the endpoints controller takes it out of the Service first.
    shutdown: ShutdownToken,
    /// The watches failing right now and their last error, by watch (the `watch` label of
    /// `kubeflake_operator_watch_errors_total`): `/readyz` shows them, so a watch that is
    /// refused (RBAC) or failing says so instead of holding things back in silence.
    failing_watches: Mutex<BTreeMap<&'static str, String>>,
}

impl Health {
    /// A replica's health, not ready once `shutdown` is triggered.
    pub fn new(shutdown: ShutdownToken) -> Health {
        Health {
            shutdown,
            ..Health::default()
        }
    }

    /// Marks the replica dead for `/healthz`, with the reason it reports (the first
    /// reason given is kept).
    pub fn fail(&self, reason: impl Into<String>) {
        let _ = self.failure.set(reason.into());
    }

    /// Whether the replica is alive; the reason when not.
    pub fn liveness(&self) -> Result<(), String> {
        match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }

    /// What becomes of one event of `watch`: an error is counted
    /// (`kubeflake_operator_watch_errors_total{watch}`), shown by `/readyz` and logged at
    /// warn, with what does not work meanwhile (`consequence`), when the watch starts
    /// failing (it is retried with [`kubeflake_runtime::backoff::WatchBackoff`]); an event
    /// that shows the watch works (an object listed or changed, a list done) clears it.
    ///
    /// `Event::Init` shows nothing: the watcher emits it as it starts a list, before the
    /// list is asked, so every retry of a failing watch begins with one. Taken as success,
    /// it cleared the failure for the moment of each retry (`/readyz` flickered) and made
    /// every retry log "works again" and a new warn.
    pub fn report_watch<K>(
        &self,
        watch: &'static str,
        consequence: &str,
        metrics: &Metrics,
        event: &Result<watcher::Event<K>, watcher::Error>,
    ) {
        match event {
            Ok(watcher::Event::Init) => {}
            Ok(_) => {
                if self.watch_recovered(watch) {
                    tracing::info!(watch, "watch works again");
                }
            }
            Err(e) => {
                metrics.watch_errors.with_label_values(&[watch]).inc();
                let message = e.to_string();
                if self.watch_failed(watch, message.clone()) {
                    tracing::warn!(watch, error = %message, "watch failed: {consequence} (retried with back-off; is the operator allowed to list and watch it?)");
                } else {
                    tracing::debug!(watch, error = %message, "watch failed again");
                }
            }
        }
    }

    /// Records that `watch` failed with `error`; true when it was not failing before (then
    /// the caller logs it at warn; repeats are retried with back-off and only counted).
    pub fn watch_failed(&self, watch: &'static str, error: String) -> bool {
        let mut failing = self
            .failing_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        failing.insert(watch, error).is_none()
    }

    /// Records that `watch` works again; true when it was failing.
    pub fn watch_recovered(&self, watch: &'static str) -> bool {
        let mut failing = self
            .failing_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        failing.remove(watch).is_some()
    }

    /// The watches failing right now, with their last error.
    pub fn failing_watches(&self) -> BTreeMap<&'static str, String> {
        self.failing_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the replica may receive traffic; the reason when not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.shutdown.is_triggered() {
            return Err("shutting down");
        }
        if !self.ready.load(Ordering::Acquire) {
            return Err("caches not synced yet");
        }
        if self.webhook_cert.get().is_some_and(|c| !c.is_loaded()) {
            return Err("webhook serving certificate not loaded yet");
        }
        Ok(())
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Reply {
    kubeflake_runtime::reply::body(status, content_type, body)
}

fn answer(path: &str, health: &Health, metrics: &Metrics) -> Reply {
    let json = "application/json";
    match path {
        "/healthz" => match health.liveness() {
            Ok(()) => reply(StatusCode::OK, json, r#"{"status":"alive"}"#.into()),
            Err(reason) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json,
                serde_json::json!({"status": "failed", "reason": reason}).to_string(),
            ),
        },
        "/readyz" => {
            let (code, mut body) = match health.readiness() {
                Ok(()) => (StatusCode::OK, serde_json::json!({"status": "ready"})),
                Err(reason) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    serde_json::json!({"status": "not ready", "reason": reason}),
                ),
            };
            // Failing watches do not change the answer (the binding keeper is optional,
            // and the controller's own watches already hold readiness back until its
            // caches sync), but the body says which fail and why.
            let failing = health.failing_watches();
            if !failing.is_empty() {
                body["failingWatches"] = serde_json::json!(failing);
            }
            reply(code, json, body.to_string())
        }
        "/metrics" => reply(
            StatusCode::OK,
            kubeflake_runtime::reply::PROMETHEUS_TEXT,
            metrics.render(),
        ),
        other => reply(
            StatusCode::NOT_FOUND,
            json,
            format!(r#"{{"error":"no route {other:?}; try /healthz, /readyz or /metrics"}}"#),
        ),
    }
}

/// The bounds of the probe and metrics port, which listens on the pod IP: the kubelet and
/// Prometheus need a few connections, so 64; the serve loop's header and idle bounds.
pub const PROBE_LIMITS: Limits = Limits::DEFAULT.with_max_connections(64);

/// Serves the probes and metrics until the task is dropped (the shared serve loop:
/// connection cap, header and idle timeouts, accept back-off).
pub async fn serve(listener: TcpListener, health: Arc<Health>, metrics: Arc<Metrics>) {
    let options = ServeOptions {
        name: "operator probes",
        limits: PROBE_LIMITS,
        drain: Duration::ZERO,
    };
    let handler = move |req: hyper::Request<hyper::body::Incoming>| {
        let reply = answer(req.uri().path(), &health, &metrics);
        async move { reply }
    };
    kubeflake_runtime::serve::serve(listener, options, handler, std::future::pending()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed_pem() -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_replica_serving_the_webhook_is_not_ready_until_its_certificate_is_loaded() {
        let health = Health::default();
        health.ready.store(true, Ordering::Release);
        let cert = Arc::new(ServingCert::default());
        assert!(health.webhook_cert.set(cert.clone()).is_ok());
        assert_eq!(
            health.readiness(),
            Err("webhook serving certificate not loaded yet")
        );
        let (crt, key) = self_signed_pem();
        cert.load_pem(
            crt.as_bytes(),
            key.as_bytes(),
            &crate::certs::PairOrigin::secret("test"),
        )
        .expect("loads");
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn without_the_webhook_readiness_is_the_caches_alone() {
        let health = Health::default();
        assert_eq!(health.readiness(), Err("caches not synced yet"));
        health.ready.store(true, Ordering::Release);
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn a_failed_replica_answers_healthz_with_503_and_the_reason() {
        let health = Health::default();
        let metrics = Metrics::new();
        let alive = answer("/healthz", &health, &metrics);
        assert_eq!(alive.status(), StatusCode::OK);
        health.fail("the controller stopped: its watches ended");
        assert_eq!(
            health.liveness(),
            Err("the controller stopped: its watches ended".to_string())
        );
        let dead = answer("/healthz", &health, &metrics);
        assert_eq!(dead.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = body_json(dead);
        assert_eq!(body["status"], "failed");
        assert_eq!(body["reason"], "the controller stopped: its watches ended");
        // The first reason is kept.
        health.fail("something later");
        assert_eq!(
            body_json(answer("/healthz", &health, &metrics))["reason"],
            "the controller stopped: its watches ended"
        );
    }

    fn body_json(r: Reply) -> serde_json::Value {
        use http_body_util::BodyExt;
        let bytes = futures::executor::block_on(r.into_body().collect())
            .expect("a full body never fails")
            .to_bytes();
        serde_json::from_slice(&bytes).expect("a JSON body")
    }

    #[test]
    fn readyz_names_each_failing_watch_and_its_error_until_it_recovers() {
        let health = Health::default();
        let metrics = Metrics::new();
        assert!(health.watch_failed("rbac_rolebindings", "403 forbidden".into()));
        assert!(!health.watch_failed("rbac_rolebindings", "403 again".into()));
        let body = body_json(answer("/readyz", &health, &metrics));
        assert_eq!(body["reason"], "caches not synced yet");
        assert_eq!(body["failingWatches"]["rbac_rolebindings"], "403 again");
        assert!(health.watch_recovered("rbac_rolebindings"));
        let body = body_json(answer("/readyz", &health, &metrics));
        assert!(body.get("failingWatches").is_none(), "{body}");
    }

    /// The watcher emits `Init` as it starts each list, before asking: every retry of a
    /// failing watch begins with one. It must not count as the watch working, or `/readyz`
    /// would lose the failure at each retry (and each retry log "works again" and warn).
    #[test]
    fn a_failing_watch_stays_failing_through_the_init_of_its_retry_until_a_list_is_done() {
        use k8s_openapi::api::core::v1::Pod;
        let health = Health::default();
        let metrics = Metrics::new();
        let failed: Result<watcher::Event<Pod>, _> = Err(watcher::Error::NoResourceVersion);
        health.report_watch("rbac_roles", "roles are not kept", &metrics, &failed);
        assert!(health.failing_watches().contains_key("rbac_roles"));
        let retry: Result<watcher::Event<Pod>, watcher::Error> = Ok(watcher::Event::Init);
        health.report_watch("rbac_roles", "roles are not kept", &metrics, &retry);
        assert!(
            health.failing_watches().contains_key("rbac_roles"),
            "a retry's Init is not a success"
        );
        let listed: Result<watcher::Event<Pod>, watcher::Error> = Ok(watcher::Event::InitDone);
        health.report_watch("rbac_roles", "roles are not kept", &metrics, &listed);
        assert!(health.failing_watches().is_empty(), "a list done is");
        assert!(
            metrics
                .render()
                .contains("kubeflake_operator_watch_errors_total{watch=\"rbac_roles\"} 1"),
            "the one failure is counted"
        );
    }

    #[test]
    fn a_draining_replica_is_not_ready() {
        let shutdown = kubeflake_runtime::shutdown::Shutdown::new();
        let health = Health::new(shutdown.token());
        health.ready.store(true, Ordering::Release);
        assert_eq!(health.readiness(), Ok(()));
        shutdown.trigger("test");
        assert_eq!(health.readiness(), Err("shutting down"));
    }
}
