//! Ops commands: restart, skip, disable, enable, rewind and gc, through the library and the CLI,
//! with running dispatchers; every transition and every refusal.
mod common;

use std::time::Duration;

use common::*;
use highwater::{Error, NewEvent, Position, Xid8, append, ops, shards};
use serde_json::json;
use sqlx::PgPool;

/// Fails on events with `poison: true` while `gate.broken` is true.
const GATED: &str = "INSERT INTO seen VALUES ($2, 1 / (CASE WHEN ($1->>'poison')::bool AND (SELECT broken FROM gate) \
                     THEN 0 ELSE 1 END))";

async fn tables(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE seen (event_id bigint, x int); CREATE TABLE gate (broken bool); INSERT INTO gate VALUES (true);",
    )
    .execute(pool)
    .await
    .unwrap();
}

fn gated(name: &str) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\nmaxAttempts: 2\nbackoff: {{initial: 50ms, max: 100ms}}\nsink: {{sql: {{statement: \"{GATED}\"}}}}"
        ),
    )
}

async fn append_one(pool: &PgPool, payload: serde_json::Value) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("s", "1", "Tick", payload)).await.unwrap();
    tx.commit().await.unwrap();
    id
}

/// Three events: fine, poison, fine.
const POISON_IN_THE_MIDDLE: [bool; 3] = [false, true, false];

/// What a test starts from, set up in this order: the `Tick` type and the `seen` and `gate`
/// tables (the gate broken), the consumers, the events (one transaction each), dispatcher `p0`.
#[derive(Default)]
struct Given {
    consumers: Vec<String>,
    poison: Vec<bool>,
    dispatching: bool,
    own_cluster: bool,
}

fn given() -> Given {
    Given::default()
}

/// The database, the ids of the events appended, and the dispatcher while it lives.
struct World {
    db: TestDb,
    ids: Vec<i64>,
    _dispatcher: Option<(Dispatcher, tempfile::TempDir)>,
}

impl Given {
    fn consumer(mut self, document: String) -> Self {
        self.consumers.push(document);
        self
    }

    /// One event per flag: poison or fine.
    fn events(mut self, poison: &[bool]) -> Self {
        self.poison.extend(poison);
        self
    }

    fn dispatching(mut self) -> Self {
        self.dispatching = true;
        self
    }

    /// On a cluster of its own instead of the shared one: for a test that reads the fence (a
    /// rewind checks its target against it) or `pg_stat_activity`, both cluster-wide.
    fn own_cluster(mut self) -> Self {
        self.own_cluster = true;
        self
    }

    async fn start(self) -> World {
        let db = if self.own_cluster { setup(&["Tick"]).await } else { shared(&["Tick"]).await };
        tables(&db.pool).await;
        for c in &self.consumers {
            apply(&db.pool, c).await;
        }
        let mut ids = Vec::new();
        for poison in self.poison {
            ids.push(append_one(&db.pool, json!({"poison": poison})).await);
        }
        let dispatcher = self.dispatching.then(|| {
            let logs = tempfile::tempdir().unwrap();
            (Dispatcher::start(&db.url, "p0", logs.path()), logs)
        });
        World { db, ids, _dispatcher: dispatcher }
    }
}

async fn position_of(pool: &PgPool, id: i64) -> Position {
    let tx: Xid8 =
        sqlx::query_scalar("SELECT tx_id FROM highwater.events WHERE id = $1").bind(id).fetch_one(pool).await.unwrap();
    Position::from((tx, id))
}

#[derive(Debug, PartialEq)]
struct Row {
    status: String,
    attempts: i32,
    failing: Option<i64>,
    cursor: Position,
}

async fn shard(pool: &PgPool, consumer: &str, instance: &str) -> Row {
    let (status, attempts, failing, tx, id): (String, i32, Option<i64>, Xid8, i64) = sqlx::query_as(
        "SELECT status, attempts, failing_event_id, cursor_tx, cursor_id FROM highwater.consumer_shards
          WHERE consumer = $1 AND instance_id = $2",
    )
    .bind(consumer)
    .bind(instance)
    .fetch_one(pool)
    .await
    .unwrap();
    Row { status, attempts, failing, cursor: Position::from((tx, id)) }
}

async fn wait_status(pool: &PgPool, consumer: &str, status: &str) {
    let (pool, consumer, status) = (pool.clone(), consumer.to_owned(), status.to_owned());
    eventually(&format!("{consumer} to be {status}"), Duration::from_secs(30), || {
        let (pool, consumer, status) = (pool.clone(), consumer.clone(), status.clone());
        async move { shard(&pool, &consumer, "__shared__").await.status == status }
    })
    .await;
}

