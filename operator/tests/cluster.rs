//! The operator against a real kube-apiserver and PostgreSQL: resources become rows, shards
//! follow pods (also across an operator restart), deletion policies, CEL rules enforced by the
//! API server, leader election.
mod common;

use std::time::{Duration, Instant};

use common::*;

const CONSUMERS: &str = r#"
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: live, namespace: shop}
spec:
  delivery: PerInstance
  group: web
  deletionPolicy: Retain
  sink: {log: {target: stderr}}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: orders, namespace: shop}
spec:
  delivery: Shared
  group: web
  sink: {sql: {statement: "SELECT 1"}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_become_rows_and_pod_shards_follow_pods() {
    let w = world(&[]).await;
    let op = Operator::start(&w, "op-1", true);
    let out = apply(&w, CONSUMERS).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let pool = w.pool.clone();
    eventually("both consumers' rows", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM highwater.consumers WHERE source LIKE 'kubernetes:shop/%'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            n == 2
        }
    })
    .await;
    assert_eq!(shards(&w.pool, "orders").await, vec![("__shared__".to_owned(), None)]);

    // Pods of the group get shards as soon as they exist; others do not.
    let pods = [
        pod("web-0", "shop", "web"),
        pod("web-1", "shop", "web"),
        pod("web-2", "shop", "web"),
        pod("api-0", "shop", "api"),
        pod("web-x", "default", "web"),
    ]
    .concat();
    let out = apply(&w, &pods).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pool = w.pool.clone();
    eventually("three pod shards", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move { shards(&pool, "live").await.len() == 3 }
    })
    .await;
    let mut expected = Vec::new();
    for p in ["web-0", "web-1", "web-2"] {
        expected.push((p.to_owned(), Some(uid(&w, "shop", p).await)));
    }
    assert_eq!(shards(&w.pool, "live").await, expected, "one shard per pod of the group, with the pod's uid");

    // A shard registered outside Kubernetes (no pod uid) is not the operator's to collect.
    let mut conn = w.pool.acquire().await.unwrap();
    highwater::shards::register(&mut conn, "live", "laptop", None).await.unwrap();
    drop(conn);

    // kubectl shows delivery, status and lag.
    let pool = w.pool.clone();
    let _ = pool;
    eventually("status on both resources", Duration::from_secs(30), || async {
        let out = w.cp.kubectl_ok(["get", "ec", "-n", "shop"]).await.unwrap();
        out.contains("Ready") && out.matches("Ready").count() == 2
    })
    .await;
    let table = w.cp.kubectl_ok(["get", "ec", "-n", "shop"]).await.unwrap();
    println!("{table}");
    let header = table.lines().next().unwrap();
    for col in ["NAME", "DELIVERY", "STATUS", "LAG", "AGE"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        table.lines().any(|l| l.starts_with("live") && l.contains("PerInstance") && l.contains("Ready")),
        "{table}"
    );

    // Scale-down: the deleted pods' shards go, quickly.
    let started = Instant::now();
    w.cp.kubectl_ok(["delete", "pod", "web-1", "web-2", "-n", "shop", "--wait=true"]).await.unwrap();
    let pool = w.pool.clone();
    eventually("the deleted pods' shards to go", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move { shards(&pool, "live").await.len() == 2 }
    })
    .await;
    println!("pod deletion to shard removal: {:?}", started.elapsed());
    eventually("a PodShardsRemoved event", Duration::from_secs(30), || async {
        let out = w
            .cp
            .kubectl_ok(["get", "events", "-n", "shop", "--field-selector", "reason=PodShardsRemoved", "-o", "name"])
            .await
            .unwrap_or_default();
        out.lines().count() >= 2
    })
    .await;
    let left: Vec<String> = shards(&w.pool, "live").await.into_iter().map(|s| s.0).collect();
    assert_eq!(left, vec!["laptop".to_owned(), "web-0".to_owned()]);

    // Pods deleted while the operator is down are cleaned up when it comes back.
    assert_eq!(op.stop(), Some(0), "clean exit on SIGTERM");
    w.cp.kubectl_ok(["delete", "pod", "web-0", "-n", "shop", "--wait=true"]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(shards(&w.pool, "live").await.len(), 2, "nobody removed it while the operator was down");
    let op = Operator::start(&w, "op-1", true);
    let pool = w.pool.clone();
    eventually("the shard of the pod deleted during the outage to go", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move { shards(&pool, "live").await.len() == 1 }
    })
    .await;
    assert_eq!(shards(&w.pool, "live").await[0].0, "laptop");

    // Deletion policies: Delete removes the rows, Retain keeps them disabled.
    w.cp.kubectl_ok(["delete", "ec", "orders", "live", "-n", "shop", "--wait=true", "--timeout=60s"]).await.unwrap();
    let names: Vec<String> =
        sqlx::query_scalar("SELECT name FROM highwater.consumers ORDER BY name").fetch_all(&w.pool).await.unwrap();
    assert_eq!(names, vec!["live".to_owned()], "orders deleted, live retained");
    assert_eq!(shard_statuses(&w.pool, "live").await, ["disabled"]);
    // The Retain disable is in the shard-change audit, by the operator, with why.
    let changes = highwater::ops::shard_changes(&w.pool, "live", 10).await.unwrap();
    let last = changes.first().expect("the Retain disable audited");
    assert_eq!((last.action.as_str(), last.changed_by.as_str()), ("disabled", "kubernetes:highwater-operator"));
    assert!(last.reason.as_deref().is_some_and(|r| r.contains("deletionPolicy: Retain")), "{last:?}");
    assert!(op.metric("highwater_operator_shards_removed_total").await.unwrap_or(0.0) >= 1.0);
    drop(op);
}

