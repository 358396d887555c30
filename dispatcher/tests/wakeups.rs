//! Wake-ups: writers notify only while a dispatcher sleeps, a dispatcher that goes to sleep never
//! strands a writer that saw it awake, and the head read stays cheap on a large table.
mod common;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use sqlx::{PgPool, postgres::PgListener};

const APPEND: &str = "SELECT highwater.append('order', 'o-1', 'OrderPlaced', '{}')";

/// Notifications on `highwater_events` that arrive within `window`.
async fn notifications(listener: &mut PgListener, window: Duration) -> usize {
    let deadline = Instant::now() + window;
    let mut n = 0;
    while let Ok(Ok(Some(_))) = tokio::time::timeout_at(deadline.into(), listener.try_recv()).await {
        n += 1;
    }
    n
}

async fn listen(db: &TestDb) -> PgListener {
    let mut l = PgListener::connect_with(&db.pool).await.unwrap();
    l.listen("highwater_events").await.unwrap();
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_notify_only_while_a_dispatcher_sleeps() {
    let db = setup(&["OrderPlaced"]).await;
    let mut l = listen(&db).await;

    sqlx::query(APPEND).execute(&db.pool).await.unwrap();
    assert_eq!(notifications(&mut l, Duration::from_millis(300)).await, 0, "nobody sleeps: no NOTIFY");

    sqlx::query("INSERT INTO highwater.sleepers VALUES ('d-1', now() + interval '1 minute')")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(APPEND).execute(&db.pool).await.unwrap();
    assert_eq!(notifications(&mut l, Duration::from_secs(2)).await, 1, "a dispatcher sleeps: one NOTIFY");

    sqlx::query("UPDATE highwater.sleepers SET asleep_until = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(APPEND).execute(&db.pool).await.unwrap();
    assert_eq!(notifications(&mut l, Duration::from_millis(300)).await, 0, "a lease that ran out counts as awake");

    // A REPEATABLE READ writer sees the sleepers as of its snapshot, which may predate a mark:
    // it notifies whatever it sees.
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("SET TRANSACTION ISOLATION LEVEL {level}")))
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(APPEND).execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(notifications(&mut l, Duration::from_secs(2)).await, 1, "{level} writer notifies");
    }
}

