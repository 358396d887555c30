//! Per-stream order around dead letters (issue 36). `errorMode: skipStream`: a poison event of
//! stream A is a dead letter and every later event of A is parked behind it, undelivered, while
//! stream B goes on; once the poison event is redriven, A's parked events follow it in stream
//! order, each applied exactly once, and live delivery of A goes on after them. `errorMode: skip`
//! (the default behaviour documented beside it): the later events of A are delivered at once, and
//! the redriven event arrives after them.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use sqlx::PgPool;

/// As in tests/redrive.rs: poison events fail while `verdict` holds a message for their kind
/// (`"poison": true` is kind `true`). `seen` records every application in order.
const SETUP: &str = "
    CREATE TABLE verdict (kind text, msg text);
    INSERT INTO verdict VALUES ('true', 'amount is not a number (v1)');
    CREATE FUNCTION check_poison(p jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
    DECLARE m text;
    BEGIN
        SELECT msg INTO m FROM verdict WHERE kind = p->>'poison';
        IF m IS NOT NULL THEN RAISE EXCEPTION '%', m; END IF;
        RETURN true;
    END $$;
    CREATE TABLE seen (seq bigserial, event_id bigint, stream text);";

const STATEMENT: &str = "INSERT INTO seen (event_id, stream) SELECT $2, $4 WHERE check_poison($1)";

fn sql_consumer(name: &str, mode: &str) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\nerrorMode: {mode}\nmaxAttempts: 2\nbackoff: {{initial: 50ms, max: 100ms}}\n\
             sink: {{sql: {{statement: \"{STATEMENT}\"}}}}"
        ),
    )
}

async fn add(pool: &PgPool, stream: &str, poison: impl serde::Serialize) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("order", stream, "Tick", json!({"poison": poison}))).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// The events applied, in application order.
async fn seen(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("SELECT event_id FROM seen ORDER BY seq").fetch_all(pool).await.unwrap()
}

/// (event, error, blocked_by, redriven)
async fn letters(pool: &PgPool) -> Vec<(i64, String, Option<i64>, bool)> {
    sqlx::query_as(
        "SELECT event_id, error, blocked_by, redriven_at IS NOT NULL FROM highwater.dead_letters ORDER BY event_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn cursor_id(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT cursor_id FROM highwater.consumer_shards").fetch_one(pool).await.unwrap()
}

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Streams a and b, interleaved: a1, a2 (poison), b1, a3, b2, a4.
struct Events {
    a: [i64; 4],
    b: [i64; 2],
}

async fn append_streams(pool: &PgPool) -> Events {
    let a1 = add(pool, "a", false).await;
    let a2 = add(pool, "a", true).await;
    let b1 = add(pool, "b", false).await;
    let a3 = add(pool, "a", false).await;
    let b2 = add(pool, "b", false).await;
    let a4 = add(pool, "a", false).await;
    Events { a: [a1, a2, a3, a4], b: [b1, b2] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_stream_parks_the_later_events_of_the_poisoned_stream_and_redrive_delivers_them_in_order_once() {
    let db = shared(&["Tick"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    apply(&db.pool, &sql_consumer("a", "skipStream")).await;
    let ev = append_streams(&db.pool).await;
    let [a1, a2, a3, a4] = ev.a;
    let [b1, b2] = ev.b;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "s0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM highwater.dead_letters", 3, Duration::from_secs(30)).await;
    eventually("the cursor at the last event", Duration::from_secs(30), || async { cursor_id(&db.pool).await == a4 })
        .await;

    // Stream b went on; stream a stopped at its poison event: a3 and a4 parked behind it.
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2]);
    let l = letters(&db.pool).await;
    assert_eq!(l.len(), 3, "{l:?}");
    assert_eq!((l[0].0, l[0].2, l[0].3), (a2, None, false));
    assert!(l[0].1.contains("amount is not a number"), "{l:?}");
    for (row, id) in l[1..].iter().zip([a3, a4]) {
        assert_eq!(row, &(id, format!("stream blocked by dead letter {a2}"), Some(a2), false));
    }
    // A stream b event after it is delivered; one of a is parked too.
    let b3 = add(&db.pool, "b", false).await;
    let a5 = add(&db.pool, "a", false).await;
    eventually("b3 delivered and a5 parked", Duration::from_secs(30), || async { cursor_id(&db.pool).await == a5 })
        .await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2, b3]);
    assert_eq!(letters(&db.pool).await.len(), 4);

    // A parked event is not redriven on its own: it follows the one it is parked behind.
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &a3.to_string()]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains(&format!("parked behind dead letter {a2}")) && err.contains("fix:"), "{err}");
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--all", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would redrive 1 dead letter(s)") && out.contains("parked behind dead letter"), "{out}");

    // Fixed; the poison event redriven: it, then a3, a4, a5 in stream order, each once.
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let (code, out, err) =
        cli(&db.url, &["consumer", "redrive", "a", "--event", &a2.to_string(), "--reason", "parser fixed"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_count(&db.pool, "SELECT count(*) FROM seen", 8, Duration::from_secs(30)).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2, b3, a2, a3, a4, a5]);
    let l = letters(&db.pool).await;
    assert!(l.iter().all(|r| r.3), "every dead letter redriven: {l:?}");
    let reasons: Vec<Option<String>> =
        sqlx::query_scalar("SELECT redrive_reason FROM highwater.dead_letters ORDER BY event_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(reasons[0].as_deref(), Some("parser fixed"));
    for r in &reasons[1..] {
        assert_eq!(r.as_deref(), Some(format!("after dead letter {a2} (errorMode skipStream)").as_str()));
    }
    assert_eq!(cursor_id(&db.pool).await, a5, "the cursor untouched by the redrives");

    // The stream is no longer blocked: live delivery of a goes on, after the parked ones.
    let a6 = add(&db.pool, "a", false).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 9, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2, b3, a2, a3, a4, a5, a6], "each exactly once");
    assert_eq!(letters(&db.pool).await.len(), 4, "a6 not parked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_delivers_the_later_events_of_the_stream_first_and_the_redriven_event_after_them() {
    let db = shared(&["Tick"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    apply(&db.pool, &sql_consumer("a", "skip")).await;
    let ev = append_streams(&db.pool).await;
    let [a1, a2, a3, a4] = ev.a;
    let [b1, b2] = ev.b;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "s0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 5, Duration::from_secs(30)).await;
    // The documented behaviour of skip: a's later events do not wait for its parked one.
    assert_eq!(seen(&db.pool).await, vec![a1, b1, a3, b2, a4]);
    let l = letters(&db.pool).await;
    assert_eq!(l.len(), 1, "only the poison event parked: {l:?}");
    assert_eq!((l[0].0, l[0].2), (a2, None));

    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &a2.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    // The consumer sees 1, 3, 4, then 2 of stream a.
    assert_eq!(seen(&db.pool).await, vec![a1, b1, a3, b2, a4, a2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_event_whose_redrive_fails_blocks_its_stream_and_the_rest_waits_behind_it() {
    let db = shared(&["Tick"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    sqlx::query("INSERT INTO verdict VALUES ('k2', 'currency unknown (v1)')").execute(&db.pool).await.unwrap();
    apply(&db.pool, &sql_consumer("a", "skipStream")).await;
    // a2 fails for one reason, a3 (parked behind it, never tried) would fail for another.
    let a1 = add(&db.pool, "a", false).await;
    let a2 = add(&db.pool, "a", true).await;
    let a3 = add(&db.pool, "a", "k2").await;
    let a4 = add(&db.pool, "a", false).await;
    let b1 = add(&db.pool, "b", false).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "s0", logs.path());
    eventually("the cursor at the last event", Duration::from_secs(30), || async { cursor_id(&db.pool).await == b1 })
        .await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1]);

    // a2's cause fixed, a3's not: a2 is delivered, a3's redrive fails, and a4 stays parked,
    // now behind a3.
    sqlx::query("DELETE FROM verdict WHERE kind = 'true'").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &a2.to_string(), "--wait", "0s"]);
    assert_eq!(code, 0, "{out}{err}");
    eventually("a3's redrive failed", Duration::from_secs(30), || async {
        let l = letters(&db.pool).await;
        l.iter().any(|r| r.0 == a3 && r.1.contains("currency unknown"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, a2], "nothing of a passes a3");
    let l = letters(&db.pool).await;
    assert_eq!(l[0], (a2, l[0].1.clone(), None, true));
    assert_eq!((l[1].0, l[1].2, l[1].3), (a3, None, false), "a3 blocks the stream now: {l:?}");
    assert_eq!((l[2].0, l[2].2, l[2].3), (a4, Some(a3), false), "a4 parked behind a3: {l:?}");
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.dead_letters WHERE redrive_at IS NOT NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(pending, 0, "a4 is no longer pending");

    // Live events of a are parked behind a3 meanwhile.
    let a5 = add(&db.pool, "a", false).await;
    eventually("a5 parked", Duration::from_secs(30), || async { cursor_id(&db.pool).await == a5 }).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, a2]);

    // a3 fixed and redriven: a3, a4, a5 in order, each once.
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &a3.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    wait_count(&db.pool, "SELECT count(*) FROM seen", 6, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, a2, a3, a4, a5]);
}

/// (event, discarded_by, discard_reason, redrive_at set, redriven)
async fn discard_state(pool: &PgPool) -> Vec<(i64, Option<String>, Option<String>, bool, bool)> {
    sqlx::query_as(
        "SELECT event_id, discarded_by, discard_reason, redrive_at IS NOT NULL, redriven_at IS NOT NULL
           FROM highwater.dead_letters ORDER BY event_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discarding_the_blocker_releases_the_parked_events_in_order_once_and_the_stream_goes_on_without_it() {
    let db = shared(&["Tick"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    apply(&db.pool, &sql_consumer("a", "skipStream")).await;
    let ev = append_streams(&db.pool).await;
    let [a1, a2, a3, a4] = ev.a;
    let [b1, b2] = ev.b;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "s0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM highwater.dead_letters", 3, Duration::from_secs(30)).await;
    eventually("the cursor at the last event", Duration::from_secs(30), || async { cursor_id(&db.pool).await == a4 })
        .await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2]);
    // From here on a2 would apply if anything delivered it: the test sees a delivery of the
    // discarded event instead of a failure hiding it.
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();

    // Refusals, each with its fix, and nothing changed.
    let before = (letters(&db.pool).await, discard_state(&db.pool).await);
    let refusals: [(Vec<String>, String); 4] = [
        (vec![a3.to_string()], format!("parked behind dead letter {a2}")),
        (vec![a1.to_string()], format!("event {a1} is not a dead letter of consumer a")),
        (vec!["999999".into()], "event 999999 is not a dead letter of consumer a".into()),
        (vec![a2.to_string(), "--instance".into(), "nope".into()], "(instance nope)".into()),
    ];
    for (args, want) in &refusals {
        let mut argv = vec!["consumer", "discard", "a", "--reason", "cannot be fixed", "--yes", "--event"];
        argv.extend(args.iter().map(String::as_str));
        let (code, out, err) = cli(&db.url, &argv);
        assert_ne!(code, 0, "{argv:?}: {out}");
        assert!(err.contains(want.as_str()) && err.contains("fix:"), "{argv:?}: {err}");
    }
    // Without --yes and without a terminal: asks, so refuses.
    let (code, out, err) = cli(&db.url, &["consumer", "discard", "a", "--event", &a2.to_string(), "--reason", "x"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("needs a confirmation") && err.contains("--yes"), "{err}");
    let (code, _, err) =
        cli(&db.url, &["consumer", "discard", "nope", "--event", &a2.to_string(), "--reason", "x", "--yes"]);
    assert_ne!(code, 0);
    assert!(err.contains("no consumer named \"nope\""), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((letters(&db.pool).await, discard_state(&db.pool).await), before, "refusals change nothing");
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2]);

    // The blocker discarded: a3, a4 follow in stream order, each once; a2 never.
    let (code, out, err) =
        cli(&db.url, &["consumer", "discard", "a", "--event", &a2.to_string(), "--reason", "cannot be fixed", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("released, requested for redrive in stream order: {a3}, {a4}")), "{out}");
    wait_count(&db.pool, "SELECT count(*) FROM seen", 5, Duration::from_secs(30)).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2, a3, a4]);
    let s = discard_state(&db.pool).await;
    let me = s[0].1.clone().expect("discarded_by recorded");
    assert_eq!(s[0], (a2, Some(me.clone()), Some("cannot be fixed".into()), false, false), "{s:?}");
    for row in &s[1..] {
        assert_eq!((row.1.as_ref(), row.3, row.4), (None, false, true), "released and redriven: {s:?}");
    }
    let reasons: Vec<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT redrive_by, redrive_reason FROM highwater.dead_letters WHERE event_id <> $1")
            .bind(a2)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let reason = format!("after dead letter {a2} was discarded (errorMode skipStream)");
    assert!(reasons.iter().all(|r| r == &(Some(me.clone()), Some(reason.clone()))), "{reasons:?}");
    assert_eq!(cursor_id(&db.pool).await, a4, "the cursor untouched");

    // Live delivery of a goes on; a2 stays out of every redrive.
    let a5 = add(&db.pool, "a", false).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 6, Duration::from_secs(30)).await;
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--all", "--wait", "0s"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("no dead letter of consumer a that can be redriven matches"), "{err}");
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &a2.to_string()]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("it was discarded at") && err.contains("fix:"), "{err}");
    let (code, out, err) =
        cli(&db.url, &["consumer", "discard", "a", "--event", &a2.to_string(), "--reason", "again", "--yes"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("already discarded") && err.contains("fix:"), "{err}");
    let (code, out, _) = cli(&db.url, &["consumer", "dead-letters", "a"]);
    assert_eq!(code, 0);
    assert!(out.contains("discarded") && out.contains("cannot be fixed"), "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen(&db.pool).await, vec![a1, b1, b2, a3, a4, a5], "each exactly once, a2 never");
    assert_eq!(letters(&db.pool).await.len(), 3, "a5 not parked");
}
