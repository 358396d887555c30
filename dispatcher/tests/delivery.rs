//! Every committed event reaches every consumer, in (tx_id, id) order, under concurrent writers
//! whose commits land out of id order; the naive `id > cursor` read loses events under the same
//! load.
mod common;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use common::*;
use highwater::{NewEvent, Position, append, shards};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::Mutex;

#[tokio::test]
async fn naive_id_cursor_loses_an_event_that_the_fence_delivers() {
    let db = setup(&["Tick"]).await;
    let mut slow = db.pool.begin().await.unwrap();
    let first = append(&mut slow, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    let mut fast = db.pool.begin().await.unwrap();
    let second = append(&mut fast, &NewEvent::new("s", "2", "Tick", json!({}))).await.unwrap();
    fast.commit().await.unwrap();
    assert!(first < second);

    // The naive reader sees the higher id first and moves past the lower one.
    let naive: Vec<i64> = sqlx::query_scalar("SELECT id FROM highwater.events WHERE id > 0 ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(naive, vec![second]);
    // The fence reader sees nothing yet: the slow transaction holds the fence.
    let mut conn = db.pool.acquire().await.unwrap();
    let batch = shards::read_batch(&mut conn, Position::ZERO, &[], 100).await.unwrap();
    assert!(batch.events.is_empty(), "read past a running transaction: {:?}", batch.events);

    slow.commit().await.unwrap();
    let naive_after: Vec<i64> = sqlx::query_scalar("SELECT id FROM highwater.events WHERE id > $1 ORDER BY id")
        .bind(second)
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(naive_after.is_empty(), "the naive reader never sees event {first}");
    let batch = shards::read_batch(&mut conn, Position::ZERO, &[], 100).await.unwrap();
    let ids: Vec<i64> = batch.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![first, second], "the fence reader delivers both, in transaction order");
}

const SCHEMA: &str = "
CREATE TABLE shared_seen (seq bigserial PRIMARY KEY, event_id bigint NOT NULL);
CREATE TABLE instance_seen (instance text NOT NULL, event_id bigint NOT NULL);
CREATE TABLE log_seen (event_id bigint NOT NULL);";

async fn writer(pool: PgPool, txs: usize, committed: Arc<Mutex<BTreeSet<i64>>>) {
    for t in 0..txs {
        let (n, delay_ms, abort) = (rand::random_range(1..=3), rand::random_range(0..25u64), rand::random_bool(0.1));
        let mut tx = pool.begin().await.unwrap();
        let mut ids = Vec::new();
        for k in 0..n {
            let ev = NewEvent::new("account", &format!("{}", (t * 7 + k) % 13), "Deposited", json!({"n": t}));
            ids.push(append(&mut tx, &ev).await.unwrap());
        }
        // Sitting on the transaction lets younger ones commit first.
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        if abort {
            tx.rollback().await.unwrap();
        } else {
            tx.commit().await.unwrap();
            committed.lock().await.extend(ids);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_deliver_every_committed_event() {
    let db = setup(&["Deposited"]).await;
    sqlx::raw_sql(SCHEMA).execute(&db.pool).await.unwrap();
    let yaml = [
        consumer("shared-sql", "delivery: Shared\nbatchSize: 50\nsink: {sql: {statement: 'INSERT INTO shared_seen (event_id) VALUES ($2)'}}"),
        consumer(
            "each-instance",
            "delivery: PerInstance\nstartFrom: earliest\nsink: {sql: {statement: \"INSERT INTO instance_seen VALUES (current_setting('highwater.instance_id'), $2)\"}}",
        ),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let logs = tempfile::tempdir().unwrap();
    let procs: Vec<Dispatcher> = (0..3).map(|i| Dispatcher::start(&db.url, &format!("d{i}"), logs.path())).collect();
    wait_registered(&db.pool, "each-instance", 3).await;

    // The naive reader polls `id > cursor` alongside the writers.
    let stop = tokio_util::sync::CancellationToken::new();
    let naive = {
        let pool = db.pool.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut cursor = 0i64;
            let mut seen = BTreeSet::new();
            while !stop.is_cancelled() {
                let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM highwater.events WHERE id > $1 ORDER BY id")
                    .bind(cursor)
                    .fetch_all(&pool)
                    .await
                    .unwrap();
                if let Some(&last) = ids.last() {
                    cursor = last;
                }
                seen.extend(ids);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        })
    };
    let committed = Arc::new(Mutex::new(BTreeSet::new()));
    let writers: Vec<_> = (0..6).map(|_| tokio::spawn(writer(db.pool.clone(), 80, committed.clone()))).collect();
    for w in writers {
        w.await.unwrap();
    }
    let committed = committed.lock().await.clone();
    let total = committed.len() as i64;

    let pool = db.pool.clone();
    eventually("every consumer to catch up", Duration::from_secs(90), || {
        let pool = pool.clone();
        async move {
            let shared = scalar_i64(&pool, "SELECT count(*) FROM shared_seen").await;
            let inst = scalar_i64(&pool, "SELECT count(*) FROM instance_seen").await;
            shared >= total && inst >= 3 * total
        }
    })
    .await;
    stop.cancel();
    let naive_seen = naive.await.unwrap();

    let shared: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM shared_seen ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    assert_eq!(shared.len() as i64, total, "the shared consumer delivered each event exactly once");
    assert_eq!(shared.iter().copied().collect::<BTreeSet<_>>(), committed);
    // Application order is (tx_id, id) order.
    let expected: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM highwater.events ORDER BY tx_id, id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(shared, expected, "delivered in transaction order");
    for i in 0..3 {
        let seen: Vec<i64> = sqlx::query_scalar("SELECT event_id FROM instance_seen WHERE instance = $1")
            .bind(format!("d{i}"))
            .fetch_all(&db.pool)
            .await
            .unwrap();
        assert_eq!(seen.len() as i64, total, "instance d{i} delivered each event once");
        assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), committed, "instance d{i} saw every event");
    }
    let lost: Vec<_> = committed.difference(&naive_seen).collect();
    println!("committed {total} events; the naive id > cursor reader lost {}", lost.len());
    assert!(!lost.is_empty(), "under out-of-order commits the naive reader loses events");
    drop(procs);
}
