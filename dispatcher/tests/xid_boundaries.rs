//! Positions across the transaction-id boundaries every long-lived database crosses: a power of
//! ten (where text order and numeric order part: `'9999' > '10000'`) and the 32-bit epoch (where
//! `xid8` leaves the range of `xid`). Each scenario runs on a cluster whose counter starts just
//! below the boundary (`pg_resetwal`), appends events on both sides, and checks delivery, kills,
//! retention, rewind, skip, gc, lag and SSE resume against the events' real positions.
mod common;

use std::time::Duration;

use common::*;
use highwater::{Error, NewEvent, Position, Xid8, append, ops, retention, shards};
use serde_json::json;
use sqlx::PgPool;

/// 10^4, 2^32 (epoch 0 → 1) and 10^10 (a power of ten at epoch 2).
const TEN_4: u64 = 10_000;
const EPOCH_1: u64 = 1 << 32;
const TEN_10: u64 = 10_000_000_000;

/// A migrated cluster whose transaction counter is a little below `boundary`: room for the
/// migrations and a test's own setup; [`edge`] then moves it to just below.
async fn below(boundary: u64, types: &[&str]) -> TestDb {
    setup_at(types, boundary - 500).await
}

/// Uses up transaction ids until the next is `margin` below `boundary`.
async fn edge(db: &TestDb, boundary: u64, margin: u64) {
    highwater_testkit::burn_xids_to(&db.pool, boundary - margin).await.unwrap();
}

/// Appends one event in its own transaction; returns its id and position.
async fn append_one(pool: &PgPool, stream: &str, payload: serde_json::Value) -> (i64, Position) {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("order", stream, "Tick", payload)).await.unwrap();
    tx.commit().await.unwrap();
    (id, position_of(pool, id).await)
}

/// `n` events, one per transaction, on distinct streams, starting `margin` ids below `boundary`.
async fn events_across(db: &TestDb, boundary: u64, margin: u64, n: usize) -> Vec<(i64, Position)> {
    edge(db, boundary, margin).await;
    let mut events = Vec::new();
    for i in 0..n {
        events.push(append_one(&db.pool, &i.to_string(), json!({})).await);
    }
    events
}

async fn position_of(pool: &PgPool, id: i64) -> Position {
    let tx: Xid8 =
        sqlx::query_scalar("SELECT tx_id FROM highwater.events WHERE id = $1").bind(id).fetch_one(pool).await.unwrap();
    Position::from((tx, id))
}

async fn cursor(pool: &PgPool, consumer: &str) -> Position {
    let row: (Xid8, i64) =
        sqlx::query_as("SELECT cursor_tx, cursor_id FROM highwater.consumer_shards WHERE consumer = $1")
            .bind(consumer)
            .fetch_one(pool)
            .await
            .unwrap();
    row.into()
}

async fn set_cursor(pool: &PgPool, consumer: &str, at: Position, status: &str) {
    sqlx::query("UPDATE highwater.consumer_shards SET cursor_tx = $2, cursor_id = $3, status = $4 WHERE consumer = $1")
        .bind(consumer)
        .bind(at.xid8())
        .bind(at.id)
        .bind(status)
        .execute(pool)
        .await
        .unwrap();
}

fn assert_crosses(boundary: u64, positions: &[Position]) {
    assert!(
        positions.iter().any(|p| p.tx < boundary) && positions.iter().any(|p| p.tx >= boundary),
        "the events straddle {boundary}: {positions:?}"
    );
}

