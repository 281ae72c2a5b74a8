//! The DER reader against certificates made by another tool (Python's `cryptography`),
//! whose dates `openssl x509 -noout -dates` confirmed.

use super::*;

/// notBefore 2020-01-01T00:00:00Z, notAfter 2021-01-01T12:30:05Z (both UTCTime).
pub(in crate::check) const OLD: &str = "\
-----BEGIN CERTIFICATE-----
MIIBLjCB1qADAgECAhRSckkcMToFbBox0JoKuVK/+Eec8jAKBggqhkjOPQQDAjAY
MRYwFAYDVQQDDA1rdWJlZmxha2Utb2xkMB4XDTIwMDEwMTAwMDAwMFoXDTIxMDEw
MTEyMzAwNVowGDEWMBQGA1UEAwwNa3ViZWZsYWtlLW9sZDBZMBMGByqGSM49AgEG
CCqGSM49AwEHA0IABBZjVsOQnjwvF+/bogeAlMfPpkXiwE/Kr7WENoegYr8/7bK6
+5w0egeg+JnVCFWlmyIru4LWB0dzA3XuD/CrgUAwCgYIKoZIzj0EAwIDRwAwRAIg
XtF914ViAOvkwRCFcUhPRVRHmsMgYfTvu5R5WZblSkQCIB+Nbdidm7hICMveDWj4
QXHci8eLkN2HACiPGYQVwk/X
-----END CERTIFICATE-----
";

/// notBefore 2025-06-01T12:00:00Z (UTCTime), notAfter 2060-01-01T00:00:00Z
/// (GeneralizedTime: years from 2050 on must be).
pub(in crate::check) const FAR: &str = "\
-----BEGIN CERTIFICATE-----
MIIBMTCB2KADAgECAhRIA2jQrivcgLJ6mChhgFtpFkbyLTAKBggqhkjOPQQDAjAY
MRYwFAYDVQQDDA1rdWJlZmxha2UtZmFyMCAXDTI1MDYwMTEyMDAwMFoYDzIwNjAw
MTAxMDAwMDAwWjAYMRYwFAYDVQQDDA1rdWJlZmxha2UtZmFyMFkwEwYHKoZIzj0C
AQYIKoZIzj0DAQcDQgAE74AtbZXEj9ewcmPEcbX7xeMVgfIi2+/RVuo8bAWCRPvB
ap+zzmO1JVwA0oPGhYYIF14nKj0yqV2zy7SdxcaiyjAKBggqhkjOPQQDAgNIADBF
AiAaiMTrSaqeryfKKcYkjHBoAv2aXvan5ZLY+2cwlnSNMwIhAInpYweRh55lKMkk
Mci5f+AKrLWq5TJ4Dehkiz60Yoh5
-----END CERTIFICATE-----
";

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

#[test]
fn a_certificate_s_dates_are_read_in_utc_time_and_generalized_time() {
    let old = bundle_validity(OLD.as_bytes()).unwrap();
    assert_eq!(
        old,
        vec![Validity {
            not_before: at("2020-01-01T00:00:00Z"),
            not_after: at("2021-01-01T12:30:05Z"),
        }]
    );
    let far = bundle_validity(FAR.as_bytes()).unwrap();
    assert_eq!(far[0].not_before, at("2025-06-01T12:00:00Z"));
    assert_eq!(far[0].not_after, at("2060-01-01T00:00:00Z"));
}

#[test]
fn every_certificate_of_a_bundle_is_read_in_order() {
    let bundle = format!("{FAR}\n{OLD}");
    let all = bundle_validity(bundle.as_bytes()).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].not_after, at("2060-01-01T00:00:00Z"));
    assert_eq!(all[1].not_after, at("2021-01-01T12:30:05Z"));
}

#[test]
fn an_empty_or_garbled_bundle_is_an_error_naming_what_is_wrong() {
    assert_eq!(bundle_validity(b""), Err(CertError::NoCertificate));
    assert_eq!(
        bundle_validity(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
        Err(CertError::Base64 { index: 0 })
    );
    // Cut in the middle of the DER: the reader stops with an error, never a panic.
    let lines: Vec<&str> = OLD.lines().collect();
    let cut = format!("{}\n{}\n-----END CERTIFICATE-----\n", lines[0], lines[1]);
    assert!(matches!(
        bundle_validity(cut.as_bytes()),
        Err(CertError::Der { index: 0, .. })
    ));
}

#[test]
fn base64_decodes_with_and_without_padding_and_refuses_other_characters() {
    assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
    assert_eq!(base64_decode("aGVs\nbG8h").unwrap(), b"hello!");
    assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
    assert_eq!(base64_decode("aG-k"), None);
    assert_eq!(base64_decode("aG=k"), None);
}
