//! Writing kubeconfig files that point at the local API server.

use std::path::Path;

use anyhow::{Context, Result};

/// Writes a kubeconfig for `server` authenticating with a client certificate.
///
/// The files are referenced by absolute path rather than embedded, so a person can
/// inspect them next to the kubeconfig. Strings are written as JSON strings, which are
/// valid YAML and need no further escaping.
pub fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_cert: &Path,
    client_cert: &Path,
    client_key: &Path,
    user: &str,
) -> Result<()> {
    let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let p = |p: &Path| q(&p.to_string_lossy());
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kubeflake-e2e
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: kubeflake-e2e
  context:
    cluster: kubeflake-e2e
    user: {user}
    namespace: default
current-context: kubeflake-e2e
",
        server = q(server),
        ca = p(ca_cert),
        user = q(user),
        cert = p(client_cert),
        key = p(client_key),
    );
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes a kubeconfig for `server` authenticating with `token` only (no client
/// certificate), e.g. one from `kubectl create token`, so a client acts with exactly that
/// identity's rights; `namespace` is its default namespace.
pub fn write_token_kubeconfig(
    path: &Path,
    server: &str,
    ca_cert: &Path,
    user: &str,
    token: &str,
    namespace: &str,
) -> Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": server,
            "certificate-authority": ca_cert,
        }}],
        "users": [{"name": user, "user": {"token": token.trim()}}],
        "contexts": [{"name": "c", "context": {"cluster": "test", "user": user, "namespace": namespace}}],
        "current-context": "c",
    });
    // JSON is YAML: kubeconfig loaders read it as is.
    std::fs::write(path, serde_json::to_vec_pretty(&config)?)
        .with_context(|| format!("cannot write {}", path.display()))
}
