//! The mutating admission webhook: HTTPS on `--webhook-addr`, path [`PATH`].
//!
//! The API server sends an `AdmissionReview` for each pod created with the
//! `kubeflake.io/sequence` label (the configuration's `objectSelector`); we answer with
//! the patch from [`crate::inject`], or deny the pod when the sequence it names does not
//! exist: a pod without IDs would only fail later and less clearly. Whether it exists is
//! read from a watch of the IdSequences ([`watch_sequences`]) when it is there, so a burst
//! of pods costs the API server no extra request each; a sequence not in that cache (made
//! a moment ago, or missing) is asked for with a GET, so the cache never denies a pod.
//!
//! Every replica serves the webhook (it needs no leadership: it only reads), so a rolling
//! update or a lost leader never blocks pod creation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use hyper::body::{Body, Incoming};
use hyper::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kubeflake_crds::IdSequence;
use kubeflake_runtime::reply::{self, Reply};
use kubeflake_runtime::serve::{BodyLimits, Limits, ServeOptions, read_body};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::certs::ServingCert;
use crate::http::Health;
use crate::inject::{Decision, SidecarTemplate, decide};
use crate::metrics::Metrics;

/// The URL path the MutatingWebhookConfiguration points at.
pub const PATH: &str = "/mutate-v1-pod";
/// Largest AdmissionReview accepted: 1 MiB. A review of a pod's CREATE carries the pod
/// once (no old object) plus a few hundred bytes; a pod's annotations are at most 256 KiB
/// together and a big manifest's spec is tens of KiB, so a real review is far below it.
/// With [`Bounds::DEFAULT`]'s 64 connections, bodies hold at most 64 MiB of the
/// operator's 256 Mi; the 4 MiB of before let about 64 slow bodies pass that limit.
pub const MAX_BODY: usize = 1 << 20;

/// What the webhook handlers share.
pub struct Webhook {
    pub client: Client,
    pub template: SidecarTemplate,
    pub metrics: Arc<Metrics>,
    /// The IdSequences this replica's watch has seen ([`watch_sequences`]).
    pub sequences: Store<IdSequence>,
}

/// A cache of the IdSequences in `api`'s scope for the webhook, and the task that keeps it
/// (run it for the life of the process). A failing watch is reported as the operator's
/// other watches are ([`Health::report_watch`], watch `webhook_idsequences`) and retried
/// with back-off; meanwhile the webhook reads each pod's sequence with a GET.
pub fn watch_sequences(
    api: Api<IdSequence>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> (Store<IdSequence>, impl Future<Output = ()> + Send) {
    let (store, writer) = reflector::store();
    let keep = async move {
        watcher(api, watcher::Config::default())
            .backoff(kubeflake_runtime::backoff::WatchBackoff::default())
            .reflect(writer)
            .for_each(|event| {
                health.report_watch(
                    "webhook_idsequences",
                    "the webhook reads each pod's IdSequence with a GET until it works",
                    &metrics,
                    &event,
                );
                std::future::ready(())
            })
            .await
    };
    (store, keep)
}

fn json(status: StatusCode, body: Vec<u8>) -> Reply {
    reply::body(status, reply::JSON, body)
}

fn error(status: StatusCode, message: &str) -> Reply {
    reply::error(status, message, serde_json::Value::Null)
}

impl Webhook {
    /// Answers one HTTP request, reading its body within `body`; never panics, every
    /// error is a JSON body (413 too large, 408 too slow).
    async fn answer<B>(&self, req: Request<B>, body: BodyLimits) -> Reply
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.uri().path() != PATH {
            return error(
                StatusCode::NOT_FOUND,
                &format!("no route {:?}; the webhook is at {PATH}", req.uri().path()),
            );
        }
        if req.method() != Method::POST {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "use POST with an AdmissionReview",
            );
        }
        let body = match read_body(req, body).await {
            Ok((_, bytes)) => bytes,
            Err(e) => {
                tracing::info!(error = %e, "AdmissionReview not read");
                return e.reply();
            }
        };
        let review: AdmissionReview<Pod> = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("not an AdmissionReview of a Pod: {e}"),
                );
            }
        };
        let request: AdmissionRequest<Pod> = match review.try_into() {
            Ok(r) => r,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("AdmissionReview without a request: {e}"),
                );
            }
        };
        let started = Instant::now();
        let (response, outcome) = self.review(&request).await;
        self.metrics
            .webhook_requests
            .with_label_values(&[outcome])
            .inc();
        self.metrics
            .webhook_seconds
            .observe(started.elapsed().as_secs_f64());
        let review: AdmissionReview<DynamicObject> = response.into_review();
        match serde_json::to_vec(&review) {
            Ok(body) => json(StatusCode::OK, body),
            Err(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot encode the answer: {e}"),
            ),
        }
    }

    /// The admission decision, and its outcome label for metrics.
    async fn review(&self, request: &AdmissionRequest<Pod>) -> (AdmissionResponse, &'static str) {
        let allow = AdmissionResponse::from(request);
        let Some(pod) = request.object.as_ref() else {
            return (allow, "skipped");
        };
        let (sequence, patch) = match decide(pod, &self.template) {
            Decision::Skip(reason) => {
                tracing::debug!(pod = ?pod.metadata.name, reason, "not injecting");
                return (allow, "skipped");
            }
            Decision::Deny(message) => {
                tracing::info!(pod = ?pod.metadata.name, %message, "pod denied");
                return (allow.deny(message), "denied");
            }
            Decision::Fail(message) => {
                tracing::error!(pod = ?pod.metadata.name, %message, "pod denied: patch not built");
                return (allow.deny(message), "error");
            }
            Decision::Complete { patch } => {
                // A re-invocation after a later webhook added containers: they get the
                // URL and the socket. Counted as "injected": the answer patches the pod.
                return match patched(&allow, patch) {
                    Ok(response) => {
                        tracing::info!(
                            namespace = request.namespace.as_deref(),
                            pod = pod_name(pod),
                            "containers added after the injection given the sidecar's URL and socket"
                        );
                        (response, "injected")
                    }
                    Err(message) => (allow.deny(message), "error"),
                };
            }
            Decision::Inject { sequence, patch } => (sequence, patch),
        };
        let namespace = request
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let known = ObjectRef::<IdSequence>::new(&sequence).within(&namespace);
        let cached = self.sequences.get(&known).is_some();
        self.metrics
            .webhook_sequence_lookups
            .with_label_values(&[if cached { "cache" } else { "api" }])
            .inc();
        let exists = if cached {
            Ok(true)
        } else {
            let sequences: Api<IdSequence> = Api::namespaced(self.client.clone(), &namespace);
            sequences.get_opt(&sequence).await.map(|s| s.is_some())
        };
        match exists {
            Ok(true) => {}
            Ok(false) => {
                let message = format!(
                    "IdSequence {sequence:?} not found in namespace {namespace:?}: create it first \
                     (kubectl apply -f idsequence.yaml), or fix the pod's kubeflake.io/sequence label"
                );
                return (allow.deny(message), "denied");
            }
            Err(e) => {
                let message = format!(
                    "cannot check IdSequence {sequence:?} in namespace {namespace:?}: {e}; retry"
                );
                return (allow.deny(message), "error");
            }
        }
        match patched(&allow, patch) {
            Ok(response) => {
                tracing::info!(namespace, pod = pod_name(pod), sequence, "sidecar injected");
                (response, "injected")
            }
            Err(message) => (allow.deny(message), "error"),
        }
    }
}

