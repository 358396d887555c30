//! The harness's own tests: a real control plane built from the Go modules answers kubectl and
//! kube-rs, enforces RBAC, and with the controller manager turns a Deployment into Pods.
use std::time::Duration;

use highwater_e2e::{ControlPlane, wait_for};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{ConfigMap, Namespace, Pod},
};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use serde_json::json;

const KUBERNETES_VERSION: &str = "v1.35.4";

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    Ok(())
}

#[tokio::test]
async fn api_server_answers_kubectl_and_kube_rs_and_enforces_rbac() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;

    let version: serde_json::Value = serde_json::from_str(&cp.kubectl_ok(["get", "--raw", "/version"]).await?)?;
    assert_eq!(version["gitVersion"], KUBERNETES_VERSION, "{version}");
    assert_eq!(cp.client().apiserver_version().await?.git_version, KUBERNETES_VERSION);

    // Written with kube-rs, read back with kubectl.
    let client = cp.client();
    create_namespace(&client, "demo").await?;
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "settings", "namespace": "demo" },
        "data": { "colour": "blue" },
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), "demo").create(&PostParams::default(), &config_map).await?;
    let colour = cp.kubectl_ok(["get", "configmap", "settings", "-n", "demo", "-o", "jsonpath={.data.colour}"]).await?;
    assert_eq!(colour, "blue");

    // A user without bindings: authenticated, and refused.
    let nobody = cp.user("nobody", &[]).await?;
    let can_i = nobody.kubectl(["auth", "can-i", "get", "configmaps", "-n", "demo"]).await?;
    assert_eq!(String::from_utf8_lossy(&can_i.stdout).trim(), "no");
    assert!(!can_i.status.success());
    let refused = Api::<ConfigMap>::namespaced(nobody.client(), "demo").get("settings").await;
    match refused {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
    let whoami = nobody.kubectl_ok(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]).await?;
    assert_eq!(whoami, "nobody");
    // The admin may.
    assert_eq!(cp.kubectl_ok(["auth", "can-i", "get", "configmaps", "-n", "demo"]).await?.trim(), "yes");
    Ok(())
}

#[tokio::test]
async fn controller_manager_turns_a_deployment_into_pods() -> anyhow::Result<()> {
    let cp = ControlPlane::with_controller_manager().await?;
    let client = cp.client();
    create_namespace(&client, "apps").await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "apps" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "registry.invalid/web:1" }] },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "apps").create(&PostParams::default(), &deployment).await?;

    let by_label = ListParams::default().labels("app=web");
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), "apps");
    let replica_set = wait_for("a ReplicaSet for the Deployment", Duration::from_secs(60), || async {
        Ok::<_, kube::Error>(replica_sets.list(&by_label).await?.items.into_iter().next())
    })
    .await?;
    assert_eq!(replica_set.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let owner = &replica_set.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Deployment", "web"));

    // No nodes, so the Pods stay Pending; that they exist is the controllers' work.
    let pods = Api::<Pod>::namespaced(client.clone(), "apps");
    let pods = wait_for("2 Pods", Duration::from_secs(60), || async {
        let items = pods.list(&by_label).await?.items;
        Ok::<_, kube::Error>((items.len() == 2).then_some(items))
    })
    .await?;
    for pod in &pods {
        let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(owner.name, replica_set.metadata.name.clone().unwrap_or_default());
        assert_eq!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Pending"));
    }
    let listed = cp.kubectl_ok(["get", "pods", "-n", "apps", "-l", "app=web", "-o", "name"]).await?;
    assert_eq!(listed.lines().count(), 2, "{listed}");
    Ok(())
}
