//! Static checks of the Helm chart and its monitoring, without a Kubernetes cluster:
//!
//! - the alerts (`charts/highwater/files/alerts/*.yaml`) pass `promtool check rules` and their
//!   unit tests (`files/alerts/tests/*.yaml`, `promtool test rules`), every alert has a case that
//!   fires and one that stays quiet, the required labels and annotations, and a runbook in
//!   `docs/runbooks/`;
//! - the dashboards (`files/dashboards/*.json`) are valid JSON with a unit and a description on
//!   every panel, the template variables, and PromQL that promtool accepts;
//! - the chart's CRD copy equals `crds/eventconsumer.yaml`;
//! - `helm lint` and `helm template` pass with every `charts/highwater/ci/*.yaml`, and the
//!   rendered objects have the properties the chart promises (restricted pods, dispatcher group
//!   labels and instance ids, no dispatcher token, least-privilege RBAC, CRD keep policy, optional
//!   objects only when enabled).
//!
//! promtool comes from Debian's `prometheus` package (.ci/run installs it); helm is found at
//! `$HIGHWATER_HELM` or `~/.cache/highwater-e2e/tools/helm`, else built by `charts/build-helm.sh`.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use serde_yaml::Value;

/// The runbook base URL the alert files carry (the chart swaps in `runbookBaseUrl`).
const RUNBOOK_BASE: &str = "https://example.invalid/highwater/blob/main/docs/runbooks";
const RELEASE: &str = "highwater";
const NAMESPACE: &str = "highwater-system";

/// The alerts the chart promises (issue "Helm chart, alerts and Grafana lag dashboards").
const REQUIRED_ALERTS: [&str; 10] = [
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
];

/// Every metric the dispatcher and the operator export (docs/operations.md, docs/operator.md).
const METRICS: [&str; 18] = [
    "highwater_consumer_lag_events",
    "highwater_consumer_lag_seconds",
    "highwater_events_processed_total",
    "highwater_events_failed_total",
    "highwater_delivery_latency_seconds",
    "highwater_handler_duration_seconds",
    "highwater_shard_status",
    "highwater_shard_attempts",
    "highwater_fence_age_seconds",
    "highwater_stale_shard_heartbeat_age_seconds",
    "highwater_ready",
    "highwater_operator_reconciles_total",
    "highwater_operator_reconcile_errors_total",
    "highwater_operator_reconcile_duration_seconds",
    "highwater_operator_shards_created_total",
    "highwater_operator_shards_removed_total",
    "highwater_operator_pod_shard_removal_seconds",
    "highwater_operator_leader",
];

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// alerts

struct Rule {
    file: PathBuf,
    group: String,
    rule: Value,
}

fn alert_rules() -> Vec<Rule> {
    let mut out = Vec::new();
    for file in alert_files() {
        let doc = yaml(&file);
        for g in seq(get(&doc, "groups")) {
            for r in seq(get(g, "rules")) {
                out.push(Rule { file: file.clone(), group: str_at(g, "name").to_owned(), rule: r.clone() });
            }
        }
    }
    out
}

fn alert_names() -> BTreeSet<String> {
    alert_rules().iter().map(|r| str_at(&r.rule, "alert").to_owned()).filter(|a| !a.is_empty()).collect()
}

#[test]
fn alert_rules_pass_promtool_check_rules() {
    let (ok, out, err) = run(Command::new(promtool()).args(["check", "rules"]).args(alert_files()));
    assert!(ok, "promtool check rules failed:\n{out}{err}");
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let (ok, out, err) = run(Command::new(promtool()).args(["test", "rules"]).args(alert_test_files()));
    assert!(ok, "promtool test rules failed:\n{out}{err}");
}

#[test]
fn the_required_alerts_exist_and_only_alerting_rules_do() {
    let names = alert_names();
    for a in REQUIRED_ALERTS {
        assert!(names.contains(a), "alert {a} is missing from charts/highwater/files/alerts/");
    }
    for r in alert_rules() {
        assert!(
            !str_at(&r.rule, "alert").is_empty(),
            "{} group {}: only alerting rules belong here (a recording rule would need its own tests): {:?}",
            r.file.display(),
            r.group,
            r.rule
        );
    }
    let all: Vec<_> = alert_rules().iter().map(|r| str_at(&r.rule, "alert").to_owned()).collect();
    assert_eq!(all.len(), names.len(), "an alert name is used twice: {all:?}");
}

#[test]
fn every_alert_has_a_severity_summary_description_and_runbook() {
    for r in alert_rules() {
        let alert = str_at(&r.rule, "alert");
        let severity = str_at(&r.rule, "labels.severity");
        assert!(["critical", "warning", "info"].contains(&severity), "{alert}: labels.severity is {severity:?}");
        for a in ["summary", "description"] {
            assert!(!str_at(&r.rule, &format!("annotations.{a}")).trim().is_empty(), "{alert}: no annotations.{a}");
        }
        assert_eq!(
            str_at(&r.rule, "annotations.runbook_url"),
            format!("{RUNBOOK_BASE}/{alert}.md"),
            "{alert}: runbook_url must be the runbook base URL + /{alert}.md (the chart replaces the base)"
        );
        assert!(!str_at(&r.rule, "expr").trim().is_empty(), "{alert}: no expr");
        assert!(get(&r.rule, "for").as_str().is_some(), "{alert}: no `for` (a single scrape would page)");

        let runbook = root().join(format!("docs/runbooks/{alert}.md"));
        assert!(runbook.is_file(), "{alert}: no runbook at docs/runbooks/{alert}.md");
        let text = read(&runbook);
        assert!(text.starts_with(&format!("# {alert}\n")), "{}: must start with `# {alert}`", runbook.display());
        for h in ["## What it means", "## How to confirm", "## How to fix"] {
            assert!(text.contains(h), "{}: no `{h}` section", runbook.display());
        }
        assert!(text.contains("```"), "{}: no command to run", runbook.display());
    }
}