async fn seen(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("SELECT event_id FROM seen ORDER BY ctid").fetch_all(pool).await.unwrap()
}

/// The refusal message, asserting it is one.
fn refused<T: std::fmt::Debug>(r: highwater::Result<T>) -> String {
    match r {
        Err(Error::Refused(m)) => m.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_retries_the_event_the_shard_died_on() {
    let w = given().consumer(gated("a")).events(&POISON_IN_THE_MIDDLE).dispatching().start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    wait_status(&db.pool, "a", "dead").await;
    let dead = shard(&db.pool, "a", "__shared__").await;
    assert_eq!((dead.attempts, dead.failing), (2, Some(ids[1])));

    // What does not apply to a dead shard is refused, saying what to do instead.
    let m = refused(ops::enable(&db.pool, "a", None, &ops::Audit::by("test")).await);
    assert!(m.contains("is dead, not disabled") && m.contains("highwater consumer restart a"), "{m}");

    sqlx::query("UPDATE gate SET broken = false").execute(&db.pool).await.unwrap();
    let t = ops::restart(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].to_string(), "eventconsumer/a restarted (instance __shared__)");
    assert_eq!((t[0].from_status.as_str(), t[0].to_status.as_str()), ("dead", "idle"));
    assert_eq!(t[0].cursor_before, t[0].cursor_after, "restart keeps the cursor");
    let after = shard(&db.pool, "a", "__shared__").await;
    assert_eq!(after.attempts, 0, "attempts start again");

    // The running dispatcher reacts to the notification: the failing event is retried and passes.
    wait_count(&db.pool, "SELECT count(*) FROM seen", 3, Duration::from_secs(10)).await;
    assert_eq!(seen(&db.pool).await, ids, "the poison event delivered on retry, in order, once");
    wait_status(&db.pool, "a", "idle").await;

    let m = refused(ops::restart(&db.pool, "a", None, &ops::Audit::by("test")).await);
    assert!(m.contains("is idle, not dead"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_moves_past_exactly_the_failing_event_and_delivery_resumes() {
    let w = given().consumer(gated("a")).events(&POISON_IN_THE_MIDDLE).dispatching().start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    wait_status(&db.pool, "a", "dead").await;

    // Skipping names the event: a wrong one is refused with the actual id.
    let m = refused(ops::skip(&db.pool, "a", None, Some(ids[2]), &ops::Audit::by("test")).await);
    assert!(m.contains(&format!("is failing on event {}, not {}", ids[1], ids[2])), "{m}");
    assert!(m.contains(&format!("--event {}", ids[1])), "{m}");
    assert_eq!(shard(&db.pool, "a", "__shared__").await.status, "dead", "a refusal changes nothing");

    let t = ops::skip(&db.pool, "a", None, Some(ids[1]), &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].action, ops::Action::Skipped { event_id: ids[1] });
    assert_eq!(t[0].cursor_after, position_of(&db.pool, ids[1]).await, "the cursor is on the skipped event");
    assert!(t[0].to_string().starts_with(&format!("eventconsumer/a skipped event {} (instance __shared__", ids[1])));

    wait_count(&db.pool, "SELECT count(*) FROM seen", 2, Duration::from_secs(10)).await;
    let later = append_one(&db.pool, json!({"poison": false})).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 3, Duration::from_secs(10)).await;
    assert_eq!(seen(&db.pool).await, vec![ids[0], ids[2], later], "only the poison event is missing");
    let s = shard(&db.pool, "a", "__shared__").await;
    assert_eq!((s.status.as_str(), s.attempts, s.failing), ("idle", 0, None));
    let parked: Vec<(String, i64, i32, String)> = sqlx::query_as(
        "SELECT instance_id, event_id, attempts, error FROM highwater.dead_letters WHERE consumer = 'a'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(parked.len(), 1, "the skipped event is parked as a dead letter: {parked:?}");
    assert_eq!((parked[0].0.as_str(), parked[0].1), ("__shared__", ids[1]));
    assert!(parked[0].2 >= 1 && parked[0].3.ends_with("(skipped by an operator)"), "{parked:?}");
    let out = std::process::Command::new(bin())
        .args(["consumer", "dead-letters", "a", "--output", "json"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!((listed[0]["event_id"].as_i64(), listed[0]["event_type"].as_str()), (Some(ids[1]), Some("Tick")));
    let out = std::process::Command::new(bin())
        .args(["consumer", "dead-letters"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.lines().nth(1).is_some_and(|l| l.starts_with("a ") && l.contains("skipped by an operator")),
        "{table}"
    );

    let m = refused(ops::skip(&db.pool, "a", None, None, &ops::Audit::by("test")).await);
    assert!(m.contains("has no failing event") && m.contains("rewind"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_keeps_a_disabled_shard_disabled() {
    let w = given().consumer(gated("a")).events(&POISON_IN_THE_MIDDLE).start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    // No dispatcher: set the failure a pass would leave behind.
    let before = position_of(&db.pool, ids[0]).await;
    sqlx::query(
        "UPDATE highwater.consumer_shards SET status = 'disabled', attempts = 1, failing_event_id = $1,
                cursor_tx = $2, cursor_id = $3, next_attempt_at = now() + interval '1 hour'
          WHERE consumer = 'a'",
    )
    .bind(ids[1])
    .bind(before.xid8())
    .bind(before.id)
    .execute(&db.pool)
    .await
    .unwrap();
    let t = ops::skip(&db.pool, "a", None, None, &ops::Audit::by("test")).await.unwrap();
    assert_eq!((t[0].from_status.as_str(), t[0].to_status.as_str()), ("disabled", "disabled"));
    assert_eq!(t[0].cursor_before, before);
    let s = shard(&db.pool, "a", "__shared__").await;
    assert_eq!((s.status.as_str(), s.attempts, s.failing), ("disabled", 0, None));
    assert_eq!(s.cursor, position_of(&db.pool, ids[1]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_to_an_event_redelivers_from_that_event() {
    let w = given().own_cluster().consumer(gated("a")).events(&[false; 5]).dispatching().start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    wait_count(&db.pool, "SELECT count(*) FROM seen", 5, Duration::from_secs(20)).await;

    let t = ops::rewind(&db.pool, "a", None, ops::RewindTo::Event(ids[2]), &ops::Audit::by("test")).await.unwrap();
    let at = position_of(&db.pool, ids[2]).await;
    assert_eq!(t[0].cursor_after, Position::new(at.tx, at.id - 1), "just before the event");
    assert!(t[0].to_string().contains(&format!("rewound to event {}", ids[2])), "{}", t[0]);
    wait_count(&db.pool, "SELECT count(*) FROM seen", 8, Duration::from_secs(10)).await;
    let mut expected = ids.clone();
    expected.extend(&ids[2..]);
    assert_eq!(seen(&db.pool).await, expected, "the SQL sink sees the event and what follows again");

    // latest delivers nothing again; earliest everything.
    let t = ops::rewind(&db.pool, "a", None, ops::RewindTo::Latest, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t[0].cursor_after, position_of(&db.pool, ids[4]).await);
    let t = ops::rewind(&db.pool, "a", None, ops::RewindTo::Earliest, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t[0].cursor_after, Position::ZERO);
    wait_count(&db.pool, "SELECT count(*) FROM seen", 13, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM seen").await, 13);
}

/// A mistyped year put the cursor past every undelivered event without a word (issue 44): a time
/// to come is refused, and a time or an event forward of the cursor says how many events it would
/// skip and moves only once that is confirmed (--yes), through the library and the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_refuses_a_future_time_and_asks_before_skipping_events() {
    let typed = consumer("typed", "delivery: Shared\neventTypes: [Tick]\nsink: {sql: {statement: 'SELECT 1'}}");
    let w = given().own_cluster().consumer(gated("a")).consumer(typed).events(&[false; 4]).start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    let (p, u) = (&db.pool, &db.url);
    highwater::event_types::register(p, "Other", None, None).await.unwrap();
    let mut tx = p.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "2", "Other", json!({}))).await.unwrap();
    tx.commit().await.unwrap();
    let year_2099: chrono::DateTime<chrono::Utc> = "2099-01-01T00:00:00Z".parse().unwrap();

    let m = refused(ops::rewind(p, "a", None, ops::RewindTo::Time(year_2099), &ops::Audit::by("test")).await);
    assert!(m.contains("--to 2099-01-01T00:00:00+00:00 is in the future") && m.contains("check the date"), "{m}");
    let m = refused(ops::rewind_skipping(p, "a", None, ops::RewindTo::Time(year_2099), &ops::Audit::by("test")).await);
    assert!(m.contains("in the future"), "refused even when skipping is confirmed: {m}");
    let (code, out, err) = cli(u, &["consumer", "rewind", "a", "--to", "2099-01-01T00:00:00Z"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("is in the future") && err.contains("fix: check the date"), "{err}");
    let (code, _, err) = cli(u, &["consumer", "rewind", "a", "--to", "2099-01-01T00:00:00Z", "--yes"]);
    assert_eq!(code, 1, "{err}");

    // Forward past undelivered events: counted (of the consumer's types), refused unless confirmed.
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()").fetch_one(p).await.unwrap();
    let skips = ops::rewind_skips(p, "typed", None, ops::RewindTo::Time(now)).await.unwrap();
    assert_eq!(skips, vec![ops::Skipped { instance_id: "__shared__".into(), events: 4 }], "not the Other event");
    let m = refused(ops::rewind(p, "a", None, ops::RewindTo::Time(now), &ops::Audit::by("test")).await);
    assert!(m.contains("forward past 5 undelivered event(s) (5 on shard __shared__)"), "{m}");
    assert!(m.contains(&format!("`highwater consumer rewind a --to {} --yes`", now.to_rfc3339())), "{m}");
    let m = refused(ops::rewind(p, "a", None, ops::RewindTo::Event(ids[2]), &ops::Audit::by("test")).await);
    assert!(m.contains("forward past 2 undelivered event(s)") && m.contains(&format!("--to {} --yes", ids[2])), "{m}");
    let (code, out, err) = cli(u, &["consumer", "rewind", "a", "--to", &ids[3].to_string()]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("skipping 3 undelivered event(s)") && err.contains("pass --yes"), "{err}");
    assert_eq!(shard(p, "a", "__shared__").await.cursor, Position::ZERO, "every refusal left the cursor");

    let (code, out, err) = cli(u, &["consumer", "rewind", "a", "--to", &ids[3].to_string(), "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("eventconsumer/a rewound to event {}", ids[3])), "{out}");
    let at = position_of(p, ids[3]).await;
    assert_eq!(shard(p, "a", "__shared__").await.cursor, Position::new(at.tx, at.id - 1));
    // Backwards asks nothing; latest skips on purpose, by name.
    ops::rewind(p, "a", None, ops::RewindTo::Event(ids[1]), &ops::Audit::by("test")).await.unwrap();
    let (code, _, err) = cli(u, &["consumer", "rewind", "a", "--to", "latest"]);
    assert_eq!(code, 0, "{err}");
    let other: i64 = sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(p).await.unwrap();
    assert_eq!(shard(p, "a", "__shared__").await.cursor, position_of(p, other).await);
    assert!(ops::rewind_skips(p, "a", None, ops::RewindTo::Time(now)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_to_a_time_and_what_it_resets() {
    let w = given().own_cluster().consumer(gated("a")).events(&POISON_IN_THE_MIDDLE).start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    // Created 3, 2 and 1 hours ago.
    sqlx::query("UPDATE highwater.events SET created_at = now() - (4 - (SELECT count(*) FROM highwater.events e2 WHERE e2.id <= events.id)) * interval '1 hour'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE highwater.consumer_shards SET status = 'dead', attempts = 2, failing_event_id = $1,
                last_error = 'boom', next_attempt_at = now() WHERE consumer = 'a'",
    )
    .bind(ids[1])
    .execute(&db.pool)
    .await
    .unwrap();
    let t150: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now() - interval '150 minutes'").fetch_one(&db.pool).await.unwrap();
    // Forward past the first event (the cursor is at 0/0): confirmed.
    let t =
        ops::rewind_skipping(&db.pool, "a", None, ops::RewindTo::Time(t150), &ops::Audit::by("test")).await.unwrap();
    let second = position_of(&db.pool, ids[1]).await;
    assert_eq!(t[0].cursor_after, Position::new(second.tx, second.id - 1), "before the first event at or after");
    assert_eq!((t[0].from_status.as_str(), t[0].to_status.as_str()), ("dead", "idle"), "a dead shard is idle");
    let (attempts, failing, error, next): (i32, Option<i64>, Option<String>, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as(
            "SELECT attempts, failing_event_id, last_error, next_attempt_at FROM highwater.consumer_shards WHERE consumer = 'a'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((attempts, failing, error, next), (0, None, None, None), "the failure is cleared");

    // A time after every event: only what comes next, once skipping the two is confirmed.
    let after_all: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now() - interval '30 minutes'").fetch_one(&db.pool).await.unwrap();
    let t = ops::rewind_skipping(&db.pool, "a", None, ops::RewindTo::Time(after_all), &ops::Audit::by("test"))
        .await
        .unwrap();
    assert_eq!(t[0].cursor_after, position_of(&db.pool, ids[2]).await);

    // A disabled shard stays disabled.
    ops::disable(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    let t = ops::rewind(&db.pool, "a", None, ops::RewindTo::Earliest, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t[0].to_status.as_str(), "disabled");

    // Parsing of --to.
    assert_eq!("earliest".parse::<ops::RewindTo>().unwrap(), ops::RewindTo::Earliest);
    assert_eq!("42".parse::<ops::RewindTo>().unwrap(), ops::RewindTo::Event(42));
    assert!(matches!("2026-01-31T12:00:00+01:00".parse::<ops::RewindTo>().unwrap(), ops::RewindTo::Time(_)));
    assert!("0".parse::<ops::RewindTo>().unwrap_err().to_string().contains("start at 1"));
    assert!("yesterday".parse::<ops::RewindTo>().unwrap_err().to_string().contains("RFC 3339"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_stops_delivery_and_enable_resumes_it() {
    let w = given().consumer(gated("a")).dispatching().start().await;
    let db = &w.db;
    let first = append_one(&db.pool, json!({"poison": false})).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 1, Duration::from_secs(20)).await;

    let t = ops::disable(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t[0].to_string(), "eventconsumer/a disabled (instance __shared__; was idle)");
    let m = refused(ops::disable(&db.pool, "a", None, &ops::Audit::by("test")).await);
    assert!(m.contains("already disabled"), "{m}");
    let second = append_one(&db.pool, json!({"poison": false})).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(seen(&db.pool).await, vec![first], "nothing delivered while disabled");
    assert_eq!(shard(&db.pool, "a", "__shared__").await.cursor, position_of(&db.pool, first).await);

    let t = ops::enable(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    assert_eq!(t[0].to_string(), "eventconsumer/a enabled (instance __shared__)");
    wait_count(&db.pool, "SELECT count(*) FROM seen", 2, Duration::from_secs(10)).await;
    assert_eq!(seen(&db.pool).await, vec![first, second]);
    let m = refused(ops::enable(&db.pool, "a", None, &ops::Audit::by("test")).await);
    assert!(m.contains("is idle, not disabled"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_wins_over_a_pass_in_flight() {
    let slow = "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO seen SELECT $2, 1 FROM pg_sleep(2)'}}";
    let w = given().own_cluster().consumer(consumer("a", slow)).dispatching().start().await;
    let db = &w.db;
    wait_registered(&db.pool, "a", 1).await;
    let id = append_one(&db.pool, json!({})).await;
    wait_count(
        &db.pool,
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%highwater.sql_sink_apply%' AND state = 'active' AND pid <> pg_backend_pid()",
        1,
        Duration::from_secs(10),
    )
    .await;
    ops::disable(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    // The pass finishes its statement, finds the shard changed and rolls back.
    wait_count(
        &db.pool,
        "SELECT 1 - count(*) FROM pg_stat_activity WHERE query LIKE '%highwater.sql_sink_apply%' AND state = 'active' AND pid <> pg_backend_pid()",
        1,
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(seen(&db.pool).await.is_empty(), "the pass applied nothing");
    let s = shard(&db.pool, "a", "__shared__").await;
    assert_eq!((s.status.as_str(), s.cursor), ("disabled", Position::ZERO));

    ops::enable(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM seen", 1, Duration::from_secs(10)).await;
    assert_eq!(seen(&db.pool).await, vec![id], "delivered once after enable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_problem_and_the_fix() {
    let w = given()
        .own_cluster()
        .consumer(gated("a"))
        .consumer(consumer("live", "delivery: PerInstance\nsink: {sql: {statement: 'SELECT 1'}}"))
        .consumer(consumer("paused", "delivery: Shared\nsuspend: true\nsink: {sql: {statement: 'SELECT 1'}}"))
        .start()
        .await;
    let p = &w.db.pool;

    for m in [
        refused(ops::restart(p, "nope", None, &ops::Audit::by("test")).await),
        refused(ops::skip(p, "nope", None, None, &ops::Audit::by("test")).await),
        refused(ops::disable(p, "nope", None, &ops::Audit::by("test")).await),
        refused(ops::enable(p, "nope", None, &ops::Audit::by("test")).await),
        refused(ops::rewind(p, "nope", None, ops::RewindTo::Earliest, &ops::Audit::by("test")).await),
    ] {
        assert!(m.contains("no consumer named \"nope\"") && m.contains("consumer list"), "{m}");
    }
    let m = refused(ops::disable(p, "a", Some("pod-1"), &ops::Audit::by("test")).await);
    assert!(m.contains("is Shared") && m.contains("drop --instance"), "{m}");
    let m = refused(ops::disable(p, "live", None, &ops::Audit::by("test")).await);
    assert!(m.contains("has no shards yet"), "{m}");
    let mut conn = p.acquire().await.unwrap();
    shards::register(&mut conn, "live", "pod-1", None).await.unwrap();
    let m = refused(ops::disable(p, "live", Some("pod-2"), &ops::Audit::by("test")).await);
    assert!(m.contains("no shard for instance \"pod-2\"") && m.contains("consumer status live"), "{m}");

    let m = refused(ops::restart(p, "a", None, &ops::Audit::by("test")).await);
    assert!(m.contains("cannot restart consumer a") && m.contains("shard __shared__: is idle, not dead"), "{m}");
    let m = refused(ops::skip(p, "live", None, None, &ops::Audit::by("test")).await);
    assert!(m.contains("shard pod-1: has no failing event") && m.contains("rewind live --instance pod-1"), "{m}");
    let m = refused(ops::enable(p, "a", None, &ops::Audit::by("test")).await);
    assert!(m.contains("is idle, not disabled"), "{m}");
    let m = refused(ops::enable(p, "paused", None, &ops::Audit::by("test")).await);
    assert!(m.contains("suspend: true") && m.contains("consumer apply"), "{m}");
    let m = refused(ops::disable(p, "paused", None, &ops::Audit::by("test")).await);
    assert!(m.contains("already disabled"), "{m}");

    // Rewind targets that would lose or invent positions.
    let m = refused(ops::rewind(p, "a", None, ops::RewindTo::Event(999), &ops::Audit::by("test")).await);
    assert!(m.contains("no event with id 999"), "{m}");
    let mut old = p.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()").execute(&mut *old).await.unwrap();
    let above = append_one(p, json!({})).await;
    let m = refused(ops::rewind(p, "a", None, ops::RewindTo::Event(above), &ops::Audit::by("test")).await);
    assert!(m.contains("not below the fence"), "{m}");
    old.rollback().await.unwrap();
    ops::rewind_skipping(p, "a", None, ops::RewindTo::Event(above), &ops::Audit::by("test")).await.unwrap();

    // A refusal leaves every shard as it was.
    let shards: Vec<(String, String, String)> =
        sqlx::query_as("SELECT consumer, instance_id, status FROM highwater.consumer_shards ORDER BY 1, 2")
            .fetch_all(p)
            .await
            .unwrap();
    assert_eq!(
        shards,
        [("a", "__shared__", "idle"), ("live", "pod-1", "idle"), ("paused", "__shared__", "disabled")]
            .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_instance_commands_apply_to_every_shard_they_fit() {
    let w =
        given().consumer(consumer("live", "delivery: PerInstance\nsink: {sql: {statement: 'SELECT 1'}}")).start().await;
    let db = &w.db;
    let mut conn = db.pool.acquire().await.unwrap();
    for i in ["pod-a", "pod-b", "pod-c"] {
        shards::register(&mut conn, "live", i, None).await.unwrap();
    }
    sqlx::query("UPDATE highwater.consumer_shards SET status = 'dead', attempts = 10 WHERE instance_id = 'pod-b'")
        .execute(&db.pool)
        .await
        .unwrap();
    let names = |t: Vec<ops::Transition>| t.into_iter().map(|t| t.instance_id).collect::<Vec<_>>();

    assert_eq!(
        names(ops::restart(&db.pool, "live", None, &ops::Audit::by("test")).await.unwrap()),
        ["pod-b"],
        "only the dead one"
    );
    assert_eq!(names(ops::disable(&db.pool, "live", Some("pod-a"), &ops::Audit::by("test")).await.unwrap()), ["pod-a"]);
    assert_eq!(names(ops::disable(&db.pool, "live", None, &ops::Audit::by("test")).await.unwrap()), ["pod-b", "pod-c"]);
    assert_eq!(names(ops::enable(&db.pool, "live", Some("pod-c"), &ops::Audit::by("test")).await.unwrap()), ["pod-c"]);
    assert_eq!(names(ops::enable(&db.pool, "live", None, &ops::Audit::by("test")).await.unwrap()), ["pod-a", "pod-b"]);
    assert_eq!(
        names(ops::rewind(&db.pool, "live", None, ops::RewindTo::Earliest, &ops::Audit::by("test")).await.unwrap()),
        ["pod-a", "pod-b", "pod-c"]
    );
    let m = refused(ops::restart(&db.pool, "live", None, &ops::Audit::by("test")).await);
    for i in ["pod-a", "pod-b", "pod-c"] {
        assert!(m.contains(&format!("shard {i}: is idle, not dead")), "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_notify_running_dispatchers() {
    let w = given().consumer(gated("a")).start().await;
    let db = &w.db;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool).await.unwrap();
    listener.listen("highwater_control").await.unwrap();
    ops::disable(&db.pool, "a", None, &ops::Audit::by("test")).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await.unwrap().unwrap();
    assert_eq!(n.payload(), "a");
    // A refusal sends nothing.
    let _ = ops::disable(&db.pool, "a", None, &ops::Audit::by("test")).await;
    assert!(tokio::time::timeout(Duration::from_millis(300), listener.recv()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_deletes_only_stale_unmanaged_per_instance_shards() {
    let w = given()
        .consumer(consumer("s", "delivery: Shared\nsink: {sql: {statement: 'SELECT 1'}}"))
        .consumer(consumer("p", "delivery: PerInstance\nsink: {sql: {statement: 'SELECT 1'}}"))
        .start()
        .await;
    let db = &w.db;
    let mut conn = db.pool.acquire().await.unwrap();
    shards::register(&mut conn, "p", "gone", None).await.unwrap();
    shards::register(&mut conn, "p", "alive", None).await.unwrap();
    shards::register(&mut conn, "p", "managed", Some("uid-1")).await.unwrap();
    sqlx::query(
        "UPDATE highwater.consumer_shards SET heartbeat_at = now() - interval '2 hours'
          WHERE instance_id IN ('gone', 'managed', '__shared__')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let opts = |stale: u64| ops::GcOptions {
        stale_after: Duration::from_secs(stale),
        consumer: None,
        instance: None,
        include_managed: false,
    };

    let m = refused(ops::gc(&db.pool, &opts(10)).await);
    assert!(m.contains("too short") && m.contains("1m"), "{m}");
    let m = refused(ops::gc(&db.pool, &ops::GcOptions { instance: Some("__shared__".into()), ..opts(3600) }).await);
    assert!(m.contains("never deletes __shared__"), "{m}");
    let m = refused(ops::gc(&db.pool, &ops::GcOptions { consumer: Some("nope".into()), ..opts(3600) }).await);
    assert!(m.contains("no consumer named"), "{m}");
    let m = refused(ops::gc(&db.pool, &ops::GcOptions { instance: Some("alive".into()), ..opts(3600) }).await);
    assert!(m.contains("p: heartbeat") && m.contains("looks alive"), "{m}");
    let m = refused(ops::gc(&db.pool, &ops::GcOptions { instance: Some("managed".into()), ..opts(3600) }).await);
    assert!(m.contains("uid-1") && m.contains("--include-managed"), "{m}");

    let r = ops::gc(&db.pool, &opts(3600)).await.unwrap();
    let deleted: Vec<_> = r.deleted.iter().map(|c| (c.consumer.as_str(), c.instance_id.as_str())).collect();
    assert_eq!(deleted, [("p", "gone")]);
    assert!(r.deleted[0].heartbeat_age >= Duration::from_secs(7100));
    assert!(
        r.deleted[0].to_string().starts_with("eventconsumer/p shard gone deleted (heartbeat 2h"),
        "{}",
        r.deleted[0]
    );
    assert_eq!(r.kept_managed, ["p/managed"]);

    let r = ops::gc(&db.pool, &ops::GcOptions { include_managed: true, ..opts(3600) }).await.unwrap();
    assert_eq!(r.deleted.iter().map(|c| c.instance_id.as_str()).collect::<Vec<_>>(), ["managed"]);
    assert_eq!(r.deleted[0].pod_uid.as_deref(), Some("uid-1"));
    assert!(ops::gc(&db.pool, &opts(3600)).await.unwrap().deleted.is_empty());

    let left: Vec<(String, String)> =
        sqlx::query_as("SELECT consumer, instance_id FROM highwater.consumer_shards ORDER BY 1, 2")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(left, [("p".to_owned(), "alive".to_owned()), ("s".to_owned(), "__shared__".to_owned())]);
}

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_prints_each_change_and_refuses_with_the_reason() {
    let w = given().own_cluster().consumer(gated("a")).events(&POISON_IN_THE_MIDDLE).start().await;
    let (db, ids) = (&w.db, w.ids.clone());
    let u = &db.url;

    let (code, out, _) = cli(u, &["consumer", "disable", "a", "--reason", "maintenance window"]);
    assert_eq!((code, out.as_str()), (0, "eventconsumer/a disabled (instance __shared__; was idle)\n"));
    let (code, out, _) = cli(u, &["consumer", "enable", "a", "--instance", "__shared__"]);
    assert_eq!((code, out.as_str()), (0, "eventconsumer/a enabled (instance __shared__)\n"));
    // For scripts: the same change as JSON.
    let (code, out, _) = cli(u, &["consumer", "disable", "a", "--output", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v[0]["consumer"].as_str(), v[0]["instance_id"].as_str(), v[0]["action"].as_str()),
        (Some("a"), Some("__shared__"), Some("disabled"))
    );
    assert_eq!((v[0]["from_status"].as_str(), v[0]["to_status"].as_str()), (Some("idle"), Some("disabled")));
    assert_eq!(v[0]["cursor_after"]["tx"].as_str(), Some("0"), "{v}");
    let (code, _, _) = cli(u, &["consumer", "enable", "a"]);
    assert_eq!(code, 0);

    let (code, out, err) = cli(u, &["consumer", "restart", "a"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("error: cannot restart consumer a:") && err.contains("is idle, not dead"), "{err}");
    let (code, _, err) = cli(u, &["consumer", "skip", "a", "--event", &ids[1].to_string()]);
    assert_eq!(code, 1);
    assert!(err.contains("has no failing event"), "{err}");

    let (code, out, err) = cli(u, &["consumer", "rewind", "a", "--to", &ids[1].to_string(), "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("eventconsumer/a rewound to event {} (instance __shared__; cursor 0/0 -> ", ids[1])),
        "{out}"
    );
    let (code, _, err) = cli(u, &["consumer", "rewind", "a", "--to", "last tuesday"]);
    assert_eq!(code, 2, "a bad --to is a usage error");
    assert!(err.contains("RFC 3339"), "{err}");

    // A dead shard restarted from the command line.
    sqlx::query("UPDATE highwater.consumer_shards SET status = 'dead', attempts = 2, failing_event_id = $1")
        .bind(ids[1])
        .execute(&db.pool)
        .await
        .unwrap();
    let (code, out, err) = cli(u, &["consumer", "restart", "a"]);
    assert_eq!((code, out.as_str()), (0, "eventconsumer/a restarted (instance __shared__)\n"), "{err}");
    let (code, out, err) = cli(u, &["consumer", "skip", "a", "--event", &ids[1].to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("eventconsumer/a skipped event {}", ids[1])), "{out}");

    // Every change above is in the audit, newest first, with the OS user as who and the reason
    // given; refusals are not.
    let (code, out, err) = cli(u, &["consumer", "history", "a", "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let h: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let actions: Vec<&str> = h.iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["skipped", "restarted", "rewound", "enabled", "disabled", "enabled", "disabled"], "{out}");
    assert_eq!(h[0]["detail"].as_str(), Some(format!("event {}", ids[1]).as_str()), "{out}");
    assert_eq!((h[0]["from_status"].as_str(), h[0]["to_status"].as_str()), (Some("idle"), Some("idle")), "{out}");
    assert_eq!(h[2]["detail"].as_str(), Some(format!("to event {}", ids[1]).as_str()), "{out}");
    assert_eq!(h[2]["cursor_before"]["id"].as_i64(), Some(0), "{out}");
    assert_eq!(h[6]["reason"].as_str(), Some("maintenance window"), "{out}");
    let who = h[0]["changed_by"].as_str().unwrap();
    assert!(!who.is_empty() && h.iter().all(|c| c["changed_by"].as_str() == Some(who)), "{out}");
    let (code, out, _) = cli(u, &["consumer", "history", "a", "--limit", "1"]);
    assert_eq!(code, 0);
    let mut lines = out.lines();
    assert!(lines.next().is_some_and(|l| l.starts_with("AT") && l.contains("REASON")), "{out}");
    assert!(lines.next().is_some_and(|l| l.contains(&format!("skipped event {}", ids[1])) && l.contains(who)), "{out}");
    assert_eq!(lines.next(), None, "--limit 1: {out}");
    let (code, _, err) = cli(u, &["consumer", "history", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no consumer named \"nope\""), "{err}");

    let (code, out, err) = cli(u, &["consumer", "gc", "--stale-after", "1h"]);
    assert_eq!((code, out.as_str()), (0, "no stale shards (heartbeat older than 1h)\n"), "{err}");
    let (code, _, err) = cli(u, &["consumer", "gc", "--stale-after", "5s"]);
    assert_eq!(code, 1);
    assert!(err.contains("too short"), "{err}");
}
