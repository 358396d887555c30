//! kwok with one fake Node: the scheduler binds Pods to it, kwok marks them Running (and Ready)
//! and completes their graceful deletion. No kubelet runs anything; [`crate::pod_runner`] starts
//! real processes for the Pods that need them.
use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};

use crate::process::Process;

/// The fake node's name.
pub const NODE: &str = "kwok-node-0";
/// The annotation kwok manages nodes by (`--manage-nodes-with-annotation-selector`).
pub const NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// kwok's stages (node initialize and heartbeat; pod ready, complete, delete: all at once), from
/// kwok's own kustomize/stage; kwok has none built in.
pub const STAGES: &str = include_str!("../control-plane/kwok/stages.yaml");

pub struct Kwok {
    process: Process,
}

impl Kwok {
    /// Starts kwok managing the nodes annotated [`NODE_ANNOTATION`], with `kubeconfig`.
    pub fn start(program: &Path, kubeconfig: &Path, log: &Path) -> Result<Kwok> {
        let dir = log.parent().unwrap_or(Path::new("."));
        let stages = dir.join("kwok-stages.yaml");
        std::fs::write(&stages, STAGES).with_context(|| format!("writing {}", stages.display()))?;
        let mut command = Command::new(program);
        command.args([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--config={}", stages.display()),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={}={}", NODE_ANNOTATION.0, NODE_ANNOTATION.1),
            "--node-ip=127.0.0.1".into(),
            "--cidr=10.0.1.0/24".into(),
        ]);
        // Keep a user's ~/.kwok out of tests.
        command.env("HOME", dir);
        Ok(Kwok { process: Process::spawn("kwok", command, log)? })
    }

    /// Creates the fake node, waits until kwok reports it Ready, and clears the
    /// `node.kubernetes.io/not-ready` taint that admission puts on new nodes (the node lifecycle
    /// controller, which would remove it, does not run).
    pub async fn create_node(&mut self, admin: &kube::Client) -> Result<()> {
        let nodes: Api<Node> = Api::all(admin.clone());
        let node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "annotations": {NODE_ANNOTATION.0: NODE_ANNOTATION.1, "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "type": "kwok"},
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            },
        }))?;
        nodes.create(&PostParams::default(), &node).await?;
        self.process
            .wait_ready("the fake node Ready", Duration::from_secs(60), || async {
                let Ok(node) = nodes.get(NODE).await else { return false };
                node.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .await?;
        let patch = serde_json::json!({"spec": {"taints": null}});
        nodes.patch(NODE, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}