#[test]
fn every_runbook_belongs_to_an_alert() {
    let names = alert_names();
    for f in files(&root().join("docs/runbooks"), ".md") {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(stem == "README" || names.contains(&stem), "{} names no alert of files/alerts/", f.display());
    }
}

#[test]
fn every_alert_has_a_unit_test_that_fires_and_one_that_stays_quiet() {
    let mut fires: BTreeMap<String, usize> = BTreeMap::new();
    let mut quiet: BTreeMap<String, usize> = BTreeMap::new();
    for f in alert_test_files() {
        let doc = yaml(&f);
        for t in seq(get(&doc, "tests")) {
            for case in seq(get(t, "alert_rule_test")) {
                let name = str_at(case, "alertname").to_owned();
                let target = if seq(get(case, "exp_alerts")).is_empty() { &mut quiet } else { &mut fires };
                *target.entry(name).or_default() += 1;
            }
        }
    }
    for a in alert_names() {
        assert!(fires.contains_key(&a), "{a}: no promtool test case in files/alerts/tests/ where it fires");
        assert!(quiet.contains_key(&a), "{a}: no promtool test case in files/alerts/tests/ where it stays quiet");
    }
    for a in fires.keys().chain(quiet.keys()) {
        assert!(alert_names().contains(a), "files/alerts/tests/ tests an alert that does not exist: {a}");
    }
}

// ---------------------------------------------------------------------------------------------
// dashboards

fn dashboards() -> Vec<(PathBuf, serde_json::Value)> {
    dashboard_files()
        .into_iter()
        .map(|f| {
            let v =
                serde_json::from_str(&read(&f)).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", f.display()));
            (f, v)
        })
        .collect()
}

/// Every panel, rows' nested panels included.
fn panels(d: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn walk<'a>(ps: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for p in ps.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    out
}

#[test]
fn dashboards_are_the_two_expected_ones() {
    let names: Vec<String> =
        dashboard_files().iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["highwater-consumer.json", "highwater-overview.json"]);
}

#[test]
fn dashboards_have_units_descriptions_variables_and_a_recent_schema() {
    for (f, d) in dashboards() {
        let name = f.display();
        assert!(d["schemaVersion"].as_u64().unwrap_or(0) >= 39, "{name}: schemaVersion must be 39 or later");
        assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty() && u.len() <= 40), "{name}: uid");
        assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()), "{name}: title");
        assert!(d["id"].is_null(), "{name}: id must be null (a provisioned dashboard gets its own)");

        let vars: BTreeMap<&str, &serde_json::Value> = d["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["name"].as_str().unwrap_or_default(), v))
            .collect();
        for v in ["datasource", "namespace", "consumer", "instance"] {
            assert!(vars.contains_key(v), "{name}: no template variable {v}");
        }
        assert_eq!(vars["datasource"]["type"], "datasource", "{name}: datasource variable type");
        assert_eq!(vars["datasource"]["query"], "prometheus", "{name}: datasource variable query");
        for v in ["namespace", "consumer", "instance"] {
            assert_eq!(vars[v]["type"], "query", "{name}: variable {v} type");
            assert_eq!(vars[v]["datasource"]["uid"], "${datasource}", "{name}: variable {v} datasource");
        }

        let mut ids = BTreeSet::new();
        let ps = panels(&d);
        assert!(ps.len() > 5, "{name}: too few panels");
        let titles: BTreeSet<&str> =
            ps.iter().filter(|p| p["type"] != "row").filter_map(|p| p["title"].as_str()).collect();
        assert_eq!(titles.len(), ps.iter().filter(|p| p["type"] != "row").count(), "{name}: two panels share a title");
        let rect = |p: &serde_json::Value| {
            let g = |k: &str| p["gridPos"][k].as_u64().unwrap_or(0);
            (g("x"), g("y"), g("x") + g("w"), g("y") + g("h"))
        };
        for (i, a) in ps.iter().enumerate() {
            let (ax0, ay0, ax1, ay1) = rect(a);
            assert!(ax1 <= 24, "{name}: panel {} is wider than the grid", a["title"]);
            for b in &ps[i + 1..] {
                let (bx0, by0, bx1, by1) = rect(b);
                let overlap = ax0 < bx1 && bx0 < ax1 && ay0 < by1 && by0 < ay1;
                assert!(!overlap, "{name}: panels {} and {} overlap", a["title"], b["title"]);
            }
        }
        for p in ps {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(!title.is_empty(), "{name}: a panel without a title: {p}");
            assert!(ids.insert(p["id"].as_u64().expect("a panel id")), "{name}: panel id {} used twice", p["id"]);
            for k in ["h", "w", "x", "y"] {
                assert!(p["gridPos"][k].is_u64(), "{name}: panel {title:?} has no gridPos.{k}");
            }
            if p["type"] == "row" {
                continue;
            }
            assert!(
                p["description"].as_str().is_some_and(|s| s.trim().len() > 20),
                "{name}: panel {title:?} has no description"
            );
            assert!(
                p["fieldConfig"]["defaults"]["unit"].as_str().is_some_and(|u| !u.is_empty()),
                "{name}: panel {title:?} has no unit (fieldConfig.defaults.unit)"
            );
            let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
            if p["type"] != "alertlist" {
                assert!(!targets.is_empty(), "{name}: panel {title:?} has no query");
                assert_eq!(p["datasource"]["uid"], "${datasource}", "{name}: panel {title:?} datasource");
            }
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{name}: panel {title:?} query datasource");
                assert!(t["expr"].as_str().is_some_and(|e| e.contains("highwater_")), "{name}: {title:?}: {t}");
            }
        }
    }
}

