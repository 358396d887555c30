//! Partitioned event storage: `events drop-partitions` drops a whole partition only when the fence
//! and every non-disabled shard have passed it (a lagging shard, a dead shard, a shard registered
//! during the drop and a long transaction holding the fence all keep it), and partitions are
//! created ahead of the transaction ids.
mod common;

use std::time::Duration;

use common::*;
use highwater::{Error, NewEvent, Xid8, append, ops, partitions, shards};
use serde_json::json;
use sqlx::PgPool;

/// Transaction ids per partition in these tests: a few hundred transactions cross several.
const WIDTH: i64 = 100;

/// The migration made partitions 10,000,000 transaction ids wide; replaces the (still empty) ones
/// above the existing events with `WIDTH`-wide ones, so a test crosses several quickly.
async fn narrow(pool: &PgPool) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$
         DECLARE r record;
         BEGIN
             FOR r IN SELECT name FROM highwater.event_partitions WHERE name <> 'events_legacy' LOOP
                 EXECUTE format('DROP TABLE highwater.%I', r.name);
                 DELETE FROM highwater.event_partitions WHERE name = r.name;
             END LOOP;
             UPDATE highwater.event_partitioning SET width = {WIDTH}, ahead = 5;
             -- Re-cuts the tail down to the fence, in the same transaction as the drops.
             PERFORM highwater.create_event_partitions();
         END $$"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// Commits `n` transactions that each take a transaction id and write nothing.
async fn burn_xids(pool: &PgPool, n: i64) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )))
    .execute(pool)
    .await
    .unwrap();
    partitions::create_ahead(pool).await.unwrap();
}

/// Appends `n` events, each in its own transaction, created 40 days ago.
async fn old_events(pool: &PgPool, n: usize) -> Vec<(Xid8, i64)> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut tx = pool.begin().await.unwrap();
        let id = append(&mut tx, &NewEvent::new("order", &i.to_string(), "Tick", json!({}))).await.unwrap();
        let tx_id: Xid8 = sqlx::query_scalar(
            "UPDATE highwater.events SET created_at = now() - interval '40 days' WHERE id = $1 RETURNING tx_id",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        out.push((tx_id, id));
    }
    out
}

