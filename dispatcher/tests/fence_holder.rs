//! A session left idle in a transaction that took an id holds the fence back: `consumer status`
//! and `consumer list` name it (pid, application, state, age) beside the lag it causes, and the
//! dispatcher logs it, once a minute at most while it lasts, and says when it ends (issue 44).
mod common;

use std::{process::Command, time::Duration};

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use sqlx::{Connection, PgConnection};

async fn append_committed(pool: &sqlx::PgPool, n: i64) {
    let mut tx = pool.begin().await.unwrap();
    for i in 0..n {
        append(&mut tx, &NewEvent::new("s", &i.to_string(), "Tick", json!({"i": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
}

fn cli(url: &str, args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

async fn fence_age(port: u16) -> Option<f64> {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.ok()?.text().await.ok()?;
    body.lines().find_map(|l| l.strip_prefix("highwater_fence_age_seconds ")?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_holding_the_fence_is_named_in_status_and_in_the_log() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &consumer("proj", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO applied VALUES ($2)'}}"))
        .await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "d0", logs.path(), &[("HIGHWATER_METRICS_INTERVAL", "500ms")]);
    let log = || std::fs::read_to_string(logs.path().join("d0.log")).unwrap_or_default();
    append_committed(&db.pool, 3).await;
    wait_count(&db.pool, "SELECT count(*) FROM applied", 3, Duration::from_secs(30)).await;
    assert!(!cli(&db.url, &["consumer", "status", "proj"]).contains("held by the fence"), "nothing held yet");

    // A forgotten psql: it appended (so holds a transaction id) and sits idle in its transaction.
    let mut forgotten = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("SET application_name = 'forgotten-psql'").execute(&mut forgotten).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut forgotten).await.unwrap();
    let mut tx = forgotten.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "forgotten", "Tick", json!({}))).await.unwrap();
    append_committed(&db.pool, 4).await;

    let named = format!("4 event(s) held by the fence: pid {pid} (forgotten-psql, idle in transaction ");
    let status = cli(&db.url, &["consumer", "status", "proj"]);
    assert!(status.contains(&format!("proj/__shared__: {named}")), "status names the holder:\n{status}");
    assert!(
        status.contains(&format!(
            "fix: commit or roll back that transaction, or end it: SELECT pg_terminate_backend({pid})"
        )),
        "and the fix:\n{status}"
    );
    let list = cli(&db.url, &["consumer", "list"]);
    assert!(list.contains(&named), "so does the list:\n{list}");
    let json: serde_json::Value =
        serde_json::from_str(&cli(&db.url, &["consumer", "status", "proj", "-o", "json"])).unwrap();
    let row = &json[0];
    assert_eq!(row["held_events"], 4, "{row}");
    assert_eq!(row["held_by_fence"]["pid"], pid, "{row}");
    assert_eq!(row["held_by_fence"]["application"], "forgotten-psql", "{row}");
    assert_eq!(row["held_by_fence"]["state"], "idle in transaction", "{row}");

    // The dispatcher says so once it has held for a few seconds ...
    let line = format!("held by the fence: pid {pid} (forgotten-psql, idle in transaction ");
    let wanted = line.clone();
    eventually("the dispatcher to log the fence's holder", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(logs.path().join("d0.log")).unwrap_or_default();
        let found = text.contains(&wanted);
        async move { found }
    })
    .await;
    assert!(log().contains("SELECT pg_terminate_backend"), "with the fix:\n{}", log());
    // ... and not again on each refresh: several refreshes (every 500 ms) later, still once.
    let port = d.http_port;
    let seen_at = fence_age(port).await.expect("fence age exported");
    eventually("three more seconds of refreshes", Duration::from_secs(60), || async move {
        fence_age(port).await.is_some_and(|a| a >= seen_at + 3.0)
    })
    .await;
    assert_eq!(log().matches(&line).count(), 1, "once a minute at most:\n{}", log());

    // It commits: everything is delivered, the log says the fence moved on, status names nothing.
    tx.commit().await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM applied", 8, Duration::from_secs(30)).await;
    eventually("the log to say the fence moved on", Duration::from_secs(30), || {
        let found =
            std::fs::read_to_string(logs.path().join("d0.log")).unwrap_or_default().contains("the fence moved on");
        async move { found }
    })
    .await;
    assert!(!cli(&db.url, &["consumer", "status", "proj"]).contains("held by the fence"), "nothing held any more");
}
