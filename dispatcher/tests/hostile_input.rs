//! Bad input the other test files do not try: SQL sink statements that fail or time out, webhook
//! receivers that never answer or never finish their response, oversized payloads, hostile
//! consumer names. Each gets a bounded, named outcome; nothing hangs, nothing is skipped.
mod common;

use std::time::Duration;

use common::*;
use highwater::{Error, NewEvent, append, definitions};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

async fn append_one(pool: &sqlx::PgPool, payload: serde_json::Value) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("s", "1", "Tick", payload)).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// Waits until `consumer`'s shard is dead and returns (last_error, failing_event_id, cursor_id).
async fn wait_dead(pool: &sqlx::PgPool, consumer: &str) -> (String, i64, i64) {
    let q = "SELECT last_error, failing_event_id, cursor_id FROM highwater.consumer_shards
              WHERE consumer = $1 AND status = 'dead'";
    for _ in 0..600 {
        if let Some(r) = sqlx::query_as::<_, (String, i64, i64)>(q).bind(consumer).fetch_optional(pool).await.unwrap() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{consumer} never went dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_statements_that_fail_or_time_out_halt_on_the_event_and_say_why() {
    let db = setup(&["Tick"]).await;
    let yaml = [
        consumer(
            "broken",
            "delivery: Shared\nmaxAttempts: 2\nbackoff: {initial: 100ms, max: 1s}\nsink: {sql: {statement: 'INSERT INTO nowhere VALUES ($2)'}}",
        ),
        consumer(
            "sleepy",
            "delivery: Shared\nmaxAttempts: 2\nbackoff: {initial: 100ms, max: 1s}\nsink: {sql: {statement: 'SELECT pg_sleep(30)', timeout: 300ms}}",
        ),
    ]
    .concat();
    // Apply checks the statement against the tables then: the table goes after it.
    sqlx::raw_sql("CREATE TABLE nowhere (id bigint)").execute(&db.pool).await.unwrap();
    apply(&db.pool, &yaml).await;
    sqlx::raw_sql("DROP TABLE nowhere").execute(&db.pool).await.unwrap();
    let id = append_one(&db.pool, json!({})).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "h0", logs.path());
    let (err, failing, cursor) = wait_dead(&db.pool, "broken").await;
    assert!(err.contains("relation \"nowhere\" does not exist"), "{err}");
    assert_eq!((failing, cursor), (id, 0), "halted on the event, the cursor before it");
    let (err, failing, cursor) = wait_dead(&db.pool, "sleepy").await;
    assert!(err.contains("statement timeout"), "{err}");
    assert_eq!((failing, cursor), (id, 0));
}

/// A receiver that reads the request and then never answers.
async fn silent_receiver() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            held.push(s);
        }
    });
    url
}