/// The name of the partition holding event `id`.
async fn partition_of(pool: &PgPool, id: i64) -> String {
    sqlx::query_scalar(
        "SELECT relname::text FROM highwater.events e JOIN pg_class c ON c.oid = e.tableoid WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn names(pool: &PgPool) -> Vec<String> {
    partitions::list(pool).await.unwrap().into_iter().map(|p| p.name).collect()
}

fn opts(days: u32) -> partitions::DropOptions {
    partitions::DropOptions { older_than_days: days, dry_run: false }
}

fn refused<T: std::fmt::Debug>(r: highwater::Result<T>) -> String {
    match r {
        Err(Error::Refused(m)) => m.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn count(pool: &PgPool) -> i64 {
    scalar_i64(pool, "SELECT count(*) FROM highwater.events").await
}

async fn set_cursor(pool: &PgPool, consumer: &str, at: (Xid8, i64)) {
    sqlx::query("UPDATE highwater.consumer_shards SET cursor_tx = $2, cursor_id = $3 WHERE consumer = $1")
        .bind(consumer)
        .bind(at.0)
        .bind(at.1)
        .execute(pool)
        .await
        .unwrap();
}

/// A shared consumer `audit` (no dispatcher running: its cursor moves only when a test moves it),
/// three old events in one partition and three in the next, and the transaction ids moved past
/// both.
async fn two_old_partitions() -> (TestDb, Vec<(Xid8, i64)>, Vec<(Xid8, i64)>) {
    let db = setup(&["Tick"]).await;
    narrow(&db.pool).await;
    apply(&db.pool, &consumer("audit", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let first = old_events(&db.pool, 3).await;
    let p1 = partition_of(&db.pool, first[0].1).await;
    burn_xids(&db.pool, WIDTH).await;
    let second = old_events(&db.pool, 3).await;
    let p2 = partition_of(&db.pool, second[0].1).await;
    assert_ne!(p1, p2);
    assert_eq!(partition_of(&db.pool, first[2].1).await, p1);
    assert_eq!(partition_of(&db.pool, second[2].1).await, p2);
    burn_xids(&db.pool, 2 * WIDTH).await;
    (db, first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_or_dead_shard_keeps_the_partitions_it_needs() {
    let (db, first, second) = two_old_partitions().await;
    let p1 = partition_of(&db.pool, first[0].1).await;
    let p2 = partition_of(&db.pool, second[0].1).await;

    // At the start: refused, naming the shard; nothing dropped. A dry run says the same.
    let m = refused(partitions::drop_old(&db.pool, &opts(30)).await);
    assert!(m.contains("audit/__shared__: cursor 0/0 (event 0), status idle"), "{m}");
    let dry =
        refused(partitions::drop_old(&db.pool, &partitions::DropOptions { older_than_days: 30, dry_run: true }).await);
    assert!(dry.contains("audit/__shared__: cursor 0/0 (event 0), status idle"), "{dry}");
    assert_eq!(count(&db.pool).await, 6);
    let left = names(&db.pool).await;
    assert!(left.contains(&p1) && left.contains(&p2), "{left:?}");

    // One event short of the first partition's end: still refused.
    set_cursor(&db.pool, "audit", first[1]).await;
    let m = refused(partitions::drop_old(&db.pool, &opts(30)).await);
    assert!(m.contains(&format!("audit/__shared__: cursor {}/{}", first[1].0, first[1].1)), "{m}");
    assert_eq!(count(&db.pool).await, 6);

    // At the first partition's last event: the legacy partition (empty) and the first go; the
    // second is refused, the report says what was dropped before stopping.
    set_cursor(&db.pool, "audit", first[2]).await;
    let m = refused(partitions::drop_old(&db.pool, &opts(30)).await);
    assert!(m.contains("(before stopping, dropped"), "{m}");
    assert!(m.contains(&p1), "{m}");
    let left = names(&db.pool).await;
    assert!(!left.contains(&p1) && left.contains(&p2), "{left:?}");
    assert_eq!(count(&db.pool).await, 3, "the second partition's events are all there");

    // A dead shard past the first partition but not the second keeps the second.
    sqlx::query("UPDATE highwater.consumer_shards SET status = 'dead'").execute(&db.pool).await.unwrap();
    set_cursor(&db.pool, "audit", second[0]).await;
    assert!(refused(partitions::drop_old(&db.pool, &opts(30)).await).contains("status dead"));
    assert_eq!(count(&db.pool).await, 3);

    // Disabled: the operator accepted the loss; the second goes, the partition holding the next
    // transaction id stays (transactions below its bound may still write into it).
    ops::disable(&db.pool, "audit", None, &ops::Audit::by("test")).await.unwrap();
    let r = partitions::drop_old(&db.pool, &opts(30)).await.unwrap();
    assert!(r.dropped.iter().any(|p| p.name == p2), "{r}");
    assert!(r.kept.as_deref().is_some_and(|k| k.contains("may still write into it")), "{r}");
    assert_eq!(count(&db.pool).await, 0);
    assert!(!names(&db.pool).await.is_empty(), "the current and future partitions stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn young_partitions_stay_and_caught_up_shards_let_old_ones_go() {
    let (db, first, second) = two_old_partitions().await;
    let p1 = partition_of(&db.pool, first[0].1).await;
    let p2 = partition_of(&db.pool, second[0].1).await;
    set_cursor(&db.pool, "audit", second[2]).await;
    // Newer than 50 days: kept, not refused.
    let r = partitions::drop_old(&db.pool, &opts(50)).await.unwrap();
    assert!(r.dropped.iter().all(|p| p.name == "events_legacy"), "only the empty legacy partition: {r}");
    assert!(r.kept.as_deref().is_some_and(|k| k.contains(&p1) && k.contains("newer than the retention age")), "{r}");
    assert_eq!(count(&db.pool).await, 6);
    let r = partitions::drop_old(&db.pool, &opts(30)).await.unwrap();
    let dropped: Vec<&str> = r.dropped.iter().map(|p| p.name.as_str()).collect();
    assert!(dropped.contains(&p1.as_str()) && dropped.contains(&p2.as_str()), "{r}");
    assert_eq!(count(&db.pool).await, 0, "{r}");
    // Recorded as the DELETE trigger records a prune, for rebuilds (a DROP fires no trigger).
    let pruned: (i64, i64) = sqlx::query_as("SELECT events, newest_id FROM highwater.pruned WHERE event_type = 'Tick'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(pruned, (6, second[2].1));
}

/// A transaction that took its id inside a partition and is still open holds the fence below the
/// partition's bound: it may still append into that partition, so the partition stays. Had it
/// been dropped, that append would find no partition for its transaction id and fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_transaction_holding_the_fence_keeps_its_partition() {
    let db = setup(&["Tick"]).await;
    narrow(&db.pool).await;
    let mut long = db.pool.begin().await.unwrap();
    let xid: Xid8 = sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *long).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *long).await.unwrap();
    burn_xids(&db.pool, 3 * WIDTH).await;

    let r = partitions::drop_old(&db.pool, &opts(0)).await.unwrap();
    let kept = r.kept.clone().unwrap_or_default();
    assert!(kept.contains("may still write into it") && kept.contains(&format!("pid {pid}")), "{r}");
    let holding: Vec<String> = partitions::list(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.lo <= xid && xid < p.hi)
        .map(|p| p.name)
        .collect();
    assert_eq!(holding.len(), 1, "the long transaction's partition is still there");

    let id = append(&mut long, &NewEvent::new("order", "1", "Tick", json!({}))).await.unwrap();
    long.commit().await.unwrap();
    assert_eq!(partition_of(&db.pool, id).await, holding[0], "its event went into that partition");

    // Once it committed and a shard delivered its event, the partition can go.
    apply(&db.pool, &consumer("audit", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let m = refused(partitions::drop_old(&db.pool, &opts(0)).await);
    assert!(m.contains("audit/__shared__: cursor 0/0"), "{m}");
    set_cursor(&db.pool, "audit", (xid, id)).await;
    partitions::drop_old(&db.pool, &opts(0)).await.unwrap();
    assert_eq!(count(&db.pool).await, 0);
    assert!(!names(&db.pool).await.contains(&holding[0]));
}

/// Sessions waiting for a lock on `highwater.events` or `consumer_shards`.
const WAITING: &str = "SELECT count(*) FROM pg_locks
                        WHERE relation IN ('highwater.consumer_shards'::regclass, 'highwater.events'::regclass)
                          AND NOT granted";

/// A per-instance consumer `late` from the earliest event, no shard yet, three old events in one
/// partition, transaction ids past it.
async fn late_consumer_and_an_old_partition() -> (TestDb, partitions::Partition) {
    let db = setup(&["Tick"]).await;
    narrow(&db.pool).await;
    apply(
        &db.pool,
        &consumer("late", "delivery: PerInstance\nstartFrom: earliest\nsink: {sql: {statement: 'SELECT 1'}}"),
    )
    .await;
    let events = old_events(&db.pool, 3).await;
    burn_xids(&db.pool, 2 * WIDTH).await;
    let name = partition_of(&db.pool, events[0].1).await;
    let p = partitions::list(&db.pool).await.unwrap().into_iter().find(|p| p.name == name).unwrap();
    (db, p)
}

/// A shard registered while a drop's transaction is open waits for it to commit: it cannot be
/// created between the drop's check and the drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_waits_for_a_drop_in_progress() {
    let (db, p) = late_consumer_and_an_old_partition().await;
    let mut drop_tx = db.pool.begin().await.unwrap();
    let cutoff = chrono::Utc::now() - chrono::Duration::days(30);
    assert_eq!(partitions::drop_in(&mut drop_tx, &p, cutoff).await.unwrap(), partitions::Outcome::Dropped);

    let pool = db.pool.clone();
    let register = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        let created = shards::register(&mut tx, "late", "pod-1", None).await.unwrap();
        tx.commit().await.unwrap();
        created
    });
    wait_count(&db.pool, WAITING, 1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!register.is_finished(), "the registration waits for the drop");
    drop_tx.commit().await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(10), register).await.unwrap().unwrap());
    assert_eq!(count(&db.pool).await, 0, "registered after the drop: it starts from what is left");
}

/// A drop that starts while a registration is uncommitted waits for it, then sees the shard and
/// refuses: nothing dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_refuses_a_shard_registered_just_before_it() {
    let (db, p) = late_consumer_and_an_old_partition().await;
    let mut register = db.pool.begin().await.unwrap();
    assert!(shards::register(&mut register, "late", "pod-1", None).await.unwrap());

    let pool = db.pool.clone();
    let drop = tokio::spawn(async move { partitions::drop_old(&pool, &opts(30)).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!drop.is_finished(), "the drop waits for the registering transaction");
    register.commit().await.unwrap();
    let m = refused(tokio::time::timeout(Duration::from_secs(30), drop).await.unwrap().unwrap());
    assert!(m.contains("late/pod-1: cursor 0/0"), "{m}");
    assert_eq!(count(&db.pool).await, 3, "nothing dropped");
    assert!(names(&db.pool).await.contains(&p.name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_created_ahead_once_and_the_tail_catches_the_rest() {
    let db = setup(&["Tick"]).await;
    narrow(&db.pool).await;
    // Two more calls at once: each partition is created once (the ranges stay contiguous below);
    // the transaction ids they take may call for one more partition at this tiny width.
    let (a, b) = tokio::join!(partitions::create_ahead(&db.pool), partitions::create_ahead(&db.pool));
    assert!(a.unwrap() + b.unwrap() <= 2);
    let next: Xid8 =
        sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())").fetch_one(&db.pool).await.unwrap();
    let all = partitions::list(&db.pool).await.unwrap();
    let top = all.iter().map(|p| p.hi).max().unwrap();
    assert!(top.0 >= next.0 + 5 * WIDTH as u64 - 1, "five widths ahead: {top} vs {next}");
    // After the legacy partition (`narrow` left a gap there, below the fence, that nothing can
    // be written into any more).
    for w in all[1..].windows(2) {
        assert_eq!(w[0].hi, w[1].lo, "contiguous: {all:?}");
    }
    // Past every partition (nobody created more): the insert still succeeds, in the tail.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$",
        6 * WIDTH
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("order", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(partition_of(&db.pool, id).await, "events_tail");
    let tx_id: Xid8 = sqlx::query_scalar("SELECT tx_id FROM highwater.events WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();

    // The next creation turns the tail's rows into a range ending just above them, and goes on.
    assert!(partitions::create_ahead(&db.pool).await.unwrap() >= 5);
    let holding = partition_of(&db.pool, id).await;
    let p = partitions::list(&db.pool).await.unwrap().into_iter().find(|p| p.name == holding).unwrap();
    assert_eq!((p.lo, p.hi), (top, Xid8(tx_id.0 + 1)), "{p:?}");
    let mut tx = db.pool.begin().await.unwrap();
    let id2 = append(&mut tx, &NewEvent::new("order", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let p2 = partition_of(&db.pool, id2).await;
    assert!(p2 != "events_tail" && p2 != holding, "{p2}");
}

/// Partition creation (which re-cuts the tail) and drops run while writers append several events
/// per transaction: no append fails (no deadlock, no missing partition), and every event a writer
/// committed is either still there or in a partition that was dropped whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_under_concurrent_appenders_fails_no_append() {
    let db = setup(&["Tick"]).await;
    narrow(&db.pool).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut writers = Vec::new();
    for w in 0..4 {
        let (pool, stop) = (db.pool.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut committed = 0u64;
            while !stop.is_cancelled() {
                let mut tx = pool.begin().await.unwrap();
                for i in 0..3 {
                    append(&mut tx, &NewEvent::new("order", &format!("{w}-{i}"), "Tick", json!({}))).await.unwrap();
                }
                tx.commit().await.unwrap();
                committed += 3;
            }
            committed
        }));
    }
    let (mut created, mut dropped, mut busy) = (0, 0, 0);
    let until = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < until {
        burn_xids_only(&db.pool, WIDTH / 2).await;
        match partitions::create_ahead(&db.pool).await {
            Ok(n) => created += n,
            // The re-cut waits at most 1 s for the table; under this load it may give up.
            Err(e) if e.to_string().contains("lock timeout") => busy += 1,
            Err(e) => panic!("creating partitions: {e}"),
        }
        dropped += partitions::drop_old(&db.pool, &opts(0)).await.unwrap().dropped.len();
    }
    stop.cancel();
    let mut committed = 0;
    for w in writers {
        committed += w.await.expect("no append failed");
    }
    assert!(committed > 0 && created > 0 && dropped > 0, "{committed} appended, {created} created, {dropped} dropped");
    let left = count(&db.pool).await as u64;
    assert!(left <= committed, "{left} of {committed}");
    eprintln!("{committed} appended, {created} partitions created, {dropped} dropped, {busy} creations busy");
}

/// Commits `n` transactions that take a transaction id and write nothing (no partition creation).
async fn burn_xids_only(pool: &PgPool, n: i64) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )))
    .execute(pool)
    .await
    .unwrap();
}
