//! Static checks of the Helm chart and its monitoring, without a Kubernetes cluster:
//!
//! - the alerts (`charts/highwater/files/alerts/*.yaml`) pass `promtool check rules` and their
//!   unit tests (`files/alerts/tests/*.yaml`, `promtool test rules`), every alert has a case that
//!   fires and one that stays quiet, the required labels and annotations, and a runbook in
//!   `docs/runbooks/`;
//! - the dashboards (`files/dashboards/*.json`) are valid JSON with a unit and a description on
//!   every panel, the template variables, and PromQL that promtool accepts;
//! - the chart's CRD copies equal `crds/eventconsumer.yaml` and `crds/eventtype.yaml`;
//! - `helm lint` and `helm template` pass with every `charts/highwater/ci/*.yaml`, and the
//!   rendered objects have the properties the chart promises (restricted pods, dispatcher group
//!   labels and instance ids, no dispatcher token, least-privilege RBAC, CRDs' keep policy, optional
//!   objects only when enabled).
//!
//! promtool comes from Debian's `prometheus` package (.ci/run installs it); helm is found at
//! `$HIGHWATER_HELM` or `~/.cache/highwater-e2e/tools/helm`, else built by `charts/build-helm.sh`.
//!
//! One module per concern; this file holds the paths, tools and YAML helpers they share.
mod alerts;
mod console;
mod dashboards;
mod docs;
mod objects;
mod pods;
mod rbac;
mod render;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use serde_yaml::Value;

use alerts::alert_names;
use dashboards::{dashboards, panels};
use render::{Rendered, helm_template, rendered};

/// The runbook base URL the alert files carry (the chart swaps in `runbookBaseUrl`).
const RUNBOOK_BASE: &str = "https://example.invalid/highwater/blob/main/docs/runbooks";
const RELEASE: &str = "highwater";
const NAMESPACE: &str = "highwater-system";
/// The CRDs of `crds/`, each copied to `charts/highwater/files/crds/`.
const CRD_FILES: [&str; 2] = ["eventconsumer.yaml", "eventtype.yaml"];

/// The alerts the chart promises (issue "Helm chart, alerts and Grafana lag dashboards").
const REQUIRED_ALERTS: [&str; 12] = [
    "HighwaterConsumerLagHigh",
    "HighwaterConsumerFallingBehind",
    "HighwaterConsumerStalled",
    "HighwaterShardDead",
    "HighwaterFailureRatioHigh",
    "HighwaterFenceHeldBack",
    "HighwaterStalePerInstanceShard",
    "HighwaterDispatcherMetricsAbsent",
    "HighwaterOperatorDown",
    "HighwaterOperatorReconcileErrors",
    "HighwaterBrokerSinkFailing",
    "HighwaterPassesFailing",
];

/// Every metric the dispatcher and the operator export (docs/operations.md, docs/operator.md).
const METRICS: [&str; 25] = [
    "highwater_consumer_lag_events",
    "highwater_rebuild_events_done",
    "highwater_rebuild_events_expected",
    "highwater_consumer_lag_seconds",
    "highwater_events_processed_total",
    "highwater_events_failed_total",
    "highwater_passes_failed_total",
    "highwater_passes_skipped_total",
    "highwater_delivery_latency_seconds",
    "highwater_handler_duration_seconds",
    "highwater_shard_status",
    "highwater_shard_attempts",
    "highwater_fence_age_seconds",
    "highwater_stale_shard_heartbeat_age_seconds",
    "highwater_ready",
    "highwater_sink_errors_total",
    "highwater_sink_publish_seconds",
    "highwater_consumer_partitions_owned",
    "highwater_operator_reconciles_total",
    "highwater_operator_reconcile_errors_total",
    "highwater_operator_reconcile_duration_seconds",
    "highwater_operator_shards_created_total",
    "highwater_operator_shards_removed_total",
    "highwater_operator_pod_shard_removal_seconds",
    "highwater_operator_leader",
];

// paths, tools, files

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn chart() -> PathBuf {
    root().join("charts/highwater")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn yaml(path: &Path) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

/// The files of `dir` whose name ends with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no *{suffix} file in {}", dir.display());
    out
}

fn alert_files() -> Vec<PathBuf> {
    files(&chart().join("files/alerts"), ".yaml")
}

fn alert_test_files() -> Vec<PathBuf> {
    files(&chart().join("files/alerts/tests"), ".yaml")
}

fn dashboard_files() -> Vec<PathBuf> {
    files(&chart().join("files/dashboards"), ".json")
}

fn ci_values_files() -> Vec<PathBuf> {
    files(&chart().join("ci"), ".yaml")
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("HIGHWATER_PROMTOOL") {
        return p.into();
    }
    on_path("promtool").unwrap_or_else(|| {
        panic!(
            "promtool is not installed: install it with `apt-get update && apt-get install -y prometheus` \
             (Debian's package; .ci/run does this), or set HIGHWATER_PROMTOOL to a promtool binary"
        )
    })
}

/// helm: `$HIGHWATER_HELM`, else the cached build of `charts/build-helm.sh` ([`highwater_e2e::helm::helm`]).
fn helm() -> PathBuf {
    highwater_e2e::helm::helm().expect("helm (set HIGHWATER_HELM to a helm v3 binary to skip the build)")
}

/// Runs a command; returns (success, stdout, stderr).
fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file in the system temp directory, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> Self {
        TempPath(std::env::temp_dir().join(format!("highwater-chart-static-{}-{name}", std::process::id())))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = if self.0.is_dir() { fs::remove_dir_all(&self.0) } else { fs::remove_file(&self.0) };
    }
}

// ---------------------------------------------------------------------------------------------
// YAML helpers

/// The value at `path`: keys and sequence indexes separated by `.`; a key that holds dots (a label
/// such as `app.kubernetes.io/component`) goes in brackets: `metadata.labels.[helm.sh/hook]`.
fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    let mut segments = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        let (segment, tail) = match rest.strip_prefix('[') {
            Some(r) => r.split_once(']').expect("a closing ]"),
            None => rest.split_once('.').map(|(a, _)| (a, &rest[a.len()..])).unwrap_or((rest, "")),
        };
        segments.push(segment);
        rest = tail.strip_prefix('.').unwrap_or(tail);
    }
    segments.into_iter().fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => v.get(i).unwrap_or(&NULL),
        Err(_) => v.get(k).unwrap_or(&NULL),
    })
}

/// `v[k]` for a key that may hold dots.
fn key<'a>(v: &'a Value, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.get(k).unwrap_or(&NULL)
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    get(v, path).as_str().unwrap_or_default()
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    seq(v).iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()
}

/// `values.yaml` with `over` merged in (maps recursively; anything else replaced).
fn merged(base: &Value, over: &Value) -> Value {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            let mut m = b.clone();
            for (k, v) in o {
                let new = match m.get(k) {
                    Some(old) => merged(old, v),
                    None => v.clone(),
                };
                m.insert(k.clone(), new);
            }
            Value::Mapping(m)
        }
        (_, o) => o.clone(),
    }
}

/// YAML as JSON with every number a float, so `10000.0` and `10000` compare equal.
fn normalized(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Number(n) => serde_json::json!(n.as_f64().expect("a number")),
        Value::String(s) => serde_json::Value::String(s.clone()),
        Value::Sequence(s) => serde_json::Value::Array(s.iter().map(normalized).collect()),
        Value::Mapping(m) => serde_json::Value::Object(
            m.iter().map(|(k, v)| (k.as_str().expect("a string key").to_owned(), normalized(v))).collect(),
        ),
        Value::Tagged(t) => normalized(&t.value),
    }
}
