//! `spec.filter` (issue 49): refused at apply time by PostgreSQL itself (syntax with its place,
//! not a boolean, an aggregate, a volatile function, another table), and applied in the read of
//! real dispatchers: only the events it selects are delivered, in order, also to a partitioned
//! consumer and across batches, while the cursor passes the others; the lag counts only them, and
//! a replay delivers only them.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append, definitions, ops::replay};
use serde_json::{Value, json};

async fn refused(db: &TestDb, filter: &str) -> String {
    let yaml = consumer("picky", &format!("delivery: Shared\nfilter: {filter:?}\nsink: {{log: {{target: stderr}}}}"));
    let defs = definitions::parse(&yaml, "test").expect("parses");
    let err = definitions::apply(&db.pool, &defs).await.expect_err(filter);
    let text = format!("{err:#}");
    assert!(text.contains("filter is refused"), "{filter}: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_are_checked_by_postgresql_when_applied() {
    let db = shared(&["OrderPlaced"]).await;
    let e = refused(&db, "payload->>'total' > 1000").await;
    assert!(e.contains("at line 1, column 19") && e.contains("operator does not exist: text > integer"), "{e}");
    let e = refused(&db, "stream_type = 'order' AND\n  (payload->>'total')::numeric >").await;
    assert!(e.contains("at the end of the expression: syntax error"), "{e}");
    let e = refused(&db, "stream_type = 'order' AND\n  (payload->>'total')::numeric >> 3").await;
    assert!(e.contains("at line 2, column 32") && e.contains("operator does not exist: numeric >> integer"), "{e}");
    let e = refused(&db, "payload->>'total'").await;
    assert!(e.contains("argument of WHERE must be type boolean"), "{e}");
    let e = refused(&db, "count(*) > 1").await;
    assert!(e.contains("aggregate functions are not allowed"), "{e}");
    let e = refused(&db, "random() < 0.5").await;
    assert!(e.contains("function random() is volatile"), "{e}");
    let e = refused(&db, "nextval('highwater.events_id_seq') > 0").await;
    assert!(e.contains("nextval(regclass) is volatile"), "{e}");
    let e = refused(&db, "EXISTS (SELECT 1 FROM highwater.consumers c WHERE c.name = stream_id)").await;
    assert!(e.contains("it reads highwater.consumers"), "{e}");
    let e = refused(&db, "no_such_column = 1").await;
    assert!(e.contains("no_such_column") && e.contains("line 1, column 1"), "{e}");
    // The filter is the read's WHERE clause between parentheses: it cannot close them.
    let e = refused(&db, "true) UNION ALL SELECT * FROM highwater.events WHERE (true").await;
    assert!(e.contains("a `)` closes a parenthesis the filter did not open"), "{e}");
    // Nothing of a refused definition was stored.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.consumers").fetch_one(&db.pool).await.unwrap();
    assert_eq!(n, 0);
    // A stable function, JSON operators, the metadata and a tenant: accepted.
    apply(
        &db.pool,
        &consumer(
            "picky",
            "delivery: Shared\nfilter: \"(payload->>'total')::numeric > 1000 AND metadata ? 'source' \
             AND coalesce(tenant_id, 'none') <> 'test' AND created_at <= now()\"\nsink: {log: {target: stderr}}",
        ),
    )
    .await;
}

fn read_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_events_a_filter_selects_are_delivered_in_order() {
    let db = shared(&["OrderPlaced", "OrderShipped"]).await;
    let out = tempfile::tempdir().unwrap();
    let (big, parts) = (out.path().join("big.jsonl"), out.path().join("parts.jsonl"));
    let filter = "filter: \"event_type = 'OrderPlaced' AND (payload->>'total')::numeric > 1000\"";
    apply(
        &db.pool,
        &[
            consumer(
                "big-orders",
                &format!("delivery: Shared\nbatchSize: 7\n{filter}\nsink: {{log: {{target: '{}'}}}}", big.display()),
            ),
            consumer(
                "big-parts",
                &format!(
                    "delivery: Shared\npartitions: 2\nbatchSize: 7\n{filter}\nsink: {{log: {{target: '{}'}}}}",
                    parts.display()
                ),
            ),
        ]
        .concat(),
    )
    .await;
    let mut expected = Vec::new();
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..300i64 {
        let (ty, total) = if i % 5 == 4 { ("OrderShipped", 5000) } else { ("OrderPlaced", (i % 4) * 700) };
        let id = append(&mut tx, &NewEvent::new("order", &format!("o-{}", i % 13), ty, json!({"total": total})))
            .await
            .unwrap();
        if ty == "OrderPlaced" && total > 1000 {
            expected.push(id);
        }
    }
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    let all_delivered =
        || async { read_lines(&big).len() >= expected.len() && read_lines(&parts).len() >= expected.len() };
    eventually("the selected events delivered", Duration::from_secs(60), all_delivered).await;
    let ids = |lines: Vec<Value>| lines.iter().map(|l| l["event"]["id"].as_i64().unwrap()).collect::<Vec<_>>();
    assert_eq!(ids(read_lines(&big)), expected, "exactly the selected events, in order");
    let mut got = ids(read_lines(&parts));
    got.sort();
    assert_eq!(got, expected, "the partitions together deliver the selected events once each");
    // The cursors pass the events the filter rejects: each shard reaches the head.
    eventually("the cursors at the head", Duration::from_secs(30), || async {
        let behind: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM highwater.consumer_shards
              WHERE (cursor_tx, cursor_id) < (SELECT tx_id, id FROM highwater.events ORDER BY tx_id DESC, id DESC LIMIT 1)
                AND partition_index IS NULL",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        behind == 0
    })
    .await;
    let delivered: i64 =
        sqlx::query_scalar("SELECT delivered_count FROM highwater.consumer_shards WHERE consumer = 'big-orders'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(delivered, expected.len() as i64, "only the selected events were delivered");

    // A replay of one stream delivers again what live delivery did: the events the filter
    // selects; the others are named as left out, with the reason.
    let stream_events: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT id, event_type = 'OrderPlaced' FROM highwater.events WHERE stream_id = 'o-3' ORDER BY tx_id, id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let selected: Vec<i64> = stream_events.iter().map(|(id, _)| *id).filter(|id| expected.contains(id)).collect();
    assert!(!selected.is_empty() && selected.len() < stream_events.len(), "{stream_events:?}");
    let request = replay::Request {
        consumer: "big-orders".into(),
        stream: "order/o-3".into(),
        by: "filter-test".into(),
        ..Default::default()
    };
    let plan = replay::replay(&db.pool, &request).await.unwrap();
    assert_eq!(plan.selected.iter().map(|s| s.event_id).collect::<Vec<_>>(), selected);
    let by_filter: Vec<i64> = plan
        .left_out
        .iter()
        .filter(|l| l.why == "the consumer's filter does not select it")
        .map(|l| l.event_id)
        .collect();
    // The consumer takes both types; its filter leaves out every OrderShipped and the small orders.
    let unselected: Vec<i64> = stream_events.iter().map(|(id, _)| *id).filter(|id| !expected.contains(id)).collect();
    assert!(stream_events.iter().any(|(id, placed)| *placed && unselected.contains(id)), "{stream_events:?}");
    assert_eq!(by_filter, unselected, "{:?}", plan.left_out);
    eventually("the replay delivered", Duration::from_secs(30), || async {
        read_lines(&big).len() >= expected.len() + selected.len()
    })
    .await;
    let lines = ids(read_lines(&big));
    assert_eq!(lines[expected.len()..], selected[..], "the replay delivered the selected events of o-3, in order");
}

/// `consumer status`'s lag (and so the lag metrics, the operator's status and the console) counts
/// what a filtered consumer will receive: the events its filter selects, not every event of its
/// types; partitions split that count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_of_a_filtered_consumer_counts_only_what_it_will_receive() {
    let db = shared(&["OrderPlaced"]).await;
    let filter = "filter: \"(payload->>'total')::numeric > 1000\"";
    let sink = "sink: {log: {target: stderr}}";
    apply(
        &db.pool,
        &[
            consumer("all-orders", &format!("delivery: Shared\n{sink}")),
            consumer("big-orders", &format!("delivery: Shared\n{filter}\n{sink}")),
            consumer("big-parts", &format!("delivery: Shared\npartitions: 2\n{filter}\n{sink}")),
        ]
        .concat(),
    )
    .await;
    // A dispatcher registers the shards, then is killed: nothing is delivered after.
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "p0", logs.path());
    for (name, shards) in [("all-orders", 1), ("big-orders", 1), ("big-parts", 2)] {
        wait_registered(&db.pool, name, shards).await;
    }
    drop(d);
    let mut tx = db.pool.begin().await.unwrap();
    let mut selected = 0;
    for i in 0..40i64 {
        let total = (i % 4) * 700;
        append(&mut tx, &NewEvent::new("order", &format!("o-{i}"), "OrderPlaced", json!({"total": total})))
            .await
            .unwrap();
        selected += i64::from(total > 1000);
    }
    tx.commit().await.unwrap();
    let lag = |rows: &[highwater::ops::ShardStatus], name: &str| -> i64 {
        rows.iter().filter(|r| r.consumer == name).map(|r| r.lag_events).sum()
    };
    let rows = highwater::ops::status(&db.pool, None).await.unwrap();
    assert_eq!(lag(&rows, "all-orders"), 40, "{rows:?}");
    assert_eq!(lag(&rows, "big-orders"), selected, "only the selected events: {rows:?}");
    assert_eq!(lag(&rows, "big-parts"), selected, "the partitions together: {rows:?}");
    let parts: Vec<i64> = rows.iter().filter(|r| r.consumer == "big-parts").map(|r| r.lag_events).collect();
    assert!(parts.len() == 2 && parts.iter().all(|n| *n > 0), "each partition its share: {parts:?}");
    let one = highwater::ops::status(&db.pool, Some("big-orders")).await.unwrap();
    assert_eq!((one[0].lag_events, one[0].lag_seconds.is_some()), (selected, true), "{one:?}");
}
