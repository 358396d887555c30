//! Reading the next batch while the current one is delivered (external sinks on the claim's
//! connection, SQL sinks on a second one): a batch read ahead is never delivered when an
//! operator's command lands between its read and the cursor update that would make it the next
//! batch; a drain that reads ahead delivers every event once, in order.
mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, routing::post};
use common::*;
use highwater::{NewEvent, append, ops};
use serde_json::{Value, json};
use tokio::sync::watch;

/// A webhook receiver whose first request, while `hold` is set, waits until the gate opens.
struct Gate {
    batches: Mutex<Vec<Vec<i64>>>,
    hold: AtomicBool,
    open: watch::Sender<bool>,
}

async fn receive(State(gate): State<Arc<Gate>>, Json(body): Json<Vec<Value>>) -> &'static str {
    let ids = body.iter().map(|e| e["event"]["id"].as_i64().expect("event.id")).collect();
    gate.batches.lock().unwrap().push(ids);
    if gate.hold.swap(false, Ordering::SeqCst) {
        let mut rx = gate.open.subscribe();
        rx.wait_for(|open| *open).await.unwrap();
    }
    "ok"
}

async fn metric(port: u16, series: &str) -> f64 {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    body.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// Twenty events in one transaction, `n` 0..19; their ids in order.
async fn twenty_orders(pool: &sqlx::PgPool) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            append(&mut tx, &NewEvent::new("order", &i.to_string(), "OrderPlaced", json!({"n": i}))).await.unwrap(),
        );
    }
    tx.commit().await.unwrap();
    ids
}

const USED: &str = "highwater_read_ahead_batches_total{consumer=\"c\",instance_id=\"__shared__\",outcome=\"used\"}";
const DISCARDED: &str =
    "highwater_read_ahead_batches_total{consumer=\"c\",instance_id=\"__shared__\",outcome=\"discarded\"}";

