//! Migration 20261201000020 converts a populated installation: a database migrated up to the
//! migration before it, with events, stream versions and cursors, is migrated; every event is
//! still there (in the `events_legacy` partition), each consumer delivers exactly the events after
//! its cursor (old and new), ids keep increasing, and stream versions carry on.
mod common;

use std::time::Duration;

use common::*;
use highwater::{Error, NewEvent, Xid8, append, db, embedded};
use serde_json::json;
use sqlx::PgPool;

const PARTITIONED: i64 = 20261201000020;

/// Migrates with the first release's own binary (0.1.0, before partitioning; built from this
/// repository's history by e2e/upgrade/build-release.sh and cached): the schema of an
/// installation that has not upgraded yet.
async fn migrate_before_partitioning(url: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e/upgrade/build-release.sh");
    let out = std::process::Command::new(script).arg("--oldest").output().expect("running build-release.sh");
    assert!(out.status.success(), "building the first release: {}", String::from_utf8_lossy(&out.stderr));
    let old = String::from_utf8(out.stdout).unwrap();
    let st = std::process::Command::new(old.trim()).arg("migrate").env("DATABASE_URL", url).status().unwrap();
    assert!(st.success(), "the first release's migrate");
    let pool = db::connect(url, 1).await.unwrap();
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater._sqlx_migrations WHERE version >= $1")
        .bind(PARTITIONED)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(before, 0, "the first release predates the partitioning migration");
}

/// Declares a Shared consumer and its shard as an installation of that version did, in its own
/// schema (today's `definitions::apply` writes columns that later migrations add).
async fn declare_as_before(pool: &PgPool, yaml: &str) {
    let d = highwater::definitions::parse(yaml, "test").unwrap().remove(0);
    sqlx::query(
        "INSERT INTO highwater.consumers (name, delivery, start_from, sink, spec, source)
         VALUES ($1, 'Shared', 'earliest', $2, $3, 'test')",
    )
    .bind(&d.name)
    .bind(sqlx::types::Json(&d.spec.sink))
    .bind(sqlx::types::Json(&d.spec))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO highwater.consumer_shards (consumer, instance_id) VALUES ($1, '__shared__')")
        .bind(&d.name)
        .execute(pool)
        .await
        .unwrap();
}

async fn append_one(pool: &PgPool, stream: &str, expected: Option<i64>) -> highwater::Result<i64> {
    let mut e = NewEvent::new("account", stream, "Tick", json!({"stream": stream}));
    e.expected_version = expected;
    let mut tx = pool.begin().await?;
    let id = append(&mut tx, &e).await?;
    tx.commit().await?;
    Ok(id)
}

async fn ids(pool: &PgPool, sql: &'static str) -> Vec<i64> {
    sqlx::query_scalar(sql).fetch_all(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_populated_database_is_converted_and_keeps_delivering() {
    let pg = embedded::EmbeddedPostgres::start(Default::default()).await.unwrap();
    let pool = db::connect(&pg.url(), 10).await.unwrap();
    migrate_before_partitioning(&pg.url()).await;
    // Registered as a binary of that release did: today's `register` reads the registry's newer
    // columns, which a schema before partitioning does not have yet.
    sqlx::query("INSERT INTO highwater.event_types (event_type) VALUES ('Tick')").execute(&pool).await.unwrap();
    sqlx::raw_sql("CREATE TABLE seen_all (event_id bigint); CREATE TABLE seen_half (event_id bigint)")
        .execute(&pool)
        .await
        .unwrap();
    for (name, table) in [("all", "seen_all"), ("half", "seen_half")] {
        declare_as_before(
            &pool,
            &consumer(
                name,
                &format!(
                    "delivery: Shared\nsink: {{sql: {{statement: 'INSERT INTO {table} (event_id) VALUES ($2)'}}}}"
                ),
            ),
        )
        .await;
    }

    // Before: 40 events, ten of them versions 1..10 of stream "v", some several per transaction.
    for v in 0..10 {
        append_one(&pool, "v", Some(v)).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        for s in 0..3 {
            append(&mut tx, &NewEvent::new("account", &format!("u{v}-{s}"), "Tick", json!({}))).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
    let old: Vec<(Xid8, i64)> =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id").fetch_all(&pool).await.unwrap();
    assert_eq!(old.len(), 40);
    // `half` has processed the first 20 (in delivery order) before the upgrade.
    sqlx::query("UPDATE highwater.consumer_shards SET cursor_tx = $1, cursor_id = $2 WHERE consumer = 'half'")
        .bind(old[19].0)
        .bind(old[19].1)
        .execute(&pool)
        .await
        .unwrap();
    let max_old_id = old.iter().map(|p| p.1).max().unwrap();

    db::migrate(&pool).await.unwrap();

    assert_eq!(
        ids(&pool, "SELECT count(*) FROM highwater.events_legacy").await,
        vec![40],
        "every event is in the legacy partition"
    );
    let after: Vec<(Xid8, i64)> =
        sqlx::query_as("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id").fetch_all(&pool).await.unwrap();
    assert_eq!(after, old, "same events, same positions");
    // Stream versions carry on from the stored head.
    let r = append_one(&pool, "v", Some(5)).await;
    assert!(
        matches!(&r, Err(Error::VersionConflict { message, .. }) if message.contains("is at version 10, expected 5")),
        "{r:?}"
    );
    let v11 = append_one(&pool, "v", Some(10)).await.unwrap();
    assert!(v11 > max_old_id, "ids keep increasing: {v11} after {max_old_id}");
    let mut new = vec![v11];
    for i in 0..9 {
        new.push(append_one(&pool, &format!("n{i}"), None).await.unwrap());
    }
    let where_new: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT c.relname::text FROM highwater.events e JOIN pg_class c ON c.oid = e.tableoid WHERE e.id = ANY ($1)",
    )
    .bind(&new)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(where_new.iter().all(|n| n != "events_legacy" && n != "events_tail"), "{where_new:?}");

    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&pg.url(), "p0", logs.path());
    wait_count(&pool, "SELECT count(*) FROM seen_all", 50, Duration::from_secs(30)).await;
    wait_count(&pool, "SELECT count(*) FROM seen_half", 30, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut expected_all: Vec<i64> = old.iter().map(|p| p.1).chain(new.iter().copied()).collect();
    expected_all.sort_unstable();
    assert_eq!(ids(&pool, "SELECT event_id FROM seen_all ORDER BY 1").await, expected_all, "every event, once");
    let mut expected_half: Vec<i64> = old[20..].iter().map(|p| p.1).chain(new.iter().copied()).collect();
    expected_half.sort_unstable();
    assert_eq!(
        ids(&pool, "SELECT event_id FROM seen_half ORDER BY 1").await,
        expected_half,
        "exactly the events after its cursor, once"
    );
}
