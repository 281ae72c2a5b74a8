//! A peer's token is accepted only if the API server signed it (ES256 or RS256, a key it
//! publishes), for the oracle's audience, for a pod of this namespace, and it is valid now
//! (docs/safety.md rule 16).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use kubeflake_crds::contract::ORACLE_TOKEN_AUDIENCE;
use serde_json::json;

use super::jwt::{Expect, verify};
use super::keys::{Discovered, KeySet, KeySource};
use super::test_tokens::*;
use super::*;

fn expect() -> Expect<'static> {
    Expect {
        issuer: ISSUER,
        audience: ORACLE_TOKEN_AUDIENCE,
        namespace: NAMESPACE,
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn check(signer: &Signer, token: &str) -> Result<Peer, TokenError> {
    verify(token, &discovered(&[signer]).keys, &expect(), now())
}

fn claims() -> serde_json::Value {
    pod_claims("uid-a", NAMESPACE, ORACLE_TOKEN_AUDIENCE)
}

#[test]
fn rule16_a_pod_token_signed_es256_or_rs256_by_the_api_server_names_its_pod() {
    for signer in [Signer::es256("ec-1"), Signer::rs256("rsa-1")] {
        let peer = check(&signer, &oracle_token(&signer, "uid-a")).unwrap();
        assert_eq!(peer.pod_uid, "uid-a");
        assert_eq!(peer.pod_name, "pod-uid-a");
        // The audience may be one string too.
        let mut one = claims();
        one["aud"] = json!(ORACLE_TOKEN_AUDIENCE);
        assert_eq!(
            check(&signer, &signer.token(&one)).unwrap().pod_uid,
            "uid-a"
        );
    }
}

#[test]
fn rule16_a_token_whose_signature_does_not_verify_is_refused() {
    for signer in [Signer::es256("k"), Signer::rs256("k")] {
        let good = oracle_token(&signer, "uid-a");
        // Another pod's claims under the good signature.
        let (_, rest) = good.split_once('.').unwrap();
        let (_, sig) = rest.split_once('.').unwrap();
        let header = good.split('.').next().unwrap();
        let other = part(&pod_claims("uid-b", NAMESPACE, ORACLE_TOKEN_AUDIENCE));
        let forged = format!("{header}.{other}.{sig}");
        assert!(
            matches!(check(&signer, &forged), Err(TokenError::Signature { .. })),
            "{:?}",
            check(&signer, &forged)
        );
    }
    // Signed by a key of the same kid that the API server does not have.
    let published = Signer::es256("k");
    let stranger = Signer::es256("k");
    let err = check(&published, &oracle_token(&stranger, "uid-a")).unwrap_err();
    assert!(matches!(err, TokenError::Signature { .. }), "{err}");
    assert_eq!(err.reason(), "signature");
}

#[test]
fn rule16_a_token_for_another_audience_is_refused_the_api_servers_own_included() {
    let signer = Signer::es256("k");
    for audience in ["https://kubernetes.default.svc.cluster.local", "vault", ""] {
        let token = signer.token(&pod_claims("uid-a", NAMESPACE, audience));
        let err = check(&signer, &token).unwrap_err();
        assert!(matches!(err, TokenError::Audience { .. }), "{err}");
        assert!(err.to_string().contains("projected oracle token"), "{err}");
    }
}

#[test]
fn rule16_an_expired_token_or_one_not_yet_valid_is_refused_with_a_minutes_leeway() {
    let signer = Signer::rs256("k");
    let mut c = claims();
    c["exp"] = json!(now() - 61);
    assert!(matches!(
        check(&signer, &signer.token(&c)),
        Err(TokenError::Expired { .. })
    ));
    c["exp"] = json!(now() - 30);
    assert!(
        check(&signer, &signer.token(&c)).is_ok(),
        "within the leeway"
    );
    for field in ["nbf", "iat"] {
        let mut c = claims();
        c[field] = json!(now() + 120);
        let err = check(&signer, &signer.token(&c)).unwrap_err();
        assert!(
            matches!(err, TokenError::NotYetValid { .. }),
            "{field}: {err}"
        );
        c[field] = json!(now() + 30);
        assert!(
            check(&signer, &signer.token(&c)).is_ok(),
            "{field} within the leeway"
        );
    }
}

#[test]
fn rule16_a_token_of_a_pod_of_another_namespace_or_of_no_pod_is_refused() {
    let signer = Signer::es256("k");
    let other = signer.token(&pod_claims("uid-a", "other", ORACLE_TOKEN_AUDIENCE));
    let err = check(&signer, &other).unwrap_err();
    assert!(matches!(err, TokenError::Namespace { .. }), "{err}");
    // A service account's token not bound to a pod.
    let mut c = claims();
    c["kubernetes.io"].as_object_mut().unwrap().remove("pod");
    assert_eq!(check(&signer, &signer.token(&c)), Err(TokenError::NotAPod));
    let mut c = claims();
    c["kubernetes.io"]["pod"]["uid"] = json!("");
    assert_eq!(check(&signer, &signer.token(&c)), Err(TokenError::NotAPod));
    // Another issuer (another cluster) with the same key.
    let mut c = claims();
    c["iss"] = json!("https://elsewhere");
    assert!(matches!(
        check(&signer, &signer.token(&c)),
        Err(TokenError::Issuer { .. })
    ));
}

#[test]
fn rule16_a_token_signed_with_a_key_the_api_server_does_not_publish_is_refused() {
    let published = Signer::es256("k1");
    let other = Signer::es256("k2");
    let err = check(&published, &oracle_token(&other, "uid-a")).unwrap_err();
    assert_eq!(err, TokenError::UnknownKey { kid: "k2".into() });
}

#[test]
fn rule16_alg_none_and_every_algorithm_but_es256_and_rs256_is_refused() {
    let signer = Signer::es256("k");
    let unsigned = format!(
        "{}.{}.",
        part(&json!({"alg": "none", "kid": "k"})),
        part(&claims())
    );
    assert_eq!(
        check(&signer, &unsigned),
        Err(TokenError::Algorithm("none".into()))
    );
    for alg in ["HS256", "ES384", "PS256", "EdDSA"] {
        let token = signer.sign(&json!({"alg": alg, "kid": "k"}), &claims());
        assert_eq!(
            check(&signer, &token),
            Err(TokenError::Algorithm(alg.into()))
        );
    }
    // RS256 claimed with an EC key: the key is not one for the algorithm.
    let token = signer.sign(&json!({"alg": "RS256", "kid": "k"}), &claims());
    assert!(matches!(
        check(&signer, &token),
        Err(TokenError::Algorithm(_))
    ));
}

#[test]
fn rule16_malformed_tokens_are_refused_never_a_panic() {
    let signer = Signer::rs256("k");
    let good = oracle_token(&signer, "uid-a");
    for bad in [
        "x",
        "a.b",
        "a.b.c.d",
        "!!.!!.!!",
        "e30.e30.",
        &good[..good.len() / 2],
        &format!("{good}.x"),
    ] {
        let err = check(&signer, bad).unwrap_err();
        assert!(
            matches!(err, TokenError::Malformed(_) | TokenError::Signature { .. }),
            "{bad}: {err}"
        );
    }
    assert_eq!(check(&signer, ""), Err(TokenError::Missing));
    // No kid.
    let token = signer.sign(&json!({"alg": "RS256"}), &claims());
    assert!(matches!(
        check(&signer, &token),
        Err(TokenError::Malformed(_))
    ));
}

/// Keys that change: each fetch is counted and returns what `now` holds.
struct Rotating {
    now: Mutex<Discovered>,
    fetches: AtomicUsize,
}

impl KeySource for Rotating {
    fn fetch(&self) -> BoxFuture<'_, Result<Discovered, TokenError>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let now = self.now.lock().unwrap().clone();
        Box::pin(async move { Ok(now) })
    }
}

