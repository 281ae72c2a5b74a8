//! The webhook's TLS certificate: where it comes from and how it is kept fresh.
//!
//! Two sources, chosen by flags:
//! - **self-managed** (default): the operator keeps its own CA and a serving certificate
//!   (rcgen, ECDSA P-256) in a Secret, renews the serving certificate when a third of its
//!   life is left, and writes the CA into the `caBundle` of its
//!   MutatingWebhookConfiguration, re-writing it whenever something (a `helm upgrade`)
//!   resets it. Every replica runs this; all writes are compare-and-swap, so the replicas
//!   agree on one Secret. The Secret is owned by the webhook configuration, so deleting the
//!   configuration (`helm uninstall`) garbage-collects it.
//! - **a directory** (`--webhook-cert-dir`, for cert-manager): `tls.crt` and `tls.key` are
//!   read from a mounted Secret and re-read when they change; `caBundle` is left to
//!   cert-manager's CA injector.
//!
//! The TLS server asks [`ServingCert`] for the current key on every handshake, so a
//! renewal takes effect without a restart; it takes only a pair whose key matches its
//! certificate (`certs/serving.rs`).
//!
//! One piece (about 550 lines): the Secret's layout (annotation and key names), the
//! decision what to write into it (`desired_secret`, pure) and the compare-and-swap
//! writes that store it are one protocol between replicas; split apart, a change to one
//! side could silently stop matching the other. It reads top to bottom: generation, the
//! pure decision, the bounded CAS retry, the keeper loop. The directory source, which
//! shares none of that protocol, is `certs/dir.rs`; what is served, `certs/serving.rs`.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// Life of the serving certificate; it is renewed when a third of it is left.
const SERVING_DAYS: i64 = 365;
/// Life of the CA; replaced (the old one kept in the bundle) when a tenth is left.
const CA_DAYS: i64 = 3650;
const NOT_AFTER: &str = "kubeflake.io/not-after";
const CA_NOT_AFTER: &str = "kubeflake.io/ca-not-after";
const DNS_NAMES: &str = "kubeflake.io/dns-names";
const CA_KEY: &str = "ca.key";
const CA_BUNDLE: &str = "ca.crt";

/// A certificate problem, said so that an operator of the cluster can act on it.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate or key in {0} is not valid PEM: {1}")]
    Pem(String, String),
    #[error("the key in {0} is not a key rustls can sign with: {1}")]
    Key(String, rustls::Error),
    #[error(
        "the key {key} does not belong to the certificate {cert} (a pair read across a \
         rotation, or two files of different pairs): not loaded, the certificate served \
         before stays; check that both come from the same Secret version"
    )]
    KeyMismatch { cert: String, key: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("Kubernetes API error on {what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {0} is missing {1}")]
    Incomplete(String, &'static str),
    #[error(
        "{what}: {attempts} compare-and-swap writes in a row lost to other writers (another \
         replica, or something else rewriting it); giving up for this pass, retried later"
    )]
    Conflicts { what: String, attempts: u32 },
    #[error(
        "MutatingWebhookConfiguration {0} not found: the certificate Secret, which it owns, \
         is written only while it exists (install the chart, or create it first)"
    )]
    NoWebhookConfig(String),
}

/// The self-managed certificate's settings.
#[derive(Debug, Clone)]
pub struct SelfManaged {
    pub namespace: String,
    pub secret: String,
    /// The MutatingWebhookConfiguration whose `caBundle` is kept equal to our CA.
    pub webhook_config: String,
    /// Names the serving certificate is valid for (Service DNS names, extra SANs).
    pub dns_names: Vec<String>,
}

impl SelfManaged {
    /// The names a webhook Service is reached by from the API server, plus `extra`.
    pub fn service_names(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
        let mut names = vec![
            service.to_string(),
            format!("{service}.{namespace}"),
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.cluster.local"),
        ];
        names.extend(extra.iter().cloned());
        names
    }
}

/// A generated CA or serving certificate, as PEM.
struct Pem {
    cert: String,
    key: String,
    not_after: DateTime<Utc>,
}

fn ca_params(not_after: DateTime<Utc>) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "kubeflake-webhook-ca");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(&mut params, not_after);
    params
}

fn set_validity(params: &mut CertificateParams, not_after: DateTime<Utc>) {
    let to_time = |t: DateTime<Utc>| {
        time::OffsetDateTime::from_unix_timestamp(t.timestamp())
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    };
    // An hour of slack for clocks behind ours.
    params.not_before = to_time(Utc::now() - chrono::Duration::hours(1));
    params.not_after = to_time(not_after);
}

