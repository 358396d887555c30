//! The chart's monitoring, proven against a real Prometheus: `helm install` of charts/highwater on
//! the e2e control plane with every monitoring object on (PodMonitor, PrometheusRule, dashboard
//! ConfigMaps, validated by the Prometheus Operator's CRDs), the operator and two dispatchers run
//! as real processes by the pod runner, and a real Prometheus scrapes them with the targets and
//! target labels the Prometheus Operator would make of the installed PodMonitor and evaluates the
//! installed PrometheusRule (its `for:` durations shortened to 5 s, the one change).
//!
//! Scenarios make every panel have something to show: a per-instance consumer that delivers
//! (`live`), a partitioned consumer shared by the dispatchers (`parts`), a consumer with maxAttempts 1 and a failing SQL statement (`poison`: failures, a dead
//! shard), a slow consumer created behind a backlog of hour-old events (`backlog`: lag in events
//! and seconds that falls, time to catch up, the lag alert) and a scale-down from 2 dispatchers to
//! 1 (the operator's shard removal). Then every query of both dashboards, as installed, with the
//! template variables filled in as Grafana does, runs through the HTTP API (time series panels as
//! range queries over the test, instant ones at the end) and must return at least one number that
//! is not NaN; every template variable query returns values; every alert expression parses and
//! evaluates without error; HighwaterConsumerLagHigh and HighwaterShardDead fire.
//!
//! Needs `highwater` and `highwater-operator` built (`cargo build --bins -p highwater -p
//! highwater-operator`), prometheus (Debian's package) and Go (for the Prometheus Operator's CRDs).
use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use highwater::{
    db,
    embedded::{EmbeddedOptions, EmbeddedPostgres},
    event_types,
    events::{self, NewEvent},
};
use highwater_e2e::{
    ControlPlane, PodRunner, helm,
    pod_monitor::PodMonitor,
    prometheus::{self, Prometheus},
    wait_for,
};
use serde_json::{Value, json};
use sqlx::PgPool;

const NS: &str = "hw";
const RELEASE: &str = "hw";
/// The chart's fullname: the PodMonitor's and PrometheusRule's name.
const FULLNAME: &str = "hw-highwater";
const OPERATOR: &str = "hw-highwater-operator";
const DISPATCHERS: &str = "hw-highwater-dispatcher-default";
/// Prometheus's scrape and rule evaluation interval (the chart's monitoring.scrape.interval).
const SCRAPE: &str = "1s";
/// Grafana's `$__rate_interval`: max(`$__interval` + scrape interval, 4 × scrape interval).
const RATE_INTERVAL: &str = "4s";
/// Step of the range queries, Grafana's `$__interval`.
const STEP: Duration = Duration::from_secs(1);
/// The rules' `for:` in the test's copy (the chart's are minutes long).
const TEST_FOR: &str = "5s";
/// Events of the backlog: at ~4 events/s the `backlog` consumer drains them in well over a
/// minute, so the 30 s subquery of "Time to catch up" sees the lag fall across two of its steps
/// wherever they fall.
const BACKLOG: usize = 360;

const CONSUMERS: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live, namespace: hw}
spec:
  delivery: PerInstance
  sink: {log: {target: stderr}}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: poison, namespace: hw}
spec:
  delivery: Shared
  maxAttempts: 1
  sink: {sql: {statement: 'SELECT 1/0'}}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: parts, namespace: hw}
spec:
  delivery: Shared
  partitions: 2
  sink: {log: {target: stderr}}
"#;

/// Created once the backlog is in: a shared consumer starts from the earliest event.
const BACKLOG_CONSUMER: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: backlog, namespace: hw}
spec:
  delivery: Shared
  batchSize: 5
  sink: {sql: {statement: 'SELECT $2 FROM pg_sleep(0.25)'}}
"#;

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

async fn kubectl_apply(cp: &ControlPlane, yaml: &str) {
    let out = cp.kubectl_with_input(["apply", "-f", "-"], yaml).await.unwrap();
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
}

