//! Replies: every body kubeflake serves is built here, so content types and the JSON
//! error shape (`{"error": "<what to fix>", ...}`) are the same on every endpoint.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

/// A complete reply.
pub type Reply = Response<Full<Bytes>>;

/// The content type of JSON replies.
pub const JSON: &str = "application/json";
/// The content type of plain-text replies.
pub const TEXT: &str = "text/plain; charset=utf-8";
/// The content type of the Prometheus text exposition format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// A reply with `body` as `content_type`.
pub fn body(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut reply = Response::new(Full::new(body.into()));
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    reply
}

/// A JSON reply.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Reply {
    body(status, JSON, value.to_string())
}

/// A JSON error reply: `{"error": message}` plus the `extra` fields of an object.
pub fn error(status: StatusCode, message: &str, extra: serde_json::Value) -> Reply {
    let mut value = serde_json::json!({ "error": message });
    if let (Some(fields), serde_json::Value::Object(more)) = (value.as_object_mut(), extra) {
        fields.extend(more);
    }
    json(status, &value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn read(reply: Reply) -> (StatusCode, String, serde_json::Value) {
        let status = reply.status();
        let content_type = reply.headers()[CONTENT_TYPE].to_str().unwrap().to_string();
        let bytes = futures_executor(reply.into_body().collect())
            .expect("a full body never fails")
            .to_bytes();
        (
            status,
            content_type,
            serde_json::from_slice(&bytes).unwrap(),
        )
    }

    fn futures_executor<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn an_error_is_a_json_object_with_the_message_and_any_extra_fields() {
        let (status, content_type, body) = read(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no slot yet; retry later",
            serde_json::json!({"reason": "no_slot"}),
        ));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(content_type, JSON);
        assert_eq!(
            body,
            serde_json::json!({"error": "no slot yet; retry later", "reason": "no_slot"})
        );
        let (_, _, plain) = read(error(
            StatusCode::NOT_FOUND,
            "no route",
            serde_json::Value::Null,
        ));
        assert_eq!(plain, serde_json::json!({"error": "no route"}));
    }
}