/// A dispatcher whose polls are all a minute apart except the busy one: only notifications and
/// the sleep protocol can bring it an event in time.
fn dispatcher(db: &TestDb, instance: &str, dir: &std::path::Path, idle: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{instance}.log"))).unwrap();
    Command::new(bin())
        .args(["dispatch", "--instance-id", instance, "--listen", "off"])
        .args(["--poll-interval", "60s", "--idle-poll-interval", idle, "--busy-poll-interval", "5ms"])
        .env("DATABASE_URL", &db.url)
        .env("HIGHWATER_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

async fn delivered(pool: &PgPool, id: i64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let seen: bool = sqlx::query_scalar("SELECT EXISTS (SELECT FROM seen WHERE event_id = $1)")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
        if seen {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

async fn asleep(pool: &PgPool, instance: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT FROM highwater.sleepers WHERE instance_id = $1 AND asleep_until > now())")
        .bind(instance)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Appends `n` events, one transaction each, as fast as one connection can.
async fn burst(pool: &PgPool, n: usize) -> i64 {
    let mut last = 0;
    for _ in 0..n {
        last = sqlx::query_scalar(APPEND).fetch_one(pool).await.unwrap();
    }
    last
}

/// A database with consumer `c` (a SQL sink into `seen`) and dispatcher `d-1` running it, once
/// it has marked itself asleep.
async fn asleep_dispatcher(idle: &str) -> (TestDb, impl Drop) {
    let db = setup(&["OrderPlaced"]).await;
    sqlx::query("CREATE TABLE seen (event_id bigint PRIMARY KEY)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &consumer("c", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen VALUES ($2)'}}")).await;
    let dir = tempfile::tempdir().unwrap();
    let d = scopeguard(dispatcher(&db, "d-1", dir.path(), idle), dir);
    eventually("the dispatcher to fall asleep", Duration::from_secs(30), || asleep(&db.pool, "d-1")).await;
    (db, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_saw_the_dispatcher_awake_is_delivered_after_it_falls_asleep() {
    let (db, _d) = asleep_dispatcher("60s").await;

    // Asleep, a single append is delivered through its NOTIFY (every poll is a minute away).
    let id = burst(&db.pool, 1).await;
    assert!(delivered(&db.pool, id, Duration::from_secs(5)).await, "an append to a sleeping dispatcher");

    let mut rounds = 0;
    let mut caught = 0;
    while caught < 5 {
        rounds += 1;
        assert!(rounds <= 40, "the writer never caught the dispatcher awake ({caught} of 5 rounds)");
        // A burst wakes it: it polls and writers stop notifying.
        let last = burst(&db.pool, 200).await;
        assert!(delivered(&db.pool, last, Duration::from_secs(5)).await, "the burst");
        // A writer appends while it is awake (its trigger sees nobody asleep and sends nothing),
        // then keeps its transaction open well past the dispatcher's quiet time, so the
        // dispatcher marks itself asleep before this commits.
        let mut tx = db.pool.begin().await.unwrap();
        let id: i64 = sqlx::query_scalar(APPEND).fetch_one(&mut *tx).await.unwrap();
        let saw_awake: bool =
            sqlx::query_scalar("SELECT NOT EXISTS (SELECT FROM highwater.sleepers WHERE asleep_until > now())")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let fell_asleep = asleep(&db.pool, "d-1").await;
        tx.commit().await.unwrap();
        assert!(
            delivered(&db.pool, id, Duration::from_secs(5)).await,
            "event {id}: the writer saw the dispatcher awake: {saw_awake}, it was asleep at the commit: {fell_asleep}"
        );
        if saw_awake && fell_asleep {
            caught += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awake_dispatcher_spares_writers_their_notify() {
    let (db, _d) = asleep_dispatcher("60s").await;

    let mut l = listen(&db).await;
    let last = burst(&db.pool, 500).await;
    assert!(delivered(&db.pool, last, Duration::from_secs(10)).await, "the burst");
    let sent = notifications(&mut l, Duration::from_millis(300)).await;
    // The first few wake it (10 head moves within 100 ms); the rest find it awake.
    assert!(sent < 100, "{sent} of 500 appends notified");
    assert!(sent >= 1, "the sleeping dispatcher was notified at all");
}

/// A dispatcher asleep longer than its lease (60 s) with a longer safety poll still gets its
/// notifications: it renews the lease on time instead of at its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_longer_than_the_lease_keeps_its_notifications() {
    let (db, _d) = asleep_dispatcher("10m").await;
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert!(asleep(&db.pool, "d-1").await, "the sleep mark was renewed");
    let id = burst(&db.pool, 1).await;
    assert!(delivered(&db.pool, id, Duration::from_secs(5)).await, "an append after 70 s asleep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_read_touches_a_few_pages_whatever_the_table_holds() {
    let db = setup(&["OrderPlaced"]).await;
    for _ in 0..4 {
        sqlx::query(
            "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
             SELECT 'order', 'o-' || g, 'OrderPlaced', '{}' FROM generate_series(1, 50000) g",
        )
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}", highwater::dispatch::HEAD_QUERY);
    let conn = &mut *db.pool.acquire().await.unwrap();
    // Before autovacuum has analyzed the newest partition (it fills between two analyzes), and
    // after. Nothing waits above the fence here: the read used to scan every row of the
    // partition to find that out (2,474 pages before ANALYZE).
    for stats in ["none", "analyzed"] {
        if stats == "analyzed" {
            sqlx::query("ANALYZE highwater.events").execute(&mut *conn).await.unwrap();
        }
        let plan: serde_json::Value =
            sqlx::query_scalar(sqlx::AssertSqlSafe(explain.clone())).fetch_one(&mut *conn).await.unwrap();
        let top = &plan[0]["Plan"];
        let n = top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap();
        assert!(n < 60, "statistics {stats}: the head read touched {n} pages of a 200,000-event table");
    }

    // And it still says when something waits: a transaction holds the fence while a later one
    // commits above it.
    let mut open = db.pool.begin().await.unwrap();
    sqlx::query(APPEND).execute(&mut *open).await.unwrap();
    sqlx::query(APPEND).execute(&db.pool).await.unwrap();
    let head = highwater::dispatch::read_head(&db.pool).await.unwrap();
    assert!(head.pending_above_fence, "an event committed above an open transaction waits");
    open.commit().await.unwrap();
    let head = highwater::dispatch::read_head(&db.pool).await.unwrap();
    assert!(!head.pending_above_fence, "nothing waits once it commits");
}

/// Kills the child when the test ends, however it ends; keeps its log directory until then.
fn scopeguard(child: Child, dir: tempfile::TempDir) -> impl Drop {
    struct Kill(Child, #[allow(dead_code)] tempfile::TempDir);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    Kill(child, dir)
}
