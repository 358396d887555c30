//! The Grafana dashboards: units, descriptions, variables, rate intervals and valid PromQL.
use super::*;

pub(crate) fn dashboards() -> Vec<(PathBuf, serde_json::Value)> {
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
pub(crate) fn panels(d: &serde_json::Value) -> Vec<&serde_json::Value> {
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
