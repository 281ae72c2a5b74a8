//! A bound service-account token, checked: its signature against the API server's keys
//! ([`KeySet`]), then its claims against what a peer of this sidecar's strict sequence
//! must be ([`Expect`]). Pure: no clock, no network (the caller passes `now` and the keys).
//!
//! Only ES256 and RS256 are accepted (the algorithms the API server signs with: an
//! ECDSA P-256 or an RSA key); `alg: none` and every other algorithm is refused before
//! anything else is read. The key is the one the header's `kid` names, of the type the
//! algorithm needs.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

use super::keys::{Key, KeySet};
use super::{LEEWAY_SECS, TokenError};

/// What a peer's token must say.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect<'a> {
    /// The API server's issuer (from its discovery document).
    pub(crate) issuer: &'a str,
    /// [`kubeflake_crds::contract::ORACLE_TOKEN_AUDIENCE`].
    pub(crate) audience: &'a str,
    /// This sidecar's namespace: a peer's pod is in the same one.
    pub(crate) namespace: &'a str,
}

/// Who a valid token says the peer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    /// The pod the token is bound to.
    pub(crate) pod_uid: String,
    pub(crate) pod_name: String,
    /// When the token expires (seconds since the epoch).
    pub(crate) expires: i64,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn contains(&self, audience: &str) -> bool {
        match self {
            Audience::One(a) => a == audience,
            Audience::Many(all) => all.iter().any(|a| a == audience),
        }
    }

    fn shown(&self) -> String {
        match self {
            Audience::One(a) => a.clone(),
            Audience::Many(all) => all.join(", "),
        }
    }
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    aud: Audience,
    exp: i64,
    nbf: Option<i64>,
    iat: Option<i64>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<KubernetesClaims>,
}

#[derive(Deserialize)]
struct KubernetesClaims {
    namespace: Option<String>,
    pod: Option<Ref>,
}

#[derive(Deserialize)]
struct Ref {
    name: Option<String>,
    uid: Option<String>,
}

/// Checks `token` against `keys` and `expect` at `now` (seconds since the epoch).
pub(crate) fn verify(
    token: &str,
    keys: &KeySet,
    expect: &Expect<'_>,
    now: i64,
) -> Result<Peer, TokenError> {
    let token = token.trim();
    if token.is_empty() {
        return Err(TokenError::Missing);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed(
            "not three dot-separated parts".into(),
        ));
    };
    let header: Header = decode_json(header, "header")?;
    let algorithm = match header.alg.as_str() {
        "ES256" => Algorithm::Es256,
        "RS256" => Algorithm::Rs256,
        other => return Err(TokenError::Algorithm(other.to_string())),
    };
    let kid = header
        .kid
        .ok_or_else(|| TokenError::Malformed("the header names no key (kid)".into()))?;
    let key = keys
        .get(&kid)
        .ok_or_else(|| TokenError::UnknownKey { kid: kid.clone() })?;
    let signature = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|_| TokenError::Malformed("the signature is not base64url".into()))?;
    // The signed bytes: header and payload as sent, with the dot between.
    let signed = &token.as_bytes()[..header_and_payload_len(token)];
    let checked = match (algorithm, key) {
        (Algorithm::Es256, Key::P256 { point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(signed, &signature)
        }
        (Algorithm::Rs256, Key::Rsa { n, e }) => RsaPublicKeyComponents { n, e }.verify(
            &signature::RSA_PKCS1_2048_8192_SHA256,
            signed,
            &signature,
        ),
        _ => {
            return Err(TokenError::Algorithm(format!(
                "{} with key {kid}, which is not a key for it",
                header.alg
            )));
        }
    };
    checked.map_err(|_| TokenError::Signature { kid })?;
    let claims: Claims = decode_json(payload, "payload")?;
    check_claims(claims, expect, now)
}

#[derive(Clone, Copy)]
enum Algorithm {
    Es256,
    Rs256,
}

/// The length of `header.payload` in a token of three parts.
fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

fn decode_json<T: for<'de> Deserialize<'de>>(part: &str, what: &str) -> Result<T, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed(format!("the {what} is not base64url")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| TokenError::Malformed(format!("the {what} is not what a token holds: {e}")))
}

fn check_claims(claims: Claims, expect: &Expect<'_>, now: i64) -> Result<Peer, TokenError> {
    if claims.iss != expect.issuer {
        return Err(TokenError::Issuer {
            found: claims.iss,
            expected: expect.issuer.to_string(),
        });
    }
    if !claims.aud.contains(expect.audience) {
        return Err(TokenError::Audience {
            found: claims.aud.shown(),
            expected: expect.audience.to_string(),
        });
    }
    if now >= claims.exp.saturating_add(LEEWAY_SECS) {
        return Err(TokenError::Expired {
            exp: claims.exp,
            now,
        });
    }
    for at in [claims.nbf, claims.iat].into_iter().flatten() {
        if at > now.saturating_add(LEEWAY_SECS) {
            return Err(TokenError::NotYetValid { at, now });
        }
    }
    let kubernetes = claims.kubernetes.ok_or(TokenError::NotAPod)?;
    let namespace = kubernetes.namespace.unwrap_or_default();
    if namespace != expect.namespace {
        return Err(TokenError::Namespace {
            found: namespace,
            expected: expect.namespace.to_string(),
        });
    }
    let pod = kubernetes.pod.ok_or(TokenError::NotAPod)?;
    let pod_uid = pod
        .uid
        .filter(|u| !u.is_empty())
        .ok_or(TokenError::NotAPod)?;
    Ok(Peer {
        pod_uid,
        pod_name: pod.name.unwrap_or_default(),
        expires: claims.exp,
    })
}
