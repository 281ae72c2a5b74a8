//! The cluster's PKI, generated fresh for every cluster with `rcgen`.
//!
//! - a CA that signs every certificate and that the API server trusts for client certs;
//! - the API server's serving certificate for 127.0.0.1 / localhost and the node's bridge;
//! - client certificates for the admin (group `system:masters`, which RBAC lets do
//!   anything), kube-controller-manager and, for the test node, kube-scheduler, the
//!   kubelet and kube-proxy (users the bootstrap RBAC policy and the Node authorizer know);
//! - the key pair that signs and verifies service-account tokens.
//!
//! All keys are ECDSA P-256: quick to generate and accepted everywhere Kubernetes
//! reads keys.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Paths of the PEM files written by [`Pki::generate`].
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub controller_manager_cert: PathBuf,
    pub controller_manager_key: PathBuf,
    /// kube-scheduler: user `system:kube-scheduler` (bootstrap RBAC binds it).
    pub scheduler_cert: PathBuf,
    pub scheduler_key: PathBuf,
    /// The node's kubelet: user `system:node:<node>` in group `system:nodes`, which the
    /// Node authorizer and NodeRestriction admission limit to its own node and pods.
    pub kubelet_cert: PathBuf,
    pub kubelet_key: PathBuf,
    /// kube-proxy: user `system:kube-proxy` (bootstrap RBAC binds `system:node-proxier`).
    pub proxy_cert: PathBuf,
    pub proxy_key: PathBuf,
    /// Private key that signs service-account tokens.
    pub service_account_key: PathBuf,
    /// Its public half, with which the API server verifies tokens.
    pub service_account_pub: PathBuf,
}

impl Pki {
    /// Generates all keys and certificates into `dir` (which must exist).
    pub fn generate(dir: &Path) -> Result<Pki> {
        let pki = Pki {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            controller_manager_cert: dir.join("controller-manager.crt"),
            controller_manager_key: dir.join("controller-manager.key"),
            scheduler_cert: dir.join("scheduler.crt"),
            scheduler_key: dir.join("scheduler.key"),
            kubelet_cert: dir.join("kubelet.crt"),
            kubelet_key: dir.join("kubelet.key"),
            proxy_cert: dir.join("proxy.crt"),
            proxy_key: dir.join("proxy.key"),
            service_account_key: dir.join("sa.key"),
            service_account_pub: dir.join("sa.pub"),
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = name("kubeflake-e2e-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        write(&pki.ca_cert, &ca_cert.pem())?;
        write(&pki.ca_key, &ca_key.serialize_pem())?;
        let issuer = Issuer::new(ca_params, ca_key);

        // The serving certificate also names what pods on the test node reach it by: the
        // bridge address, the `kubernetes` Service's address and its DNS names.
        let mut serving = leaf("kube-apiserver", None, ExtendedKeyUsagePurpose::ServerAuth);
        serving.subject_alt_names = vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V4(crate::addresses::BRIDGE_IP)),
            SanType::IpAddress(IpAddr::V4(crate::addresses::KUBERNETES_SERVICE_IP)),
            SanType::DnsName("localhost".try_into()?),
            SanType::DnsName("kubernetes".try_into()?),
            SanType::DnsName("kubernetes.default".try_into()?),
            SanType::DnsName("kubernetes.default.svc".try_into()?),
            SanType::DnsName("kubernetes.default.svc.cluster.local".try_into()?),
        ];
        issue(&serving, &issuer, &pki.serving_cert, &pki.serving_key)?;

        let admin = leaf(
            "kubeflake-admin",
            Some("system:masters"),
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        issue(&admin, &issuer, &pki.admin_cert, &pki.admin_key)?;

        let kcm = leaf(
            "system:kube-controller-manager",
            None,
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        issue(
            &kcm,
            &issuer,
            &pki.controller_manager_cert,
            &pki.controller_manager_key,
        )?;

        for (user, group, cert, key) in [
            (
                "system:kube-scheduler",
                None,
                &pki.scheduler_cert,
                &pki.scheduler_key,
            ),
            (
                &*format!("system:node:{}", crate::addresses::NODE_NAME),
                Some("system:nodes"),
                &pki.kubelet_cert,
                &pki.kubelet_key,
            ),
            ("system:kube-proxy", None, &pki.proxy_cert, &pki.proxy_key),
        ] {
            let params = leaf(user, group, ExtendedKeyUsagePurpose::ClientAuth);
            issue(&params, &issuer, cert, key)?;
        }

        let sa = KeyPair::generate()?;
        write(&pki.service_account_key, &sa.serialize_pem())?;
        write(&pki.service_account_pub, &sa.public_key_pem())?;
        Ok(pki)
    }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        // Kubernetes maps O= to the user's groups and CN= to the user name.
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

fn leaf(
    common_name: &str,
    organization: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name, organization);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    params
}

fn issue(
    params: &CertificateParams,
    issuer: &Issuer<'_, KeyPair>,
    cert: &Path,
    key: &Path,
) -> Result<()> {
    let key_pair = KeyPair::generate()?;
    let certificate = params.signed_by(&key_pair, issuer)?;
    write(cert, &certificate.pem())?;
    write(key, &key_pair.serialize_pem())
}

fn write(path: &Path, pem: &str) -> Result<()> {
    fs::write(path, pem).with_context(|| format!("cannot write {}", path.display()))
}
