//! Tokens made for tests, signed the way the API server signs its own: an ES256 key
//! generated per test (`ring`), and a fixed RS256 key, `rs256-test-key.pk8`.
//!
//! `rs256-test-key.pk8` is a 2048-bit RSA key in PKCS#8 DER, made once with
//! `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -outform DER -out k.der`
//! and `openssl pkcs8 -topk8 -nocrypt -inform DER -in k.der -outform DER -out rs256-test-key.pk8`;
//! it signs nothing but these tests' tokens.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kubeflake_crds::contract::ORACLE_TOKEN_AUDIENCE;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair,
    RsaPublicKeyComponents,
};
use serde_json::{Value, json};

use super::keys::{Discovered, FixedKeys, Key, KeySet};
use super::{OwnToken, PeerAuth, RefusalLog, Verifier};

/// The issuer of the tests' API server.
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The tests' namespace.
pub(crate) const NAMESPACE: &str = "ns";

enum Pair {
    Es256(EcdsaKeyPair),
    Rs256(RsaKeyPair),
}

/// A signing key and its `kid`.
pub(crate) struct Signer {
    pair: Pair,
    pub(crate) kid: String,
}

impl Signer {
    pub(crate) fn es256(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer {
            pair: Pair::Es256(pair),
            kid: kid.into(),
        }
    }

    pub(crate) fn rs256(kid: &str) -> Signer {
        let pair = RsaKeyPair::from_pkcs8(include_bytes!("rs256-test-key.pk8")).unwrap();
        Signer {
            pair: Pair::Rs256(pair),
            kid: kid.into(),
        }
    }

    /// The public key, as the API server's key set lists it.
    pub(crate) fn key(&self) -> (String, Key) {
        let key = match &self.pair {
            Pair::Es256(p) => Key::P256 {
                point: p.public_key().as_ref().to_vec(),
            },
            Pair::Rs256(p) => {
                let c: RsaPublicKeyComponents<Vec<u8>> = p.public().into();
                Key::Rsa { n: c.n, e: c.e }
            }
        };
        (self.kid.clone(), key)
    }

    fn alg(&self) -> &'static str {
        match self.pair {
            Pair::Es256(_) => "ES256",
            Pair::Rs256(_) => "RS256",
        }
    }

    /// A token with `claims`, its header naming this key and algorithm.
    pub(crate) fn token(&self, claims: &Value) -> String {
        self.sign(
            &json!({"alg": self.alg(), "kid": self.kid, "typ": "JWT"}),
            claims,
        )
    }

    /// A token with this header and these claims, signed by this key.
    pub(crate) fn sign(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", part(header), part(claims));
        let rng = SystemRandom::new();
        let signature = match &self.pair {
            Pair::Es256(p) => p.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Pair::Rs256(p) => {
                let mut out = vec![0; p.public().modulus_len()];
                p.sign(&RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut out)
                    .unwrap();
                out
            }
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

pub(crate) fn part(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap())
}

/// The claims the API server writes in a token bound to pod `uid` of `namespace`.
pub(crate) fn pod_claims(uid: &str, namespace: &str, audience: &str) -> Value {
    let now = chrono::Utc::now().timestamp();
    json!({
        "aud": [audience],
        "exp": now + 3600,
        "iat": now,
        "nbf": now,
        "iss": ISSUER,
        "sub": format!("system:serviceaccount:{namespace}:default"),
        "kubernetes.io": {
            "namespace": namespace,
            "pod": {"name": format!("pod-{uid}"), "uid": uid},
            "serviceaccount": {"name": "default", "uid": "sa-uid"},
        },
    })
}

/// A token of pod `uid` in the tests' namespace, for the oracle's audience.
pub(crate) fn oracle_token(signer: &Signer, uid: &str) -> String {
    signer.token(&pod_claims(uid, NAMESPACE, ORACLE_TOKEN_AUDIENCE))
}

/// The discovered issuer and keys of these signers.
pub(crate) fn discovered(signers: &[&Signer]) -> Discovered {
    Discovered {
        issuer: ISSUER.into(),
        keys: KeySet::new(signers.iter().map(|s| s.key())),
    }
}

/// A verifier of the tests' namespace that knows these signers' keys.
pub(crate) fn verifier(signers: &[&Signer]) -> Verifier {
    Verifier::new(
        Arc::new(FixedKeys(discovered(signers))),
        ORACLE_TOKEN_AUDIENCE,
        NAMESPACE,
    )
}

/// What the sidecar of pod `uid` shows and checks, with `signer` as the API server.
/// Its refusals are counted ([`RefusalLog::count`]).
pub(crate) fn peer_auth(signer: &Signer, uid: &str) -> Arc<PeerAuth> {
    let counter = prometheus::IntCounterVec::new(
        prometheus::Opts::new("refusals", "refusals"),
        &["side", "reason"],
    )
    .unwrap();
    Arc::new(PeerAuth {
        own: OwnToken::Fixed(oracle_token(signer, uid)),
        verifier: verifier(&[signer]),
        log: RefusalLog::new(counter),
    })
}