fn new_ca() -> Result<Pem, CertError> {
    let key = KeyPair::generate()?;
    let not_after = Utc::now() + chrono::Duration::days(CA_DAYS);
    let cert = ca_params(not_after).self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
        not_after,
    })
}

/// A serving certificate for `dns_names`, signed by the CA whose key is `ca_key` and
/// whose parameters are rebuilt by [`ca_params`] (same name and key: same issuer).
fn new_serving(
    ca_key: &str,
    ca_not_after: DateTime<Utc>,
    dns_names: &[String],
) -> Result<Pem, CertError> {
    let issuer = Issuer::new(ca_params(ca_not_after), KeyPair::from_pem(ca_key)?);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        dns_names
            .first()
            .map(String::as_str)
            .unwrap_or("kubeflake-webhook"),
    );
    params.distinguished_name = name;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let not_after = (Utc::now() + chrono::Duration::days(SERVING_DAYS)).min(ca_not_after);
    set_validity(&mut params, not_after);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
        not_after,
    })
}

/// What the Secret holds, read back.
struct Stored {
    tls_crt: Vec<u8>,
    tls_key: Vec<u8>,
    ca_bundle: Vec<u8>,
    ca_key: String,
    not_after: Option<DateTime<Utc>>,
    ca_not_after: Option<DateTime<Utc>>,
    dns_names: String,
}

fn read_stored(secret: &Secret) -> Option<Stored> {
    let data = secret.data.as_ref()?;
    let field = |k: &str| data.get(k).map(|b| b.0.clone());
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    let time = |k: &str| {
        annotations
            .get(k)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    Some(Stored {
        tls_crt: field("tls.crt")?,
        tls_key: field("tls.key")?,
        ca_bundle: field(CA_BUNDLE)?,
        ca_key: String::from_utf8(field(CA_KEY)?).ok()?,
        not_after: time(NOT_AFTER),
        ca_not_after: time(CA_NOT_AFTER),
        dns_names: annotations.get(DNS_NAMES).cloned().unwrap_or_default(),
    })
}

/// Whether a certificate valid until `not_after` for `days` in all needs replacing now.
fn due(not_after: Option<DateTime<Utc>>, days: i64, share_left: i64) -> bool {
    match not_after {
        None => true,
        Some(t) => t - Utc::now() < chrono::Duration::days(days) / share_left as i32,
    }
}

/// What to write into the Secret.
struct Desired {
    data: BTreeMap<String, ByteString>,
    not_after: DateTime<Utc>,
    ca_not_after: DateTime<Utc>,
}

/// The first PEM block of `bundle` (the current CA; older ones follow it).
fn first_pem_block(bundle: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bundle).ok()?;
    const END: &str = "-----END CERTIFICATE-----";
    let end = text.find(END)? + END.len();
    Some(format!("{}\n", text[..end].trim_start()))
}

/// The Secret we want, given what is stored (if anything): `None` when it is still good.
fn desired_secret(
    config: &SelfManaged,
    stored: Option<&Stored>,
) -> Result<Option<Desired>, CertError> {
    let names = config.dns_names.join(",");
    let (ca_key, ca_not_after, bundle) = match stored {
        Some(s) if !due(s.ca_not_after, CA_DAYS, 10) => (
            s.ca_key.clone(),
            s.ca_not_after.unwrap_or_else(Utc::now),
            s.ca_bundle.clone(),
        ),
        _ => {
            // New CA; the previous one stays trusted in the bundle until the next rotation,
            // so certificates it signed keep working while the caBundle is updated.
            let ca = new_ca()?;
            let mut bundle = ca.cert.into_bytes();
            if let Some(old) = stored.and_then(|s| first_pem_block(&s.ca_bundle)) {
                bundle.extend(old.into_bytes());
            }
            (ca.key, ca.not_after, bundle)
        }
    };
    if let Some(s) = stored
        && s.ca_key == ca_key
        && s.dns_names == names
        && !due(s.not_after, SERVING_DAYS, 3)
    {
        return Ok(None);
    }
    let serving = new_serving(&ca_key, ca_not_after, &config.dns_names)?;
    let data = [
        ("tls.crt", serving.cert.into_bytes()),
        ("tls.key", serving.key.into_bytes()),
        (CA_BUNDLE, bundle),
        (CA_KEY, ca_key.into_bytes()),
    ];
    Ok(Some(Desired {
        data: data
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v)))
            .collect(),
        not_after: serving.not_after,
        ca_not_after,
    }))
}

