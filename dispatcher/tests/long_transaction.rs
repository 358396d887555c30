//! A transaction held open (here ~25 s; the long chaos run can hold one for minutes) holds the
//! fence back: events committed after it began wait, the fence-age metric rises, nothing behind
//! it is skipped; when it commits, everything is delivered, its own events included.
mod common;

use std::time::{Duration, Instant};

use common::*;
use highwater::{NewEvent, Xid8, append};
use serde_json::json;

async fn fence_age(port: u16) -> f64 {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let s = scrape.samples.iter().find(|s| s.metric == "highwater_fence_age_seconds").expect("fence age exported");
    match s.value {
        prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("fence age is not a gauge: {other:?}"),
    }
}

async fn append_committed(pool: &sqlx::PgPool, n: i64) {
    let mut tx = pool.begin().await.unwrap();
    for i in 0..n {
        append(&mut tx, &NewEvent::new("s", &i.to_string(), "Tick", json!({"i": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_holds_delivery_back_and_skips_nothing() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &consumer("proj", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO applied VALUES ($2)'}}"))
        .await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "d0", logs.path(), &[("HIGHWATER_METRICS_INTERVAL", "500ms")]);

    // Before the long transaction: delivered as usual.
    append_committed(&db.pool, 10).await;
    wait_count(&db.pool, "SELECT count(*) FROM applied", 10, Duration::from_secs(30)).await;

    let mut long = db.pool.begin().await.unwrap();
    append(&mut long, &NewEvent::new("s", "long", "Tick", json!({"long": true}))).await.unwrap();
    let held_since = Instant::now();
    let mut committed_after = 0;
    let mut ages = Vec::new();
    while held_since.elapsed() < Duration::from_secs(25) {
        append_committed(&db.pool, 5).await;
        committed_after += 5;
        tokio::time::sleep(Duration::from_secs(1)).await;
        ages.push(fence_age(d.http_port).await);
        assert_eq!(
            scalar_i64(&db.pool, "SELECT count(*) FROM applied").await,
            10,
            "nothing committed after the open transaction began is delivered while it is open"
        );
    }
    assert!(ages.windows(2).all(|w| w[1] >= w[0]), "the fence age only rises while the transaction is open: {ages:?}");
    assert!(*ages.last().unwrap() >= 20.0, "the fence age shows the open transaction: {ages:?}");
    let cursor_tx: Xid8 =
        sqlx::query_scalar("SELECT cursor_tx FROM highwater.consumer_shards").fetch_one(&db.pool).await.unwrap();
    let long_tx: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *long).await.unwrap();
    assert!(cursor_tx < long_tx, "the cursor stays below the open transaction ({cursor_tx} < {long_tx})");

    long.commit().await.unwrap();
    let total = 10 + 1 + committed_after;
    wait_count(&db.pool, "SELECT count(*) FROM applied", total, Duration::from_secs(30)).await;
    assert_eq!(scalar_i64(&db.pool, "SELECT count(DISTINCT event_id) FROM applied").await, total, "each once");
    assert_eq!(
        scalar_i64(
            &db.pool,
            "SELECT count(*) FROM highwater.events e LEFT JOIN applied a ON a.event_id = e.id WHERE a.event_id IS NULL"
        )
        .await,
        0,
        "every event delivered, the long transaction's own included"
    );
    let pool = db.pool.clone();
    let port = d.http_port;
    eventually("the fence age to fall back", Duration::from_secs(10), || async move { fence_age(port).await < 5.0 })
        .await;
    drop(pool);
}