#[tokio::test(start_paused = true)]
async fn rule16_an_unknown_key_fetches_the_key_set_again_at_most_every_10_s() {
    let old = Signer::es256("old");
    let new = Signer::es256("new");
    let source = Arc::new(Rotating {
        now: Mutex::new(discovered(&[&old])),
        fetches: AtomicUsize::new(0),
    });
    let v = Verifier::new(source.clone(), ORACLE_TOKEN_AUDIENCE, NAMESPACE);
    v.verify(&oracle_token(&old, "uid-a")).await.unwrap();
    assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
    // The API server rotates in a new key; the first token signed with it waits for the
    // refetch interval, then is accepted.
    *source.now.lock().unwrap() = discovered(&[&old, &new]);
    let token = oracle_token(&new, "uid-b");
    assert!(matches!(
        v.verify(&token).await,
        Err(TokenError::UnknownKey { .. })
    ));
    assert_eq!(source.fetches.load(Ordering::SeqCst), 1, "not yet 10 s");
    tokio::time::advance(REFETCH_EVERY).await;
    assert_eq!(v.verify(&token).await.unwrap().pod_uid, "uid-b");
    assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
    // A stranger's made-up kids make no fetch each.
    let stranger = Signer::es256("made-up");
    for _ in 0..20 {
        assert!(v.verify(&oracle_token(&stranger, "uid-x")).await.is_err());
    }
    assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
    assert_eq!(KeySet::default().len(), 0);
}