/// grafana/dashboard-linter's target-rate-interval and counter rules (the linter itself cannot be
/// fetched here: docs/observability.md): every range of a `rate`, `irate` or `increase` is
/// `$__rate_interval`, and every counter or histogram bucket is read through one of them.
#[test]
fn dashboard_rates_use_the_rate_interval_and_counters_are_never_shown_raw() {
    for (f, d) in dashboards() {
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().unwrap_or_default();
                let at = format!("{}: panel {}: {expr}", f.display(), p["title"]);
                for (i, _) in expr.match_indices('[') {
                    let range = &expr[i..=i + expr[i..].find(']').expect("a closed range")];
                    // `[10m:30s]` is a subquery (deriv over a gauge), not a counter's rate.
                    assert!(range == "[$__rate_interval]" || range.contains(':'), "{at}: range {range}");
                }
                for (i, _) in expr.match_indices("highwater_") {
                    let name: String =
                        expr[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    if name.ends_with("_total") || name.ends_with("_bucket") {
                        let rest = &expr[i + name.len()..];
                        let selector = if rest.starts_with('{') { &rest[..=rest.find('}').unwrap()] } else { "" };
                        let before = expr[..i].trim_end();
                        assert!(
                            rest[selector.len()..].starts_with("[$__rate_interval]")
                                && ["rate(", "irate(", "increase("].iter().any(|f| before.ends_with(f)),
                            "{at}: counter {name} must be read through rate/irate/increase over $__rate_interval"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn dashboard_queries_are_promql_that_promtool_accepts() {
    // Each query, with Grafana's variables filled in, becomes a recording rule for
    // `promtool check rules` (which parses every expression).
    let mut rules = Vec::new();
    for (f, d) in dashboards() {
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().unwrap_or_default();
                let filled = [
                    ("$__rate_interval", "5m"),
                    ("$__interval", "1m"),
                    ("$__range", "6h"),
                    ("${namespace}", ".*"),
                    ("${consumer}", ".*"),
                    ("${instance}", ".*"),
                    ("$namespace", ".*"),
                    ("$consumer", ".*"),
                    ("$instance", ".*"),
                ]
                .iter()
                .fold(expr.to_owned(), |e, (var, value)| e.replace(var, value));
                assert!(!filled.contains('$'), "{}: panel {}: unknown variable in {expr}", f.display(), p["title"]);
                rules.push(serde_json::json!({"record": format!("dashboard_query_{}", rules.len()), "expr": filled}));
            }
        }
    }
    let file = TempPath::new("dashboard-queries.yaml");
    let doc = serde_json::json!({"groups": [{"name": "dashboards", "rules": rules}]});
    fs::write(&file.0, serde_yaml::to_string(&doc).unwrap()).unwrap();
    let (ok, out, err) = run(Command::new(promtool()).args(["check", "rules"]).arg(&file.0));
    assert!(ok, "a dashboard query is not valid PromQL:\n{out}{err}");
}

// ---------------------------------------------------------------------------------------------
// CRD copy and docs

#[test]
fn the_charts_crd_copy_equals_crds_eventconsumer_yaml() {
    let source = read(&root().join("crds/eventconsumer.yaml"));
    let copy = read(&chart().join("files/crds/eventconsumer.yaml"));
    assert!(
        source == copy,
        "charts/highwater/files/crds/eventconsumer.yaml differs from crds/eventconsumer.yaml\n  \
         fix: cp crds/eventconsumer.yaml charts/highwater/files/crds/eventconsumer.yaml"
    );
}

/// The `highwater_*` names in `text`, without histogram suffixes.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("highwater_") {
        let tail = &rest[i..];
        let end =
            tail.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        let name = &tail[..end];
        let name = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        // `highwater_dev_group`-style label names and the schema name are not metrics.
        if name.len() > "highwater_".len() && !rest[..i].ends_with(['.', '-']) {
            out.insert(name.to_owned());
        }
        rest = &tail[end..];
    }
    out
}

#[test]
fn observability_doc_covers_every_metric_alert_and_panel() {
    let doc = read(&root().join("docs/observability.md"));
    for m in METRICS {
        assert!(doc.contains(&format!("`{m}")), "docs/observability.md does not describe the metric {m}");
    }
    let mut used = BTreeSet::new();
    for f in alert_files().into_iter().chain(dashboard_files()) {
        used.extend(metric_names(&read(&f)));
    }
    for m in used {
        assert!(METRICS.contains(&m.as_str()), "alerts or dashboards use {m}, which no component exports");
    }
    for a in alert_names() {
        assert!(doc.contains(&format!("`{a}`")), "docs/observability.md does not describe the alert {a}");
    }
    for (f, d) in dashboards() {
        for p in panels(&d).into_iter().filter(|p| p["type"] != "row") {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(
                doc.contains(title),
                "docs/observability.md does not describe the panel {title:?} of {}",
                f.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// helm

struct Rendered {
    file: String,
    /// values.yaml merged with the values file.
    values: Value,
    objects: Vec<Value>,
}

impl Rendered {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| str_at(o, "kind") == kind).collect()
    }

    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> = self.all(kind).into_iter().filter(|o| str_at(o, "metadata.name") == name).collect();
        assert_eq!(found.len(), 1, "{}: expected one {kind} {name}, found {}", self.file, found.len());
        found[0]
    }

    fn on(&self, path: &str) -> bool {
        get(&self.values, path).as_bool().unwrap_or(false)
    }

    fn v(&self, path: &str) -> &Value {
        get(&self.values, path)
    }
}

fn helm_template(args: &[&str]) -> Result<Vec<Value>, String> {
    let (ok, out, err) = run(Command::new(helm())
        .args(["template", RELEASE])
        .arg(chart())
        .args(["--namespace", NAMESPACE, "--kube-version", "1.35.0"])
        .args(args));
    if !ok {
        return Err(err);
    }
    // Helm separates documents with a `---` line; inside a document every such line is indented.
    let mut objects = Vec::new();
    let mut doc = String::new();
    for line in out.lines().chain(["---"]) {
        if line == "---" {
            let v: Value =
                serde_yaml::from_str(&doc).map_err(|e| format!("rendered YAML does not parse: {e}\n{doc}"))?;
            if !v.is_null() {
                objects.push(v);
            }
            doc.clear();
        } else {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    Ok(objects)
}

fn rendered() -> &'static [Rendered] {
    static R: OnceLock<Vec<Rendered>> = OnceLock::new();
    R.get_or_init(|| {
        let defaults = yaml(&chart().join("values.yaml"));
        ci_values_files()
            .iter()
            .map(|f| {
                let file = f.file_name().unwrap().to_string_lossy().into_owned();
                let objects = helm_template(&["-f", &f.to_string_lossy()])
                    .unwrap_or_else(|e| panic!("helm template -f {file}:\n{e}"));
                Rendered { file, values: merged(&defaults, &yaml(f)), objects }
            })
            .collect()
    })
}

#[test]
fn helm_lint_passes_with_every_ci_values_file() {
    for f in ci_values_files() {
        let (ok, out, err) = run(Command::new(helm())
            .args(["lint", "--strict"])
            .arg(chart())
            .arg("-f")
            .arg(&f)
            .args(["--kube-version", "1.35.0"]));
        assert!(ok, "helm lint --strict -f {}:\n{out}{err}", f.display());
    }
}

/// (component, pod spec) of every workload.
fn pod_specs(r: &Rendered) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for o in &r.objects {
        let spec = match str_at(o, "kind") {
            "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => get(o, "spec.template.spec"),
            "CronJob" => get(o, "spec.jobTemplate.spec.template.spec"),
            "Pod" => get(o, "spec"),
            _ => continue,
        };
        out.push((str_at(o, "metadata.labels.[app.kubernetes.io/component]").to_owned(), spec));
    }
    out
}

#[test]
fn every_pod_runs_with_the_restricted_security_context_and_resource_requests() {
    for r in rendered() {
        let mut components = BTreeSet::new();
        for (component, spec) in pod_specs(r) {
            let at = format!("{}: {component} pod", r.file);
            components.insert(component.clone());
            let psc = get(spec, "securityContext");
            assert_eq!(get(psc, "runAsNonRoot").as_bool(), Some(true), "{at}: runAsNonRoot");
            assert_eq!(str_at(psc, "seccompProfile.type"), "RuntimeDefault", "{at}: seccompProfile");
            for k in ["hostNetwork", "hostPID", "hostIPC"] {
                assert_ne!(get(spec, k).as_bool(), Some(true), "{at}: {k}");
            }
            let containers: Vec<&Value> =
                seq(get(spec, "containers")).iter().chain(seq(get(spec, "initContainers"))).collect();
            assert!(!containers.is_empty(), "{at}: no containers");
            for c in containers {
                let at = format!("{at}, container {}", str_at(c, "name"));
                let sc = get(c, "securityContext");
                assert_eq!(
                    get(sc, "allowPrivilegeEscalation").as_bool(),
                    Some(false),
                    "{at}: allowPrivilegeEscalation"
                );
                assert_eq!(get(sc, "readOnlyRootFilesystem").as_bool(), Some(true), "{at}: readOnlyRootFilesystem");
                assert_eq!(get(sc, "runAsNonRoot").as_bool(), Some(true), "{at}: runAsNonRoot");
                assert_ne!(get(sc, "privileged").as_bool(), Some(true), "{at}: privileged");
                assert_eq!(strings(get(sc, "capabilities.drop")), ["ALL"], "{at}: capabilities.drop");
                assert!(seq(get(sc, "capabilities.add")).is_empty(), "{at}: capabilities.add");
                assert_eq!(str_at(sc, "seccompProfile.type"), "RuntimeDefault", "{at}: seccompProfile");
                for res in ["cpu", "memory"] {
                    assert!(!get(c, &format!("resources.requests.{res}")).is_null(), "{at}: no {res} request");
                }
                assert!(str_at(c, "image").starts_with(str_at(&r.values, "image.repository")), "{at}: image");
            }
        }
        // Every kind of pod the values ask for is there (so the checks above covered it).
        let mut expected = BTreeSet::from(["dispatcher".to_owned()]);
        if r.on("operator.enabled") {
            expected.insert("operator".into());
        }
        if str_at(&r.values, "migrations.owner") == "hook" {
            expected.insert("migrate".into());
        }
        if r.on("retention.enabled") {
            expected.insert("retention".into());
        }
        assert_eq!(components, expected, "{}: the workloads rendered", r.file);
    }
}

#[test]
fn dispatcher_pods_carry_their_group_label_and_the_pod_name_as_instance_id() {
    for r in rendered() {
        let groups = seq(r.v("dispatchers.groups"));
        assert_eq!(
            r.all("Deployment")
                .iter()
                .filter(|d| str_at(d, "metadata.labels.[app.kubernetes.io/component]") == "dispatcher")
                .count(),
            groups.len(),
            "{}: one dispatcher Deployment per group",
            r.file
        );
        for g in groups {
            let name = str_at(g, "name");
            let d = r.one("Deployment", &format!("{RELEASE}-dispatcher-{name}"));
            let at = format!("{}: group {name}", r.file);
            assert_eq!(str_at(d, "spec.selector.matchLabels.[highwater.dev/group]"), name, "{at}: selector");
            let pod = get(d, "spec.template");
            assert_eq!(
                str_at(pod, "metadata.labels.[highwater.dev/group]"),
                name,
                "{at}: pod label highwater.dev/group"
            );
            let keda = r.on("keda.enabled") && get(g, "keda.enabled").as_bool() == Some(true);
            if keda {
                assert!(get(d, "spec.replicas").is_null(), "{at}: KEDA scales it, so replicas must be left out");
            } else {
                assert_eq!(get(d, "spec.replicas"), get(g, "replicas"), "{at}: replicas");
            }
            let c = get(pod, "spec.containers.0");
            assert_eq!(strings(get(c, "command")), ["highwater"], "{at}: command");
            let args = strings(get(c, "args"));
            assert_eq!(args[0], "dispatch", "{at}: args {args:?}");
            assert!(args.contains(&format!("--group={name}")), "{at}: args {args:?}");
            for extra in strings(get(g, "extraArgs")) {
                assert!(args.contains(&extra), "{at}: extraArgs {extra} missing from {args:?}");
            }
            let env: BTreeMap<&str, &Value> =
                seq(get(c, "env")).iter().map(|e| (str_at(e, "name"), get(e, "valueFrom"))).collect();
            assert_eq!(
                str_at(env["HIGHWATER_INSTANCE_ID"], "fieldRef.fieldPath"),
                "metadata.name",
                "{at}: HIGHWATER_INSTANCE_ID must come from the pod name (downward API)"
            );
            assert_eq!(
                str_at(env["DATABASE_URL"], "secretKeyRef.name"),
                str_at(&r.values, "database.existingSecret"),
                "{at}: DATABASE_URL secret"
            );
            assert_eq!(
                str_at(env["DATABASE_URL"], "secretKeyRef.key"),
                str_at(&r.values, "database.secretKey"),
                "{at}: DATABASE_URL key"
            );
            let log_format = seq(get(c, "env")).iter().find(|e| str_at(e, "name") == "HIGHWATER_LOG_FORMAT");
            assert_eq!(
                log_format.map(|e| str_at(e, "value")),
                Some(str_at(&r.values, "dispatchers.logFormat")),
                "{at}: HIGHWATER_LOG_FORMAT from dispatchers.logFormat"
            );
            for e in seq(get(g, "env")) {
                assert!(env.contains_key(str_at(e, "name")), "{at}: group env {} missing", str_at(e, "name"));
            }
            let port = get(c, "ports.0");
            assert_eq!((str_at(port, "name"), get(port, "containerPort").as_u64()), ("http", Some(8080)), "{at}: port");
            assert_eq!(str_at(c, "livenessProbe.httpGet.path"), "/healthz", "{at}: liveness");
            assert_eq!(str_at(c, "readinessProbe.httpGet.path"), "/readyz", "{at}: readiness");
            assert_eq!(str_at(c, "readinessProbe.httpGet.port"), "http", "{at}: readiness port");
            if !get(g, "resources").is_null() {
                assert_eq!(get(c, "resources"), get(g, "resources"), "{at}: resources");
            }
        }
    }
}

#[test]
fn dispatchers_and_jobs_mount_no_token_and_are_bound_to_no_role() {
    for r in rendered() {
        for (component, spec) in pod_specs(r) {
            if component != "operator" {
                assert_eq!(
                    get(spec, "automountServiceAccountToken").as_bool(),
                    Some(false),
                    "{}: {component} pods must not mount a service account token",
                    r.file
                );
            }
        }
        let dispatcher_sa = format!("{RELEASE}-dispatcher");
        let sa = r.one("ServiceAccount", &dispatcher_sa);
        assert_eq!(get(sa, "automountServiceAccountToken").as_bool(), Some(false), "{}: dispatcher SA", r.file);
        for kind in ["RoleBinding", "ClusterRoleBinding"] {
            for b in r.all(kind) {
                for s in seq(get(b, "subjects")) {
                    assert_eq!(
                        str_at(s, "name"),
                        format!("{RELEASE}-operator"),
                        "{}: {kind} {} binds {}: only the operator has RBAC",
                        r.file,
                        str_at(b, "metadata.name"),
                        str_at(s, "name")
                    );
                }
            }
        }
    }
}

/// "apiGroup/resource" -> verbs of a (Cluster)Role.
fn role_rules(role: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in seq(get(role, "rules")) {
        for g in strings(get(rule, "apiGroups")) {
            for res in strings(get(rule, "resources")) {
                out.entry(format!("{g}/{res}")).or_default().extend(strings(get(rule, "verbs")));
            }
        }
    }
    out
}

#[test]
fn operator_rbac_is_least_privilege() {
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let expected: BTreeMap<String, BTreeSet<String>> = [
        ("highwater.dev/eventconsumers", set(&["get", "list", "watch", "patch", "update"])),
        ("highwater.dev/eventconsumers/status", set(&["get", "patch", "update"])),
        ("highwater.dev/eventconsumers/finalizers", set(&["update"])),
        ("/pods", set(&["get", "list", "watch"])),
        ("events.k8s.io/events", set(&["create", "patch"])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    for r in rendered() {
        if !r.on("operator.enabled") {
            assert!(r.all("ClusterRole").is_empty() && r.all("Role").is_empty(), "{}: RBAC without operator", r.file);
            continue;
        }
        let watch = str_at(&r.values, "operator.watchNamespace");
        let (kind, name, ns) = if watch.is_empty() {
            ("ClusterRole", format!("{RELEASE}-operator-{NAMESPACE}"), "")
        } else {
            assert!(r.all("ClusterRole").is_empty(), "{}: watching {watch} needs no ClusterRole", r.file);
            assert!(r.all("ClusterRoleBinding").is_empty(), "{}: watching {watch} needs no ClusterRoleBinding", r.file);
            ("Role", format!("{RELEASE}-operator"), watch)
        };
        let role = r.one(kind, &name);
        assert_eq!(str_at(role, "metadata.namespace"), ns, "{}: {kind} namespace", r.file);
        assert_eq!(role_rules(role), expected, "{}: the operator's {kind}", r.file);
        let binding = r.one(&format!("{kind}Binding"), &name);
        assert_eq!(str_at(binding, "roleRef.name"), name, "{}: binding", r.file);
        assert_eq!(str_at(binding, "subjects.0.namespace"), NAMESPACE, "{}: binding subject", r.file);

        let lease = r.one("Role", &format!("{RELEASE}-operator-leader-election"));
        assert_eq!(
            str_at(lease, "metadata.namespace"),
            NAMESPACE,
            "{}: the Lease Role is in the release namespace",
            r.file
        );
        assert_eq!(
            role_rules(lease),
            BTreeMap::from([("coordination.k8s.io/leases".to_owned(), set(&["get", "create", "update", "patch"]))]),
            "{}: Lease Role",
            r.file
        );
        for o in r.all("ClusterRole").into_iter().chain(r.all("Role")) {
            for (res, verbs) in role_rules(o) {
                assert!(!res.contains('*') && !verbs.contains("*"), "{}: wildcard in {res}: {verbs:?}", r.file);
                assert!(!res.contains("customresourcedefinitions"), "{}: the operator needs no CRD access", r.file);
                assert!(!res.contains("secrets"), "{}: the operator needs no Secret access", r.file);
            }
        }
    }
}

#[test]
fn the_operator_elects_a_leader_and_knows_its_pod_through_the_downward_api() {
    for r in rendered() {
        let d = r.one("Deployment", &format!("{RELEASE}-operator"));
        assert_eq!(get(d, "spec.replicas"), r.v("operator.replicas"), "{}: operator replicas", r.file);
        let c = get(d, "spec.template.spec.containers.0");
        assert_eq!(strings(get(c, "command")), ["highwater-operator"], "{}", r.file);
        let args = strings(get(c, "args"));
        assert!(
            !args.iter().any(|a| a.starts_with("--leader-election")),
            "{}: leader election stays on: {args:?}",
            r.file
        );
        let env: BTreeMap<&str, &Value> = seq(get(c, "env")).iter().map(|e| (str_at(e, "name"), e)).collect();
        assert_eq!(str_at(env["POD_NAME"], "valueFrom.fieldRef.fieldPath"), "metadata.name", "{}: POD_NAME", r.file);
        assert_eq!(
            str_at(env["POD_NAMESPACE"], "valueFrom.fieldRef.fieldPath"),
            "metadata.namespace",
            "{}: POD_NAMESPACE",
            r.file
        );
        assert_eq!(
            str_at(env["HIGHWATER_LOG_FORMAT"], "value"),
            str_at(&r.values, "operator.logFormat"),
            "{}: HIGHWATER_LOG_FORMAT from operator.logFormat",
            r.file
        );
        let watch = str_at(&r.values, "operator.watchNamespace");
        assert_eq!(args.contains(&format!("--namespace={watch}")), !watch.is_empty(), "{}: {args:?}", r.file);
        assert_eq!(str_at(c, "ports.0.name"), "http", "{}", r.file);
        assert_eq!(str_at(c, "livenessProbe.httpGet.path"), "/healthz", "{}", r.file);
        assert_eq!(str_at(c, "readinessProbe.httpGet.path"), "/readyz", "{}", r.file);
    }
}

#[test]
fn migrations_have_exactly_one_owner() {
    for r in rendered() {
        let owner = str_at(&r.values, "migrations.owner");
        let operator_args =
            strings(get(r.one("Deployment", &format!("{RELEASE}-operator")), "spec.template.spec.containers.0.args"));
        let jobs = r.all("Job");
        assert_eq!(operator_args.contains(&"--migrate".to_owned()), owner == "operator", "{}: --migrate", r.file);
        if owner == "hook" {
            assert_eq!(jobs.len(), 1, "{}: one migration Job", r.file);
            let job = jobs[0];
            assert_eq!(str_at(job, "metadata.annotations.[helm.sh/hook]"), "pre-install,pre-upgrade", "{}", r.file);
            let c = get(job, "spec.template.spec.containers.0");
            assert_eq!(
                (strings(get(c, "command")), strings(get(c, "args"))),
                (vec!["highwater".into()], vec!["migrate".into()])
            );
            let sa = r.one("ServiceAccount", str_at(job, "spec.template.spec.serviceAccountName"));
            assert_eq!(
                str_at(sa, "metadata.annotations.[helm.sh/hook]"),
                "pre-install,pre-upgrade",
                "{}: the Job's ServiceAccount must exist before the Job, as a hook",
                r.file
            );
        } else {
            assert!(jobs.is_empty(), "{}: no migration Job when the owner is {owner}", r.file);
        }
    }
}

#[test]
fn crds_carry_the_keep_policy_and_the_crd_of_crds_eventconsumer_yaml() {
    let source = yaml(&root().join("crds/eventconsumer.yaml"));
    for r in rendered() {
        let crds = r.all("CustomResourceDefinition");
        if !r.on("crds.create") {
            assert!(crds.is_empty(), "{}: crds.create=false renders no CRD", r.file);
            continue;
        }
        assert_eq!(crds.len(), 1, "{}: one CRD", r.file);
        let crd = crds[0];
        assert_eq!(str_at(crd, "metadata.annotations.[helm.sh/resource-policy]"), "keep", "{}: keep policy", r.file);
        assert_eq!(str_at(crd, "metadata.name"), "eventconsumers.highwater.dev", "{}", r.file);
        assert!(
            normalized(get(crd, "spec")) == normalized(get(&source, "spec")),
            "{}: the rendered CRD's spec differs from crds/eventconsumer.yaml",
            r.file
        );
    }
}

#[test]
fn monitoring_and_optional_objects_render_only_when_enabled() {
    let alert_count = alert_names().len();
    for r in rendered() {
        let count = |kind: &str| r.all(kind).len();
        let scrape = r.on("monitoring.scrape.enabled");
        let kind = str_at(&r.values, "monitoring.scrape.kind");
        assert_eq!(count("PodMonitor"), usize::from(scrape && kind == "PodMonitor"), "{}: PodMonitor", r.file);
        assert_eq!(
            count("ServiceMonitor"),
            usize::from(scrape && kind == "ServiceMonitor"),
            "{}: ServiceMonitor",
            r.file
        );
        for m in r.all("PodMonitor").into_iter().chain(r.all("ServiceMonitor")) {
            let endpoints = if kind == "PodMonitor" { "spec.podMetricsEndpoints" } else { "spec.endpoints" };
            assert_eq!(str_at(get(m, endpoints), "0.port"), "http", "{}: monitor port", r.file);
            assert_eq!(str_at(get(m, endpoints), "0.path"), "/metrics", "{}: monitor path", r.file);
            for (k, v) in r.v("monitoring.scrape.labels").as_mapping().into_iter().flatten() {
                assert_eq!(key(get(m, "metadata.labels"), k.as_str().unwrap()), v, "{}: monitor label", r.file);
            }
        }

        let rules = r.all("PrometheusRule");
        assert_eq!(rules.len(), usize::from(r.on("monitoring.prometheusRule.enabled")), "{}: PrometheusRule", r.file);
        if let Some(pr) = rules.first() {
            let disabled = strings(r.v("monitoring.prometheusRule.disabledAlerts"));
            let base = str_at(&r.values, "monitoring.prometheusRule.runbookBaseUrl").trim_end_matches('/');
            let mut seen = Vec::new();
            for g in seq(get(pr, "spec.groups")) {
                for rule in seq(get(g, "rules")) {
                    let alert = str_at(rule, "alert");
                    seen.push(alert.to_owned());
                    assert_eq!(str_at(rule, "annotations.runbook_url"), format!("{base}/{alert}.md"), "{}", r.file);
                    for (k, v) in r.v("monitoring.prometheusRule.ruleLabels").as_mapping().into_iter().flatten() {
                        assert_eq!(key(get(rule, "labels"), k.as_str().unwrap()), v, "{}: rule label", r.file);
                    }
                    assert!(!str_at(rule, "labels.severity").is_empty(), "{}: {alert} lost its severity", r.file);
                }
            }
            assert_eq!(seen.len(), alert_count - disabled.len(), "{}: alerts in the PrometheusRule: {seen:?}", r.file);
            assert!(disabled.iter().all(|d| !seen.contains(d)), "{}: disabled alerts rendered", r.file);
            // The rendered groups are still rules promtool accepts.
            let file = TempPath::new(&format!("rendered-rules-{}", r.file));
            fs::write(&file.0, serde_yaml::to_string(get(pr, "spec")).unwrap()).unwrap();
            let (ok, out, err) = run(Command::new(promtool()).args(["check", "rules"]).arg(&file.0));
            assert!(ok, "{}: the rendered PrometheusRule fails promtool check rules:\n{out}{err}", r.file);
        }

        let label_key = str_at(&r.values, "monitoring.dashboards.labelKey");
        let dashboards: Vec<_> =
            r.all("ConfigMap").into_iter().filter(|c| !key(get(c, "metadata.labels"), label_key).is_null()).collect();
        if r.on("monitoring.dashboards.enabled") {
            assert_eq!(dashboards.len(), dashboard_files().len(), "{}: one ConfigMap per dashboard", r.file);
            let ns = str_at(&r.values, "monitoring.dashboards.namespace");
            for c in &dashboards {
                assert_eq!(str_at(c, "metadata.namespace"), if ns.is_empty() { NAMESPACE } else { ns }, "{}", r.file);
                let value = str_at(&r.values, "monitoring.dashboards.labelValue");
                assert_eq!(
                    key(get(c, "metadata.labels"), label_key).as_str().unwrap_or_default(),
                    value,
                    "{}: sidecar label",
                    r.file
                );
                for (file, json) in get(c, "data").as_mapping().into_iter().flatten() {
                    let original: serde_json::Value =
                        serde_json::from_str(&read(&chart().join("files/dashboards").join(file.as_str().unwrap())))
                            .unwrap();
                    let shipped: serde_json::Value = serde_json::from_str(json.as_str().unwrap()).unwrap();
                    assert_eq!(shipped, original, "{}: dashboard {file:?} changed on the way", r.file);
                }
            }
        } else {
            assert!(dashboards.is_empty(), "{}: dashboards rendered while disabled", r.file);
        }

        let scaled: Vec<&str> = seq(r.v("dispatchers.groups"))
            .iter()
            .filter(|g| r.on("keda.enabled") && get(g, "keda.enabled").as_bool() == Some(true))
            .map(|g| str_at(g, "name"))
            .collect();
        assert_eq!(count("ScaledObject"), scaled.len(), "{}: ScaledObjects", r.file);
        for g in scaled {
            let so = r.one("ScaledObject", &format!("{RELEASE}-dispatcher-{g}"));
            assert_eq!(str_at(so, "spec.scaleTargetRef.name"), format!("{RELEASE}-dispatcher-{g}"), "{}", r.file);
            let trigger = get(so, "spec.triggers.0");
            assert_eq!(str_at(trigger, "type"), "prometheus", "{}", r.file);
            let query = str_at(trigger, "metadata.query");
            assert!(query.contains("highwater_consumer_lag_events") && query.contains("__shared__"), "{query}");
            assert!(query.contains(&format!("pod=~\"{RELEASE}-dispatcher-{g}-")), "{}: query {query}", r.file);
        }

        let groups = seq(r.v("dispatchers.groups")).len();
        let pdbs = usize::from(r.on("operator.enabled") && r.on("operator.podDisruptionBudget.enabled"))
            + if r.on("dispatchers.podDisruptionBudget.enabled") { groups } else { 0 };
        assert_eq!(count("PodDisruptionBudget"), pdbs, "{}: PodDisruptionBudgets", r.file);
        let policies = if r.on("networkPolicy.enabled") { 2 + usize::from(r.on("operator.enabled")) } else { 0 };
        assert_eq!(count("NetworkPolicy"), policies, "{}: NetworkPolicies", r.file);
        for np in r.all("NetworkPolicy") {
            assert_eq!(strings(get(np, "spec.policyTypes")), ["Ingress"], "{}", r.file);
        }

        let cronjobs = r.all("CronJob");
        assert_eq!(cronjobs.len(), usize::from(r.on("retention.enabled")), "{}: retention CronJob", r.file);
        if let Some(cj) = cronjobs.first() {
            assert_eq!(get(cj, "spec.schedule"), r.v("retention.schedule"), "{}", r.file);
            assert_eq!(str_at(cj, "spec.concurrencyPolicy"), "Forbid", "{}", r.file);
            let args = strings(get(cj, "spec.jobTemplate.spec.template.spec.containers.0.args"));
            assert_eq!(args[..2], ["events", "prune"], "{}: {args:?}", r.file);
            let days = get(&r.values, "retention.olderThanDays").as_u64().unwrap();
            assert!(args.contains(&format!("--older-than={days}")), "{}: {args:?}", r.file);
            if r.on("retention.allStreamTypes") {
                assert!(args.contains(&"--all-stream-types".to_owned()), "{}: {args:?}", r.file);
            } else {
                for t in strings(r.v("retention.streamTypes")) {
                    assert!(args.contains(&format!("--stream-type={t}")), "{}: {args:?}", r.file);
                }
            }
        }
    }
}

#[test]
fn the_chart_refuses_missing_or_contradicting_values_with_the_fix() {
    let cases: [(&[&str], &str); 6] = [
        (&[], "database.existingSecret is required"),
        (&["--set", "database.existingSecret=db", "--set", "bogus=1"], "additional properties 'bogus' not allowed"),
        (&["--set", "database.existingSecret=db", "--set", "retention.enabled=true"], "retention.streamTypes"),
        (
            &[
                "--set",
                "database.existingSecret=db",
                "--set",
                "dispatchers.groups[0].name=a",
                "--set",
                "dispatchers.groups[1].name=a",
            ],
            "listed twice",
        ),
        (&["--set", "database.existingSecret=db", "--set", "migrations.owner=both"], "migrations"),
        (
            &[
                "--set",
                "database.existingSecret=db",
                "--set",
                "migrations.owner=operator",
                "--set",
                "operator.enabled=false",
            ],
            "migrations.owner=operator needs operator.enabled=true",
        ),
    ];
    for (args, message) in cases {
        match helm_template(args) {
            Ok(_) => panic!("helm template {args:?} rendered; expected a refusal containing {message:?}"),
            Err(e) => assert!(e.contains(message), "helm template {args:?}: expected {message:?} in:\n{e}"),
        }
    }
}

#[test]
fn notes_show_an_event_consumer_and_how_to_watch_lag() {
    // `helm template` does not render NOTES.txt: render it through `tpl` in a copy of the chart.
    let copy = TempPath::new("notes-chart");
    let status = Command::new("cp").arg("-r").arg(chart()).arg(&copy.0).status().expect("cp");
    assert!(status.success(), "copying the chart");
    fs::copy(copy.0.join("templates/NOTES.txt"), copy.0.join("notes.txt")).unwrap();
    fs::write(
        copy.0.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ tpl (.Files.Get \"notes.txt\") . | quote }}\n",
    )
    .unwrap();
    let (ok, out, err) = run(Command::new(helm())
        .args(["template", RELEASE])
        .arg(&copy.0)
        .args(["--namespace", NAMESPACE, "--show-only", "templates/zz-notes.yaml"])
        .args(["--set", "database.existingSecret=db"]));
    assert!(ok, "rendering NOTES.txt:\n{err}");
    let doc: Value = serde_yaml::from_str(&out).unwrap();
    let notes = str_at(&doc, "data.notes");
    for needle in ["kind: EventConsumer", "kubectl get ec", "highwater consumer top", "highwater.dev/restart"] {
        assert!(notes.contains(needle), "NOTES.txt lacks {needle:?}:\n{notes}");
    }
    let example = notes.split("kubectl apply -n highwater-system -f -\n").nth(1).and_then(|s| s.split("YAML\n").next());
    let ec: Value = serde_yaml::from_str(example.expect("the example EventConsumer in NOTES.txt")).unwrap();
    assert_eq!(str_at(&ec, "apiVersion"), "highwater.dev/v1alpha1");
    assert_eq!(str_at(&ec, "spec.group"), "default");
}
