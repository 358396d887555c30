//! Jaeger v1.75's all-in-one (`cmd/jaeger`: an OpenTelemetry Collector with Jaeger's in-memory
//! storage and query service), built from its Go module into the e2e cache once per recipe by
//! `e2e/trace-backend/build.sh` (a wrapper module pins every module) and run on free loopback
//! ports: OTLP over HTTP in, Jaeger's query API (`/api/traces`) out. The trace backend of the tracing test
//! (`tests/tracing.rs`, docs/observability.md "Tracing").
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let jaeger = highwater_e2e::jaeger::Jaeger::start().await?;
//! let endpoint = jaeger.otlp_endpoint(); // "http://127.0.0.1:<port>" for OTEL_EXPORTER_OTLP_ENDPOINT
//! let trace = jaeger.trace("4bf92f3577b34da6a3ce929d0e0e4736").await?;
//! # Ok(()) }
//! ```
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use highwater::embedded::free_port;
use serde_json::Value;
use tempfile::TempDir;

use crate::process::Process;

pub const VERSION: &str = "v1.75.0";

pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("trace-backend/build.sh")
}

/// The binary, built on first use (minutes cold, a hash check warm).
pub async fn binary() -> Result<PathBuf> {
    let script = build_script();
    let out = tokio::process::Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({}); see its messages above", script.display(), out.status);
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim()))
}

pub struct Jaeger {
    process: Process,
    _dir: TempDir,
    otlp_port: u16,
    query_port: u16,
}

impl Jaeger {
    pub async fn start() -> Result<Jaeger> {
        let binary = binary().await?;
        let dir = tempfile::Builder::new().prefix("highwater-jaeger-").tempdir()?;
        let (otlp_port, query_port, query_grpc) = (free_port()?, free_port()?, free_port()?);
        // The all-in-one's own configuration (cmd/jaeger/internal/all-in-one.yaml) cut to what the
        // test needs, on free loopback ports: no other receivers, no fixed ports, no self-metrics.
        let config = format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#
        );
        let config_path = dir.path().join("jaeger.yaml");
        std::fs::write(&config_path, config)?;
        let mut cmd = Command::new(&binary);
        cmd.arg("--config").arg(&config_path);
        let process = Process::spawn("jaeger", cmd, &dir.path().join("jaeger.log"))?;
        let mut jaeger = Jaeger { process, _dir: dir, otlp_port, query_port };
        let services = format!("http://127.0.0.1:{query_port}/api/services");
        jaeger
            .process
            .wait_ready("the query API", Duration::from_secs(60), || {
                let services = services.clone();
                async move { reqwest::get(&services).await.is_ok_and(|r| r.status().is_success()) }
            })
            .await?;
        Ok(jaeger)
    }

    /// For `OTEL_EXPORTER_OTLP_ENDPOINT` (OTLP/HTTP; the exporter adds `/v1/traces`).
    pub fn otlp_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_port)
    }

    /// The query API's and UI's address.
    pub fn query_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.query_port)
    }

    /// The spans of trace `trace_id` (32 hex digits) as Jaeger's query API returns them
    /// (`/api/traces/{id}`: `spans[]` with `spanID`, `operationName`, `references`, `tags`);
    /// empty while Jaeger has none.
    pub async fn trace(&self, trace_id: &str) -> Result<Vec<Value>> {
        let resp = reqwest::get(format!("{}/api/traces/{trace_id}", self.query_url())).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        let v: Value = resp.error_for_status()?.json().await?;
        Ok(v["data"][0]["spans"].as_array().cloned().unwrap_or_default())
    }

    /// Every span of `service`'s recent traces named `operation`, with its trace's id.
    pub async fn spans(&self, service: &str, operation: &str) -> Result<Vec<Value>> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/traces", self.query_url()),
            &[("service", service), ("operation", operation), ("limit", "1000"), ("lookback", "1h")],
        )?;
        let v: Value = reqwest::get(url).await?.error_for_status()?.json().await.context("Jaeger's /api/traces")?;
        let traces = v["data"].as_array().cloned().unwrap_or_default();
        Ok(traces
            .iter()
            .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
            .filter(|s| s["operationName"] == operation)
            .collect())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}

/// The value of a span's tag `key` (Jaeger's `tags: [{key, type, value}]`).
pub fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"].as_array()?.iter().find(|t| t["key"] == key).map(|t| &t["value"])
}

/// The span id of a span's CHILD_OF reference: its parent.
pub fn parent(span: &Value) -> Option<&str> {
    span["references"].as_array()?.iter().find(|r| r["refType"] == "CHILD_OF").and_then(|r| r["spanID"].as_str())
}
