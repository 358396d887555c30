//! A dispatcher started before its database: it answers /healthz at once, reports not ready,
//! retries with backoff, and starts delivering when the database appears, without a restart.
mod common;

use std::time::Duration;

use common::*;
use highwater::{
    NewEvent, append, db,
    embedded::{EmbeddedOptions, EmbeddedPostgres, free_port},
    event_types,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_database_and_recovers_without_a_restart() {
    let pg_port = free_port().unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{pg_port}/postgres");
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&url, "early", logs.path());
    let http = format!("http://127.0.0.1:{}", d.http_port);
    let client = reqwest::Client::new();
    let mut healthy = false;
    for _ in 0..100 {
        if client.get(format!("{http}/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(healthy, "/healthz answers while the database is unreachable");
    let r = client.get(format!("{http}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().contains("not ready"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = std::fs::read_to_string(logs.path().join("early.log")).unwrap();
    assert!(log.contains("database not reachable yet"), "it says why it waits:\n{log}");

    // The database appears: the same process migrates nothing itself, but once the schema and a
    // consumer exist it becomes ready and delivers.
    let pg = EmbeddedPostgres::start(EmbeddedOptions { port: Some(pg_port), ..Default::default() }).await.unwrap();
    let pool = db::connect(&pg.url(), 4).await.unwrap();
    db::migrate(&pool).await.unwrap();
    event_types::register(&pool, "Tick", None, None).await.unwrap();
    sqlx::raw_sql("CREATE TABLE seen (id bigint)").execute(&pool).await.unwrap();
    apply(&pool, &consumer("late", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2)'}}")).await;
    let mut ready = false;
    for _ in 0..300 {
        if client.get(format!("{http}/readyz")).send().await.is_ok_and(|r| r.status() == 200) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready,
        "ready once the database answers: {}",
        std::fs::read_to_string(logs.path().join("early.log")).unwrap()
    );
    let mut tx = pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    wait_count(&pool, "SELECT count(*) FROM seen", 1, Duration::from_secs(30)).await;
    drop(d);
}
