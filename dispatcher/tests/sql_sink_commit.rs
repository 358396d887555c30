//! A SQL sink's failure at COMMIT (issue 44). A deferred constraint trigger that fails (with
//! SQLSTATE `HW001`, as `highwater.append` of an unregistered type raises it, or with an ordinary
//! error) fails the batch's COMMIT, after every statement of it ran. It is attributed to its
//! event like an immediate failure: the poison event counts its attempts, ends `dead` (or parked,
//! `errorMode: skip`), and the events before it apply exactly once. `HW001` at COMMIT is not
//! taken for the refused-cursor-move signal (`highwater.sql_sink_refused`, now `ZH001`), nor is
//! `ZH001` itself raised by a user's trigger. An error at COMMIT that no event's checks
//! reproduce is the pass's, shown without the C source line sqlx appends.
mod common;

use std::time::Duration;

use common::*;
use highwater::{NewEvent, append};
use serde_json::json;
use sqlx::PgPool;

const PER_EVENT: &str = "INSERT INTO proj (event_id, n) VALUES ($2, ($1->>'n')::int)";
const SET: &str = "INSERT INTO proj (event_id, n) SELECT id, (payload->>'n')::int FROM highwater_batch";

/// How the poison row (`n = 0`) fails, in `boom()`: with `HW001` (the case: a follow-up
/// event of a type nobody registered) or with an ordinary error.
const APPEND_UNREGISTERED: &str =
    "PERFORM highwater.append('follow', NEW.event_id::text, 'NeverRegistered', '{}'::jsonb)";
const RAISE: &str = "RAISE EXCEPTION 'poison row %', NEW.event_id";