/// The pod's name for logs: its generateName prefix while it has no name yet.
fn pod_name(pod: &Pod) -> Option<&str> {
    pod.metadata
        .name
        .as_deref()
        .or(pod.metadata.generate_name.as_deref())
}

/// `allow` with `patch` applied; or, when the patch cannot be encoded (an operator bug),
/// the message to deny the pod with.
fn patched(
    allow: &AdmissionResponse,
    patch: serde_json::Value,
) -> Result<AdmissionResponse, String> {
    let patch: json_patch::Patch = serde_json::from_value(patch)
        .map_err(|e| format!("internal error building the patch: {e}"))?;
    allow
        .clone()
        .with_patch(patch)
        .map_err(|e| format!("internal error encoding the patch: {e}"))
}

/// The TLS settings: HTTP/1.1 only, the certificate from `serving` on every handshake.
pub fn tls_acceptor(serving: Arc<ServingCert>) -> Result<TlsAcceptor, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(serving);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Binds `addr`; the error names the flag.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on --webhook-addr {addr}: {e}"))
}

/// What the webhook lets one client hold, so that slow or many clients cannot take the
/// operator's memory or hold every connection (with `failurePolicy: Fail` a stalled
/// webhook stops every labelled pod from being created).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// From TCP accept to a completed TLS handshake.
    pub handshake: Duration,
    /// The connection cap, the header's size and time, the idle time.
    pub connections: Limits,
    /// The AdmissionReview's size and the time it may take to arrive.
    pub body: BodyLimits,
}

impl Bounds {
    /// The API server sends a review in one go and waits at most the configuration's
    /// `timeoutSeconds` (the chart's 5 s, at most 30 s) for the answer: 10 s for the
    /// handshake, 5 s for the header and 5 s for the body are plenty; 10 s idle between
    /// reviews; 64 connections (one replica's in-flight reviews are a few; a connection
    /// being answered is never closed, a full listener closes its longest-waiting one).
    pub const DEFAULT: Bounds = Bounds {
        handshake: Duration::from_secs(10),
        connections: Limits {
            max_connections: 64,
            idle_timeout: Duration::from_secs(10),
            ..Limits::DEFAULT
        },
        body: BodyLimits {
            max_bytes: MAX_BODY,
            timeout: Duration::from_secs(5),
        },
    };
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::DEFAULT
    }
}

/// Serves the webhook until the task is dropped: the shared serve loop within `bounds`,
/// with each connection's TLS handshake bounded by `bounds.handshake`.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    webhook: Arc<Webhook>,
    bounds: Bounds,
) {
    let options = ServeOptions {
        name: "webhook",
        limits: bounds.connections,
        drain: Duration::ZERO,
    };
    let handshake = move |stream: tokio::net::TcpStream, peer: SocketAddr| {
        let acceptor = acceptor.clone();
        async move {
            match tokio::time::timeout(bounds.handshake, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Some(tls),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    None
                }
            }
        }
    };
    let handler = move |req: Request<Incoming>| {
        let webhook = webhook.clone();
        async move { webhook.answer(req, bounds.body).await }
    };
    kubeflake_runtime::serve::serve_upgraded(
        listener,
        options,
        handshake,
        handler,
        std::future::pending(),
    )
    .await
}

#[cfg(test)]
mod tests;