/// Each rule of the CRD, enforced by the API server itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_rejects_bad_resources_with_readable_messages() {
    let w = world(&[]).await;
    let ec = |name: &str, spec: &str| {
        format!(
            "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n{spec}\n"
        )
    };
    let cases = [
        ("two-sinks", "  delivery: Shared\n  sink: {log: {}, sql: {statement: x}}", "set exactly one sink"),
        ("no-sink", "  delivery: Shared\n  sink: {}", "set exactly one sink"),
        ("sse-shared", "  delivery: Shared\n  sink: {sse: {}}", "sink.sse needs delivery: PerInstance"),
        ("attempts", "  delivery: Shared\n  maxAttempts: 0\n  sink: {log: {}}", "spec.maxAttempts"),
        ("batch", "  delivery: Shared\n  batchSize: 20000\n  sink: {log: {}}", "spec.batchSize"),
        ("bad-group", "  delivery: Shared\n  group: Bad_Group\n  sink: {log: {}}", "spec.group"),
        ("dotted.name", "  delivery: Shared\n  sink: {log: {}}", "metadata.name must be a DNS-1123 label"),
        ("bad-delivery", "  delivery: Sometimes\n  sink: {log: {}}", "Unsupported value: \"Sometimes\""),
        (
            "kafka-and-log",
            "  delivery: Shared\n  sink: {log: {}, kafka: {brokers: [\"k:9092\"], topic: t}}",
            "set exactly one sink",
        ),
        (
            "bad-compression",
            "  delivery: Shared\n  sink: {kafka: {brokers: [\"k:9092\"], topic: t, compression: brotli}}",
            "Unsupported value: \"brotli\"",
        ),
        ("no-brokers", "  delivery: Shared\n  sink: {kafka: {brokers: [], topic: t}}", "spec.sink.kafka.brokers"),
        ("zero-partitions", "  delivery: Shared\n  partitions: 0\n  sink: {log: {}}", "spec.partitions"),
        ("many-partitions", "  delivery: Shared\n  partitions: 257\n  sink: {log: {}}", "spec.partitions"),
        (
            "split-instances",
            "  delivery: PerInstance\n  partitions: 4\n  sink: {log: {}}",
            "partitions above 1 need delivery: Shared",
        ),
    ];
    for (name, spec, needle) in cases {
        let out = apply(&w, &ec(name, spec)).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} was accepted");
        assert!(err.contains(needle), "{name}: {err}");
    }
    // The broker sinks' fields are part of the schema: full definitions are accepted.
    for (name, sink) in [
        (
            "relay-kafka",
            "{kafka: {brokers: [\"k:9092\"], topic: \"events.{streamType}\", key: streamId, value: envelope, \
             compression: lz4, tls: {caFile: /etc/ca.crt}, sasl: {mechanism: SCRAM-SHA-512, username: relay, \
             password: {env: KAFKA_PASSWORD}}, headers: {x-team: billing}, properties: {linger.ms: \"5\"}}}",
        ),
        (
            "relay-nats",
            "{nats: {servers: [\"nats://n:4222\"], subject: \"events.{streamType}.{eventType}\", username: relay, \
             password: {file: /etc/nats/password}}}",
        ),
    ] {
        let out = apply(&w, &ec(name, &format!("  delivery: Shared\n  sink: {sink}"))).await;
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Immutable fields, on update.
    let out = apply(&w, &ec("fixed", "  delivery: Shared\n  consumerName: fixed-orders\n  sink: {log: {}}")).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = apply(&w, &ec("fixed", "  delivery: PerInstance\n  consumerName: fixed-orders\n  sink: {log: {}}")).await;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("delivery is immutable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(&w, &ec("fixed", "  delivery: Shared\n  consumerName: other\n  sink: {log: {}}")).await;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("consumerName is immutable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(&w, &ec("fixed", "  delivery: Shared\n  sink: {log: {}}")).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("consumerName is immutable"), "removing it counts too");
    // Unknown fields are refused, not dropped.
    let out = apply(&w, &ec("typo", "  delivery: Shared\n  maxAttemps: 3\n  sink: {log: {}}")).await;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown field \"spec.maxAttemps\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_acts_and_the_standby_takes_over() {
    let w = world(&[]).await;
    let lease_holder = || async {
        w.cp.kubectl_ok([
            "get",
            "lease",
            "highwater-operator",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .await
        .unwrap_or_default()
    };
    let a = Operator::start(&w, "op-a", true);
    eventually("op-a to lead", Duration::from_secs(60), || async { lease_holder().await == "op-a" }).await;
    let b = Operator::start(&w, "op-b", true);
    eventually("op-b's metrics endpoint", Duration::from_secs(30), || async {
        b.metric("highwater_operator_leader").await.is_some()
    })
    .await;

    let ec = |name: &str| {
        format!(
            "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{delivery: Shared, sink: {{log: {{}}}}}}\n"
        )
    };
    assert!(apply(&w, &ec("first")).await.status.success());
    let pool = w.pool.clone();
    eventually("the leader to reconcile", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.consumers").fetch_one(&pool).await.unwrap()
                == 1
        }
    })
    .await;
    assert_eq!(a.metric("highwater_operator_leader").await, Some(1.0));
    assert_eq!(b.metric("highwater_operator_leader").await, Some(0.0), "the standby does not act");
    assert_eq!(b.metric("highwater_operator_reconciles_total").await, Some(0.0));

    // The leader dies without releasing: the standby takes over when the Lease expires.
    a.kill();
    let killed = Instant::now();
    assert!(apply(&w, &ec("second")).await.status.success());
    let pool = w.pool.clone();
    eventually("the standby to take over and reconcile", Duration::from_secs(90), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.consumers").fetch_one(&pool).await.unwrap()
                == 2
        }
    })
    .await;
    println!("leader killed to standby reconciling: {:?}", killed.elapsed());
    assert_eq!(lease_holder().await, "op-b");
    assert_eq!(b.metric("highwater_operator_leader").await, Some(1.0));
    drop(b);
}
