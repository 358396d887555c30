//! Stream replay (issue 36): `consumer replay NAME --stream TYPE/ID [--since ID]` delivers one
//! stream's events to one consumer again through the redrive path (the dispatcher running the
//! shard, its own sink, under the shard's claim): a SQL-sink read model whose row was damaged is
//! rebuilt by replaying its stream; each replayed event applies exactly once more, in stream
//! order; the cursor is untouched; who/why/when are recorded; events beyond the cursor and of
//! types the consumer does not select are left out; bad input is refused with a fix, nothing
//! changed.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, Xid8, append, ops::replay};
use serde_json::json;
use sqlx::PgPool;

/// A read model (`totals`: one row per stream, the sum of its events' `n`) and a log of every
/// application with the settings it ran with, in application order.
const SETUP: &str = "
    CREATE TABLE totals (stream text PRIMARY KEY, total int NOT NULL, last bigint NOT NULL);
    CREATE TABLE log (seq bigserial, event_id bigint, stream text, tenant text, correlation text, causation text);
    CREATE FUNCTION project(p jsonb, id bigint, sid text) RETURNS boolean LANGUAGE sql AS $$
        INSERT INTO totals AS t VALUES (sid, (p->>'n')::int, id)
            ON CONFLICT (stream) DO UPDATE SET total = t.total + (p->>'n')::int, last = id;
        SELECT true $$;";

const STATEMENT: &str = "INSERT INTO log (event_id, stream, tenant, correlation, causation) \
     SELECT $2, $4, current_setting('highwater.tenant_id', true), current_setting('highwater.correlation_id', true), \
     current_setting('highwater.causation_id', true) WHERE project($1, $2, $4)";

fn projection(name: &str) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\neventTypes: [Tick]\nmaxAttempts: 2\nbackoff: {{initial: 50ms, max: 100ms}}\n\
             sink: {{sql: {{statement: \"{STATEMENT}\"}}}}"
        ),
    )
}

async fn add(pool: &PgPool, stream: &str, event_type: &str, n: i32, corr: &str) -> i64 {
    let mut e = NewEvent::new("order", stream, event_type, json!({"n": n}));
    e.tenant_id = Some("t1".into());
    e.metadata = Some(json!({"correlation_id": corr}));
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &e).await.unwrap();
    tx.commit().await.unwrap();
    id
}

type Cursor = (Xid8, i64, i64, String);

/// (event, tenant, correlation, causation) of one application.
type Applied = (i64, Option<String>, Option<String>, Option<String>);

async fn cursor(pool: &PgPool, consumer: &str) -> Cursor {
    sqlx::query_as(
        "SELECT cursor_tx, cursor_id, delivered_count, status FROM highwater.consumer_shards WHERE consumer = $1",
    )
    .bind(consumer)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn applied(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM log WHERE event_id = $1").bind(id).fetch_one(pool).await.unwrap()
}

async fn total(pool: &PgPool, stream: &str) -> Option<i32> {
    sqlx::query_scalar("SELECT total FROM totals WHERE stream = $1").bind(stream).fetch_optional(pool).await.unwrap()
}

async fn replays(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM highwater.replays").fetch_one(pool).await.unwrap()
}

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn os_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid()).unwrap().unwrap().name
}

/// Stream order/o-1: Tick 1, Note (not selected), Tick 2, Tick 3; order/o-2: Tick 10. All
/// delivered live by a running dispatcher.
struct Live {
    db: TestDb,
    o1: Vec<i64>,
    note: i64,
    o2: i64,
    _logs: tempfile::TempDir,
    _d: Dispatcher,
}

