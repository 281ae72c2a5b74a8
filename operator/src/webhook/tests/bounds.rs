//! What the webhook lets a client hold: a body's size and time, and its connections.

use super::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;

fn post(body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(body.into()));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = PATH.parse().expect("a path");
    req
}

async fn json_of(reply: Reply) -> serde_json::Value {
    let bytes = reply
        .into_body()
        .collect()
        .await
        .expect("a full body")
        .to_bytes();
    serde_json::from_slice(&bytes).expect("a JSON body")
}

#[tokio::test]
async fn an_admission_review_over_one_mib_is_answered_413_with_a_json_error() {
    let webhook = unreachable_webhook();
    let reply = webhook
        .answer(post(vec![b' '; MAX_BODY + 1]), Bounds::DEFAULT.body)
        .await;
    assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = json_of(reply).await;
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains(&MAX_BODY.to_string())),
        "{body}"
    );
}

/// A body whose bytes arrive one every 50 ms and never end.
struct Trickle(tokio::time::Interval);

impl Body for Trickle {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_tick(cx)
            .map(|_| Some(Ok(Frame::data(Bytes::from_static(b" ")))))
    }
}

/// The trickle never ends, so only the body timeout (here 300 ms) ends the read.
#[tokio::test]
async fn a_body_that_trickles_is_cut_off_after_the_body_timeout_with_408() {
    let webhook = unreachable_webhook();
    let mut req = Request::new(Trickle(tokio::time::interval(Duration::from_millis(50))));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = PATH.parse().expect("a path");
    let body = BodyLimits {
        timeout: Duration::from_millis(300),
        ..Bounds::DEFAULT.body
    };
    let reply = tokio::time::timeout(Duration::from_secs(30), webhook.answer(req, body))
        .await
        .expect("the body timeout ends the read");
    assert_eq!(reply.status(), StatusCode::REQUEST_TIMEOUT);
    let body = json_of(reply).await;
    assert!(body["error"].is_string(), "{body}");
}

/// With its cap reached, a newcomer closes the connection that waited longest (here:
/// ones that never start their TLS handshake, whose own timeout is far off).
#[tokio::test]
async fn the_connection_cap_holds_a_newcomer_closes_the_longest_waiting_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tls_acceptor(Arc::new(ServingCert::default())).expect("acceptor");
    let bounds = Bounds {
        handshake: Duration::from_secs(600),
        connections: Limits {
            max_connections: 2,
            ..Bounds::DEFAULT.connections
        },
        ..Bounds::DEFAULT
    };
    let server = tokio::spawn(serve(
        listener,
        acceptor,
        Arc::new(unreachable_webhook()),
        bounds,
    ));
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut buf = [0u8; 16];
    // Bounds the wait only: a broken build must not hang the run.
    let first = tokio::time::timeout(Duration::from_secs(30), conns[0].read(&mut buf)).await;
    assert!(
        matches!(first, Ok(Ok(0)) | Ok(Err(_))),
        "the longest-waiting connection is closed: {first:?}"
    );
    for c in &mut conns[1..] {
        let still = tokio::time::timeout(Duration::from_millis(100), c.read(&mut buf)).await;
        assert!(
            still.is_err(),
            "a connection under the cap is closed: {still:?}"
        );
    }
    server.abort();
}
