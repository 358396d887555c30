//! The chart's CRD copy and the observability documentation.
use super::*;

#[test]
fn the_charts_crd_copies_equal_crds_yaml() {
    for file in CRD_FILES {
        let source = read(&root().join("crds").join(file));
        let copy = read(&chart().join("files/crds").join(file));
        assert!(
            source == copy,
            "charts/highwater/files/crds/{file} differs from crds/{file}\n  \
             fix: cp crds/{file} charts/highwater/files/crds/{file}"
        );
    }
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
