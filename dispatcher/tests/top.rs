//! `highwater consumer top` shows every shard with its lag and delivery rate, screen after screen.
mod common;

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_shows_lag_and_rate() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &[consumer("paused", "delivery: Shared\nsuspend: true\nsink: {log: {target: stderr}}")].concat())
        .await;
    let mut tx = db.pool.begin().await.unwrap();
    for _ in 0..7 {
        append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    }
    tx.commit().await.unwrap();
    let out = tokio::process::Command::new(bin())
        .args(["consumer", "top", "--iterations", "2", "--interval", "200ms"])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("highwater top").count(), 2, "two screens:\n{text}");
    assert!(text.contains("RATE/s"));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("paused")).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].contains("disabled") && rows[0].split_whitespace().nth(4) == Some("7"), "{}", rows[0]);
    // No rate on the first screen, 0.0 on the next (nothing delivered).
    assert_eq!(rows[0].split_whitespace().nth(6), Some("-"));
    assert_eq!(rows[1].split_whitespace().nth(6), Some("0.0"));
}
