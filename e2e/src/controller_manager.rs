//! kube-controller-manager with a chosen set of controllers, each acting as its own service
//! account (`--use-service-account-credentials`), the way clusters run it. No leader election,
//! no serving port.
use std::{path::Path, process::Command, time::Duration};

use anyhow::Result;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;

use crate::{pki::Pki, process::Process};

/// What a Deployment needs to become Pods, plus namespace deletion and garbage collection.
pub const DEFAULT_CONTROLLERS: [&str; 6] = [
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
];

/// The user its client certificate names; the bootstrap RBAC policy binds its role to it.
pub const USER: &str = "system:kube-controller-manager";

pub struct ControllerManager {
    process: Process,
    controllers: Vec<String>,
}

impl ControllerManager {
    pub fn start(
        program: &Path,
        pki: &Pki,
        kubeconfig: &Path,
        controllers: &[String],
        log: &Path,
    ) -> Result<ControllerManager> {
        let file = |p: &Path| p.display().to_string();
        let mut command = Command::new(program);
        command.args([
            format!("--kubeconfig={}", file(kubeconfig)),
            format!("--controllers={}", controllers.join(",")),
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", file(&pki.sa_signing_key())),
            format!("--root-ca-file={}", file(&pki.ca_cert())),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ]);
        Ok(ControllerManager {
            process: Process::spawn("kube-controller-manager", command, log)?,
            controllers: controllers.to_vec(),
        })
    }

    /// With the serviceaccount controller: waits until it has made the `default` ServiceAccount
    /// of namespace `default` (so its controllers run and Pods can be admitted). Otherwise only
    /// checks that the process still runs.
    pub async fn wait_ready(&mut self, admin: &kube::Client) -> Result<()> {
        if !self.controllers.iter().any(|c| c == "serviceaccount-controller" || c == "serviceaccount") {
            return self.process.check_running();
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
        self.process
            .wait_ready("default/default ServiceAccount", Duration::from_secs(120), || async {
                matches!(accounts.get_opt("default").await, Ok(Some(_)))
            })
            .await
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}
