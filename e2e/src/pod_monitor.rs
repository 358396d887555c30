//! What the Prometheus Operator makes of a PodMonitor, for the pods the [`PodRunner`] runs: the
//! pods its selector picks in its namespaces, each scraped on the port its endpoint names, with
//! the target labels the operator attaches (`namespace`, `pod`, `container`, `endpoint`, and `job`
//! = `<namespace>/<monitor name>`). The address is the loopback port the runner gave the process
//! instead of the pod IP. Targets go to a `file_sd` file that [`PodMonitor::refresh`] keeps up to
//! date as pods come and go, as the operator's Kubernetes service discovery would.
use std::{path::Path, sync::Arc, time::Duration};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::{Value, json};

use crate::{
    PodRunner,
    prometheus::{Target, write_targets},
};

pub struct PodMonitor {
    pub namespace: String,
    pub name: String,
    /// The label selector, in `kubectl -l` syntax.
    pub selector: String,
    pub namespaces: Vec<String>,
    /// The first endpoint's port name, path and interval.
    pub port: String,
    pub path: String,
    pub interval: String,
}

impl PodMonitor {
    /// Reads PodMonitor `namespace/name` (kind `monitoring.coreos.com/v1`) from the API server.
    pub async fn get(client: &kube::Client, namespace: &str, name: &str) -> Result<PodMonitor> {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &kube::api::ApiResource {
                group: "monitoring.coreos.com".into(),
                version: "v1".into(),
                api_version: "monitoring.coreos.com/v1".into(),
                kind: "PodMonitor".into(),
                plural: "podmonitors".into(),
            },
        );
        let object = api.get(name).await.with_context(|| format!("PodMonitor {namespace}/{name}"))?;
        PodMonitor::from_spec(namespace, name, &object.data["spec"])
    }

    fn from_spec(namespace: &str, name: &str, spec: &Value) -> Result<PodMonitor> {
        let mut terms: Vec<String> = Vec::new();
        if let Some(labels) = spec["selector"]["matchLabels"].as_object() {
            terms.extend(labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())));
        }
        for e in spec["selector"]["matchExpressions"].as_array().into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            terms.push(match e["operator"].as_str().unwrap_or_default() {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_owned(),
                "DoesNotExist" => format!("!{key}"),
                other => bail!("PodMonitor {namespace}/{name}: selector operator {other:?} is unknown"),
            });
        }
        let namespaces: Vec<String> = match spec["namespaceSelector"]["matchNames"].as_array() {
            Some(names) => names.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect(),
            None => vec![namespace.to_owned()],
        };
        let endpoint = &spec["podMetricsEndpoints"][0];
        let port = endpoint["port"].as_str().context("the first podMetricsEndpoint names no port")?.to_owned();
        Ok(PodMonitor {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            selector: terms.join(","),
            namespaces,
            port,
            path: endpoint["path"].as_str().unwrap_or("/metrics").to_owned(),
            interval: endpoint["interval"].as_str().unwrap_or("30s").to_owned(),
        })
    }

    /// The `job` label the Prometheus Operator gives the monitor's targets.
    pub fn job(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The scrape config the operator would generate, with targets from `file_sd`.
    pub fn scrape_config(&self, file_sd: &Path) -> Value {
        json!({
            "job_name": format!("podMonitor/{}/{}/0", self.namespace, self.name),
            "scrape_interval": self.interval,
            "scrape_timeout": self.interval,
            "metrics_path": self.path,
            "file_sd_configs": [{"files": [file_sd.display().to_string()]}],
        })
    }

    /// The targets now: selected pods whose container declares the port and whose process runs.
    pub async fn targets(&self, client: &kube::Client, runner: &PodRunner) -> Result<Vec<Target>> {
        let mut targets = Vec::new();
        for ns in &self.namespaces {
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            for pod in pods.list(&ListParams::default().labels(&self.selector)).await?.items {
                let uid = pod.uid().unwrap_or_default();
                let Some(container) = pod.spec.as_ref().and_then(|s| {
                    s.containers
                        .iter()
                        .find(|c| c.ports.iter().flatten().any(|p| p.name.as_deref() == Some(self.port.as_str())))
                }) else {
                    continue;
                };
                let port = runner.with(|m| {
                    m.get_mut(&uid).and_then(|r| (!r.terminating && r.process.exited().is_none()).then_some(r.port))
                });
                let Some(Some(port)) = port else { continue };
                targets.push(Target {
                    address: format!("127.0.0.1:{port}"),
                    labels: vec![
                        ("job".into(), self.job()),
                        ("namespace".into(), ns.clone()),
                        ("pod".into(), pod.name_any()),
                        ("container".into(), container.name.clone()),
                        ("endpoint".into(), self.port.clone()),
                    ],
                });
            }
        }
        targets.sort_by(|a, b| a.address.cmp(&b.address));
        Ok(targets)
    }

    /// Rewrites `file_sd` whenever the targets change (checked every 200 ms) until the task is
    /// aborted.
    pub fn refresh(
        self,
        client: kube::Client,
        runner: Arc<PodRunner>,
        file_sd: std::path::PathBuf,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut last: Option<Vec<Target>> = None;
            loop {
                match self.targets(&client, &runner).await {
                    Ok(targets) if last.as_ref() != Some(&targets) => match write_targets(&file_sd, &targets) {
                        Ok(()) => last = Some(targets),
                        Err(e) => eprintln!("pod monitor: {e:#}"),
                    },
                    Ok(_) => {}
                    Err(e) => eprintln!("pod monitor: listing pods: {e:#}"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }
}
