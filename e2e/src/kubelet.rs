//! A real kubelet (built by build.sh from the control plane's Kubernetes version) joining the
//! control plane as Node [`NODE`], running pods through containerd.
//!
//! What this machine needs, found by trying (docs/image.md): `failCgroupV1: false` (its cgroups
//! are the v1/v2 hybrid layout, and kubelet 1.35 refuses cgroup v1 unless told otherwise),
//! `cgroupDriver: cgroupfs` (no systemd), and swap checks off. The kubelet's own endpoints listen
//! on loopback; nothing needs them (container logs are read from its log directory).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result};
use highwater::embedded::free_port;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

use crate::process::Process;

/// The real node's name.
pub const NODE: &str = "highwater-e2e-node";

pub struct Kubelet {
    process: Process,
    pod_logs: PathBuf,
}

impl Kubelet {
    /// Starts the kubelet with the node identity `kubeconfig` (user `system:node:NODE`, group
    /// `system:nodes`), `client_ca` for its own server, the CRI at `containerd_socket`, and its
    /// state in `dir`.
    pub fn start(
        program: &Path,
        kubeconfig: &Path,
        client_ca: &Path,
        containerd_socket: &Path,
        dir: &Path,
    ) -> Result<Kubelet> {
        let pod_logs = dir.join("pod-logs");
        for d in [dir.join("root"), dir.join("manifests"), pod_logs.clone()] {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        let config = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": false,
            "containerRuntimeEndpoint": format!("unix://{}", containerd_socket.display()),
            "address": "127.0.0.1",
            "port": free_port()?,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": false},
                "x509": {"clientCAFile": client_ca},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "staticPodPath": dir.join("manifests"),
            "podLogsDir": pod_logs,
            "serializeImagePulls": false,
            // Nothing is pulled, and a test machine's disk may be fuller than a node's.
            "imageGCHighThresholdPercent": 100,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "registerNode": true,
        });
        let file = dir.join("kubelet.yaml");
        std::fs::write(&file, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", file.display()))?;
        let mut command = Command::new(program);
        command
            .arg(format!("--config={}", file.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!("--root-dir={}", dir.join("root").display()))
            .arg(format!("--cert-dir={}", dir.join("root/pki").display()));
        Ok(Kubelet { process: Process::spawn("kubelet", command, &dir.join("kubelet.log"))?, pod_logs })
    }

    /// Waits until the node registered and is Ready, then clears the `node.kubernetes.io/not-ready`
    /// taint it registered with (the node lifecycle controller, which would, does not run).
    pub async fn wait_ready(&mut self, admin: &kube::Client, timeout: Duration) -> Result<()> {
        let nodes: Api<Node> = Api::all(admin.clone());
        self.process
            .wait_ready("the node registered and Ready", timeout, || async {
                let Ok(node) = nodes.get(NODE).await else { return false };
                node.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .await
            .map_err(|e| match std::fs::read_to_string(self.process.log_path()) {
                // The kubelet's own reasons (its error lines), which the last lines may not show.
                Ok(log) => {
                    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with('E')).collect();
                    let last = &errors[errors.len().saturating_sub(10)..];
                    e.context(format!("the kubelet's last errors:\n{}", last.join("\n")))
                }
                Err(_) => e,
            })?;
        let patch = serde_json::json!({"spec": {"taints": null}});
        nodes.patch(NODE, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// The log of container `container` of pod `namespace/pod` (every restart's, oldest first).
    pub fn container_log(&self, namespace: &str, pod: &str, container: &str) -> String {
        let prefix = format!("{namespace}_{pod}_");
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.pod_logs).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let mut files: Vec<PathBuf> = std::fs::read_dir(entry.path().join(container))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                files.sort();
                for f in files {
                    text += &std::fs::read_to_string(f).unwrap_or_default();
                }
            }
        }
        text
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}
