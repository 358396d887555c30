//! `kubectl apply` of the examples: the event types (EventType resources) are registered with
//! the schemas of examples/event-types, a shared SQL projection, a per-instance SSE stream, a
//! partitioned webhook, the Kafka and NATS relays and the log consumers become rows and shards
//! (one per partition), and `kubectl get ec` shows their delivery, status, lag and partitions.
mod common;

use std::{path::Path, time::Duration};

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_the_examples() {
    // No type registered beforehand: the examples' EventTypes register them (the consumers that
    // read them are refused until then, and applied at their next resync).
    let w = world(&[]).await;
    let _op = Operator::start(&w, "op-1", false);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let out = w.cp.kubectl(["apply", "-n", "shop", "-f", examples.to_str().unwrap()]).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The SQL projection's table, created after the resources as a deploy order may have it: the
    // consumer is refused until its statement can run (checked at apply) and applied at the next
    // resync.
    sqlx::raw_sql(include_str!("../../examples/schema.sql")).execute(&w.pool).await.unwrap();
    // Two dispatcher pods of the default group.
    let out = apply(&w, &[pod("d-0", "shop", "default"), pod("d-1", "shop", "default")].concat()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let pool = w.pool.clone();
    eventually("every example's rows and shards", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT c.name, count(s.*) FROM highwater.consumers c
                   LEFT JOIN highwater.consumer_shards s ON s.consumer = c.name GROUP BY c.name ORDER BY c.name",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            rows == vec![
                ("cache-invalidation".to_owned(), 2),
                ("live-orders".to_owned(), 2),
                ("order-audit-log".to_owned(), 1),
                ("order-projection".to_owned(), 1),
                ("order-relay-kafka".to_owned(), 1),
                ("order-relay-nats".to_owned(), 1),
                ("order-webhook".to_owned(), 4),
            ]
        }
    })
    .await;

    // The EventTypes registered the schemas of examples/event-types/*.schema.json.
    for t in ["OrderPlaced", "OrderCancelled"] {
        let file = examples.join(format!("event-types/{t}.schema.json"));
        let expected: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let registered: Option<sqlx::types::Json<serde_json::Value>> =
            sqlx::query_scalar("SELECT json_schema FROM highwater.event_types WHERE event_type = $1")
                .bind(t)
                .fetch_one(&w.pool)
                .await
                .unwrap();
        assert_eq!(registered.map(|j| j.0), Some(expected), "examples/order-event-types.yaml's {t} vs {file:?}");
    }
    eventually("both EventTypes Ready", Duration::from_secs(30), || async {
        let t = w.cp.kubectl_ok(["get", "et", "-n", "shop"]).await.unwrap_or_default();
        t.lines().filter(|l| l.contains(" True ")).count() == 2
    })
    .await;

    let mut tx = w.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("order", "1", "OrderPlaced", json!({"order_id": "1", "total": 3.5}))).await.unwrap();
    tx.commit().await.unwrap();
    eventually("lag shown for the undelivered event", Duration::from_secs(30), || async {
        let t = w.cp.kubectl_ok(["get", "ec", "-n", "shop"]).await.unwrap_or_default();
        t.lines().any(|l| l.starts_with("order-webhook") && l.split_whitespace().nth(3) == Some("1"))
    })
    .await;
    let table = w.cp.kubectl_ok(["get", "ec", "-n", "shop"]).await.unwrap();
    println!("{table}");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "DELIVERY", "STATUS", "LAG", "PARTITIONS", "REBUILD", "AGE"]);
    for (name, delivery) in
        [("live-orders", "PerInstance"), ("order-projection", "Shared"), ("order-webhook", "Shared")]
    {
        let row = table.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} missing:\n{table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], delivery, "{row}");
        assert_eq!(cols[2], "Ready", "{row}");
    }
    let webhook = table.lines().find(|l| l.starts_with("order-webhook")).unwrap();
    assert!(webhook.contains(" 1/4 busy "), "the partition with the event is busy, of 4: {webhook}");
    // Each resource's status is refreshed on its own schedule: order-webhook's lag showing says
    // nothing yet of live-orders'.
    eventually("one undelivered event on each of live-orders' two instances", Duration::from_secs(30), || async {
        let lag =
            w.cp.kubectl_ok(["get", "ec", "live-orders", "-n", "shop", "-o", "jsonpath={.status.totalLag}"]).await;
        lag.unwrap_or_default() == "2"
    })
    .await;
}