fn refused<T: std::fmt::Debug>(r: highwater::Result<T>) -> String {
    match r {
        Err(Error::Refused(m)) => m.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Writers whose transactions commit out of order around the boundary, two dispatchers killed
/// with SIGKILL while they deliver: the SQL sink applies every event exactly once, the log sink
/// delivers every event, and each cursor ends at the newest event.
async fn delivery_survives_kills(boundary: u64) {
    let db = below(boundary, &["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log_file = logs.path().join("sink.jsonl");
    let yaml = [
        consumer(
            "projection",
            "delivery: Shared\nbatchSize: 7\nsink: {sql: {statement: 'INSERT INTO applied SELECT $2 FROM pg_sleep(0.003)'}}",
        ),
        consumer("log", &format!("delivery: Shared\nbatchSize: 7\nsink: {{log: {{target: '{}'}}}}", log_file.display())),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let mut procs: Vec<Dispatcher> =
        (0..2).map(|i| Dispatcher::start(&db.url, &format!("d{i}"), logs.path())).collect();

    edge(&db, boundary, 40).await;
    // Four writers, each holding its transaction open a random while: commits land out of
    // transaction-id order on both sides of the boundary.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let pool = db.pool.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..20 {
                    let mut tx = pool.begin().await.unwrap();
                    let e = NewEvent::new("order", &format!("w{w}"), "Tick", json!({"i": i}));
                    ids.push(append(&mut tx, &e).await.unwrap());
                    tokio::time::sleep(Duration::from_millis(rand::random_range(0..30))).await;
                    tx.commit().await.unwrap();
                }
                ids
            })
        })
        .collect();
    for k in 0..3 {
        tokio::time::sleep(Duration::from_millis(rand::random_range(100..300))).await;
        procs.remove(0).sigkill();
        procs.push(Dispatcher::start(&db.url, &format!("d-{k}"), logs.path()));
    }
    let mut ids = Vec::new();
    for w in writers {
        ids.extend(w.await.unwrap());
    }
    let total = ids.len() as i64;
    let pool = db.pool.clone();
    eventually("both consumers to catch up", Duration::from_secs(90), || {
        let pool = pool.clone();
        async move {
            let lag: i64 = ops::status(&pool, None).await.unwrap().iter().map(|s| s.lag_events).sum();
            lag == 0 && scalar_i64(&pool, "SELECT count(*) FROM applied").await >= total
        }
    })
    .await;
    drop(procs);

    let mut positions = Vec::new();
    for id in &ids {
        positions.push(position_of(&db.pool, *id).await);
    }
    assert_crosses(boundary, &positions);
    let newest = *positions.iter().max().unwrap();
    assert_eq!(scalar_i64(&db.pool, "SELECT count(DISTINCT event_id) FROM applied").await, total, "every event");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM applied").await, total, "each exactly once");
    // A SIGKILL during the sink's write can cut a batch's last line short (the kernel stops a
    // write at a page boundary for a fatal signal); that batch's cursor did not move, so its events
    // come again in whole lines. Only whole lines count.
    let logged: std::collections::BTreeSet<i64> = std::fs::read_to_string(&log_file)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["event"]["id"].as_i64())
        .collect();
    assert_eq!(logged, ids.iter().copied().collect(), "the log sink delivered every event");
    assert_eq!(cursor(&db.pool, "projection").await, newest);
    assert_eq!(cursor(&db.pool, "log").await, newest);
}

