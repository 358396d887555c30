//! kube-apiserver on a free loopback port, configured the way envtest does it: TLS from the
//! harness's CA, client certificates for authentication, Node and RBAC authorization, real
//! service-account tokens.
use std::{path::Path, process::Command, time::Duration};

use anyhow::Result;

use crate::{pki::Pki, process::Process};

/// The Service network; its first address is the `kubernetes` Service.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";
pub const SERVICE_IP: &str = "10.0.0.1";
/// The issuer (`iss`) of service-account tokens, as kubeadm sets it.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Names the serving certificate must answer to: loopback, and what in-cluster clients use.
pub const SERVING_NAMES: [&str; 7] = [
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    SERVICE_IP,
];

pub struct ApiServer {
    process: Process,
    url: String,
}

impl ApiServer {
    /// Starts kube-apiserver serving on `port` and storing in `etcd_url`. Returns once the
    /// process runs; [`ApiServer::wait_ready`] waits for `/readyz`.
    pub fn start(program: &Path, pki: &Pki, etcd_url: &str, port: u16, log: &Path) -> Result<ApiServer> {
        let file = |p: &Path| p.display().to_string();
        let mut command = Command::new(program);
        command.args([
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", file(pki.dir())),
            format!("--tls-cert-file={}", file(&pki.serving_cert())),
            format!("--tls-private-key-file={}", file(&pki.serving_key())),
            format!("--client-ca-file={}", file(&pki.ca_cert())),
            "--authorization-mode=Node,RBAC".into(),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", file(&pki.sa_public_key())),
            format!("--service-account-signing-key-file={}", file(&pki.sa_signing_key())),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
        ]);
        Ok(ApiServer {
            process: Process::spawn("kube-apiserver", command, log)?,
            url: format!("https://127.0.0.1:{port}"),
        })
    }

    /// Waits until `/readyz` answers `ok` to `client` (every post-start hook done, the bootstrap
    /// RBAC roles among them).
    pub async fn wait_ready(&mut self, client: &kube::Client) -> Result<()> {
        self.process
            .wait_ready("ready /readyz", Duration::from_secs(120), || async {
                let request = http::Request::get("/readyz").body(Vec::new()).expect("a valid request");
                client.request_text(request).await.is_ok_and(|body| body.trim() == "ok")
            })
            .await
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}
