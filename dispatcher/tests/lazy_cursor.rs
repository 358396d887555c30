//! The lazy cursor (issue 38, part 2): a consumer whose types none of the new events have runs no
//! pass for them and leaves its cursor where it is, for at most `--lazy-cursor-interval`; an
//! event of its types still reaches it at once, exactly once, and its read-your-writes bound
//! stays exact meanwhile.
mod common;

use std::time::{Duration, Instant};

use common::*;
use highwater::Xid8;
use sqlx::PgPool;

const TYPES: &[&str] = &["A", "B"];

async fn setup_consumers(db: &TestDb) {
    sqlx::raw_sql(
        "CREATE TABLE seen (consumer text NOT NULL, event_id bigint NOT NULL, PRIMARY KEY (consumer, event_id))",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let docs = [
        consumer(
            "only-a",
            "delivery: Shared\nbatchSize: 10\neventTypes: [A]\nsink: {sql: {statement: \"INSERT INTO seen VALUES ('only-a', $2)\"}}",
        ),
        consumer(
            "all",
            "delivery: Shared\nbatchSize: 10\nsink: {sql: {statement: \"INSERT INTO seen VALUES ('all', $2)\"}}",
        ),
    ];
    apply(&db.pool, &docs.concat()).await;
}

async fn append(pool: &PgPool, event_type: &str, stream: &str) -> i64 {
    sqlx::query_scalar("SELECT highwater.append('s', $1, $2, '{}')")
        .bind(stream)
        .bind(event_type)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn cursor_id(pool: &PgPool, consumer: &str) -> i64 {
    sqlx::query_scalar("SELECT cursor_id FROM highwater.consumer_shards WHERE consumer = $1")
        .bind(consumer)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn seen(pool: &PgPool, consumer: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT event_id FROM seen WHERE consumer = $1 ORDER BY event_id")
        .bind(consumer)
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn skipped(port: u16) -> f64 {
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    body.lines()
        .filter(|l| l.starts_with("highwater_passes_skipped_total{") && l.contains("consumer=\"only-a\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `consumer` has applied every event up to `last`.
async fn delivered_up_to(pool: &PgPool, consumer: &'static str, last: i64, within: Duration) {
    let pool = pool.clone();
    eventually(&format!("{consumer} to apply event {last}"), within, || {
        let pool = pool.clone();
        async move { seen(&pool, consumer).await.last().is_some_and(|id| *id >= last) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_stays_put_while_other_types_arrive_and_takes_its_own_at_once() {
    let db = setup(TYPES).await;
    setup_consumers(&db).await;
    let dir = tempfile::tempdir().unwrap();
    // Longer than the test: every move of `only-a`'s cursor below comes from an event of its own.
    let d = Dispatcher::start_with_env(&db.url, "d-1", dir.path(), &[("HIGHWATER_LAZY_CURSOR_INTERVAL", "120s")]);
    wait_registered(&db.pool, "only-a", 1).await;
    d.serving().await;

    let a1 = append(&db.pool, "A", "x").await;
    delivered_up_to(&db.pool, "only-a", a1, Duration::from_secs(20)).await;
    // The start's passes (every worker runs one when the LISTEN connection comes up) are over.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = cursor_id(&db.pool, "only-a").await;
    assert_eq!(before, a1, "only-a's cursor is at its own event");

    // Other types, one transaction each, a few milliseconds apart: many head moves.
    let mut last_b = 0;
    for i in 0..40 {
        last_b = append(&db.pool, "B", &format!("b{i}")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    delivered_up_to(&db.pool, "all", last_b, Duration::from_secs(20)).await;
    // Read-your-writes stays exact: a token after the B events is applied for `only-a` (none of
    // them is its), though its cursor did not move.
    let mut tx = db.pool.begin().await.unwrap();
    let token: Xid8 = sqlx::query_scalar("SELECT highwater.token()").fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let pool = db.pool.clone();
    eventually("only-a to have applied the token after the B events", Duration::from_secs(10), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>("SELECT highwater.applied('only-a', $1)")
                .bind(token)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(cursor_id(&db.pool, "only-a").await, before, "only-a ran no pass for the B events: its cursor stayed");
    assert!(skipped(d.http_port).await >= 1.0, "the skipped passes are counted");
    let lag: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM highwater.events e, highwater.consumer_shards s
          WHERE s.consumer = 'only-a' AND e.event_type = 'A' AND (e.tx_id, e.id) > (s.cursor_tx, s.cursor_id)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(lag, 0, "no event of its types waits behind the lazy cursor");

    // Its own type, among others: delivered at once (the interval is two minutes).
    let started = Instant::now();
    append(&db.pool, "B", "b-late").await;
    let a2 = append(&db.pool, "A", "x").await;
    append(&db.pool, "B", "b-later").await;
    delivered_up_to(&db.pool, "only-a", a2, Duration::from_secs(20)).await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(seen(&db.pool, "only-a").await, vec![a1, a2], "each A once, no B");
    assert!(cursor_id(&db.pool, "only-a").await >= a2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_cursor_reaches_the_head_within_the_interval() {
    let db = setup(TYPES).await;
    setup_consumers(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start_with_env(&db.url, "d-1", dir.path(), &[("HIGHWATER_LAZY_CURSOR_INTERVAL", "1s")]);
    wait_registered(&db.pool, "only-a", 1).await;
    let a1 = append(&db.pool, "A", "x").await;
    delivered_up_to(&db.pool, "only-a", a1, Duration::from_secs(20)).await;
    let mut last_b = 0;
    for i in 0..20 {
        last_b = append(&db.pool, "B", &format!("b{i}")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Retention and `consumer status` see it move: within the interval (plus a pass).
    let pool = db.pool.clone();
    eventually("only-a's cursor to reach the last B event", Duration::from_secs(10), || {
        let pool = pool.clone();
        async move { cursor_id(&pool, "only-a").await == last_b }
    })
    .await;
    assert_eq!(seen(&db.pool, "only-a").await, vec![a1]);
}

/// Writers append both types concurrently, in separate and shared transactions: every A reaches
/// `only-a` exactly once and in order, long before the lazy interval would move its cursor,
/// whatever the head moves' ranges and the cursor positions between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_its_types_arrives_exactly_once_under_concurrent_writers() {
    let db = setup(TYPES).await;
    setup_consumers(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start_with_env(&db.url, "d-1", dir.path(), &[("HIGHWATER_LAZY_CURSOR_INTERVAL", "300s")]);
    wait_registered(&db.pool, "only-a", 1).await;
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let pool = db.pool.clone();
            tokio::spawn(async move {
                for i in 0..60 {
                    let mut tx = pool.begin().await.unwrap();
                    // Mostly B, an A every seventh transaction, sometimes both in one.
                    let types: &[&str] = match (i + w) % 7 {
                        0 => &["A"],
                        3 => &["B", "A", "B"],
                        _ => &["B"],
                    };
                    for t in types {
                        sqlx::query("SELECT highwater.append('s', $1, $2, '{}')")
                            .bind(format!("w{w}-{i}"))
                            .bind(*t)
                            .execute(&mut *tx)
                            .await
                            .unwrap();
                    }
                    tx.commit().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(3 + (i % 5) as u64)).await;
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let want_a: Vec<i64> = sqlx::query_scalar("SELECT id FROM highwater.events WHERE event_type = 'A' ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let want_all: i64 = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await;
    wait_count(&db.pool, "SELECT count(*) FROM seen WHERE consumer = 'all'", want_all, Duration::from_secs(30)).await;
    let last_a = *want_a.last().unwrap();
    delivered_up_to(&db.pool, "only-a", last_a, Duration::from_secs(30)).await;
    // The primary key would have refused a second delivery; the list is every A, no B.
    assert_eq!(seen(&db.pool, "only-a").await, want_a);
}