/// A dead shard whose cursor is past the boundary but behind the newest event blocks prune (and
/// its dry run), the refusal names the real positions, and lag counts what it has not processed.
async fn retention_never_deletes_what_a_shard_needs(boundary: u64) {
    let db = below(boundary, &["Tick"]).await;
    apply(&db.pool, &consumer("lagging", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let events = events_across(&db, boundary, 10, 20).await;
    sqlx::query("UPDATE highwater.events SET created_at = now() - interval '40 days'").execute(&db.pool).await.unwrap();
    let positions: Vec<Position> = events.iter().map(|e| e.1).collect();
    assert_crosses(boundary, &positions);
    // Past the boundary, eight events short of the newest.
    let at = positions[12];
    assert!(at.tx >= boundary, "{at} is past {boundary}");
    set_cursor(&db.pool, "lagging", at, "dead").await;
    let newest = *positions.last().unwrap();

    let status = ops::status(&db.pool, Some("lagging")).await.unwrap();
    assert_eq!(status[0].lag_events, 7, "lag counts the events after the cursor");
    assert_eq!(status[0].cursor_tx, at.xid8());

    let opts = |batch_size, dry_run| retention::PruneOptions {
        older_than_days: 30,
        stream_types: Some(vec!["order".into()]),
        batch_size,
        dry_run,
    };
    for (batch, dry) in [(10_000, false), (3, false), (10_000, true)] {
        let m = refused(retention::prune(&db.pool, &opts(batch, dry)).await);
        assert!(m.contains(&format!("up to position {newest}, event {}", newest.id)), "batch {batch}: {m}");
        assert!(m.contains(&format!("lagging/__shared__: cursor {at} (event {}), status dead", at.id)), "{m}");
        assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await, 20, "nothing deleted");
    }

    // Caught up: everything goes.
    set_cursor(&db.pool, "lagging", newest, "idle").await;
    let r = retention::prune(&db.pool, &opts(3, false)).await.unwrap();
    assert_eq!(r.total(), 20);
}

/// Rewind to a time, to latest and to an event puts the cursor where the events really are.
async fn rewind_lands_on_the_real_positions(boundary: u64) {
    let db = below(boundary, &["Tick"]).await;
    apply(&db.pool, &consumer("r", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let events = events_across(&db, boundary, 10, 15).await;
    // The first five are an hour old; the rest, from just below the boundary on, are new.
    for (id, _) in &events[..5] {
        sqlx::query("UPDATE highwater.events SET created_at = now() - interval '1 hour' WHERE id = $1")
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let positions: Vec<Position> = events.iter().map(|e| e.1).collect();
    assert!(positions[5].tx < boundary && positions[14].tx >= boundary, "{positions:?}");

    let half_hour_ago = chrono::Utc::now() - chrono::Duration::minutes(30);
    ops::rewind_skipping(&db.pool, "r", None, ops::RewindTo::Time(half_hour_ago), &ops::Audit::by("test"))
        .await
        .unwrap();
    let c = cursor(&db.pool, "r").await;
    assert_eq!(c, Position::new(positions[5].tx, positions[5].id - 1), "just before the first event since then");
    assert!(positions[5..].iter().all(|p| *p > c) && positions[..5].iter().all(|p| *p <= c));

    ops::rewind(&db.pool, "r", None, ops::RewindTo::Latest, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(cursor(&db.pool, "r").await, positions[14], "latest is the newest event");

    let (id, p) = events[7];
    ops::rewind(&db.pool, "r", None, ops::RewindTo::Event(id), &ops::Audit::by("test")).await.unwrap();
    assert_eq!(cursor(&db.pool, "r").await, Position::new(p.tx, id - 1));
}

/// A poison event just past the boundary: the shard goes dead on it, skip moves past exactly
/// that event into the dead letters, and every other event is applied once.
async fn skip_moves_past_exactly_the_poison_event(boundary: u64) {
    let db = below(boundary, &["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (event_id bigint)").execute(&db.pool).await.unwrap();
    let statement = "INSERT INTO seen SELECT $2 WHERE 1 / (CASE WHEN ($1->>'poison')::bool THEN 0 ELSE 1 END) = 1";
    let spec = format!("delivery: Shared\nmaxAttempts: 1\nsink: {{sql: {{statement: \"{statement}\"}}}}");
    apply(&db.pool, &consumer("p", &spec)).await;
    edge(&db, boundary, 3).await;
    let mut events = Vec::new();
    for i in 0..8 {
        events.push(append_one(&db.pool, "1", json!({"poison": i == 3})).await);
    }
    let (poison, poison_at) = events[3];
    assert!(poison_at.tx >= boundary && events[2].1.tx < boundary, "{events:?}");
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d", logs.path());
    let pool = db.pool.clone();
    eventually("the shard to go dead", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move { shards::load_all(&pool, Some("p")).await.unwrap()[0].status == shards::Status::Dead }
    })
    .await;
    let dead = &shards::load_all(&db.pool, Some("p")).await.unwrap()[0];
    assert_eq!(dead.failing_event_id, Some(poison));
    assert_eq!(dead.cursor, events[2].1, "the cursor stops just before the poison event");

    ops::skip(&db.pool, "p", None, Some(poison), &ops::Audit::by("test")).await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM seen", 7, Duration::from_secs(30)).await;
    drop(d);
    let seen: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM seen ORDER BY event_id").fetch_all(&db.pool).await.unwrap();
    let expected: Vec<i64> = events.iter().map(|e| e.0).filter(|id| *id != poison).collect();
    assert_eq!(seen, expected);
    let letters = ops::dead_letters(&db.pool, Some("p")).await.unwrap();
    assert_eq!(letters.iter().map(|l| l.event_id).collect::<Vec<_>>(), [poison]);
    assert_eq!(cursor(&db.pool, "p").await, events[7].1);
}

/// A killed instance's per-instance shard, stopped past the boundary, blocks prune of what it
/// has not seen; gc removes it and the prune goes through.
async fn gc_of_a_dead_instance_unblocks_prune(boundary: u64) {
    let db = below(boundary, &["Tick"]).await;
    apply(&db.pool, &consumer("p", "delivery: PerInstance\nsink: {sql: {statement: 'SELECT 1'}}")).await;
    let mut conn = db.pool.acquire().await.unwrap();
    shards::register(&mut conn, "p", "gone", None).await.unwrap();
    drop(conn);
    let events = events_across(&db, boundary, 5, 10).await;
    sqlx::query("UPDATE highwater.events SET created_at = now() - interval '40 days'").execute(&db.pool).await.unwrap();
    sqlx::query("UPDATE highwater.consumer_shards SET heartbeat_at = now() - interval '2 hours'")
        .execute(&db.pool)
        .await
        .unwrap();
    let positions: Vec<Position> = events.iter().map(|e| e.1).collect();
    assert_crosses(boundary, &positions);
    // Past the boundary, two events short of the newest.
    let at = positions[7];
    assert!(at.tx >= boundary, "{at} is past {boundary}");
    set_cursor(&db.pool, "p", at, "idle").await;
    let opts = retention::PruneOptions {
        older_than_days: 30,
        stream_types: Some(vec!["order".into()]),
        batch_size: 100,
        dry_run: false,
    };
    let m = refused(retention::prune(&db.pool, &opts).await);
    assert!(m.contains(&format!("p/gone: cursor {at}")), "{m}");

    let gc = ops::gc(
        &db.pool,
        &ops::GcOptions {
            stale_after: Duration::from_secs(3600),
            consumer: None,
            instance: None,
            include_managed: false,
        },
    )
    .await
    .unwrap();
    assert_eq!(gc.deleted.len(), 1);
    assert_eq!(gc.deleted[0].cursor, at, "gc reports the cursor it removed");
    assert_eq!(retention::prune(&db.pool, &opts).await.unwrap().total(), 10);
}

/// An SSE client that resumes with Last-Event-ID from before the boundary gets exactly the events
/// after it, in order, across the boundary.
async fn sse_resumes_across(boundary: u64) {
    let db = below(boundary, &["Tick"]).await;
    apply(&db.pool, &consumer("live", "delivery: PerInstance\nsink: {sse: {buffer: 64}}")).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "sse", logs.path(), &[("HIGHWATER_SSE_TOKENS", "t0k3n")]);
    wait_registered(&db.pool, "live", 1).await;
    let events = events_across(&db, boundary, 8, 16).await;
    let positions: Vec<Position> = events.iter().map(|e| e.1).collect();
    assert_crosses(boundary, &positions);
    let last_seen = events.iter().rev().find(|e| e.1.tx < boundary).unwrap().0;
    let mut resp = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/v1/consumers/live/events", d.http_port))
        .bearer_auth("t0k3n")
        .header("Last-Event-ID", last_seen.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let expected: Vec<i64> = events.iter().map(|e| e.0).filter(|id| *id > last_seen).collect();
    let got = read_sse(&mut resp, expected.len() + 1, Duration::from_secs(5)).await;
    assert_eq!(got.iter().map(|e| e.0).collect::<Vec<_>>(), expected, "nothing lost, nothing twice");
}

macro_rules! at_each_boundary {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn across_ten_to_the_4() {
                    super::$scenario(super::TEN_4).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn across_the_32_bit_epoch() {
                    super::$scenario(super::EPOCH_1).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn across_ten_to_the_10_at_epoch_2() {
                    super::$scenario(super::TEN_10).await
                }
            }
        )*
    };
}

at_each_boundary!(
    delivery_survives_kills,
    retention_never_deletes_what_a_shard_needs,
    rewind_lands_on_the_real_positions,
    skip_moves_past_exactly_the_poison_event,
    gc_of_a_dead_instance_unblocks_prune,
    sse_resumes_across,
);