async fn shard(pool: &sqlx::PgPool) -> (String, i64, i64) {
    sqlx::query_as("SELECT status, cursor_id, delivered_count FROM highwater.consumer_shards WHERE consumer = 'c'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disable_between_the_read_ahead_and_the_cursor_update_discards_the_batch_read_ahead() {
    let db = setup(&["OrderPlaced"]).await;
    let ids = twenty_orders(&db.pool).await;

    let gate =
        Arc::new(Gate { batches: Mutex::default(), hold: AtomicBool::new(true), open: watch::Sender::new(false) });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/hook", post(receive)).with_state(gate.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    apply(
        &db.pool,
        &consumer("c", &format!("delivery: Shared\nbatchSize: 5\nsink: {{webhook: {{url: 'http://{addr}/hook', batch: true, timeout: 120s}}}}")),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "pod-a", logs.path());
    let (used, discarded) = (USED, DISCARDED);

    // The first batch (events 1-5) is held at the receiver; meanwhile the pass reads 6-10 ahead.
    eventually("the first batch at the receiver", Duration::from_secs(60), || async {
        !gate.batches.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ops::disable(&db.pool, "c", None, &ops::Audit::by("test")).await.unwrap();
    gate.open.send_replace(true);

    // The cursor update is refused (the shard is disabled) and the batch read ahead goes with it.
    eventually("the read ahead discarded", Duration::from_secs(30), || async {
        metric(d.http_port, discarded).await == 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*gate.batches.lock().unwrap(), vec![ids[0..5].to_vec()], "nothing after the held batch was delivered");
    assert_eq!(shard(&db.pool).await, ("disabled".to_owned(), 0, 0), "the cursor did not move");
    assert_eq!(metric(d.http_port, used).await, 0.0);

    // Enabled again: the refused batch again (at least once), then every event once, in order,
    // the drain reading ahead.
    ops::enable(&db.pool, "c", None, &ops::Audit::by("test")).await.unwrap();
    eventually("every event delivered", Duration::from_secs(60), || async {
        gate.batches.lock().unwrap().last().and_then(|b| b.last()) == ids.last()
    })
    .await;
    let batches = gate.batches.lock().unwrap().clone();
    let delivered: Vec<i64> = batches.concat();
    let expected: Vec<i64> = ids[0..5].iter().chain(&ids).copied().collect();
    assert_eq!(delivered, expected, "batches {batches:?}");
    eventually("the cursor at the last event", Duration::from_secs(30), || async {
        shard(&db.pool).await == ("idle".to_owned(), ids[19], 20)
    })
    .await;
    assert!(metric(d.http_port, used).await >= 3.0, "batches 6-10, 11-15 and 16-20 were read ahead and used");
    assert_eq!(metric(d.http_port, discarded).await, 1.0);
}

/// The rule itself, against the database: a read made while the shard was disabled saw it not
/// due and read nothing, though its head is the newest event; used after an enable and a cursor
/// update that both succeed, it would move the cursor past every event after the batch. Refused,
/// as are reads that missed a change of the events passed over or a barrier (updates that succeed
/// all the same); a read whose row is the one the update leaves is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_ahead_is_used_only_if_the_row_it_saw_still_stands() {
    use highwater::{Position, Xid8, read_ahead, shards};
    let db = setup(&["OrderPlaced"]).await;
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..20 {
        append(&mut tx, &NewEvent::new("order", &i.to_string(), "OrderPlaced", json!({"n": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
    let at: Vec<Position> =
        sqlx::query_as::<_, (Xid8, i64)>("SELECT tx_id, id FROM highwater.events ORDER BY tx_id, id")
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(Position::from)
            .collect();
    apply(&db.pool, &consumer("c", "delivery: Shared\nbatchSize: 5\nsink: {log: {}}")).await;
    let conn = &mut *db.pool.acquire().await.unwrap();
    shards::register(conn, "c", "__shared__", None).await.unwrap();
    let shard = shards::load(conn, "c", "__shared__").await.unwrap().unwrap();

    // Disabled while the batch after the first five is read; enabled before the cursor update.
    ops::disable(&db.pool, "c", None, &ops::Audit::by("test")).await.unwrap();
    let ahead = read_ahead::read(conn, &shard, at[4], &[], 5, true).await.unwrap().unwrap();
    ops::enable(&db.pool, "c", None, &ops::Audit::by("test")).await.unwrap();
    let advanced = shards::advance(conn, &shard, shard.cursor, at[4], 5).await.unwrap().expect("the update succeeds");
    assert!(ahead.after(shard.cursor, advanced).is_none(), "a read that saw the shard disabled is read again");

    // A read model's bootstrap marks an event after the batch as seen meanwhile: the read that
    // did not pass over it is read again.
    let shard = shards::load(conn, "c", "__shared__").await.unwrap().unwrap();
    let ahead = read_ahead::read(conn, &shard, at[6], &[], 5, true).await.unwrap().unwrap();
    sqlx::query("UPDATE highwater.consumer_shards SET bootstrap_snapshot = pg_current_snapshot(), bootstrap_seen = $1")
        .bind(vec![at[8].id])
        .execute(&db.pool)
        .await
        .unwrap();
    let advanced = shards::advance(conn, &shard, shard.cursor, at[6], 2).await.unwrap().unwrap();
    assert!(ahead.after(shard.cursor, advanced).is_none(), "a read that missed a change of the events passed over");
    sqlx::query("UPDATE highwater.consumer_shards SET bootstrap_snapshot = NULL, bootstrap_seen = '{}'")
        .execute(&db.pool)
        .await
        .unwrap();

    // A change of partitions sets a barrier meanwhile (after the batch): read again, since what
    // lies past the barrier belongs to the new split.
    let shard = shards::load(conn, "c", "__shared__").await.unwrap().unwrap();
    let ahead = read_ahead::read(conn, &shard, at[7], &[], 5, true).await.unwrap().unwrap();
    sqlx::query("UPDATE highwater.consumer_shards SET barrier_tx = $1, barrier_id = $2")
        .bind(at[9].xid8())
        .bind(at[9].id)
        .execute(&db.pool)
        .await
        .unwrap();
    let advanced = shards::advance(conn, &shard, shard.cursor, at[7], 1).await.unwrap().expect("before the barrier");
    assert!(ahead.after(shard.cursor, advanced).is_none(), "a read that missed a barrier");
    sqlx::query("UPDATE highwater.consumer_shards SET barrier_tx = NULL, barrier_id = NULL")
        .execute(&db.pool)
        .await
        .unwrap();

    // Nothing changed between the read and the update: the batch is the next events.
    let shard = shards::load(conn, "c", "__shared__").await.unwrap().unwrap();
    let ahead = read_ahead::read(conn, &shard, at[9], &[], 5, true).await.unwrap().unwrap();
    let advanced = shards::advance(conn, &shard, shard.cursor, at[9], 2).await.unwrap().unwrap();
    let (next, batch) = ahead.after(shard.cursor, advanced).expect("the read stands");
    assert_eq!(next.cursor, at[9]);
    assert_eq!(batch.events.iter().map(|e| e.position()).collect::<Vec<_>>(), at[10..15].to_vec());
}

/// The SQL sink reads ahead too, on a second connection while the claim's runs the batch: a
/// disable that lands while the batch runs refuses its cursor update (the whole batch rolls back)
/// and the batch read beside it is discarded; enabled again, the drain applies every event
/// exactly once, in order, reading ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_batch_refused_under_a_disable_discards_the_batch_read_beside_it() {
    let db = setup(&["OrderPlaced"]).await;
    sqlx::raw_sql(
        "CREATE SEQUENCE applied_seq;
         CREATE TABLE proj (event_id bigint PRIMARY KEY, seq bigint NOT NULL);
         CREATE TABLE hold (n int);
         INSERT INTO hold VALUES (3)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let ids = twenty_orders(&db.pool).await;
    // Event 3 sleeps for as long as `hold` names it: the first batch (0-4) runs for 3 s. Every
    // other event takes 100 ms, so that each batch runs long enough for the read beside it to take
    // its snapshot before the batch commits (a read that starts after would be discarded: safe,
    // but not what this test counts).
    let statement = "INSERT INTO proj (event_id, seq) SELECT $2, nextval('applied_seq') \
                     FROM pg_sleep(CASE WHEN ($1->>'n')::int IN (SELECT n FROM hold) THEN 3 ELSE 0.1 END)";
    apply(
        &db.pool,
        &consumer("c", &format!("delivery: Shared\nbatchSize: 5\nsink: {{sql: {{statement: \"{statement}\"}}}}")),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    // The read beside a SQL batch is the per-shard pass's (a group pass reads once for all its
    // members and has no batch to read beside): a SQL consumer uses it when it delivers alone
    // (far behind, or slow: docs/delivery.md, "The group pass"). The group stays off here so that
    // the first batch is the shard's own from the start.
    let d = Dispatcher::start_with_env(&db.url, "pod-a", logs.path(), &[("HIGHWATER_PER_CONSUMER_PASS", "true")]);
    let (used, discarded) = (USED, DISCARDED);

    // The first batch running (its transaction open, nothing committed yet; it holds on event 3).
    eventually("the first batch running", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%sql_sink_apply%' AND wait_event = 'PgSleep'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        n == 1
    })
    .await;
    ops::disable(&db.pool, "c", None, &ops::Audit::by("test")).await.unwrap();
    eventually("the read ahead discarded", Duration::from_secs(30), || async {
        metric(d.http_port, discarded).await == 1.0
    })
    .await;
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM proj").fetch_one(&db.pool).await.unwrap();
    assert_eq!(applied, 0, "the refused batch rolled back whole");
    assert_eq!(shard(&db.pool).await, ("disabled".to_owned(), 0, 0), "the cursor did not move");
    assert_eq!(metric(d.http_port, used).await, 0.0);

    sqlx::query("DELETE FROM hold").execute(&db.pool).await.unwrap();
    ops::enable(&db.pool, "c", None, &ops::Audit::by("test")).await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM proj", 20, Duration::from_secs(60)).await;
    let order: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM proj ORDER BY seq").fetch_all(&db.pool).await.unwrap();
    assert_eq!(order, ids, "every event once, in order");
    eventually("the cursor at the last event", Duration::from_secs(30), || async {
        shard(&db.pool).await == ("idle".to_owned(), ids[19], 20)
    })
    .await;
    assert!(metric(d.http_port, used).await >= 3.0, "batches 6-10, 11-15 and 16-20 were read beside and used");
    assert_eq!(metric(d.http_port, discarded).await, 1.0);
}
