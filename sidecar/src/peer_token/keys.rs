//! The API server's token keys: its issuer (`/.well-known/openid-configuration`) and key
//! set (`/openid/v1/jwks`), read with the sidecar's own client. Every service account may
//! read both (the ClusterRoleBinding `system:service-account-issuer-discovery` Kubernetes
//! installs binds them to all authenticated users).

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::BoxFuture;
use serde::Deserialize;

use super::TokenError;

/// The discovery document's path.
pub(crate) const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// The key set's path on the API server.
pub(crate) const JWKS_PATH: &str = "/openid/v1/jwks";
/// How long one fetch may take.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(2);

/// One verification key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Key {
    /// An ECDSA P-256 key: the uncompressed point (`0x04 || x || y`), for ES256.
    P256 { point: Vec<u8> },
    /// An RSA key's modulus and exponent (big-endian), for RS256.
    Rsa { n: Vec<u8>, e: Vec<u8> },
}

/// The keys by their `kid`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeySet {
    keys: HashMap<String, Key>,
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

impl KeySet {
    #[cfg(test)]
    pub(crate) fn new(keys: impl IntoIterator<Item = (String, Key)>) -> KeySet {
        KeySet {
            keys: keys.into_iter().collect(),
        }
    }

    pub(crate) fn get(&self, kid: &str) -> Option<&Key> {
        self.keys.get(kid)
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Reads a JWK set. Keys of other types (not EC P-256 or RSA) or without a `kid` are
    /// left out: no token can name them.
    pub(crate) fn parse(json: &[u8]) -> Result<KeySet, TokenError> {
        let jwks: Jwks = serde_json::from_slice(json)
            .map_err(|e| TokenError::Keys(format!("{JWKS_PATH} is not a JWK set: {e}")))?;
        let mut keys = HashMap::new();
        for jwk in jwks.keys {
            let Some(kid) = jwk.kid.clone() else { continue };
            if let Some(key) = jwk.key()? {
                keys.insert(kid, key);
            }
        }
        Ok(KeySet { keys })
    }
}

impl Jwk {
    fn key(&self) -> Result<Option<Key>, TokenError> {
        let field = |v: &Option<String>, name: &str| -> Result<Vec<u8>, TokenError> {
            let text = v
                .as_deref()
                .ok_or_else(|| TokenError::Keys(format!("key {:?} has no {name}", self.kid)))?;
            URL_SAFE_NO_PAD.decode(text).map_err(|_| {
                TokenError::Keys(format!("key {:?}: {name} is not base64url", self.kid))
            })
        };
        match (self.kty.as_str(), self.crv.as_deref()) {
            ("EC", Some("P-256")) => {
                let (x, y) = (field(&self.x, "x")?, field(&self.y, "y")?);
                if x.len() != 32 || y.len() != 32 {
                    return Err(TokenError::Keys(format!(
                        "key {:?}: a P-256 point has 32-byte coordinates",
                        self.kid
                    )));
                }
                let mut point = Vec::with_capacity(65);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                Ok(Some(Key::P256 { point }))
            }
            ("RSA", _) => Ok(Some(Key::Rsa {
                n: field(&self.n, "n")?,
                e: field(&self.e, "e")?,
            })),
            _ => Ok(None),
        }
    }
}

/// The issuer and keys the API server publishes now.
#[derive(Debug, Clone)]
pub(crate) struct Discovered {
    pub(crate) issuer: String,
    pub(crate) keys: KeySet,
}

/// Where the issuer and keys come from: the API server in a cluster, fixed in tests.
pub(crate) trait KeySource: Send + Sync + 'static {
    fn fetch(&self) -> BoxFuture<'_, Result<Discovered, TokenError>>;
}

/// The API server's discovery document and key set, read with the sidecar's client.
pub(crate) struct KubeKeySource {
    client: kube::Client,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
}

impl KubeKeySource {
    pub(crate) fn new(client: kube::Client) -> KubeKeySource {
        KubeKeySource { client }
    }

    async fn get(&self, path: &str) -> Result<String, TokenError> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| TokenError::Keys(format!("{path}: {e}")))?;
        match tokio::time::timeout(FETCH_TIMEOUT, self.client.request_text(request)).await {
            Ok(Ok(text)) => Ok(text),
            Ok(Err(e)) => Err(TokenError::Keys(format!(
                "reading {path} from the API server: {e} (every service account may read it \
                 through the ClusterRoleBinding system:service-account-issuer-discovery: is it \
                 there?)"
            ))),
            Err(_) => Err(TokenError::Keys(format!(
                "reading {path} from the API server: no answer within {FETCH_TIMEOUT:?}"
            ))),
        }
    }
}

impl KeySource for KubeKeySource {
    fn fetch(&self) -> BoxFuture<'_, Result<Discovered, TokenError>> {
        Box::pin(async move {
            let discovery: Discovery = serde_json::from_str(&self.get(DISCOVERY_PATH).await?)
                .map_err(|e| TokenError::Keys(format!("{DISCOVERY_PATH} names no issuer: {e}")))?;
            let keys = KeySet::parse(self.get(JWKS_PATH).await?.as_bytes())?;
            Ok(Discovered {
                issuer: discovery.issuer,
                keys,
            })
        })
    }
}

/// Fixed keys (tests).
#[cfg(test)]
pub(crate) struct FixedKeys(pub(crate) Discovered);

#[cfg(test)]
impl KeySource for FixedKeys {
    fn fetch(&self) -> BoxFuture<'_, Result<Discovered, TokenError>> {
        let found = self.0.clone();
        Box::pin(async move { Ok(found) })
    }
}
