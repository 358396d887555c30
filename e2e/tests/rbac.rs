//! What each ServiceAccount of the chart may do, asked of the real API server: `kubectl auth
//! can-i --list` for every account, in the release namespace and in another one, must show exactly
//! the rights docs/security.md lists (its RBAC table is parsed here), beyond what Kubernetes grants
//! every authenticated identity (measured on an account with no bindings). The dispatcher and the
//! migration Job have none, and their pods mount no token at all.
use std::collections::{BTreeMap, BTreeSet};

use highwater_e2e::{ControlPlane, helm};

/// (resource as kubectl prints it, verbs sorted).
type Rights = BTreeSet<(String, String)>;

/// The table of docs/security.md between its rbac markers: (account, scope) → rights.
fn documented() -> BTreeMap<(String, String), Rights> {
    let doc = std::fs::read_to_string(helm::chart_dir().join("../../docs/security.md")).unwrap();
    let table = doc
        .split("<!-- rbac:begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- rbac:end -->").next())
        .expect("docs/security.md has an RBAC table between <!-- rbac:begin --> and <!-- rbac:end -->");
    let mut out: BTreeMap<(String, String), Rights> = BTreeMap::new();
    for row in table.lines().filter(|l| l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [account, scope, resource, verbs] = cells[..] else { panic!("row {row:?} has not 4 cells") };
        let entry = out.entry((account.to_owned(), scope.to_owned())).or_default();
        if resource != "nothing" {
            entry.insert((resource.trim_matches('`').to_owned(), sorted(verbs.split(','))));
        }
    }
    out
}

fn sorted<'a>(verbs: impl Iterator<Item = &'a str>) -> String {
    let set: BTreeSet<&str> = verbs.map(str::trim).filter(|v| !v.is_empty()).collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// Resource rows of `kubectl auth can-i --list` (non-resource URL rows start with blanks).
fn parse(list: &str) -> Rights {
    list.lines()
        .skip(1)
        .filter(|l| !l.starts_with(' ') && !l.trim().is_empty())
        .map(|l| {
            let resource = l.split_whitespace().next().unwrap().to_owned();
            let verbs = l.rsplit_once('[').unwrap().1.trim_end().trim_end_matches(']');
            (resource, sorted(verbs.split(' ')))
        })
        .collect()
}

async fn can_i(cp: &ControlPlane, account: &str, ns: &str) -> Rights {
    let user = format!("--as=system:serviceaccount:{account}");
    parse(&cp.kubectl_ok(["auth", "can-i", "--list", &user, "-n", ns]).await.unwrap())
}

async fn apply(cp: &ControlPlane, manifests: &str) {
    let out = cp.kubectl_with_input(["apply", "-f", "-"], manifests).await.unwrap();
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
}

async fn render(cp: &ControlPlane, release: &str, ns: &str, extra: &[&str]) -> String {
    let chart = helm::chart_dir();
    let mut args = vec!["template", release, chart.to_str().unwrap(), "-n", ns, "--set", "database.existingSecret=db"];
    args.extend_from_slice(extra);
    helm::run(cp.kubeconfig_path(), args).await.unwrap()
}

/// Every pod template of the rendered chart: (kind/name, service account, mounts a token).
fn pod_templates(manifests: &str) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(manifests) {
        let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        let spec = match kind.as_str() {
            "Deployment" | "Job" => &v["spec"]["template"]["spec"],
            "CronJob" => &v["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => continue,
        };
        let name = format!("{kind}/{}", v["metadata"]["name"].as_str().unwrap());
        let sa = spec["serviceAccountName"].as_str().unwrap_or("default").to_owned();
        out.push((name, sa, spec["automountServiceAccountToken"].as_bool() != Some(false)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_account_has_exactly_the_documented_rights() {
    let doc = documented();
    let cp = ControlPlane::start().await.unwrap();
    for ns in ["hw", "other", "scoped", "apps"] {
        cp.kubectl_ok(["create", "namespace", ns]).await.unwrap();
    }
    // Release hw: the default, cluster-wide operator (retention on, so its CronJob is checked too).
    let cluster_wide =
        render(&cp, "hw", "hw", &["--set", "retention.enabled=true", "--set", "retention.allStreamTypes=true"]).await;
    apply(&cp, &cluster_wide).await;
    // Release sc: an operator that watches namespace `apps` only.
    let scoped =
        render(&cp, "sc", "scoped", &["--set", "crds.create=false", "--set", "operator.watchNamespace=apps"]).await;
    apply(&cp, &scoped).await;

    let baseline = can_i(&cp, "hw:nobody", "hw").await;
    assert!(baseline.iter().any(|(r, _)| r.starts_with("selfsubjectaccessreviews")), "{baseline:?}");
    let want = |account: &str, scopes: &[&str]| -> Rights {
        scopes
            .iter()
            .flat_map(|s| doc.get(&(account.to_owned(), (*s).to_owned())).cloned().unwrap_or_default())
            .collect()
    };
    let every = "every namespace";
    let release = "release namespace";
    // (account, namespace asked about, documented scopes that apply there)
    let cases: [(&str, &str, &str, Vec<&str>); 10] = [
        ("hw:hw-highwater-operator", "operator", "hw", vec![every, release]),
        ("hw:hw-highwater-operator", "operator", "other", vec![every]),
        ("hw:hw-highwater-dispatcher", "dispatcher", "hw", vec![every, release]),
        ("hw:hw-highwater-dispatcher", "dispatcher", "other", vec![every]),
        ("hw:hw-highwater-migrate", "migrate", "hw", vec![every, release]),
        ("hw:hw-highwater-migrate", "migrate", "other", vec![every]),
        // A scoped operator has the cluster-wide rights in the watched namespace only.
        ("scoped:sc-highwater-operator", "operator", "apps", vec![every]),
        ("scoped:sc-highwater-operator", "operator", "scoped", vec![release]),
        ("scoped:sc-highwater-operator", "operator", "other", vec![]),
        ("scoped:sc-highwater-dispatcher", "dispatcher", "apps", vec![every]),
    ];
    for (account, role, ns, scopes) in cases {
        let has: Rights = can_i(&cp, account, ns).await.difference(&baseline).cloned().collect();
        let expected = want(role, &scopes);
        assert_eq!(has, expected, "{account} in namespace {ns}: `kubectl auth can-i --list` vs docs/security.md");
    }
    assert!(!want("operator", &[every]).is_empty(), "the table lists the operator's rights");

    // Only the operator's pods carry a token; the others could not call the API server at all.
    let pods = pod_templates(&cluster_wide);
    assert!(pods.len() >= 4, "{pods:?}");
    for (name, sa, token) in pods {
        assert_eq!(token, sa == "hw-highwater-operator", "{name} (service account {sa}) mounts a token: {token}");
    }
}
