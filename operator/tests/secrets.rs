//! The database password never leaves the operator: it runs with a password URL (real scram-sha-256
//! authentication) — first against an unreachable port, so it logs connection errors, then against
//! the database — and its logs, /metrics, /readyz, the EventConsumers' status and the Kubernetes
//! Events it writes are searched for the password.
mod common;

use std::time::Duration;

use common::*;
use highwater_testkit::TestCluster;

const CONSUMERS: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: hook, namespace: shop}
spec:
  delivery: Shared
  group: web
  sink: {webhook: {url: "http://127.0.0.1:9/hook", secret: {env: HOOK_SECRET}}}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live, namespace: shop}
spec:
  delivery: PerInstance
  group: web
  sink: {log: {target: stderr}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_password_stays_out_of_logs_status_events_and_metrics() {
    let w = world(&[]).await;
    let password: String = (0..24).map(|_| char::from(b'a' + rand::random_range(0..26u8))).collect();
    let url = w.pg.create_password_login("operator", &password).await.unwrap();
    let closed = highwater::embedded::free_port().unwrap();
    let unreachable = url.replace(&format!(":{}/", w.pg.port()), &format!(":{closed}/"));

    let mut seen: Vec<(String, String)> = Vec::new();
    let waiting = Operator::start_at(&w.cp, &unreachable, w.logs.path(), "op-down", &["--leader-election", "false"]);
    let ready = format!("http://127.0.0.1:{}/readyz", waiting.port);
    eventually("/readyz to answer 503 while the database is unreachable", Duration::from_secs(30), || async {
        reqwest::get(&ready).await.is_ok_and(|r| r.status() == 503)
    })
    .await;
    let answer = reqwest::get(&ready).await.unwrap().text().await.unwrap();
    seen.push(("/readyz without a database".into(), answer));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = waiting.log();
    assert!(log.contains("127.0.0.1"), "the operator said which database it cannot reach: {log}");
    seen.push(("the log of an operator without a database".into(), log));
    waiting.kill();

    let op = Operator::start_at(&w.cp, &url, w.logs.path(), "op-1", &["--leader-election", "true"]);
    let out = apply(&w, &[CONSUMERS, "---\n", &pod("web-0", "shop", "web")].concat()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eventually("both resources Ready", Duration::from_secs(60), || async {
        let out = w.cp.kubectl_ok(["get", "eventconsumers", "-n", "shop"]).await.unwrap_or_default();
        out.matches("Ready").count() == 2
    })
    .await;
    for args in [
        &["get", "eventconsumers", "-A", "-o", "yaml"][..],
        &["get", "events.events.k8s.io", "-A", "-o", "yaml"],
        &["get", "events", "-A", "-o", "yaml"],
        &["get", "leases", "-A", "-o", "yaml"],
    ] {
        seen.push((format!("kubectl {}", args.join(" ")), w.cp.kubectl_ok(args).await.unwrap()));
    }
    let events = &seen[1].1;
    assert!(events.contains("highwater"), "the operator wrote Events: {events}");
    let base = format!("http://127.0.0.1:{}", op.port);
    for path in ["/metrics", "/readyz", "/healthz"] {
        seen.push((path.into(), reqwest::get(format!("{base}{path}")).await.unwrap().text().await.unwrap()));
    }
    assert_eq!(op.stop(), Some(0));
    let log = std::fs::read_to_string(w.logs.path().join("op-1.log")).unwrap();
    seen.push(("the operator's log".into(), log));

    for (place, text) in &seen {
        assert!(!text.contains(&password), "the database password appears in {place}:\n{text}");
    }
}