/// How many times one compare-and-swap write is tried when it keeps losing (409).
const CAS_ATTEMPTS: u32 = 5;
/// The pause after a lost write, jittered between half of it and one and a half.
const CAS_PAUSE: Duration = Duration::from_millis(200);

/// One try of a compare-and-swap write: done, or lost to another writer (try again).
enum Cas<T> {
    Done(T),
    Conflict,
}

/// Runs `attempt` until it is done or fails, at most [`CAS_ATTEMPTS`] times, pausing
/// about `pause` after each lost write; then [`CertError::Conflicts`] for `what`.
async fn retry_conflicts<T, F, Fut>(
    what: &str,
    pause: Duration,
    mut attempt: F,
) -> Result<T, CertError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Cas<T>, CertError>>,
{
    for n in 1..=CAS_ATTEMPTS {
        if let Cas::Done(t) = attempt().await? {
            return Ok(t);
        }
        tracing::debug!(what, attempt = n, "write lost a compare-and-swap race");
        if n < CAS_ATTEMPTS {
            tokio::time::sleep(pause.mul_f64(0.5 + fastrand::f64())).await;
        }
    }
    Err(CertError::Conflicts {
        what: what.to_string(),
        attempts: CAS_ATTEMPTS,
    })
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> CertError {
    let what = what.into();
    move |source| CertError::Kube { what, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    kubeflake_runtime::kube_error::status_code(e) == Some(code)
}

/// Keeps the Secret, the served certificate and the `caBundle` right, until dropped.
/// Re-checks hourly, and at once whenever the webhook configuration changes.
pub async fn keep_self_managed(client: Client, config: SelfManaged, serving: Arc<ServingCert>) {
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    // Backed off like the controller's watches, so a persistent failure (no RBAC, API
    // server down) retries every few seconds instead of in a tight LIST/WATCH loop.
    let changes = kubeflake_runtime::watch::one_object(configs, &config.webhook_config);
    let mut changes = std::pin::pin!(changes);
    loop {
        let wait = match sync_once(&client, &config, &serving).await {
            Ok(()) => Duration::from_secs(3600),
            Err(e) => {
                tracing::warn!(error = %e, secret = %config.secret, "webhook certificate not in place yet; retrying");
                Duration::from_secs(5)
            }
        };
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        // Wake early when the configuration changes (created, or caBundle reset).
        loop {
            tokio::select! {
                () = &mut deadline => break,
                event = changes.next() => match event {
                    Some(Ok(watcher::Event::Apply(_) | watcher::Event::InitDone)) => break,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => tracing::warn!(
                        error = %e,
                        config = %config.webhook_config,
                        "cannot watch the webhook configuration (retried with back-off); caBundle resets are noticed only at the next hourly check until it works"
                    ),
                    None => { deadline.as_mut().await; break }
                },
            }
        }
    }
}

/// One pass: make the Secret current (creating or renewing by CAS), serve what it holds,
/// and make the webhook configuration trust its CA.
pub async fn sync_once(
    client: &Client,
    config: &SelfManaged,
    serving: &ServingCert,
) -> Result<(), CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let webhook = configs
        .get_opt(&config.webhook_config)
        .await
        .map_err(kube_err(format!(
            "MutatingWebhookConfiguration {}",
            config.webhook_config
        )))?;
    let what = format!("Secret {}/{}", config.namespace, config.secret);
    let Some(webhook) = webhook else {
        // Without its owner a Secret written now would outlive the release (after
        // `helm uninstall` deleted the configuration, a replica still draining must not
        // write it again). Serve what is stored, if anything, and write nothing.
        let stored = secrets
            .get_opt(&config.secret)
            .await
            .map_err(kube_err(what.as_str()))?
            .as_ref()
            .and_then(read_stored);
        if let Some(stored) = stored {
            serving.load_pem(&stored.tls_crt, &stored.tls_key, &PairOrigin::secret(&what))?;
        }
        return Err(CertError::NoWebhookConfig(config.webhook_config.clone()));
    };
    let (secrets, webhook, what) = (&secrets, &webhook, &what);
    let secret = retry_conflicts(what, CAS_PAUSE, move || async move {
        let current = secrets
            .get_opt(&config.secret)
            .await
            .map_err(kube_err(what.as_str()))?;
        let stored = current.as_ref().and_then(read_stored);
        let owner = Some(owner_of(webhook));
        let owner_missing = current.as_ref().is_some_and(|s| {
            s.metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .is_empty()
        });
        let desired = desired_secret(config, stored.as_ref())?;
        let desired = match (desired, current.clone()) {
            (Some(d), _) => d,
            (None, Some(s)) if !owner_missing => return Ok(Cas::Done(s)),
            (None, Some(mut s)) => {
                s.metadata.owner_references = owner.map(|o| vec![o]);
                match secrets
                    .replace(&config.secret, &PostParams::default(), &s)
                    .await
                {
                    Ok(s) => return Ok(Cas::Done(s)),
                    Err(e) if is_status(&e, 409) => return Ok(Cas::Conflict),
                    Err(e) => return Err(kube_err(what.as_str())(e)),
                }
            }
            // Nothing stored always wants something written; keep looping safely anyway.
            (None, None) => return Ok(Cas::Conflict),
        };
        let annotations = BTreeMap::from([
            (NOT_AFTER.to_string(), desired.not_after.to_rfc3339()),
            (CA_NOT_AFTER.to_string(), desired.ca_not_after.to_rfc3339()),
            (DNS_NAMES.to_string(), config.dns_names.join(",")),
        ]);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(config.secret.clone()),
                namespace: Some(config.namespace.clone()),
                annotations: Some(annotations),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "kubeflake-operator".to_string(),
                )])),
                owner_references: owner.map(|o| vec![o]),
                resource_version: current
                    .as_ref()
                    .and_then(|s| s.metadata.resource_version.clone()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(desired.data),
            ..Default::default()
        };
        let written = match current {
            None => secrets.create(&PostParams::default(), &secret).await,
            Some(_) => {
                secrets
                    .replace(&config.secret, &PostParams::default(), &secret)
                    .await
            }
        };
        match written {
            Ok(s) => {
                tracing::info!(secret = %what, "webhook certificate written");
                Ok(Cas::Done(s))
            }
            // Another replica wrote first: use what it wrote.
            Err(e) if is_status(&e, 409) => Ok(Cas::Conflict),
            Err(e) => Err(kube_err(what.as_str())(e)),
        }
    })
    .await?;
    let stored = read_stored(&secret).ok_or(CertError::Incomplete(
        what.clone(),
        "tls.crt, tls.key, ca.crt or ca.key",
    ))?;
    serving.load_pem(&stored.tls_crt, &stored.tls_key, &PairOrigin::secret(what))?;
    patch_ca_bundle(&configs, &config.webhook_config, &stored.ca_bundle).await?;
    Ok(())
}

