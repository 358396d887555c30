//! Every object the chart renders, with each values file of charts/highwater/ci, is validated by
//! the real API server (`kubectl apply --dry-run=server`), the monitoring and KEDA objects against
//! the Prometheus Operator's and KEDA's own CRD schemas (from their published Go modules).
use std::{path::PathBuf, process::Stdio};

use highwater_e2e::{ControlPlane, helm};
use tokio::io::AsyncWriteExt;

const PROMETHEUS_OPERATOR: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";
const KEDA: &str = "github.com/kedacore/keda/v2@v2.21.0";

/// The module's directory in the e2e Go module cache, downloaded through the module proxy.
async fn module_dir(module: &str) -> PathBuf {
    let cache = std::env::var_os("HIGHWATER_E2E_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/highwater-e2e"));
    let out = tokio::process::Command::new("go")
        .args(["mod", "download", "-json", module])
        .env("GOMODCACHE", cache.join("go/mod"))
        .env("GOFLAGS", "-mod=mod")
        .current_dir(std::env::temp_dir())
        .output()
        .await
        .expect("running go (the Go toolchain is needed to fetch the CRDs: install Go or put it on PATH)");
    assert!(out.status.success(), "go mod download {module}: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    PathBuf::from(v["Dir"].as_str().expect("Dir"))
}

async fn dry_run(cp: &ControlPlane, manifests: &str) -> std::process::Output {
    let mut cmd = cp.kubectl_command();
    cmd.args(["apply", "--dry-run=server", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(manifests.as_bytes()).await.unwrap();
    child.wait_with_output().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_passes_server_side_validation() {
    let cp = ControlPlane::start().await.unwrap();
    let po = module_dir(PROMETHEUS_OPERATOR).await.join("example/prometheus-operator-crd");
    let keda = module_dir(KEDA).await.join("config/crd/bases");
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
