//! A logical dump and restore into a fresh cluster (pg_dump/pg_restore): transaction ids restart
//! below the restored cursors. The dispatcher refuses to start, naming the shard and the fix, and
//! delivers nothing, skips nothing; after the documented fix (`consumer rewind --to earliest`) it
//! delivers what is appended after the restore.
mod common;

use std::{process::Command, time::Duration};

use common::*;
use highwater::{
    NewEvent, Xid8, append,
    embedded::{EmbeddedOptions, EmbeddedPostgres, find_bindir},
};
use serde_json::json;

fn run(program: &str, args: &[&str]) {
    let out = Command::new(find_bindir().unwrap().join(program)).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_ahead_of_a_restored_cluster_are_refused_loudly() {
    let old = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&old.pool).await.unwrap();
    apply(
        &old.pool,
        &consumer("proj", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO applied VALUES ($2)'}}"),
    )
    .await;
    // Use up transaction ids, so that the cursor ends far above a new cluster's counter.
    for _ in 0..3000 {
        sqlx::query("SELECT pg_current_xact_id()").execute(&old.pool).await.unwrap();
    }
    let mut tx = old.pool.begin().await.unwrap();
    for i in 0..20 {
        append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({"i": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&old.url, "before", logs.path());
    wait_count(&old.pool, "SELECT count(*) FROM applied", 20, Duration::from_secs(30)).await;
    assert_eq!(d.terminate(Duration::from_secs(15)), Some(0));

    let dump = logs.path().join("db.dump");
    run("pg_dump", &["-Fc", "-f", dump.to_str().unwrap(), &old.url]);
    let new = EmbeddedPostgres::start(EmbeddedOptions::default()).await.unwrap();
    run("pg_restore", &["--no-owner", "-d", &new.url(), dump.to_str().unwrap()]);
    let pool = highwater::db::connect(&new.url(), 4).await.unwrap();
    let cursor = || async {
        sqlx::query_as::<_, (Xid8, i64)>("SELECT cursor_tx, cursor_id FROM highwater.consumer_shards")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let restored_cursor = cursor().await;
    let next_xid: Xid8 =
        sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())").fetch_one(&pool).await.unwrap();
    assert!(
        restored_cursor.0 >= next_xid,
        "the restore restarted transaction ids below the cursor ({restored_cursor:?}, next {next_xid})"
    );
    // An event appended after the restore gets a transaction id below the cursor.
    let mut tx = pool.begin().await.unwrap();
    let fresh = append(&mut tx, &NewEvent::new("s", "2", "Tick", json!({"after": "restore"}))).await.unwrap();
    tx.commit().await.unwrap();

    let mut d = Dispatcher::start(&new.url(), "after", logs.path());
    let mut exit = None;
    for _ in 0..300 {
        if let Ok(Some(s)) = d.child.try_wait() {
            exit = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(logs.path().join("after.log")).unwrap();
    let exit = exit.unwrap_or_else(|| panic!("the dispatcher kept running against a restored database:\n{log}"));
    assert!(!exit.success(), "it refuses with a failure exit: {exit}");
    assert!(log.contains("refusing to deliver: cursors are ahead"), "it says why:\n{log}");
    assert!(
        log.contains(&format!("proj/__shared__ (cursor transaction {})", restored_cursor.0)),
        "it names the shard:\n{log}"
    );
    assert!(log.contains("fix: see \"Restore from a logical dump\""), "it names the fix:\n{log}");
    assert_eq!(scalar_i64(&pool, "SELECT count(*) FROM applied").await, 20, "nothing delivered");
    assert_eq!(cursor().await, restored_cursor, "the cursor did not move: nothing skipped");

    // The documented fix, then a new start delivers the event appended after the restore.
    let out = Command::new(bin())
        .args(["consumer", "rewind", "proj", "--to", "earliest"])
        .env("DATABASE_URL", new.url())
        .output()
        .unwrap();
    assert!(out.status.success(), "rewind: {}", String::from_utf8_lossy(&out.stderr));
    let _d = Dispatcher::start(&new.url(), "fixed", logs.path());
    let pool2 = pool.clone();
    eventually("the event appended after the restore", Duration::from_secs(30), || {
        let pool = pool2.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM applied WHERE event_id = $1")
                .bind(fresh)
                .fetch_one(&pool)
                .await
                .unwrap()
                == 1
        }
    })
    .await;
}
