//! Tests of [`super`].
use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

fn config() -> SelfManaged {
    SelfManaged {
        namespace: "kubeflake".into(),
        secret: "kubeflake-webhook-tls".into(),
        webhook_config: "kubeflake".into(),
        dns_names: SelfManaged::service_names(
            "kubeflake-webhook",
            "kubeflake",
            &["127.0.0.1".into()],
        ),
    }
}

fn stored_from(d: &Desired, names: &str) -> Stored {
    let get = |k: &str| d.data[k].0.clone();
    Stored {
        tls_crt: get("tls.crt"),
        tls_key: get("tls.key"),
        ca_bundle: get(CA_BUNDLE),
        ca_key: String::from_utf8(get(CA_KEY)).unwrap(),
        not_after: Some(d.not_after),
        ca_not_after: Some(d.ca_not_after),
        dns_names: names.into(),
    }
}

fn certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_fresh_secret_holds_a_serving_certificate_that_rustls_accepts() {
    let d = desired_secret(&config(), None)
        .unwrap()
        .expect("something to write");
    let serving = ServingCert::default();
    serving
        .load_pem(&d.data["tls.crt"].0, &d.data["tls.key"].0, "test")
        .unwrap();
    assert!(serving.is_loaded());
    assert!(d.not_after <= d.ca_not_after);
}

#[test]
fn a_current_secret_is_left_alone_and_renewal_keeps_the_ca() {
    let c = config();
    let d = desired_secret(&c, None).unwrap().unwrap();
    let names = c.dns_names.join(",");
    assert!(
        desired_secret(&c, Some(&stored_from(&d, &names)))
            .unwrap()
            .is_none()
    );

    let mut expiring = stored_from(&d, &names);
    expiring.not_after = Some(Utc::now() + chrono::Duration::days(30));
    let renewed = desired_secret(&c, Some(&expiring))
        .unwrap()
        .expect("renewed");
    assert_eq!(renewed.data[CA_KEY], d.data[CA_KEY], "same CA");
    assert_eq!(renewed.data[CA_BUNDLE], d.data[CA_BUNDLE], "same bundle");
    assert_ne!(renewed.data["tls.crt"], d.data["tls.crt"]);
}

#[test]
fn changed_service_names_reissue_the_serving_certificate() {
    let c = config();
    let d = desired_secret(&c, None).unwrap().unwrap();
    assert!(
        desired_secret(&c, Some(&stored_from(&d, "old-name")))
            .unwrap()
            .is_some()
    );
}

#[test]
fn an_expiring_ca_is_replaced_and_the_old_one_stays_in_the_bundle() {
    let c = config();
    let d = desired_secret(&c, None).unwrap().unwrap();
    let mut old = stored_from(&d, &c.dns_names.join(","));
    old.ca_not_after = Some(Utc::now() + chrono::Duration::days(30));
    let rotated = desired_secret(&c, Some(&old)).unwrap().expect("rotated");
    assert_ne!(rotated.data[CA_KEY], d.data[CA_KEY]);
    let bundle = certs(&rotated.data[CA_BUNDLE].0);
    assert_eq!(bundle.len(), 2);
    assert_eq!(bundle[1], certs(&d.data[CA_BUNDLE].0)[0]);
    // A second rotation keeps only the newest two.
    let mut older = stored_from(&rotated, &c.dns_names.join(","));
    older.ca_not_after = Some(Utc::now());
    assert_eq!(
        certs(&desired_secret(&c, Some(&older)).unwrap().unwrap().data[CA_BUNDLE].0).len(),
        2
    );
}

/// A write that loses every compare-and-swap is tried a bounded number of times, with
/// a pause between tries, then reported (the caller logs it and tries again later).
#[tokio::test]
async fn conflicting_writes_are_retried_five_times_with_pauses_then_reported() {
    let pause = Duration::from_millis(20);
    let tries = &AtomicU32::new(0);
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        retry_conflicts("Secret x/y", pause, move || async move {
            tries.fetch_add(1, Ordering::Relaxed);
            tokio::task::yield_now().await; // the API call
            Ok::<_, CertError>(Cas::<()>::Conflict)
        }),
    )
    .await
    .expect("gives up instead of retrying forever");
    let Err(error @ CertError::Conflicts { attempts: 5, .. }) = result else {
        panic!("expected a conflict error after 5 attempts, got {result:?}");
    };
    assert_eq!(tries.load(Ordering::Relaxed), CAS_ATTEMPTS);
    assert!(error.to_string().contains("Secret x/y"), "{error}");
    // Four pauses of at least half of `pause` each.
    assert!(started.elapsed() >= pause * 2, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_write_that_wins_after_conflicts_returns_its_value_and_other_errors_stop_at_once() {
    let tries = &AtomicU32::new(0);
    let won = retry_conflicts("Secret x/y", Duration::from_millis(1), move || async move {
        let n = tries.fetch_add(1, Ordering::Relaxed) + 1;
        Ok::<_, CertError>(if n < 3 { Cas::Conflict } else { Cas::Done(n) })
    })
    .await;
    assert_eq!(won.ok(), Some(3));
    let tries = &AtomicU32::new(0);
    let failed: Result<(), _> =
        retry_conflicts("Secret x/y", Duration::from_millis(1), move || async move {
            tries.fetch_add(1, Ordering::Relaxed);
            Err(CertError::Incomplete("Secret x/y".into(), "tls.crt"))
        })
        .await;
    assert!(matches!(failed, Err(CertError::Incomplete(..))));
    assert_eq!(tries.load(Ordering::Relaxed), 1);
}

#[test]
fn garbage_pem_is_an_error_naming_its_origin() {
    let err = ServingCert::default()
        .load_pem(b"nope", b"nope", "Secret x/y")
        .unwrap_err();
    assert!(err.to_string().contains("Secret x/y"), "{err}");
}
