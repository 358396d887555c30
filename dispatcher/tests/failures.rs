//! Poison events: attempts, backoff, `dead` after maxAttempts (others unaffected), `skip` mode
//! parks them; a slow sink does not delay other consumers.
mod common;

use std::time::{Duration, Instant};

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use sqlx::PgPool;

const POISON_SQL: &str = "INSERT INTO a_seen VALUES ($2, 1 / (CASE WHEN ($1->>'poison')::bool THEN 0 ELSE 1 END))";

async fn append_three(pool: &PgPool) -> Vec<i64> {
    let mut ids = Vec::new();
    for poison in [false, true, false] {
        let mut tx = pool.begin().await.unwrap();
        ids.push(append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({"poison": poison}))).await.unwrap());
        tx.commit().await.unwrap();
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_event_goes_dead_after_max_attempts_and_others_go_on() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE a_seen (event_id bigint, x int); CREATE TABLE b_seen (event_id bigint);")
        .execute(&db.pool)
        .await
        .unwrap();
    let yaml = [
        consumer("a", &format!("delivery: Shared\nmaxAttempts: 3\nbackoff: {{initial: 300ms, max: 10s}}\nsink: {{sql: {{statement: \"{POISON_SQL}\"}}}}")),
        consumer("b", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO b_seen VALUES ($2)'}}"),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let ids = append_three(&db.pool).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());

    // Watch the attempts as they happen. Each failure is recorded with `updated_at = now()`, the
    // server's time of that attempt's failure: the gaps are measured on it, not on when this loop
    // happened to see the row (on a loaded machine a poll can lag by tens of milliseconds).
    let mut seen_attempts: Vec<(i32, f64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, attempts, at): (String, i32, f64) = sqlx::query_as(
            "SELECT status, attempts, extract(epoch FROM updated_at)::float8
               FROM highwater.consumer_shards WHERE consumer = 'a'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if seen_attempts.last().map(|l| l.0) != Some(attempts) && attempts > 0 {
            seen_attempts.push((attempts, at));
        }
        if status == "dead" {
            break;
        }
        assert!(Instant::now() < deadline, "shard never went dead (attempts {seen_attempts:?})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let counts: Vec<i32> = seen_attempts.iter().map(|a| a.0).collect();
    assert_eq!(counts, vec![1, 2, 3], "each attempt counted once");
    let gap1 = Duration::from_secs_f64(seen_attempts[1].1 - seen_attempts[0].1);
    let gap2 = Duration::from_secs_f64(seen_attempts[2].1 - seen_attempts[1].1);
    assert!(gap1 >= Duration::from_millis(250), "first retry waited the initial backoff ({gap1:?})");
    // The second delay lies in [initial, 2 · initial] (jitter only lowers it, never below initial).
    assert!(gap2 >= Duration::from_millis(250), "second retry waited at least the initial backoff ({gap2:?})");

    let (attempts, failing, error, cursor): (i32, Option<i64>, Option<String>, i64) = sqlx::query_as(
        "SELECT attempts, failing_event_id, last_error, cursor_id FROM highwater.consumer_shards WHERE consumer = 'a'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 3);
    assert_eq!(failing, Some(ids[1]), "the failing event is named");
    assert!(error.unwrap().contains("division by zero"));
    assert_eq!(cursor, ids[0], "the cursor stays before the poison event");
    let a: Vec<i64> = sqlx::query_scalar("SELECT event_id FROM a_seen").fetch_all(&db.pool).await.unwrap();
    assert_eq!(a, vec![ids[0]], "nothing after the poison event, nothing twice");

    wait_count(&db.pool, "SELECT count(*) FROM b_seen", 3, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        scalar_i64(&db.pool, "SELECT attempts::bigint FROM highwater.consumer_shards WHERE consumer = 'a'").await
            as i32,
        3,
        "a dead shard is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_mode_parks_the_poison_event_and_goes_on() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE a_seen (event_id bigint, x int)").execute(&db.pool).await.unwrap();
    apply(
        &db.pool,
        &consumer("a", &format!("delivery: Shared\nmaxAttempts: 2\nerrorMode: skip\nbackoff: {{initial: 50ms, max: 1s}}\nsink: {{sql: {{statement: \"{POISON_SQL}\"}}}}")),
    )
    .await;
    let ids = append_three(&db.pool).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM a_seen", 2, Duration::from_secs(30)).await;
    let a: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM a_seen ORDER BY event_id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(a, vec![ids[0], ids[2]]);
    let parked: Vec<(i64, i32, String)> =
        sqlx::query_as("SELECT event_id, attempts, error FROM highwater.dead_letters WHERE consumer = 'a'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!((parked[0].0, parked[0].1), (ids[1], 2));
    assert!(parked[0].2.contains("division by zero"));
    let status: String = sqlx::query_scalar("SELECT status FROM highwater.consumer_shards WHERE consumer = 'a'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(status, "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_sink_does_not_delay_another_consumer() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE fast_seen (event_id bigint, at timestamptz DEFAULT clock_timestamp()); CREATE TABLE slow_seen (event_id bigint, at timestamptz DEFAULT clock_timestamp());")
        .execute(&db.pool)
        .await
        .unwrap();
    let yaml = [
        consumer(
            "slow",
            "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO slow_seen (event_id) SELECT $2 FROM pg_sleep(4)'}}",
        ),
        consumer("fast", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO fast_seen (event_id) VALUES ($2)'}}"),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_registered(&db.pool, "fast", 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let appended = Instant::now();
    wait_count(&db.pool, "SELECT count(*) FROM fast_seen", 1, Duration::from_secs(10)).await;
    let fast_took = appended.elapsed();
    // The second event reaches the fast consumer while the slow one is still on the first.
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM fast_seen", 2, Duration::from_secs(10)).await;
    let slow_done = scalar_i64(&db.pool, "SELECT count(*) FROM slow_seen").await;
    assert_eq!(slow_done, 0, "the slow sink is still on its first event");
    assert!(fast_took < Duration::from_secs(2), "fast consumer took {fast_took:?}");
}
