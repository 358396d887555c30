//! Kubeconfig files: one cluster (the CA file and the server URL), one user (a client
//! certificate), one context, all by absolute path so kubectl and kube-rs read the same file.
use std::path::Path;

use anyhow::{Context, Result};

use crate::pki::ClientCert;

/// The cluster and context name in every kubeconfig the harness writes.
pub const CLUSTER: &str = "highwater-e2e";

/// Writes a kubeconfig for `user` authenticating with `cert` to `server`.
pub fn write(path: &Path, server: &str, ca: &Path, user: &str, cert: &ClientCert) -> Result<()> {
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CLUSTER}
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: {CLUSTER}
  context:
    cluster: {CLUSTER}
    user: {user}
current-context: {CLUSTER}
",
        ca = quoted(ca),
        cert = quoted(&cert.cert),
        key = quoted(&cert.key),
        user = yaml_quote(user),
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn quoted(path: &Path) -> String {
    yaml_quote(&path.to_string_lossy())
}

/// A YAML double-quoted scalar.
fn yaml_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}