async fn live() -> Live {
    let db = setup(&["Tick", "Note"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    apply(&db.pool, &projection("a")).await;
    let a = add(&db.pool, "o-1", "Tick", 1, "c-1").await;
    let note = add(&db.pool, "o-1", "Note", 100, "c-n").await;
    let o2 = add(&db.pool, "o-2", "Tick", 10, "c-o2").await;
    let b = add(&db.pool, "o-1", "Tick", 2, "c-2").await;
    let c = add(&db.pool, "o-1", "Tick", 3, "c-3").await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "r0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM log", 4, Duration::from_secs(30)).await;
    assert_eq!(cursor(&db.pool, "a").await.1, c, "live delivery reached the last event");
    Live { db, o1: vec![a, b, c], note, o2, _logs: logs, _d: d }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_projection_row_is_rebuilt_by_replaying_its_stream_once_in_order_cursor_untouched() {
    let l = live().await;
    let (db, o1) = (&l.db, &l.o1);
    assert_eq!(total(&db.pool, "o-1").await, Some(6));
    // The bug: the row of o-1 is damaged. The operator deletes it and replays the stream.
    sqlx::query("DELETE FROM totals WHERE stream = 'o-1'").execute(&db.pool).await.unwrap();
    let before = cursor(&db.pool, "a").await;

    // The dry run lists them in stream order, the unselected type left out; nothing changed.
    let (code, out, err) = cli(&db.url, &["consumer", "replay", "a", "--stream", "order/o-1", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would replay 3 event(s) of stream order/o-1"), "{out}");
    let pos: Vec<usize> = o1.iter().map(|id| out.find(&format!(" {id} ")).expect("listed")).collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "in stream order: {out}");
    assert!(out.contains(&format!("left out: event {}", l.note)) && out.contains("not one the consumer selects"));
    assert_eq!(replays(&db.pool).await, 0, "a dry run records nothing");
    assert_eq!(total(&db.pool, "o-1").await, None);

    let (code, out, err) =
        cli(&db.url, &["consumer", "replay", "a", "--stream", "order/o-1", "--reason", "row of o-1 lost (#77)"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("3 replayed, 0 failed, 0 pending"), "{out}");

    // Rebuilt: the row is what live delivery made it.
    assert_eq!(total(&db.pool, "o-1").await, Some(6));
    let last: i64 =
        sqlx::query_scalar("SELECT last FROM totals WHERE stream = 'o-1'").fetch_one(&db.pool).await.unwrap();
    assert_eq!(last, o1[2], "the last event applied last");
    // Exactly once more per replayed event; nothing else applied again.
    for id in o1 {
        assert_eq!(applied(&db.pool, *id).await, 2, "event {id}: live + replay");
    }
    assert_eq!(applied(&db.pool, l.note).await, 0);
    assert_eq!(applied(&db.pool, l.o2).await, 1);
    assert_eq!(total(&db.pool, "o-2").await, Some(10));
    // In stream order, with the event's tenant, correlation and causation.
    let rows: Vec<Applied> = sqlx::query_as(
        "SELECT event_id, tenant, correlation, causation FROM log WHERE seq > (SELECT max(seq) - 3 FROM log) ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(&ids, o1, "replayed in stream order");
    for (i, (id, tenant, corr, cause)) in rows.iter().enumerate() {
        assert_eq!(tenant.as_deref(), Some("t1"));
        assert_eq!(corr.as_deref(), Some(format!("c-{}", i + 1).as_str()));
        assert_eq!(cause.as_deref(), Some(id.to_string().as_str()));
    }
    // The cursor, the delivered count and the status are what they were.
    assert_eq!(cursor(&db.pool, "a").await, before);
    // Audited: who, why, when requested, when delivered (after the request).
    let audit: Vec<(String, Option<String>, bool, bool)> = sqlx::query_as(
        "SELECT requested_by, reason, replayed_at >= requested_at, due_at IS NULL AND error IS NULL
           FROM highwater.replays ORDER BY seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(audit.len(), 3);
    for a in &audit {
        assert_eq!(a, &(os_user(), Some("row of o-1 lost (#77)".to_owned()), true, true));
    }

    // --since: from the second event of the stream on, through the library.
    let plan = replay::replay(
        &db.pool,
        &replay::Request {
            consumer: "a".into(),
            stream: "order/o-1".into(),
            since: Some(o1[1]),
            by: "lib-test".into(),
            reason: None,
            dry_run: false,
        },
    )
    .await
    .unwrap();
    assert_eq!(plan.selected.iter().map(|s| s.event_id).collect::<Vec<_>>(), vec![o1[1], o1[2]]);
    let op = highwater_ops::Replay { consumer: "a".into(), stream: "order/o-1".into(), since: Some(o1[1]) };
    let p = highwater_ops::wait(&op, &db.pool, &plan, Duration::from_secs(30)).await.unwrap();
    assert_eq!(p, replay::Progress { replayed: 2, failed: vec![], pending: 0 });
    assert_eq!(applied(&db.pool, o1[0]).await, 2);
    assert_eq!(applied(&db.pool, o1[1]).await, 3);
    assert_eq!(applied(&db.pool, o1[2]).await, 3);
    assert_eq!(cursor(&db.pool, "a").await, before);

    // Live delivery goes on as before.
    let next = add(&db.pool, "o-1", "Tick", 4, "c-4").await;
    wait_count(
        &db.pool,
        "SELECT count(*) FROM log WHERE stream = 'o-1' AND event_id = (SELECT max(id) FROM highwater.events)",
        1,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(applied(&db.pool, next).await, 1);
    assert_eq!(cursor(&db.pool, "a").await.1, next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_beyond_the_cursor_are_never_replayed_and_bad_input_is_refused_with_a_fix() {
    let l = live().await;
    let db = &l.db;
    // Live delivery stops (disabled); an event appended now lies beyond the cursor.
    let (code, out, err) = cli(&db.url, &["consumer", "disable", "a"]);
    assert_eq!(code, 0, "{out}{err}");
    let ahead = add(&db.pool, "o-1", "Tick", 4, "c-4").await;
    let (code, out, err) = cli(&db.url, &["consumer", "replay", "a", "--stream", "order/o-1", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would replay 3 event(s)"), "{out}");
    assert!(out.contains(&format!("left out: event {ahead}")) && out.contains("beyond the shard's cursor"), "{out}");

    let (other, ahead_s) = (l.o2.to_string(), ahead.to_string());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["consumer", "replay", "nobody", "--stream", "order/o-1"], "no consumer named \"nobody\""),
        (vec!["consumer", "replay", "a", "--stream", "o-1"], "is not STREAM_TYPE/STREAM_ID"),
        (vec!["consumer", "replay", "a", "--stream", "order/"], "is not STREAM_TYPE/STREAM_ID"),
        (vec!["consumer", "replay", "a", "--stream", "order/o-404"], "stream order/o-404 has no events"),
        (vec!["consumer", "replay", "a", "--stream", "order/o-1", "--since", &other], "is of stream order/o-2"),
        (vec!["consumer", "replay", "a", "--stream", "order/o-1", "--since", "999999"], "event 999999 does not exist"),
        // Only the event beyond the cursor: nothing to replay.
        (
            vec!["consumer", "replay", "a", "--stream", "order/o-1", "--since", &ahead_s],
            "none of the 1 events of stream order/o-1 can be replayed",
        ),
    ];
    for (args, expect) in cases {
        let (code, out, err) = cli(&db.url, &args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(err.contains(expect) && err.contains("fix:"), "{args:?}: {err}");
    }
    assert_eq!(replays(&db.pool).await, 0, "nothing recorded by a refusal");

    // A replay requested while the shard is disabled waits for it; enabled, it is delivered.
    let (code, out, err) =
        cli(&db.url, &["consumer", "replay", "a", "--stream", "order/o-2", "--wait", "0s", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(replays(&db.pool).await, 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(applied(&db.pool, l.o2).await, 1, "not delivered while the shard is disabled");
    let (code, out, err) = cli(&db.url, &["consumer", "enable", "a"]);
    assert_eq!(code, 0, "{out}{err}");
    eventually("the replay and the live event delivered", Duration::from_secs(30), || async {
        applied(&db.pool, l.o2).await == 2 && applied(&db.pool, ahead).await == 1
    })
    .await;
}
