//! A real Prometheus (Debian's `prometheus` package, or `$HIGHWATER_PROMETHEUS`) as a child
//! process, with its HTTP API client: a test writes a scrape config whose targets come from a
//! `file_sd` file it rewrites as pods come and go, loads rule files, and evaluates PromQL the way
//! Grafana and the ruler do (`/api/v1/query`, `/api/v1/query_range`, label values, alerts, rules).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result, anyhow, bail};
use highwater::embedded::free_port;
use serde_json::{Value, json};

use crate::process::{Process, retry_on_port_clash};

/// The prometheus binary: `$HIGHWATER_PROMETHEUS`, else `prometheus` on PATH, else Debian's.
pub fn binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HIGHWATER_PROMETHEUS") {
        return Ok(p.into());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("prometheus")).find(|p| p.is_file()))
        .unwrap_or_default();
    on_path.or_else(|| Some(PathBuf::from("/usr/bin/prometheus")).filter(|p| p.is_file())).context(
        "prometheus is not installed: `apt-get install --no-install-recommends prometheus` (.ci/run does), \
         or set HIGHWATER_PROMETHEUS to a prometheus 2.x binary",
    )
}

/// The Prometheus Operator release whose CRDs (PodMonitor, ServiceMonitor, PrometheusRule) the
/// tests install.
pub const OPERATOR_MODULE: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";

/// The directory of the Prometheus Operator's CRD manifests (`example/prometheus-operator-crd`),
/// from its Go module, downloaded once through the module proxy into the e2e Go module cache.
pub async fn operator_crds() -> Result<PathBuf> {
    Ok(crate::gomod::module_dir(OPERATOR_MODULE).await?.join("example/prometheus-operator-crd"))
}

/// One scrape target of a `file_sd` file: an address and the target labels Prometheus attaches.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub address: String,
    pub labels: Vec<(String, String)>,
}

/// Replaces `path` (a `file_sd_configs` file) with `targets`, atomically: Prometheus watches the
/// file and never reads half of it.
pub fn write_targets(path: &Path, targets: &[Target]) -> Result<()> {
    let groups: Vec<Value> = targets
        .iter()
        .map(|t| {
            let labels: serde_json::Map<String, Value> =
                t.labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            json!({"targets": [t.address], "labels": labels})
        })
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&groups)?).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

pub struct Prometheus {
    process: Process,
    url: String,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts prometheus in `dir` (config `dir/prometheus.yml` from `config`, data in `dir/data`,
    /// log `dir/prometheus.log`) on a free loopback port and waits until `/-/ready`.
    pub async fn start(dir: &Path, config: &str) -> Result<Prometheus> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).with_context(|| format!("writing {}", config_file.display()))?;
        let binary = binary()?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        retry_on_port_clash(|| async {
            let port = free_port()?;
            let mut command = Command::new(&binary);
            command.args([
                format!("--config.file={}", config_file.display()),
                format!("--storage.tsdb.path={}", dir.join("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                "--log.level=warn".to_owned(),
            ]);
            let mut process = Process::spawn("prometheus", command, &dir.join("prometheus.log"))?;
            let url = format!("http://127.0.0.1:{port}");
            let ready = format!("{url}/-/ready");
            let probe = http.clone();
            process
                .wait_ready("/-/ready", Duration::from_secs(60), || {
                    let probe = probe.clone();
                    let ready = ready.clone();
                    async move { probe.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) }
                })
                .await?;
            Ok(Prometheus { process, url, http: http.clone() })
        })
        .await
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// GET `path` with `params`; the `data` of a `"status": "success"` answer, or an error with
    /// Prometheus's `errorType` and `error` (a PromQL parse error among them).
    pub async fn api(&self, path: &str, params: &[(&str, String)]) -> Result<Value> {
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", self.url), params)?;
        let response = self.http.get(url).send().await.with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .with_context(|| format!("GET {path} {params:?}: the answer ({status}) is not JSON"))?;
        if body["status"] != "success" {
            bail!("GET {path} {params:?}: {status} {}: {}", body["errorType"], body["error"]);
        }
        Ok(body["data"].clone())
    }

    /// `/api/v1/query`: the series of an instant query at `time` (now when None).
    pub async fn query(&self, expr: &str, time: Option<f64>) -> Result<Vec<Value>> {
        let mut params = vec![("query", expr.to_owned())];
        if let Some(t) = time {
            params.push(("time", format!("{t:.3}")));
        }
        result(self.api("/api/v1/query", &params).await?)
    }

    /// `/api/v1/query_range`: the series of a range query (what a Grafana time series panel runs).
    pub async fn query_range(&self, expr: &str, start: f64, end: f64, step: Duration) -> Result<Vec<Value>> {
        let params = [
            ("query", expr.to_owned()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{}", step.as_secs_f64())),
        ];
        result(self.api("/api/v1/query_range", &params).await?)
    }

    /// `/api/v1/label/<label>/values?match[]=<selector>`: what Grafana's `label_values(selector,
    /// label)` variable query runs.
    pub async fn label_values(&self, selector: &str, label: &str, start: f64, end: f64) -> Result<Vec<String>> {
        let params = [("match[]", selector.to_owned()), ("start", format!("{start:.3}")), ("end", format!("{end:.3}"))];
        let data = self.api(&format!("/api/v1/label/{label}/values"), &params).await?;
        let values = data.as_array().ok_or_else(|| anyhow!("label values: not a list: {data}"))?;
        Ok(values.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
    }

    /// `/api/v1/alerts`: the active (pending and firing) alerts.
    pub async fn alerts(&self) -> Result<Vec<Value>> {
        let data = self.api("/api/v1/alerts", &[]).await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// `/api/v1/rules`: every loaded rule with its health and last evaluation error.
    pub async fn rules(&self) -> Result<Vec<Value>> {
        let data = self.api("/api/v1/rules", &[]).await?;
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        Ok(groups.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect())
    }

    /// `/api/v1/targets`: the active targets with their labels and scrape health.
    pub async fn targets(&self) -> Result<Vec<Value>> {
        let data = self.api("/api/v1/targets", &[("state", "active".to_owned())]).await?;
        Ok(data["activeTargets"].as_array().cloned().unwrap_or_default())
    }
}

fn result(data: Value) -> Result<Vec<Value>> {
    match &data["result"] {
        Value::Array(series) => Ok(series.clone()),
        // A scalar or string result is one value.
        Value::Null => bail!("no result in {data}"),
        other => Ok(vec![json!({"metric": {}, "value": other})]),
    }
}
