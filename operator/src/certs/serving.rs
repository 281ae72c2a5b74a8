//! What the webhook's TLS server presents: the current certificate and key, swapped in
//! place on renewal, and the one check every source goes through before a pair is served:
//! the key must belong to the certificate. A mismatched pair (read across a rotation, or
//! two files of different pairs) would fail every handshake, and with the webhook's
//! `failurePolicy: Fail` the API server would then refuse labelled pods; refusing it keeps
//! the pair served before.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::CertError;

/// Where a certificate and its key were read, to name each in errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairOrigin {
    pub cert: String,
    pub key: String,
}

impl PairOrigin {
    /// Two files.
    pub fn files(cert: &Path, key: &Path) -> PairOrigin {
        PairOrigin {
            cert: cert.display().to_string(),
            key: key.display().to_string(),
        }
    }

    /// The `tls.crt` and `tls.key` of a Secret (`what` names it).
    pub fn secret(what: &str) -> PairOrigin {
        PairOrigin {
            cert: format!("{what} tls.crt"),
            key: format!("{what} tls.key"),
        }
    }
}

/// The serving certificate the TLS server presents; swapped in place on renewal.
#[derive(Default)]
pub struct ServingCert(ArcSwapOption<CertifiedKey>);

impl fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_loaded() {
            "ServingCert(loaded)"
        } else {
            "ServingCert(none)"
        })
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.load_full()
    }
}

impl ServingCert {
    pub fn is_loaded(&self) -> bool {
        self.0.load().is_some()
    }

    /// Installs a PEM certificate chain and key, if the key belongs to the chain's first
    /// certificate; otherwise nothing changes. `origin` names both in errors.
    pub fn load_pem(&self, cert: &[u8], key: &[u8], origin: &PairOrigin) -> Result<(), CertError> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| CertError::Pem(origin.cert.clone(), e.to_string()))?;
        if chain.is_empty() {
            return Err(CertError::Pem(
                origin.cert.clone(),
                "no certificate found".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| CertError::Pem(origin.key.clone(), e.to_string()))?;
        let signer = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| CertError::Key(origin.key.clone(), e))?;
        let certified = CertifiedKey::new(chain, signer);
        match certified.keys_match() {
            Ok(()) => {}
            // Every key type ring signs with tells its public key, so this is never reached
            // with ring; like rustls's own `from_der`, an unknowable answer is not a refusal.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(CertError::KeyMismatch {
                    cert: origin.cert.clone(),
                    key: origin.key.clone(),
                });
            }
            Err(e) => return Err(CertError::Pem(origin.cert.clone(), e.to_string())),
        }
        self.0.store(Some(Arc::new(certified)));
        Ok(())
    }
}
