//! The rendered workloads: restricted pods, dispatcher groups and instance ids, no tokens.
use super::*;

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
        if r.on("console.enabled") {
            expected.insert("console".into());
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
            // Broker sink credentials: each entry an env var from its Secret key, each Secret of
            // `files` mounted read-only at /etc/highwater/sinks/<secretName>.
            for e in seq(r.v("dispatchers.sinkSecrets.env")) {
                let from = env.get(str_at(e, "name")).unwrap_or_else(|| panic!("{at}: sink secret env {e:?} missing"));
                assert_eq!(str_at(from, "secretKeyRef.name"), str_at(e, "secretName"), "{at}: {e:?}");
                assert_eq!(str_at(from, "secretKeyRef.key"), str_at(e, "secretKey"), "{at}: {e:?}");
            }
            for f in seq(r.v("dispatchers.sinkSecrets.files")) {
                let secret = str_at(f, "secretName");
                let volume = seq(get(pod, "spec.volumes"))
                    .iter()
                    .find(|v| str_at(v, "secret.secretName") == secret)
                    .unwrap_or_else(|| panic!("{at}: no volume of Secret {secret}"));
                let mount = seq(get(c, "volumeMounts"))
                    .iter()
                    .find(|m| str_at(m, "name") == str_at(volume, "name"))
                    .unwrap_or_else(|| panic!("{at}: Secret {secret} is not mounted"));
                assert_eq!(str_at(mount, "mountPath"), format!("/etc/highwater/sinks/{secret}"), "{at}");
                assert_eq!(get(mount, "readOnly").as_bool(), Some(true), "{at}");
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