fn owner_of(config: &MutatingWebhookConfiguration) -> OwnerReference {
    OwnerReference {
        api_version: MutatingWebhookConfiguration::api_version(&()).into(),
        kind: MutatingWebhookConfiguration::kind(&()).into(),
        name: config.metadata.name.clone().unwrap_or_default(),
        uid: config.metadata.uid.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// Sets `caBundle` on every webhook of the configuration that lacks it (CAS replace).
async fn patch_ca_bundle(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
    bundle: &[u8],
) -> Result<(), CertError> {
    let what = format!("MutatingWebhookConfiguration {name}");
    let what = &what;
    retry_conflicts(what, CAS_PAUSE, move || async move {
        let Some(mut config) = api.get_opt(name).await.map_err(kube_err(what.as_str()))? else {
            return Ok(Cas::Done(()));
        };
        let mut changed = false;
        for hook in config.webhooks.iter_mut().flatten() {
            if hook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice())
                != Some(bundle)
            {
                hook.client_config.ca_bundle = Some(ByteString(bundle.to_vec()));
                changed = true;
            }
        }
        if !changed {
            return Ok(Cas::Done(()));
        }
        match api.replace(name, &PostParams::default(), &config).await {
            Ok(_) => {
                tracing::info!(config = %name, "caBundle written");
                Ok(Cas::Done(()))
            }
            Err(e) if is_status(&e, 409) => Ok(Cas::Conflict),
            Err(e) => Err(kube_err(what.as_str())(e)),
        }
    })
    .await
}

mod dir;
mod serving;
pub use dir::keep_from_dir;
pub use serving::{PairOrigin, ServingCert};

#[cfg(test)]
mod tests;