async fn kubectl_json(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-n", NS, "-o", "json"]);
    serde_json::from_str(&cp.kubectl_ok(all).await.unwrap()).unwrap()
}

async fn append(pool: &PgPool, stream: &str, n: usize) -> i64 {
    let mut last = 0;
    let mut conn = pool.acquire().await.unwrap();
    for i in 0..n {
        let e = NewEvent::new(stream, &format!("s-{i}"), "order.placed", json!({"n": i}));
        last = events::append(&mut conn, &e).await.unwrap();
    }
    last
}

/// consumer -> the lowest cursor of its shards.
async fn cursor(pool: &PgPool, consumer: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT min(cursor_id) FROM highwater.consumer_shards WHERE consumer = $1")
        .bind(consumer)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn diagnostics(runner: &PodRunner, prom: Option<&Prometheus>) -> String {
    let mut text = format!("pod logs in {}\n", runner.logs_dir().display());
    for pod in runner.alive(NS) {
        let log = runner.log(NS, &pod);
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        text += &format!("--- {pod} (last lines) ---\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    if let Some(p) = prom {
        text += &format!("--- prometheus (last lines) ---\n{}\n", p.log_tail(20));
    }
    text
}

/// The installed PrometheusRule's groups as a Prometheus rule file, every `for:` set to
/// [`TEST_FOR`].
fn rule_file(rule: &Value) -> (Value, Vec<Value>) {
    let mut groups = rule["spec"]["groups"].clone();
    let mut rules = Vec::new();
    for g in groups.as_array_mut().expect("spec.groups") {
        for r in g["rules"].as_array_mut().expect("rules") {
            if r.get("for").is_some() {
                r["for"] = json!(TEST_FOR);
            }
            rules.push(r.clone());
        }
    }
    (json!({"groups": groups}), rules)
}

/// A dashboard expression with Grafana's template variables replaced.
fn fill(expr: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = expr.to_owned();
    // Longest names first: `$__interval` is a prefix of nothing else here, `$__range` neither, but
    // `${x}` and `$x` forms both occur in dashboards.
    let mut names: Vec<&&str> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        out = out.replace(&format!("${{{name}}}"), &vars[name]).replace(&format!("${name}"), &vars[name]);
    }
    let left = out
        .char_indices()
        .any(|(i, c)| c == '$' && out[i + 1..].starts_with(|n: char| n.is_ascii_alphabetic() || n == '_' || n == '{'));
    assert!(!left, "a template variable is left in {out:?} (from {expr:?})");
    out
}

/// Values of a series that are numbers (NaN, as histogram_quantile gives without observations, is
/// no data).
fn numbers(series: &[Value]) -> usize {
    let sample = |v: &Value| v[1].as_str().is_some_and(|s| s.parse::<f64>().is_ok_and(|f| !f.is_nan()));
    series
        .iter()
        .map(|s| {
            let mut n = s["values"].as_array().map(|vs| vs.iter().filter(|v| sample(v)).count()).unwrap_or(0);
            if s.get("value").is_some_and(sample) {
                n += 1;
            }
            n
        })
        .sum()
}

/// The `highwater_*` metric names an expression reads.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names: Vec<String> = expr
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("highwater_"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Panels of a dashboard, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// `label_values(selector, label)` -> (selector, label).
fn label_values_query(q: &str) -> (String, String) {
    let inner = q.trim().strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')).expect("label_values(...)");
    let (selector, label) = inner.rsplit_once(',').expect("label_values(selector, label)");
    (selector.trim().to_owned(), label.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_installed_monitoring_works_against_a_real_prometheus() {
    let programs = highwater_e2e::pod_runner::built_programs();
    let crds = prometheus::operator_crds().await.unwrap();
    let cp = ControlPlane::builder().controller_manager().kwok().start().await.expect("control plane");
    let pg = EmbeddedPostgres::start(EmbeddedOptions::default()).await.expect("postgres");
    let url = pg.url();
    let pool = db::connect(&url, 5).await.unwrap();
    db::migrate(&pool).await.unwrap();
    event_types::register(&pool, "order.placed", None, None).await.unwrap();
    let runner = Arc::new(PodRunner::start(&cp, &programs, &cp.dir().join("pods")).unwrap());

    // The Prometheus Operator's CRDs, so the API server validates the chart's monitoring objects.
    for crd in ["podmonitors", "servicemonitors", "prometheusrules"] {
        let file = crds.join(format!("monitoring.coreos.com_{crd}.yaml"));
        cp.kubectl_ok(["apply", "--server-side", "-f", file.to_str().unwrap()]).await.unwrap();
    }
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd", "--all", "--timeout=60s"]).await.unwrap();
    cp.kubectl_ok(["create", "namespace", NS]).await.unwrap();
    cp.kubectl_ok(["label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"]).await.unwrap();
    cp.kubectl_ok(["create", "secret", "generic", "hw-db", "-n", NS, &format!("--from-literal=url={url}")])
        .await
        .unwrap();
    let chart = helm::chart_dir();
    let sets = [
        "database.existingSecret=hw-db",
        "migrations.owner=none",
        "dispatchers.groups[0].name=default",
        "dispatchers.groups[0].replicas=2",
        "dispatchers.metricsInterval=1s",
        "monitoring.scrape.enabled=true",
        "monitoring.scrape.kind=PodMonitor",
        &format!("monitoring.scrape.interval={SCRAPE}"),
        &format!("monitoring.scrape.scrapeTimeout={SCRAPE}"),
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboards.enabled=true",
    ];
    let mut args = vec!["install", RELEASE, chart.to_str().unwrap(), "--namespace", NS];
    for s in &sets {
        args.extend(["--set", s]);
    }
    helm::run(cp.kubeconfig_path(), args).await.unwrap();

    // The monitoring objects are installed.
    let rule = kubectl_json(&cp, &["get", "prometheusrule", FULLNAME]).await;
    let dashboards = kubectl_json(&cp, &["get", "configmaps", "-l", "grafana_dashboard=1"]).await;
    let dashboards: Vec<(String, Value)> = dashboards["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|cm| cm["data"].as_object().unwrap().iter())
        .map(|(file, text)| (file.clone(), serde_json::from_str(text.as_str().unwrap()).unwrap()))
        .collect();
    assert_eq!(dashboards.len(), 2, "both dashboards are installed as ConfigMaps");
    let monitor = PodMonitor::get(&cp.client(), NS, FULLNAME).await.unwrap();
    assert_eq!(monitor.interval, SCRAPE);

    // Prometheus, with the PodMonitor's targets and the PrometheusRule's rules.
    let dir = cp.dir().join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let file_sd = dir.join("targets.json");
    prometheus::write_targets(&file_sd, &[]).unwrap();
    let (rules_doc, rules) = rule_file(&rule);
    std::fs::write(dir.join("rules.json"), serde_json::to_vec_pretty(&rules_doc).unwrap()).unwrap();
    let config = json!({
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
        "rule_files": [dir.join("rules.json").display().to_string()],
        "scrape_configs": [monitor.scrape_config(&file_sd)],
    });
    let job = monitor.job();
    let refresher = monitor.refresh(cp.client(), runner.clone(), file_sd.clone());
    let prom = Prometheus::start(&dir, &serde_json::to_string_pretty(&config).unwrap()).await.unwrap();
    let start = now();

    // The operator and the two dispatchers run and are scraped, with the PodMonitor's labels.
    let scraped = wait_for("3 healthy scrape targets", Duration::from_secs(90), || async {
        let targets = prom.targets().await.map_err(|e| e.to_string())?;
        let up = targets.iter().filter(|t| t["health"] == "up").count();
        Ok::<_, String>((targets.len() == 3 && up == 3).then_some(targets))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    for t in &scraped {
        let labels = &t["labels"];
        assert_eq!(labels["job"], job.as_str(), "{t}");
        assert_eq!(labels["namespace"], NS, "{t}");
        assert_eq!(labels["endpoint"], "http", "{t}");
        let pod = labels["pod"].as_str().unwrap();
        let container = if pod.starts_with(OPERATOR) { "operator" } else { "dispatcher" };
        assert!(pod.starts_with(OPERATOR) || pod.starts_with(DISPATCHERS), "{t}");
        assert_eq!(labels["container"], container, "{t}");
    }

    // Scenarios: `live` delivers on both dispatchers, `poison` dies on its first event, `parts`
    // has a partition on each dispatcher.
    cp.kubectl_ok(["wait", "--for", "condition=established", "crd/eventconsumers.highwater.dev", "--timeout=60s"])
        .await
        .unwrap();
    kubectl_apply(&cp, CONSUMERS).await;
    wait_for("2 live shards, a poison shard and 2 partitions of parts", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.consumer_shards")
            .fetch_one(&pool)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((n == 5).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    // Counters start at 0 once a shard is seen: the first failure must find them scraped, or
    // rate() has no increase to show.
    wait_for("poison's failure counter scraped at 0", Duration::from_secs(60), || async {
        let series = prom.query("highwater_events_failed_total{consumer=\"poison\"}", None).await;
        Ok::<_, String>(series.map_err(|e| e.to_string())?.len().ge(&1).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    let first = append(&pool, "first", 1).await;
    let last = append(&pool, "backlog", BACKLOG).await;
    wait_for("live to deliver the backlog", Duration::from_secs(60), || async {
        Ok::<_, String>((cursor(&pool, "live").await >= Some(last)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    let key = format!("\"idempotency_key\":\"live:{last}\"");
    for pod in runner.alive(NS).iter().filter(|p| p.starts_with(DISPATCHERS)) {
        assert!(runner.log(NS, pod).contains(&key), "dispatcher {pod} delivered event {last} to its log sink");
    }
    let dead: String =
        sqlx::query_scalar("SELECT status::text FROM highwater.consumer_shards WHERE consumer = 'poison'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(dead, "dead", "poison halted on event {first}");

    // The backlog has waited an hour when `backlog` is created: lag in seconds over the alert's
    // 10 minutes, then falling as the slow sink drains it.
    sqlx::query(
        "UPDATE highwater.events SET created_at = created_at - interval '1 hour' WHERE stream_type = 'backlog'",
    )
    .execute(&pool)
    .await
    .unwrap();
    kubectl_apply(&cp, BACKLOG_CONSUMER).await;
    let created = now();
    let firing = |name: &'static str, consumer: &'static str| {
        let prom = &prom;
        async move {
            let alerts = prom.alerts().await.map_err(|e| e.to_string())?;
            let found = alerts.iter().any(|a| {
                a["labels"]["alertname"] == name && a["labels"]["consumer"] == consumer && a["state"] == "firing"
            });
            Ok::<_, String>(found.then_some(()))
        }
    };
    wait_for("HighwaterShardDead to fire for poison", Duration::from_secs(60), || {
        firing("HighwaterShardDead", "poison")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    wait_for("HighwaterConsumerLagHigh to fire for backlog", Duration::from_secs(60), || {
        firing("HighwaterConsumerLagHigh", "backlog")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    let behind = cursor(&pool, "backlog").await.unwrap_or(0);
    assert!(behind < last, "the lag alert fired while backlog was still behind (cursor {behind} < {last})");

    // A scale-down from 2 dispatchers to 1: the operator removes the gone pod's shard.
    cp.kubectl_ok(["scale", "deployment", DISPATCHERS, "-n", NS, "--replicas=1"]).await.unwrap();
    wait_for("the gone pod's live shard removed", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.consumer_shards WHERE consumer = 'live'")
            .fetch_one(&pool)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((n == 1).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));

    wait_for("backlog to catch up", Duration::from_secs(150), || async {
        Ok::<_, String>((cursor(&pool, "backlog").await >= Some(last)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&runner, Some(&prom))));
    let drained = now();
    println!("backlog of {BACKLOG} events drained in {:.0}s", drained - created);
    assert!(drained - created > 60.0, "the backlog must take over a minute to drain (two 30 s subquery steps)");
    // Two more scrapes and rule evaluations after the last change.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = now();

    // Every alert expression parses and evaluates; every rule is healthy.
    for r in &rules {
        let name = r["alert"].as_str().unwrap_or_default();
        prom.query(r["expr"].as_str().unwrap(), None).await.unwrap_or_else(|e| panic!("alert {name}: {e:#}"));
    }
    let loaded = prom.rules().await.unwrap();
    assert_eq!(loaded.len(), rules.len(), "Prometheus loaded every rule");
    for r in &loaded {
        assert_eq!(r["health"], "ok", "rule {} evaluates without error: {}", r["name"], r["lastError"]);
    }

    // Every dashboard query, with the variables filled in, returns data.
    let range = format!("{}s", (end - start).ceil() as u64);
    let mut checked = 0;
    for (file, d) in &dashboards {
        let mut vars: BTreeMap<&str, String> = BTreeMap::new();
        vars.insert("__rate_interval", RATE_INTERVAL.to_owned());
        vars.insert("__interval", format!("{}s", STEP.as_secs()));
        vars.insert("__range", range.clone());
        let mut choices: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for v in d["templating"]["list"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            if v["type"] == "datasource" {
                vars.insert("datasource", "prometheus".to_owned());
                continue;
            }
            let q = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap();
            let (selector, label) = label_values_query(q);
            let selector = fill(&selector, &vars);
            let values = prom.label_values(&selector, &label, start, end).await.unwrap();
            assert!(!values.is_empty(), "{file}: variable {name} ({q}) has no values");
            // The namespace is picked; a multi-value variable with All sends its all-value; a
            // single-value one is tried with each of its values below.
            let value = if name == "namespace" {
                assert!(values.iter().any(|v| v == NS), "{file}: namespace values {values:?}");
                NS.to_owned()
            } else if v["includeAll"] == true {
                v["allValue"].as_str().unwrap_or(".*").to_owned()
            } else {
                choices.insert(name.to_owned(), values.clone());
                values[0].clone()
            };
            vars.insert(name, value);
        }
        for p in panels(d) {
            let title = p["title"].as_str().unwrap_or_default();
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().expect("a Prometheus target with an expr");
                // A single-value variable (the consumer dashboard's consumer) is tried with each of
                // its values: the panel shows data for some consumer a user can pick.
                let mut tried = Vec::new();
                let mut found = 0;
                let options: Vec<BTreeMap<&str, String>> = if choices.is_empty() {
                    vec![vars.clone()]
                } else {
                    choices
                        .iter()
                        .flat_map(|(name, values)| {
                            values.iter().map(|value| {
                                let mut v = vars.clone();
                                v.insert(name.as_str(), value.clone());
                                v
                            })
                        })
                        .collect()
                };
                for v in options {
                    let q = fill(expr, &v);
                    let series = if t["instant"] == true {
                        prom.query(&q, Some(end)).await
                    } else {
                        prom.query_range(&q, start, end, STEP).await
                    }
                    .unwrap_or_else(|e| panic!("{file}: panel {title:?} {}: {e:#}", t["refId"]));
                    found = numbers(&series);
                    tried.push(q);
                    if found > 0 {
                        break;
                    }
                }
                if found == 0 {
                    let mut seen = String::new();
                    for name in metric_names(expr) {
                        let series = prom.query(&format!("last_over_time({name}[{range}])"), Some(end)).await;
                        seen += &format!("{name}: {series:?}\n");
                    }
                    panic!(
                        "{file}: panel {title:?} query {} returns no data; tried:\n{}\nthe metrics it reads:\n{seen}",
                        t["refId"],
                        tried.join("\n")
                    );
                }
                checked += 1;
            }
        }
    }
    println!("{checked} dashboard queries and {} alert expressions evaluated", rules.len());
    assert!(checked >= 30, "{checked} queries");
    refresher.abort();
    drop(prom);
    drop(runner);
}
