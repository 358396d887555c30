//! The web console in the chart (`console.*`, docs/console.md): nothing unless enabled; enabled,
//! one pod serving `highwater console` on its port with the database URL, its ops tokens mounted
//! from their Secret and the trusted proxy's header, a Service on that port, and NOTES with the
//! port-forward line (saying read-only when nothing lets a user act).
use super::*;

#[test]
fn the_console_renders_only_when_enabled_with_its_flags_tokens_and_service() {
    for r in rendered() {
        let consoles: Vec<_> = r
            .objects
            .iter()
            .filter(|o| str_at(o, "metadata.labels.[app.kubernetes.io/component]") == "console")
            .collect();
        if !r.on("console.enabled") {
            assert!(consoles.is_empty(), "{}: console objects while console.enabled is false", r.file);
            continue;
        }
        let name = format!("{RELEASE}-console");
        let d = r.one("Deployment", &name);
        assert_eq!(get(d, "spec.replicas").as_u64(), Some(1), "{}: one pod (sessions in memory)", r.file);
        let c = &seq(get(d, "spec.template.spec.containers"))[0];
        let port = r.v("console.port").as_u64().expect("console.port");
        assert_eq!(
            strings(get(c, "args")),
            vec!["console".to_owned(), format!("--listen=0.0.0.0:{port}")],
            "{}",
            r.file
        );
        let env: BTreeMap<String, &Value> =
            seq(get(c, "env")).iter().map(|e| (str_at(e, "name").to_owned(), e)).collect();
        assert!(env.contains_key("DATABASE_URL"), "{}: the database URL from its Secret", r.file);
        let secret = str_at(&r.values, "console.opsTokens.existingSecret");
        if !secret.is_empty() {
            let key = str_at(&r.values, "console.opsTokens.secretKey");
            assert_eq!(
                str_at(env["HIGHWATER_OPS_TOKENS_FILE"], "value"),
                format!("/etc/highwater/ops/{key}"),
                "{}",
                r.file
            );
            assert_eq!(
                str_at(&seq(get(d, "spec.template.spec.volumes"))[0], "secret.secretName"),
                secret,
                "{}",
                r.file
            );
        }
        let header = str_at(&r.values, "console.trustedUserHeader");
        if !header.is_empty() {
            assert_eq!(str_at(env["HIGHWATER_CONSOLE_TRUSTED_USER_HEADER"], "value"), header, "{}", r.file);
            let proxies = strings(r.v("console.trustedProxies")).join(",");
            assert_eq!(str_at(env["HIGHWATER_CONSOLE_TRUSTED_PROXY"], "value"), proxies, "{}", r.file);
        }
        assert_eq!(str_at(c, "readinessProbe.httpGet.path"), "/healthz", "{}", r.file);
        assert_eq!(get(d, "spec.template.spec.automountServiceAccountToken").as_bool(), Some(false), "{}", r.file);
        let s = r.one("Service", &name);
        assert_eq!(get(&seq(get(s, "spec.ports"))[0], "port").as_u64(), Some(port), "{}: Service port", r.file);
        assert_eq!(str_at(s, "spec.selector.[app.kubernetes.io/component]"), "console", "{}", r.file);
    }
    assert!(rendered().iter().any(|r| r.on("console.enabled")), "a CI values file enables the console");
}

/// The console acts on dead letters and shards, so with `networkPolicy.enabled` only
/// `consoleIngressFrom` reaches its port, and nothing when that is empty (port-forward bypasses
/// policies), unlike the metrics ports, which an empty `ingressFrom` leaves open.
#[test]
fn the_consoles_network_policy_admits_only_console_ingress_from() {
    let mut checked = 0;
    for r in rendered() {
        if !(r.on("console.enabled") && r.on("networkPolicy.enabled")) {
            continue;
        }
        let np = r.one("NetworkPolicy", &format!("{RELEASE}-console"));
        assert_eq!(str_at(np, "spec.podSelector.matchLabels.[app.kubernetes.io/component]"), "console", "{}", r.file);
        let from = seq(r.v("networkPolicy.consoleIngressFrom"));
        let ingress = seq(get(np, "spec.ingress"));
        if from.is_empty() {
            assert!(ingress.is_empty(), "{}: an empty consoleIngressFrom admits no pod: {ingress:?}", r.file);
        } else {
            assert_eq!(ingress.len(), 1, "{}", r.file);
            assert_eq!(seq(get(&ingress[0], "from")), from, "{}: the console's sources", r.file);
            assert_eq!(str_at(&seq(get(&ingress[0], "ports"))[0], "port"), "http", "{}", r.file);
        }
        checked += 1;
    }
    assert!(checked > 0, "a CI values file enables the console with networkPolicy");
}

#[test]
fn notes_show_the_consoles_port_forward_and_say_read_only_without_auth() {
    let notes = |extra: &[&str]| {
        let copy = TempPath::new("console-notes-chart");
        assert!(Command::new("cp").arg("-r").arg(chart()).arg(&copy.0).status().expect("cp").success());
        fs::copy(copy.0.join("templates/NOTES.txt"), copy.0.join("notes.txt")).unwrap();
        fs::write(
            copy.0.join("templates/zz-notes.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ tpl (.Files.Get \"notes.txt\") . | quote }}\n",
        )
        .unwrap();
        let mut cmd = Command::new(helm());
        cmd.args(["template", RELEASE]).arg(&copy.0);
        cmd.args([
            "--namespace",
            NAMESPACE,
            "--show-only",
            "templates/zz-notes.yaml",
            "--set",
            "database.existingSecret=db",
        ]);
        for e in extra {
            cmd.args(["--set", e]);
        }
        let (ok, out, err) = run(&mut cmd);
        assert!(ok, "rendering NOTES.txt:\n{err}");
        let doc: Value = serde_yaml::from_str(&out).unwrap();
        str_at(&doc, "data.notes").to_owned()
    };
    let off = notes(&[]);
    assert!(!off.contains("console"), "no console line while it is off:\n{off}");
    let forward = format!("kubectl port-forward -n {NAMESPACE} svc/{RELEASE}-console 8090:8090");
    let read_only = notes(&["console.enabled=true"]);
    assert!(read_only.contains(&forward) && read_only.contains("read-only"), "{read_only}");
    let acting = notes(&["console.enabled=true", "console.opsTokens.existingSecret=tokens"]);
    assert!(acting.contains(&forward) && !acting.contains("read-only"), "{acting}");
}
