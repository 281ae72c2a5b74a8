//! Peers of a strict sequence prove who they are (docs/safety.md rule 16): on the oracle
//! port, a forwarder shows the oracle, and the oracle its forwarder, a service-account
//! token bound to its pod, for the audience
//! [`ORACLE_TOKEN_AUDIENCE`](kubeflake_crds::contract::ORACLE_TOKEN_AUDIENCE), which the
//! kubelet projects into the sidecar container alone ([`OwnToken`]). The other side
//! checks it against the API server's own keys ([`Verifier`], [`jwt`], [`keys`]): the
//! token names the pod, and the pod's UID is then what is authorised (by the caller: a
//! claimant of the sequence, or the oracle Lease's holder).
//!
//! What a token cannot stop: it travels in clear on the pod network, so whoever can read
//! pod traffic may replay one until it expires or its pod stops being a claimant
//! (docs/known-limits.md).

pub(crate) mod jwt;
pub(crate) mod keys;
mod refusals;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use kubeflake_crds::strict_oracle::wire::MAX_TOKEN_LEN;

pub(crate) use self::jwt::{Expect, Peer};
use self::keys::{Discovered, KeySource};
pub(crate) use self::refusals::{RefusalLog, Side};

/// Clock leeway for `exp`, `nbf` and `iat` (the API server's clock and this node's).
pub(crate) const LEEWAY_SECS: i64 = 60;
/// The key set is fetched again for an unknown `kid` at most this often.
pub(crate) const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// While no key set was ever fetched, a fetch is tried at most this often.
pub(crate) const FIRST_FETCH_EVERY: Duration = Duration::from_secs(1);

/// Why a peer's token (or this sidecar's own) is not accepted. Each message says what to
/// fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TokenError {
    #[error(
        "no token: a sidecar of a strict sequence shows a token of its pod for audience \
         kubeflake.io/strict-oracle (injected by this release's webhook: re-create pods \
         injected before it)"
    )]
    Missing,
    #[error("not a service-account token: {0}")]
    Malformed(String),
    #[error("signed with {0}: only ES256 and RS256 (the API server's algorithms) are accepted")]
    Algorithm(String),
    #[error(
        "signed with key {kid}, which the API server does not publish (a token of another \
         cluster, or a key rotated out; the key set is fetched again at most every 10 s)"
    )]
    UnknownKey { kid: String },
    #[error("the signature does not verify with the API server's key {kid}: a forged token")]
    Signature { kid: String },
    #[error("issued by {found}, not by this cluster's API server ({expected})")]
    Issuer { found: String, expected: String },
    #[error(
        "for audience {found}, not {expected}: a token of the pod's own service-account \
         mount is not accepted on the oracle port; mount the projected oracle token"
    )]
    Audience { found: String, expected: String },
    #[error(
        "expired at {exp} (now {now}, 60 s leeway): the kubelet renews the file; is it mounted?"
    )]
    Expired { exp: i64, now: i64 },
    #[error("not valid before {at} (now {now}, 60 s leeway): is this node's clock right?")]
    NotYetValid { at: i64, now: i64 },
    #[error(
        "of a pod in namespace {found:?}: the peers of a sequence are in its namespace ({expected})"
    )]
    Namespace { found: String, expected: String },
    #[error(
        "not bound to a pod: request the token for the pod (a projected volume, or TokenRequest with a Pod bound object)"
    )]
    NotAPod,
    #[error("the API server's token keys are not known now: {0}")]
    Keys(String),
    #[error("this sidecar's own oracle token {path} cannot be read: {message}")]
    OwnToken { path: String, message: String },
}

impl TokenError {
    /// The metric's `reason` label: a bounded set.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            TokenError::Missing => "no_token",
            TokenError::Malformed(_) => "malformed",
            TokenError::Algorithm(_) => "algorithm",
            TokenError::UnknownKey { .. } => "unknown_key",
            TokenError::Signature { .. } => "signature",
            TokenError::Issuer { .. } => "issuer",
            TokenError::Audience { .. } => "audience",
            TokenError::Expired { .. } => "expired",
            TokenError::NotYetValid { .. } => "not_yet_valid",
            TokenError::Namespace { .. } => "namespace",
            TokenError::NotAPod => "not_a_pod",
            TokenError::Keys(_) => "keys_unavailable",
            TokenError::OwnToken { .. } => "own_token",
        }
    }

    /// Whether asking again later may succeed without anyone changing anything (the
    /// keys could not be fetched): answered 503 rather than 401.
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(self, TokenError::Keys(_) | TokenError::UnknownKey { .. })
    }
}

/// This sidecar's own token: read from its file each time it is shown (the kubelet
/// rotates the file).
#[derive(Debug, Clone)]
pub(crate) enum OwnToken {
    File(PathBuf),
    /// Tests.
    #[cfg(test)]
    Fixed(String),
}