/// `proj`, and `boom()` on its rows: every row it passes is logged in `fired` (so a trigger that
/// ran twice in what committed shows), the row with `n = 0` fails with `fail`. `deferred`: as a
/// constraint trigger `DEFERRABLE INITIALLY DEFERRED`, which fires at COMMIT; otherwise after
/// each INSERT.
async fn tables(pool: &PgPool, fail: &str, deferred: bool) {
    let trigger = if deferred {
        "CREATE CONSTRAINT TRIGGER boom AFTER INSERT ON proj DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION boom()"
    } else {
        "CREATE TRIGGER boom AFTER INSERT ON proj FOR EACH ROW EXECUTE FUNCTION boom()"
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE proj (event_id bigint PRIMARY KEY, n int NOT NULL);
         CREATE TABLE fired (event_id bigint NOT NULL);
         CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.n = 0 THEN
                 {fail};
             END IF;
             INSERT INTO fired VALUES (NEW.event_id);
             RETURN NULL;
         END $$;
         {trigger};"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// Events with these `n` in one transaction: one batch. Returns their ids in order.
async fn events(pool: &PgPool, ns: &[i64]) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for (i, n) in ns.iter().enumerate() {
        ids.push(append(&mut tx, &NewEvent::new("item", &format!("s{i}"), "Item", json!({"n": n}))).await.unwrap());
    }
    tx.commit().await.unwrap();
    ids
}

/// Shard row of a shared consumer: status, attempts, failing event, cursor id, last error.
async fn shard(pool: &PgPool, consumer: &str) -> (String, i32, Option<i64>, i64, Option<String>) {
    sqlx::query_as(
        "SELECT status, attempts, failing_event_id, cursor_id, last_error
           FROM highwater.consumer_shards WHERE consumer = $1",
    )
    .bind(consumer)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn column(pool: &PgPool, sql: &'static str) -> Vec<i64> {
    sqlx::query_scalar(sql).fetch_all(pool).await.unwrap()
}

fn spec(form: &str, statement: &str, extra: &str) -> String {
    format!(
        "delivery: Shared\n{extra}backoff: {{initial: 50ms, max: 100ms}}\nsink:\n  sql:\n    form: {form}\n    statement: \"{statement}\""
    )
}

/// The poison event (third of five) counts two attempts and the shard ends `dead` on it; the
/// two before it are applied, and their triggers fired, exactly once; its error is kept with
/// its SQLSTATE, and without a C source line.
async fn poison(form: &str, fail: &str, deferred: bool, code: &str) {
    let what = format!("{form}, {}, {code}", if deferred { "deferred" } else { "immediate" });
    let db = shared(&["Item"]).await;
    tables(&db.pool, fail, deferred).await;
    let ids = events(&db.pool, &[1, 2, 0, 4, 5]).await;
    let statement = if form == "set" { SET } else { PER_EVENT };
    apply(&db.pool, &consumer("proj", &spec(form, statement, "maxAttempts: 2\n"))).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    let pool = db.pool.clone();
    eventually(&format!("{what}: the shard to be dead"), Duration::from_secs(60), || {
        let pool = pool.clone();
        async move { shard(&pool, "proj").await.0 == "dead" }
    })
    .await;
    d.terminate(Duration::from_secs(20));

    let (status, attempts, failing, cursor_id, error) = shard(&db.pool, "proj").await;
    assert_eq!((status.as_str(), attempts, failing, cursor_id), ("dead", 2, Some(ids[2]), ids[1]), "{what}");
    let error = error.unwrap_or_default();
    assert!(error.contains(&format!("(SQLSTATE {code})")), "{what}: {error}");
    assert!(!error.contains(" at line "), "{what}: no line of PostgreSQL's C source: {error}");
    if deferred {
        assert!(error.starts_with("at COMMIT: "), "{what}: {error}");
    }
    assert_eq!(column(&db.pool, "SELECT event_id FROM proj ORDER BY event_id").await, ids[..2], "{what}");
    assert_eq!(
        column(&db.pool, "SELECT event_id FROM fired ORDER BY event_id").await,
        ids[..2],
        "{what}: fired once each"
    );
    let follow: i64 = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events WHERE stream_type = 'follow'").await;
    assert_eq!(follow, 0, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_deferred_hw001_at_commit_kills_the_poison_event() {
    poison("perEvent", APPEND_UNREGISTERED, true, "HW001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_deferred_ordinary_error_at_commit_kills_the_poison_event() {
    poison("perEvent", RAISE, true, "P0001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_immediate_hw001_kills_the_poison_event() {
    poison("perEvent", APPEND_UNREGISTERED, false, "HW001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_immediate_ordinary_error_kills_the_poison_event() {
    poison("perEvent", RAISE, false, "P0001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_deferred_hw001_at_commit_kills_the_poison_event() {
    poison("set", APPEND_UNREGISTERED, true, "HW001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_deferred_ordinary_error_at_commit_kills_the_poison_event() {
    poison("set", RAISE, true, "P0001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_immediate_hw001_kills_the_poison_event() {
    poison("set", APPEND_UNREGISTERED, false, "HW001").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_immediate_ordinary_error_kills_the_poison_event() {
    poison("set", RAISE, false, "P0001").await;
}

/// A user's trigger raising the refusal's own code, `ZH001`, at COMMIT is not a refusal either:
/// only `highwater.sql_sink_refused`, in the move's statement, is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refusal_code_raised_by_a_user_at_commit_is_the_event_s_failure() {
    poison("perEvent", "RAISE EXCEPTION 'not a refusal' USING ERRCODE = 'ZH001'", true, "ZH001").await;
}

/// A deferred failure before an immediate one in the same batch: the batch names the later,
/// immediate failure; the events before it, applied again to record it, end with their COMMIT's
/// checks, which find the earlier event, and that one is blamed (without the checks, the
/// transaction recording the failure failed at COMMIT, and the pass with it, forever).
async fn deferred_before_immediate(form: &str) {
    let db = shared(&["Item"]).await;
    tables(&db.pool, RAISE, true).await;
    // n = -1 divides by zero in the statement itself; n = 0 fails boom() at COMMIT.
    let ids = events(&db.pool, &[1, 0, 3, -1]).await;
    let statement = if form == "set" {
        "INSERT INTO proj (event_id, n) SELECT id, (payload->>'n')::int + 0 * (1 / ((payload->>'n')::int + 1)) FROM highwater_batch"
    } else {
        "INSERT INTO proj (event_id, n) VALUES ($2, ($1->>'n')::int + 0 * (1 / (($1->>'n')::int + 1)))"
    };
    apply(&db.pool, &consumer("proj", &spec(form, statement, "maxAttempts: 2\n"))).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    let pool = db.pool.clone();
    eventually(&format!("{form}: the shard to be dead"), Duration::from_secs(60), || {
        let pool = pool.clone();
        async move { shard(&pool, "proj").await.0 == "dead" }
    })
    .await;
    d.terminate(Duration::from_secs(20));
    let (status, attempts, failing, cursor_id, error) = shard(&db.pool, "proj").await;
    assert_eq!((status.as_str(), attempts, failing, cursor_id), ("dead", 2, Some(ids[1]), ids[0]), "{form}");
    let error = error.unwrap_or_default();
    assert!(error.starts_with("at COMMIT: poison row") && error.ends_with("(SQLSTATE P0001)"), "{form}: {error}");
    assert_eq!(column(&db.pool, "SELECT event_id FROM proj ORDER BY event_id").await, ids[..1], "{form}");
    assert_eq!(column(&db.pool, "SELECT event_id FROM fired ORDER BY event_id").await, ids[..1], "{form}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_a_deferred_failure_before_an_immediate_one_is_blamed() {
    deferred_before_immediate("perEvent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_a_deferred_failure_before_an_immediate_one_is_blamed() {
    deferred_before_immediate("set").await;
}

/// `errorMode: skip`: the event whose deferred check fails is parked after its one attempt and
/// the batch goes on past it; a deferred UNIQUE constraint across events (the third repeats the
/// first's value) is checked as COMMIT checks it, so the first two apply and the third is the one
/// blamed. Every event is applied or parked exactly once.
async fn skip_parks_the_event_whose_deferred_check_fails(form: &str) {
    let db = shared(&["Item"]).await;
    sqlx::raw_sql(
        "CREATE TABLE proj (event_id bigint PRIMARY KEY, n int NOT NULL,
                            CONSTRAINT n_once UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let ids = events(&db.pool, &[1, 2, 1, 3, 4]).await;
    let statement = if form == "set" { SET } else { PER_EVENT };
    apply(&db.pool, &consumer("proj", &spec(form, statement, "maxAttempts: 1\nerrorMode: skip\n"))).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    let (pool, last) = (db.pool.clone(), ids[4]);
    eventually(&format!("{form}: every event applied or parked"), Duration::from_secs(60), || {
        let pool = pool.clone();
        async move { shard(&pool, "proj").await.3 == last }
    })
    .await;
    d.terminate(Duration::from_secs(20));
    let applied = column(&db.pool, "SELECT event_id FROM proj ORDER BY event_id").await;
    assert_eq!(applied, [ids[0], ids[1], ids[3], ids[4]], "{form}");
    let parked: Vec<(i64, String)> =
        sqlx::query_as("SELECT event_id, error FROM highwater.dead_letters").fetch_all(&db.pool).await.unwrap();
    assert_eq!(parked.len(), 1, "{form}: {parked:?}");
    assert_eq!(parked[0].0, ids[2], "{form}");
    assert!(parked[0].1.contains("n_once") && parked[0].1.contains("23505"), "{form}: {parked:?}");
    let (status, _, failing, _, _) = shard(&db.pool, "proj").await;
    assert_eq!((status.as_str(), failing), ("idle", None), "{form}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_form_skip_parks_the_event_whose_deferred_check_fails() {
    skip_parks_the_event_whose_deferred_check_fails("perEvent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_form_skip_parks_the_event_whose_deferred_check_fails() {
    skip_parks_the_event_whose_deferred_check_fails("set").await;
}

/// An error at COMMIT that no event's checks reproduce (here a deferred trigger that fails only
/// when the transaction really commits) is no event's: nothing applied, no attempt counted, the
/// failed pass shown as `last_error` with its SQLSTATE and without the line of PostgreSQL's C
/// source that sqlx appends (`… at line 3891`); once the cause is gone, the batch applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_at_commit_no_event_reproduces_is_the_pass_s_and_reads_clean() {
    let db = shared(&["Item"]).await;
    sqlx::raw_sql(
        "CREATE TABLE proj (event_id bigint PRIMARY KEY, n int NOT NULL);
         CREATE TABLE gate (open boolean NOT NULL); INSERT INTO gate VALUES (false);
         CREATE FUNCTION only_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             -- The sink's check runs `SET CONSTRAINTS ALL IMMEDIATE`; COMMIT is another query.
             IF current_query() NOT LIKE '%SET CONSTRAINTS%' AND NOT (SELECT open FROM gate) THEN
                 RAISE EXCEPTION 'fails only at commit';
             END IF;
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER only_at_commit AFTER INSERT ON proj DEFERRABLE INITIALLY DEFERRED
             FOR EACH ROW EXECUTE FUNCTION only_at_commit();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let ids = events(&db.pool, &[1, 2, 3]).await;
    apply(&db.pool, &consumer("proj", &spec("perEvent", PER_EVENT, "maxAttempts: 1\nerrorMode: skip\n"))).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "d0", logs.path());
    let pool = db.pool.clone();
    eventually("the failed pass noted", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move { shard(&pool, "proj").await.4.is_some_and(|e| e.contains("fails only at commit")) }
    })
    .await;
    let (status, attempts, failing, _, error) = shard(&db.pool, "proj").await;
    assert_eq!((status.as_str(), attempts, failing), ("idle", 0, None));
    let error = error.unwrap();
    assert!(error.starts_with("pass failed: ") && error.ends_with("(SQLSTATE P0001)"), "{error}");
    assert!(!error.contains(" at line "), "{error}");
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM proj").await, 0);
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.dead_letters").await, 0);

    sqlx::raw_sql("UPDATE gate SET open = true").execute(&db.pool).await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM proj", 3, Duration::from_secs(60)).await;
    d.terminate(Duration::from_secs(20));
    assert_eq!(column(&db.pool, "SELECT event_id FROM proj ORDER BY event_id").await, ids);
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM highwater.dead_letters").await, 0);
}
