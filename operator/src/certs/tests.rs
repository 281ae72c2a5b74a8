//! Tests of [`super`].
use super::*;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::path::Path;
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
        .load_pem(
            &d.data["tls.crt"].0,
            &d.data["tls.key"].0,
            &PairOrigin::secret("test"),
        )
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
        .load_pem(b"nope", b"nope", &PairOrigin::secret("Secret x/y"))
        .unwrap_err();
    assert!(err.to_string().contains("Secret x/y"), "{err}");
}

/// A self-signed certificate and its key, as PEM.
fn pair(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("a certificate");
    (cert.pem(), key.serialize_pem())
}

/// Writes `pair` the way the kubelet's atomic writer does: into a new timestamped
/// directory, then swaps `..data` to it in one rename. The top-level `tls.crt` and
/// `tls.key` links go through `..data`. The version before is removed when `remove_old`.
fn write_version(dir: &Path, version: &str, (cert, key): &(String, String), remove_old: bool) {
    let versioned = dir.join(version);
    std::fs::create_dir(&versioned).unwrap();
    std::fs::write(versioned.join("tls.crt"), cert).unwrap();
    std::fs::write(versioned.join("tls.key"), key).unwrap();
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for name in ["tls.crt", "tls.key"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), link).unwrap();
        }
    }
    if remove_old && let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

/// Whether `key` belongs to `cert` (loading them is the check).
fn matches(cert: &[u8], key: &[u8]) -> bool {
    ServingCert::default()
        .load_pem(cert, key, &PairOrigin::secret("test"))
        .is_ok()
}

/// A rotation that lands between the reads of `tls.crt` and `tls.key` must not give the
/// old certificate with the new key: both are read from the version `..data` named when
/// the read began (or, if that version is removed under the read, both from the new one).
#[tokio::test]
async fn a_rotation_between_the_two_reads_never_yields_a_mismatched_pair() {
    let (old, new) = (pair("old.example"), pair("new.example"));
    assert!(
        !matches(old.0.as_bytes(), new.1.as_bytes()),
        "distinct keys"
    );
    for remove_old in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        write_version(dir.path(), "..2026_01_01_00_00_00.1", &old, false);
        let rotating = dir.path().to_path_buf();
        let new_pair = new.clone();
        let rotated = Arc::new(AtomicU32::new(0));
        let count = rotated.clone();
        let read = dir::read_pair_with(dir.path(), move || {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                write_version(&rotating, "..2026_01_01_00_00_00.2", &new_pair, remove_old);
            }
        })
        .await
        .expect("a pair is read");
        assert!(rotated.load(Ordering::SeqCst) >= 1, "the rotation ran");
        assert!(
            matches(&read.cert, &read.key),
            "remove_old={remove_old}: a mismatched pair was read ({} with {})",
            read.origin.cert,
            read.origin.key
        );
        let expected = if remove_old { &new } else { &old };
        assert_eq!(read.cert, expected.0.as_bytes(), "remove_old={remove_old}");
        assert_eq!(read.key, expected.1.as_bytes(), "remove_old={remove_old}");
    }
}

#[test]
fn the_pair_is_read_from_where_data_points_or_from_a_plain_directory() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(dir::resolve(dir.path()).unwrap(), dir.path());
    write_version(
        dir.path(),
        "..2026_01_01_00_00_00.1",
        &pair("a.example"),
        false,
    );
    assert_eq!(
        dir::resolve(dir.path()).unwrap(),
        dir.path().join("..2026_01_01_00_00_00.1")
    );
}

/// Before the check, a mismatched pair was installed and every handshake failed.
#[test]
fn a_key_that_does_not_match_its_certificate_is_refused_naming_both_files() {
    let (a, b) = (pair("a.example"), pair("b.example"));
    let serving = ServingCert::default();
    let origin = PairOrigin::files(Path::new("/certs/tls.crt"), Path::new("/certs/tls.key"));
    serving
        .load_pem(a.0.as_bytes(), a.1.as_bytes(), &origin)
        .expect("a matching pair loads");
    let err = serving
        .load_pem(a.0.as_bytes(), b.1.as_bytes(), &origin)
        .expect_err("a key of another pair is refused");
    assert!(matches!(err, CertError::KeyMismatch { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("/certs/tls.crt") && text.contains("/certs/tls.key"),
        "{text}"
    );
    assert!(serving.is_loaded(), "the pair served before stays");
}
