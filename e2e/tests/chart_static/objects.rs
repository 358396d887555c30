//! Objects owned once or rendered only when enabled, values refused with the fix, the notes.
use super::*;

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
fn crds_carry_the_keep_policy_and_the_crds_of_crds_yaml() {
    let sources: Vec<Value> = CRD_FILES.iter().map(|f| yaml(&root().join("crds").join(f))).collect();
    for r in rendered() {
        let crds = r.all("CustomResourceDefinition");
        if !r.on("crds.create") {
            assert!(crds.is_empty(), "{}: crds.create=false renders no CRD", r.file);
            continue;
        }
        assert_eq!(crds.len(), CRD_FILES.len(), "{}: one CRD per file of crds/", r.file);
        for (file, source) in CRD_FILES.iter().zip(&sources) {
            let name = str_at(source, "metadata.name");
            let crd = crds
                .iter()
                .find(|c| str_at(c, "metadata.name") == name)
                .unwrap_or_else(|| panic!("{}: no CRD {name}", r.file));
            assert_eq!(
                str_at(crd, "metadata.annotations.[helm.sh/resource-policy]"),
                "keep",
                "{}: keep policy",
                r.file
            );
            assert!(
                normalized(get(crd, "spec")) == normalized(get(source, "spec")),
                "{}: the rendered CRD {name}'s spec differs from crds/{file}",
                r.file
            );
        }
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
        let policies = if r.on("networkPolicy.enabled") {
            2 + usize::from(r.on("operator.enabled")) + usize::from(r.on("console.enabled"))
        } else {
            0
        };
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
            let days = get(&r.values, "retention.olderThanDays").as_u64().unwrap();
            assert!(args.contains(&format!("--older-than={days}")), "{}: {args:?}", r.file);
            if r.v("retention.mode") == "dropPartitions" {
                assert_eq!(args, ["events", "drop-partitions", &format!("--older-than={days}")], "{}", r.file);
            } else if r.on("retention.allStreamTypes") {
                assert_eq!(args[..2], ["events", "prune"], "{}: {args:?}", r.file);
                assert!(args.contains(&"--all-stream-types".to_owned()), "{}: {args:?}", r.file);
            } else {
                assert_eq!(args[..2], ["events", "prune"], "{}: {args:?}", r.file);
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
