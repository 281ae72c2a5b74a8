//! The webhook's answers (against the scripted fake API server) and its connection limits.

use super::*;
use tokio::io::AsyncReadExt;

mod bounds;

/// A webhook whose API server is nowhere (for tests that never reach it).
fn unreachable_webhook() -> Webhook {
    let client = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:1".parse().expect("a URL"),
    ))
    .expect("a client");
    Webhook {
        client,
        template: template(),
        metrics: Arc::new(Metrics::new()),
        sequences: reflector::store().0,
    }
}

#[tokio::test]
async fn a_client_that_never_completes_the_tls_handshake_is_disconnected() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let webhook = Arc::new(unreachable_webhook());
    let acceptor = tls_acceptor(Arc::new(ServingCert::default())).expect("acceptor");
    let bounds = Bounds {
        handshake: Duration::from_millis(100),
        ..Bounds::DEFAULT
    };
    let server = tokio::spawn(serve(listener, acceptor, webhook, bounds));
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut buf = [0u8; 16];
    // Without the timeout the read would wait forever; the bound only keeps a broken
    // build from hanging the test run.
    let read = tokio::time::timeout(Duration::from_secs(30), silent.read(&mut buf)).await;
    server.abort();
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the server closes a silent connection: {read:?}"
    );
}

use kube::runtime::watcher::Event;
use kubeflake_crds::IdSequenceSpec;
use serde_json::json;

use kubeflake_runtime::fake_api::FakeApi;

const SEQUENCE_PATH: &str = "/apis/kubeflake.io/v1alpha1/namespaces/shop/idsequences/orders";

fn template() -> SidecarTemplate {
    SidecarTemplate {
        image: "x".into(),
        image_pull_policy: "IfNotPresent".into(),
        port: 7070,
        probe_port: 7071,
        requests: Default::default(),
        limits: Default::default(),
    }
}

fn orders() -> IdSequence {
    let mut seq = IdSequence::new("orders", IdSequenceSpec::default());
    seq.metadata.namespace = Some("shop".into());
    seq.metadata.resource_version = Some("1".into());
    seq
}

/// The webhook on `api`, its watch cache holding `cached`.
fn webhook(api: &FakeApi, cached: &[IdSequence]) -> Webhook {
    let (sequences, mut writer) = reflector::store();
    for seq in cached {
        writer.apply_watcher_event(&Event::Apply(seq.clone()));
    }
    Webhook {
        client: api.client(),
        template: template(),
        metrics: Arc::new(Metrics::new()),
        sequences,
    }
}

/// The API server's review of a pod in namespace `shop` labelled for sequence `orders`.
fn labelled_pod() -> AdmissionRequest<Pod> {
    let review: AdmissionReview<Pod> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "shop",
            "userInfo": {"username": "test"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "app", "namespace": "shop", "labels": {"kubeflake.io/sequence": "orders"}},
                "spec": {"containers": [{"name": "app", "image": "app"}]},
            },
        },
    }))
    .expect("a review");
    review.try_into().expect("a request")
}

fn lookups(webhook: &Webhook, source: &str) -> u64 {
    webhook
        .metrics
        .webhook_sequence_lookups
        .with_label_values(&[source])
        .get()
}

#[tokio::test]
async fn a_pod_whose_sequence_the_watch_has_seen_is_injected_without_asking_the_api_server() {
    let api = FakeApi::new();
    let webhook = webhook(&api, &[orders()]);
    let (response, outcome) = webhook.review(&labelled_pod()).await;
    assert_eq!(outcome, "injected");
    assert!(response.allowed && response.patch.is_some());
    api.verify(); // no request at all
    assert_eq!(
        (lookups(&webhook, "cache"), lookups(&webhook, "api")),
        (1, 0)
    );
}

#[tokio::test]
async fn a_sequence_not_in_the_cache_yet_is_read_with_a_get_so_a_new_sequence_is_never_denied() {
    let api = FakeApi::new().expect(
        http::Method::GET,
        SEQUENCE_PATH,
        200,
        serde_json::to_value(orders()).expect("json"),
    );
    let webhook = webhook(&api, &[]);
    let (response, outcome) = webhook.review(&labelled_pod()).await;
    assert_eq!(outcome, "injected");
    assert!(response.allowed && response.patch.is_some());
    api.verify();
    assert_eq!(
        (lookups(&webhook, "cache"), lookups(&webhook, "api")),
        (0, 1)
    );
}

#[tokio::test]
async fn a_pod_whose_sequence_exists_nowhere_is_denied_with_what_to_fix() {
    let api = FakeApi::new().expect(
        http::Method::GET,
        SEQUENCE_PATH,
        404,
        kubeflake_runtime::fake_api::failure(
            404,
            "NotFound",
            "idsequences.kubeflake.io \"orders\" not found",
        ),
    );
    let webhook = webhook(&api, &[]);
    let (response, outcome) = webhook.review(&labelled_pod()).await;
    assert_eq!(outcome, "denied");
    assert!(!response.allowed);
    let message = response.result.message;
    assert!(
        message.contains("IdSequence \"orders\" not found in namespace \"shop\"")
            && message.contains("kubectl apply"),
        "{message}"
    );
    api.verify();
}
