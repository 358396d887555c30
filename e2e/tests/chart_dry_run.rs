//! Every object the chart renders, with each values file of charts/highwater/ci, is validated by
//! the real API server (`kubectl apply --dry-run=server`), the monitoring and KEDA objects against
//! the Prometheus Operator's and KEDA's own CRD schemas (from their published Go modules).
use std::path::PathBuf;

use highwater_e2e::{ControlPlane, gomod, helm};

const KEDA: &str = "github.com/kedacore/keda/v2@v2.21.0";

async fn dry_run(cp: &ControlPlane, manifests: &str) -> std::process::Output {
    cp.kubectl_with_input(["apply", "--dry-run=server", "-f", "-"], manifests).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_passes_server_side_validation() {
    let cp = ControlPlane::start().await.unwrap();
    let po = highwater_e2e::prometheus::operator_crds().await.unwrap();
    let keda = gomod::module_dir(KEDA).await.unwrap().join("config/crd/bases");
    for crd in [
        po.join("monitoring.coreos.com_servicemonitors.yaml"),
        po.join("monitoring.coreos.com_podmonitors.yaml"),
        po.join("monitoring.coreos.com_prometheusrules.yaml"),
        keda.join("keda.sh_scaledobjects.yaml"),
    ] {
        cp.kubectl_ok(["apply", "--server-side", "-f", crd.to_str().unwrap()]).await.unwrap();
    }
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd", "--all", "--timeout=60s"]).await.unwrap();
    cp.kubectl_ok(["create", "namespace", "hw"]).await.unwrap();

    let ci = helm::chart_dir().join("ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ci).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for values in files {
        let manifests = helm::run(
            cp.kubeconfig_path(),
            ["template", "hw", helm::chart_dir().to_str().unwrap(), "-n", "hw", "-f", values.to_str().unwrap()],
        )
        .await
        .unwrap();
        let kinds = manifests.lines().filter(|l| l.starts_with("kind:")).count();
        // Namespaces the values name (a watched namespace, the dashboards' namespace) must exist.
        for doc in serde_yaml::Deserializer::from_str(&manifests) {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).unwrap();
            if let Some(ns) = v.get("metadata").and_then(|m| m.get("namespace")).and_then(|n| n.as_str()) {
                let _ = cp.kubectl(["create", "namespace", ns]).await;
            }
        }
        let out = dry_run(&cp, &manifests).await;
        assert!(
            out.status.success(),
            "{}: the API server refused the rendered chart:\n{}",
            values.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let accepted = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("(server dry run)")).count();
        assert_eq!(accepted, kinds, "{}: every object validated", values.display());
        println!("{}: {accepted} objects validated", values.file_name().unwrap().to_string_lossy());
    }
}