/// A receiver that answers `status` with a chunked body that never ends.
async fn endless_receiver(status: &'static str) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!("HTTP/1.1 {status}\r\ntransfer-encoding: chunked\r\n\r\n");
                let _ = s.write_all(head.as_bytes()).await;
                while s.write_all(b"1\r\nx\r\n").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_that_hang_are_timed_out_and_endless_bodies_cut_at_the_timeout() {
    let db = shared(&["Tick"]).await;
    let hook = |name: &str, url: &str| {
        consumer(
            name,
            &format!(
                "delivery: Shared\nmaxAttempts: 2\nbackoff: {{initial: 100ms, max: 1s}}\nsink: {{webhook: {{url: '{url}', timeout: 500ms}}}}"
            ),
        )
    };
    let yaml = [
        hook("silent", &silent_receiver().await),
        hook("endless-ok", &endless_receiver("200 OK").await),
        hook("endless-err", &endless_receiver("503 Service Unavailable").await),
    ]
    .concat();
    apply(&db.pool, &yaml).await;
    let id = append_one(&db.pool, json!({})).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "w0", logs.path());
    let (err, failing, cursor) = wait_dead(&db.pool, "silent").await;
    assert!(err.contains("timed out after 500ms"), "{err}");
    assert_eq!((failing, cursor), (id, 0), "halted on the event, nothing skipped");
    // The status is the receiver's answer; reading the rest of the body stops at the timeout.
    let (err, failing, cursor) = wait_dead(&db.pool, "endless-err").await;
    assert!(err.contains("HTTP 503"), "{err}");
    assert_eq!((failing, cursor), (id, 0));
    let q = "SELECT cursor_id FROM highwater.consumer_shards WHERE consumer = 'endless-ok' AND status = 'idle'";
    assert_eq!(scalar_i64(&db.pool, q).await, id, "a 200 counts as delivered, whatever follows it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_payload_is_stored_and_delivered_whole() {
    let db = shared(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE seen (event_id bigint, bytes int)").execute(&db.pool).await.unwrap();
    let statement = "INSERT INTO seen SELECT $2, octet_length(payload::text) FROM highwater.events WHERE id = $2";
    apply(&db.pool, &consumer("big", &format!("delivery: Shared\nsink: {{sql: {{statement: '{statement}'}}}}"))).await;
    // 32 MiB in one string: far beyond what an event should carry, well within jsonb's 255 MiB.
    let big = "x".repeat(32 << 20);
    let id = append_one(&db.pool, json!({ "blob": big })).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "b0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 1, Duration::from_secs(60)).await;
    let (seen, bytes): (i64, i32) =
        sqlx::query_as("SELECT event_id, bytes FROM seen").fetch_one(&db.pool).await.unwrap();
    assert_eq!(seen, id);
    assert!(bytes as usize > 32 << 20, "delivered whole ({bytes} bytes)");
}

#[test]
fn hostile_consumer_names_are_refused_before_they_reach_sql_metrics_or_files() {
    for name in [
        "orders'; DROP TABLE highwater.events; --",
        "../../etc/passwd",
        "Orders",
        "ordérs",
        "with space",
        "-leading",
        "trailing-",
        "",
        "__shared__",
        "a{b=\"c\"}",
        &"x".repeat(64),
    ] {
        let doc = consumer(name, "delivery: Shared\nsink: {log: {}}");
        let yaml =
            doc.replace(&format!("{{name: {name}}}"), &format!("{{name: {}}}", serde_json::to_string(name).unwrap()));
        match definitions::parse(&yaml, "hostile") {
            Err(Error::Definition { problem, .. }) => {
                assert!(
                    problem.contains("is invalid: use 1-63 lowercase letters, digits and '-'"),
                    "{name:?}: {problem}"
                )
            }
            other => panic!("{name:?} was not refused: {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_event_type_names_are_refused_with_the_rule() {
    let db = shared(&[]).await;
    for name in ["1starts-with-digit", "with space", "semi;colon", "", &"x".repeat(201)] {
        match highwater::event_types::register(&db.pool, name, None, None).await {
            Err(Error::Refused(m)) => {
                let m = m.to_string();
                assert!(m.contains("is invalid") && m.contains("start with a letter"), "{name:?}: {m}")
            }
            other => panic!("{name:?} was not refused: {other:?}"),
        }
    }
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.event_types").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_last_event_ids_that_are_not_events_get_400() {
    let db = shared(&["Tick"]).await;
    apply(&db.pool, &consumer("live", "delivery: PerInstance\nsink: {sse: {}}")).await;
    let id = append_one(&db.pool, json!({})).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "sse-h", logs.path(), &[("HIGHWATER_SSE_TOKENS", "tok")]);
    wait_registered(&db.pool, "live", 1).await;
    let url = format!("http://127.0.0.1:{}/v1/consumers/live/events", d.http_port);
    for (last, status, says) in [
        ((id + 1000).to_string(), 400, "is not a known event"),
        ("99999999999999999999".to_owned(), 400, "must be an event id"),
        ("-1".to_owned(), 400, "must be an event id"),
        ("1 OR 1=1".to_owned(), 400, "must be an event id"),
    ] {
        let r =
            reqwest::Client::new().get(&url).bearer_auth("tok").header("Last-Event-ID", &last).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{last}");
        assert!(r.text().await.unwrap().contains(says), "{last}");
    }
}