impl OwnToken {
    pub(crate) async fn read(&self) -> Result<String, TokenError> {
        match self {
            #[cfg(test)]
            OwnToken::Fixed(token) => Ok(token.clone()),
            OwnToken::File(path) => {
                let own = |message: String| TokenError::OwnToken {
                    path: path.display().to_string(),
                    message,
                };
                let text = tokio::fs::read_to_string(path).await.map_err(|e| {
                    own(format!(
                        "{e} (mounted by this release's webhook; re-create pods injected before it)"
                    ))
                })?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(own("the file is empty".into()));
                }
                if token.len() > MAX_TOKEN_LEN {
                    return Err(own(format!(
                        "{} bytes, more than {MAX_TOKEN_LEN}",
                        token.len()
                    )));
                }
                Ok(token.to_string())
            }
        }
    }
}

struct Cache {
    found: Option<Arc<Discovered>>,
    last_fetch: Option<Instant>,
}

/// Checks peers' tokens against the API server's keys, fetched once and again for a key
/// it does not know (at most every [`REFETCH_EVERY`]).
pub(crate) struct Verifier {
    source: Arc<dyn KeySource>,
    audience: String,
    namespace: String,
    cache: tokio::sync::Mutex<Cache>,
}

impl Verifier {
    pub(crate) fn new(source: Arc<dyn KeySource>, audience: &str, namespace: &str) -> Verifier {
        Verifier {
            source,
            audience: audience.to_string(),
            namespace: namespace.to_string(),
            cache: tokio::sync::Mutex::new(Cache {
                found: None,
                last_fetch: None,
            }),
        }
    }

    /// Who `token` says the peer is, if the API server signed it for a pod of this
    /// namespace, for the oracle's audience, and it is valid now.
    pub(crate) async fn verify(&self, token: &str) -> Result<Peer, TokenError> {
        let found = self.keys(false).await?;
        match self.check(token, &found) {
            Err(TokenError::UnknownKey { kid }) => {
                // A key rotated in since the last fetch: fetch again, not more often than
                // every REFETCH_EVERY (a stranger's made-up kid must not make every hello a
                // fetch).
                let again = self.keys(true).await?;
                if Arc::ptr_eq(&again, &found) {
                    return Err(TokenError::UnknownKey { kid });
                }
                self.check(token, &again)
            }
            other => other,
        }
    }

    fn check(&self, token: &str, found: &Discovered) -> Result<Peer, TokenError> {
        let expect = Expect {
            issuer: &found.issuer,
            audience: &self.audience,
            namespace: &self.namespace,
        };
        jwt::verify(token, &found.keys, &expect, chrono::Utc::now().timestamp())
    }

    /// The keys known; with `refresh`, fetched again first if the last fetch is older
    /// than [`REFETCH_EVERY`].
    async fn keys(&self, refresh: bool) -> Result<Arc<Discovered>, TokenError> {
        let mut cache = self.cache.lock().await;
        let since = cache.last_fetch.map(|t| t.elapsed());
        let due = match (&cache.found, since) {
            (_, None) => true,
            (None, Some(since)) => since >= FIRST_FETCH_EVERY,
            (Some(_), Some(since)) => refresh && since >= REFETCH_EVERY,
        };
        if due {
            cache.last_fetch = Some(Instant::now());
            match self.source.fetch().await {
                Ok(found) => {
                    tracing::info!(issuer = %found.issuer, keys = found.keys.len(), "strict: read the API server's token keys");
                    cache.found = Some(Arc::new(found));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "strict: reading the API server's token keys failed")
                }
            }
        }
        cache.found.clone().ok_or_else(|| {
            TokenError::Keys("not fetched yet, or every fetch failed; retried shortly".into())
        })
    }
}

/// What a sidecar shows and checks on the oracle port.
pub(crate) struct PeerAuth {
    pub(crate) own: OwnToken,
    pub(crate) verifier: Verifier,
    pub(crate) log: RefusalLog,
}

impl PeerAuth {
    /// A sidecar's in a pod of `namespace`: its token from `token_file`, its peers'
    /// checked with the API server's keys, refusals counted in `metrics`.
    pub(crate) fn in_cluster(
        client: &kube::Client,
        token_file: &std::path::Path,
        namespace: &str,
        metrics: &crate::metrics::SegmentMetrics,
    ) -> Arc<PeerAuth> {
        Arc::new(PeerAuth {
            own: OwnToken::File(token_file.to_path_buf()),
            verifier: Verifier::new(
                Arc::new(keys::KubeKeySource::new(client.clone())),
                kubeflake_crds::contract::ORACLE_TOKEN_AUDIENCE,
                namespace,
            ),
            log: RefusalLog::new(metrics.strict_peer_refusals.clone()),
        })
    }
}

#[cfg(test)]
pub(crate) mod test_tokens;
#[cfg(test)]
mod tests;
