//! The alert rules: promtool accepts them and their unit tests, each alert is required, labelled,
//! annotated, has a runbook, and a unit test that fires and one that stays quiet.
use super::*;

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

pub(crate) fn alert_names() -> BTreeSet<String> {
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
