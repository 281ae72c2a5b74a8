//! What a Kubernetes API error means for the code that made the request.
//!
//! Every write kubeflake makes is a compare-and-swap on `resourceVersion`, so the answer
//! that matters most is "someone else wrote first" (409): read again and decide again.

/// The class of a failed Kubernetes API request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeErrorKind {
    /// 409: the object changed since it was read (or already exists): re-read.
    Conflict,
    /// 404: the object (or its namespace) is gone.
    NotFound,
    /// 410: a watch's resource version is too old: list again.
    Gone,
    /// 403: this identity may not do that (RBAC).
    Forbidden,
    /// 422 or 400: the API server rejected the object itself.
    Invalid,
    /// 429 or 5xx: the API server is overloaded or failing: retry later.
    Unavailable,
    /// The request did not get an answer (connection, TLS, timeout, decoding).
    Transport,
}

impl KubeErrorKind {
    /// A short, stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            KubeErrorKind::Conflict => "conflict",
            KubeErrorKind::NotFound => "not_found",
            KubeErrorKind::Gone => "gone",
            KubeErrorKind::Forbidden => "forbidden",
            KubeErrorKind::Invalid => "invalid",
            KubeErrorKind::Unavailable => "unavailable",
            KubeErrorKind::Transport => "transport",
        }
    }
}

/// The HTTP status the API server answered with, if it answered.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Classifies a failed request.
pub fn kind(e: &kube::Error) -> KubeErrorKind {
    match status_code(e) {
        Some(409) => KubeErrorKind::Conflict,
        Some(404) => KubeErrorKind::NotFound,
        Some(410) => KubeErrorKind::Gone,
        Some(401 | 403) => KubeErrorKind::Forbidden,
        Some(400 | 422) => KubeErrorKind::Invalid,
        Some(_) => KubeErrorKind::Unavailable,
        None => KubeErrorKind::Transport,
    }
}

/// 409: the write lost a compare-and-swap (or the object exists).
pub fn is_conflict(e: &kube::Error) -> bool {
    kind(e) == KubeErrorKind::Conflict
}

/// 404: the object is gone.
pub fn is_not_found(e: &kube::Error) -> bool {
    kind(e) == KubeErrorKind::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16) -> kube::Error {
        let status = kube::core::Status::failure("test", "Test").with_code(code);
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn an_answer_is_classified_by_its_status_code() {
        let cases = [
            (409, KubeErrorKind::Conflict),
            (404, KubeErrorKind::NotFound),
            (410, KubeErrorKind::Gone),
            (403, KubeErrorKind::Forbidden),
            (422, KubeErrorKind::Invalid),
            (429, KubeErrorKind::Unavailable),
            (503, KubeErrorKind::Unavailable),
        ];
        for (code, expected) in cases {
            assert_eq!(kind(&answered(code)), expected, "HTTP {code}");
        }
        assert!(is_conflict(&answered(409)));
        assert!(!is_conflict(&answered(404)));
        assert!(is_not_found(&answered(404)));
    }

    #[test]
    fn no_answer_is_a_transport_error() {
        let e = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(kind(&e), KubeErrorKind::Transport);
        assert_eq!(status_code(&e), None);
    }
}
