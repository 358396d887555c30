//! `dispatch --group` runs only its group's consumers and picks up definitions changed while it
//! runs (by `consumer apply` or the operator) without a restart.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_runs_its_group_and_follows_changes_live() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (consumer text, id bigint)").execute(&db.pool).await.unwrap();
    let sql = |c: &str| format!("sink: {{sql: {{statement: \"INSERT INTO seen VALUES ('{c}', $2)\"}}}}");
    apply(&db.pool, &consumer("a", &format!("delivery: Shared\ngroup: web\n{}", sql("a")))).await;
    apply(&db.pool, &consumer("other", &format!("delivery: Shared\ngroup: batch\n{}", sql("other")))).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start_with_env(&db.url, "web-0", logs.path(), &[("HIGHWATER_GROUP", "web")]);
    wait_registered(&db.pool, "a", 1).await;

    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM seen WHERE consumer = 'a'", 1, Duration::from_secs(20)).await;

    // A consumer added to the group while the dispatcher runs is picked up and catches up.
    apply(&db.pool, &consumer("b", &format!("delivery: Shared\ngroup: web\n{}", sql("b")))).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen WHERE consumer = 'b'", 1, Duration::from_secs(20)).await;
    // A changed definition takes effect too: b now writes under another name.
    apply(&db.pool, &consumer("b", &format!("delivery: Shared\ngroup: web\n{}", sql("b2")))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM seen WHERE consumer = 'b2'", 1, Duration::from_secs(20)).await;

    // The other group's consumer was never run here.
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM seen WHERE consumer = 'other'").await, 0);
    let delivered =
        scalar_i64(&db.pool, "SELECT delivered_count FROM highwater.consumer_shards WHERE consumer = 'other'").await;
    assert_eq!(delivered, 0);
}
