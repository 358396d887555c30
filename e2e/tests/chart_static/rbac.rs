//! The operator's RBAC and leader election.
use super::*;

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
        ("highwater.dev/eventtypes", set(&["get", "list", "watch"])),
        ("highwater.dev/eventtypes/status", set(&["get", "patch", "update"])),
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
