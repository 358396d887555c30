//! Dead letters redriven (issue 36): a poison event parked under `errorMode: skip`, fixed, and
//! delivered again through the consumer's own sink by a running dispatcher; the dead letter kept
//! and marked with who, why and when; the cursor untouched; a redrive that fails again is a dead
//! letter with the new error; dry runs and refusals change nothing; under load with writers and
//! SIGKILLed dispatchers every redriven event applies exactly once more and nothing else twice.
mod common;

use std::time::{Duration, Instant};

use common::*;
use highwater::{NewEvent, Xid8, append, ops::redrive};
use serde_json::json;
use sqlx::PgPool;

/// The verdict on poison events lives in a table: an error message while it holds one (the
/// bug), none once fixed. Every application records the settings the sink ran with.
const SETUP: &str = "
    CREATE TABLE verdict (msg text);
    INSERT INTO verdict VALUES ('amount is not a number (v1)');
    CREATE FUNCTION check_poison(p jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
    DECLARE m text;
    BEGIN
        IF (p->>'poison')::bool THEN
            SELECT msg INTO m FROM verdict LIMIT 1;
            IF m IS NOT NULL THEN RAISE EXCEPTION '%', m; END IF;
        END IF;
        RETURN true;
    END $$;
    CREATE TABLE seen (event_id bigint, tenant text, correlation text, causation text, consumer text);";

const STATEMENT: &str = "INSERT INTO seen SELECT $2, current_setting('highwater.tenant_id', true), \
     current_setting('highwater.correlation_id', true), current_setting('highwater.causation_id', true), \
     current_setting('highwater.consumer', true) WHERE check_poison($1)";

fn skip_consumer(name: &str) -> String {
    consumer(
        name,
        &format!(
            "delivery: Shared\nerrorMode: skip\nmaxAttempts: 2\nbackoff: {{initial: 50ms, max: 100ms}}\n\
             sink: {{sql: {{statement: \"{STATEMENT}\"}}}}"
        ),
    )
}

/// Three events of one stream of tenant `t1`, the middle one poison.
async fn append_three(pool: &PgPool) -> Vec<i64> {
    let mut ids = Vec::new();
    for (i, poison) in [false, true, false].into_iter().enumerate() {
        let mut e = NewEvent::new("order", "o-1", "Tick", json!({"poison": poison}));
        e.tenant_id = Some("t1".into());
        e.metadata = Some(json!({"correlation_id": format!("corr-{i}")}));
        let mut tx = pool.begin().await.unwrap();
        ids.push(append(&mut tx, &e).await.unwrap());
        tx.commit().await.unwrap();
    }
    ids
}

type Cursor = (Xid8, i64, i64, String);

/// The shard row as far as a redrive must leave it alone: cursor, delivered count, status.
async fn cursor(pool: &PgPool, consumer: &str) -> Cursor {
    sqlx::query_as(
        "SELECT cursor_tx, cursor_id, delivered_count, status FROM highwater.consumer_shards WHERE consumer = $1",
    )
    .bind(consumer)
    .fetch_one(pool)
    .await
    .unwrap()
}

type Letter = (i64, i32, String, Option<String>, Option<String>, bool, bool, bool);

/// (event, attempts, error, redrive_by, redrive_reason, requested, pending, redriven)
async fn letters(pool: &PgPool, consumer: &str) -> Vec<Letter> {
    sqlx::query_as(
        "SELECT event_id, attempts, error, redrive_by, redrive_reason, redrive_requested_at IS NOT NULL,
                redrive_at IS NOT NULL, redriven_at IS NOT NULL
           FROM highwater.dead_letters WHERE consumer = $1 ORDER BY event_id",
    )
    .bind(consumer)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn seen(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM seen WHERE event_id = $1").bind(id).fetch_one(pool).await.unwrap()
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

/// A consumer `a` whose middle event is parked, and a dispatcher delivering it.
struct Parked {
    db: TestDb,
    ids: Vec<i64>,
    _logs: tempfile::TempDir,
    _d: Dispatcher,
}

async fn parked() -> Parked {
    parked_on(shared(&["Tick"]).await).await
}

/// [`parked`] on a given database: a cluster of its own for a test that rewinds (a rewind reads
/// the fence, which is cluster-wide).
async fn parked_on(db: TestDb) -> Parked {
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    apply(&db.pool, &skip_consumer("a")).await;
    let ids = append_three(&db.pool).await;
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start(&db.url, "p0", logs.path());
    wait_count(&db.pool, "SELECT count(*) FROM highwater.dead_letters", 1, Duration::from_secs(30)).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 2, Duration::from_secs(30)).await;
    let c = cursor(&db.pool, "a").await;
    assert_eq!(c.1, ids[2], "skip moved the cursor past the poison event to the last one");
    Parked { db, ids, _logs: logs, _d: d }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_poison_event_is_redriven_once_through_the_sql_sink_and_its_dead_letter_kept() {
    let p = parked().await;
    let (db, ids) = (&p.db, &p.ids);
    let poison = ids[1];
    let before = cursor(&db.pool, "a").await;
    let live: (Option<String>, Option<String>, Option<String>) =
        sqlx::query_as("SELECT tenant, correlation, causation FROM seen WHERE event_id = $1")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(live, (Some("t1".into()), Some("corr-0".into()), Some(ids[0].to_string())));

    // The dry run says which, and changes nothing.
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--all", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would redrive 1 dead letter(s)") && out.contains(&poison.to_string()), "{out}");
    let l = letters(&db.pool, "a").await;
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].5, l[0].6, l[0].7), (false, false, false), "a dry run marks nothing: {l:?}");

    // Fixed; redriven by the CLI, which waits for the dispatcher's delivery.
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let started = Instant::now();
    let (code, out, err) = cli(
        &db.url,
        &["consumer", "redrive", "a", "--event", &poison.to_string(), "--reason", "amount parser fixed (#123)"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 redriven, 0 failed again, 0 pending"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(20), "delivered promptly: {:?}", started.elapsed());

    // Applied exactly once more, with the event's tenant, correlation and causation.
    assert_eq!(seen(&db.pool, poison).await, 1);
    let row: (Option<String>, Option<String>, Option<String>, Option<String>) =
        sqlx::query_as("SELECT tenant, correlation, causation, consumer FROM seen WHERE event_id = $1")
            .bind(poison)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(row, (Some("t1".into()), Some("corr-1".into()), Some(poison.to_string()), Some("a".into())));
    for id in [ids[0], ids[2]] {
        assert_eq!(seen(&db.pool, id).await, 1, "event {id} not applied again");
    }
    // The dead letter is kept, marked with who, why and when.
    let l = letters(&db.pool, "a").await;
    assert_eq!(l.len(), 1, "kept, not deleted");
    let (event, _, ref error, ref by, ref reason, requested, pending, redriven) = l[0];
    assert_eq!(event, poison);
    assert!(error.contains("amount is not a number (v1)"), "the original error stays: {error}");
    assert_eq!(by.as_deref(), Some(os_user().as_str()));
    assert_eq!(reason.as_deref(), Some("amount parser fixed (#123)"));
    assert!(requested && !pending && redriven, "{l:?}");
    let marked: bool = sqlx::query_scalar(
        "SELECT redriven_at >= redrive_requested_at AND redriven_at >= created_at FROM highwater.dead_letters",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(marked, "redriven after it was requested");
    let (code, out, _) = cli(&db.url, &["consumer", "dead-letters", "a"]);
    assert_eq!(code, 0);
    assert!(out.contains(" redriven ") && out.contains("amount parser fixed (#123)"), "{out}");
    // The cursor, the delivered count and the status are what they were.
    assert_eq!(cursor(&db.pool, "a").await, before);

    // Live delivery goes on as before.
    let mut tx = db.pool.begin().await.unwrap();
    let next = append(&mut tx, &NewEvent::new("order", "o-1", "Tick", json!({"poison": false}))).await.unwrap();
    tx.commit().await.unwrap();
    wait_count(&db.pool, "SELECT count(*) FROM seen", 4, Duration::from_secs(30)).await;
    assert_eq!(seen(&db.pool, next).await, 1);
    assert_eq!(cursor(&db.pool, "a").await.1, next);

    // Redriven already: no longer a dead letter, refused with the fix, nothing changed.
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &poison.to_string()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("no longer a dead letter") && err.contains("fix:"), "{err}");
    assert_eq!(seen(&db.pool, poison).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_that_fails_again_is_a_dead_letter_with_the_new_error() {
    let p = parked().await;
    let (db, ids) = (&p.db, &p.ids);
    let poison = ids[1];
    let before = cursor(&db.pool, "a").await;
    // A different bug now.
    sqlx::query("UPDATE verdict SET msg = 'currency is missing (v2)'").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--type", "Tick", "--reason", "try"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("currency is missing (v2)") && out.contains("0 redriven, 1 failed again"), "{out}");
    assert!(err.contains("failed again") && err.contains("fix:"), "{err}");
    let l = letters(&db.pool, "a").await;
    let (event, attempts, ref error, _, _, requested, pending, redriven) = l[0];
    assert_eq!(event, poison);
    assert!(error.contains("currency is missing (v2)"), "the new error: {error}");
    assert_eq!(attempts, 3, "two live attempts and the redrive's");
    assert!(requested && !pending && !redriven, "a dead letter again: {l:?}");
    assert_eq!(seen(&db.pool, poison).await, 0, "nothing applied");
    assert_eq!(cursor(&db.pool, "a").await, before);

    // A dead letter again, it can be redriven again once fixed.
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--error-contains", "(v2)"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(seen(&db.pool, poison).await, 1);
    assert_eq!(cursor(&db.pool, "a").await, before);
}

/// The refusals: each names the problem and a fix, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_redrives_are_refused_and_change_nothing() {
    let p = parked().await;
    let (db, ids) = (&p.db, &p.ids);
    let before = (letters(&db.pool, "a").await, cursor(&db.pool, "a").await);
    let refused = |args: &[&str], expect: &str| {
        let mut all = vec!["consumer", "redrive"];
        all.extend_from_slice(args);
        let (code, out, err) = cli(&db.url, &all);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(expect) && err.contains("fix:"), "{args:?}: {err}");
    };
    refused(&["nosuch", "--all"], "no consumer named \"nosuch\"");
    refused(&["a", "--event", &ids[0].to_string()], &format!("event {} is not a dead letter of consumer a", ids[0]));
    refused(&["a", "--event", "999999"], "event 999999 does not exist");
    refused(&["a"], "a redrive needs a selection");
    refused(&["a", "--type", "Other"], "no dead letter of consumer a that can be redriven matches");
    let (code, _, err) = cli(&db.url, &["consumer", "redrive", "a", "--all", "--rate", "fast"]);
    assert_eq!(code, 2, "clap refuses a rate that is not one: {err}");
    assert_eq!((letters(&db.pool, "a").await, cursor(&db.pool, "a").await), before);

    // A pruned event: its dead letter stays listed, a redrive is refused.
    let report = highwater::retention::prune(
        &db.pool,
        &highwater::retention::PruneOptions {
            older_than_days: 0,
            stream_types: Some(vec!["order".into()]),
            batch_size: 100,
            dry_run: false,
        },
    )
    .await
    .unwrap();
    assert_eq!(report.total(), 3);
    let before = (letters(&db.pool, "a").await, cursor(&db.pool, "a").await);
    refused(&["a", "--event", &ids[1].to_string()], "its event was pruned");
    refused(&["a", "--all"], "none of the 1 matching dead letters of consumer a can be redriven");
    let r = redrive::redrive(
        &db.pool,
        &redrive::Request {
            selection: redrive::Selection { consumer: "a".into(), all: true, ..Default::default() },
            by: "test".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(r.to_string().contains("can be redriven"), "{r}");
    assert_eq!((letters(&db.pool, "a").await, cursor(&db.pool, "a").await), before);
}

/// An external sink: delivered again after the acknowledgement with the same idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_sink_gets_the_event_again_with_the_same_idempotency_key() {
    let db = shared(&["Tick"]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("log.jsonl");
    apply(&db.pool, &consumer("hook", &format!("delivery: Shared\nsink: {{log: {{target: \"{}\"}}}}", file.display())))
        .await;
    let mut tx = db.pool.begin().await.unwrap();
    let id = append(&mut tx, &NewEvent::new("order", "o-9", "Tick", json!({"n": 9}))).await.unwrap();
    tx.commit().await.unwrap();
    let d = Dispatcher::start(&db.url, "p0", dir.path());
    let lines = |file: &std::path::Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(file).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    eventually("the live delivery", Duration::from_secs(30), || async { lines(&file).len() == 1 }).await;
    let before = cursor(&db.pool, "hook").await;
    // Parked as an operator's skip or errorMode skip would have (a log sink never fails).
    sqlx::query(
        "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
         VALUES ('hook', '__shared__', $1, 1, 'receiver was down')",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "hook", "--event", &id.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let l = lines(&file);
    assert_eq!(l.len(), 2, "delivered once more: {l:?}");
    assert_eq!(l[0]["idempotency_key"], l[1]["idempotency_key"]);
    assert_eq!(l[1]["idempotency_key"], format!("hook:{id}"));
    assert_eq!(l[0]["event"], l[1]["event"]);
    assert_eq!(cursor(&db.pool, "hook").await, before);
    drop(d);
}

/// Under load: writers append while poison events are redriven at a rate and the dispatchers
/// are SIGKILLed and replaced; every redriven event is applied exactly once, nothing else twice,
/// and the cursor only ever moves forward, through live delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_load_with_kills_every_redriven_event_applies_exactly_once_more() {
    let db = shared(&["Tick"]).await;
    sqlx::raw_sql(SETUP).execute(&db.pool).await.unwrap();
    // Every cursor change of p, to check it never goes backwards.
    sqlx::raw_sql(
        "CREATE TABLE moves (old_tx xid8, old_id bigint, new_tx xid8, new_id bigint);
         CREATE FUNCTION record_move() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF (OLD.cursor_tx, OLD.cursor_id) IS DISTINCT FROM (NEW.cursor_tx, NEW.cursor_id) THEN
                 INSERT INTO moves VALUES (OLD.cursor_tx, OLD.cursor_id, NEW.cursor_tx, NEW.cursor_id);
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER record_move AFTER UPDATE ON highwater.consumer_shards
            FOR EACH ROW WHEN (OLD.consumer = 'p') EXECUTE FUNCTION record_move();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    apply(&db.pool, &skip_consumer("p")).await;
    let logs = tempfile::tempdir().unwrap();
    let mut ds = vec![Dispatcher::start(&db.url, "d0", logs.path()), Dispatcher::start(&db.url, "d1", logs.path())];

    // Phase 1: 40 poison events among 400, all parked.
    let write = |pool: PgPool, from: usize, n: usize| async move {
        for i in from..from + n {
            let mut tx = pool.begin().await.unwrap();
            let e = NewEvent::new("order", &format!("o-{}", i % 7), "Tick", json!({"poison": i % 10 == 3}));
            append(&mut tx, &e).await.unwrap();
            tx.commit().await.unwrap();
        }
    };
    write(db.pool.clone(), 0, 400).await;
    wait_count(&db.pool, "SELECT count(*) FROM highwater.dead_letters", 40, Duration::from_secs(90)).await;
    wait_count(&db.pool, "SELECT count(*) FROM seen", 360, Duration::from_secs(90)).await;

    // Phase 2: fixed; redriven at 20/s (about two seconds) while writers append and dispatchers die.
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let writers: Vec<_> = (0..2).map(|w| tokio::spawn(write(db.pool.clone(), 1000 + w * 1000, 150))).collect();
    let url = db.url.clone();
    let request = tokio::task::spawn_blocking(move || {
        cli(&url, &["consumer", "redrive", "p", "--all", "--rate", "20/s", "--reason", "load", "--wait", "0s"])
    });
    // The first kill lands while the redrive runs: some delivered, not all.
    eventually("the redrive to begin", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        async move {
            scalar_i64(&pool, "SELECT count(*) FROM highwater.dead_letters WHERE redriven_at IS NOT NULL").await > 0
        }
    })
    .await;
    let at_kill =
        scalar_i64(&db.pool, "SELECT count(*) FROM highwater.dead_letters WHERE redriven_at IS NOT NULL").await;
    ds.remove(0).sigkill();
    ds.push(Dispatcher::start(&db.url, "d2", logs.path()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    ds.remove(0).sigkill();
    ds.push(Dispatcher::start(&db.url, "d3", logs.path()));
    let (code, out, err) = request.await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(at_kill < 40, "killed during the redrive ({at_kill} of 40 delivered then)");
    assert!(out.contains("redrive of 40 dead letter(s) of consumer p requested"), "{out}");
    for w in writers {
        w.await.unwrap();
    }
    wait_count(
        &db.pool,
        "SELECT count(*) FROM highwater.dead_letters WHERE redriven_at IS NOT NULL",
        40,
        Duration::from_secs(90),
    )
    .await;
    let total: i64 = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await;
    assert_eq!(total, 700);
    // Every event of the log applied, the 40 parked ones through their redrive, the 30 poison
    // ones written during the redrive by live delivery (the bug is fixed by then): once each.
    wait_count(&db.pool, "SELECT count(DISTINCT event_id) FROM seen", 700, Duration::from_secs(90)).await;
    let twice: Vec<(i64, i64)> =
        sqlx::query_as("SELECT event_id, count(*) FROM seen GROUP BY event_id HAVING count(*) > 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(twice.is_empty(), "applied twice: {twice:?}");
    let pending =
        scalar_i64(&db.pool, "SELECT count(*) FROM highwater.dead_letters WHERE redrive_at IS NOT NULL").await;
    assert_eq!(pending, 0);
    let backwards = scalar_i64(&db.pool, "SELECT count(*) FROM moves WHERE (new_tx, new_id) < (old_tx, old_id)").await;
    assert_eq!(backwards, 0, "the cursor never moved backwards");
    let head: i64 = scalar_i64(&db.pool, "SELECT id FROM highwater.events ORDER BY tx_id DESC, id DESC LIMIT 1").await;
    eventually("the cursor at the head", Duration::from_secs(30), || {
        let pool = db.pool.clone();
        async move { cursor(&pool, "p").await.1 == head }
    })
    .await;
}

/// More than 100 dead letters need a confirmation: without a terminal and without `--yes` the
/// request is refused and nothing is marked; `--yes` requests them, spaced by `--rate`, and with
/// no dispatcher running they stay pending (`--wait 0s` returns at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_redrive_needs_a_confirmation_and_is_spaced_by_its_rate() {
    let db = shared(&["Tick"]).await;
    apply(&db.pool, &consumer("big", "delivery: Shared\nerrorMode: skip\nsink: {log: {target: stderr}}")).await;
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..101 {
        append(&mut tx, &NewEvent::new("order", &format!("o-{i}"), "Tick", json!({}))).await.unwrap();
    }
    tx.commit().await.unwrap();
    sqlx::query(
        "INSERT INTO highwater.consumer_shards (consumer, instance_id) VALUES ('big', '__shared__') ON CONFLICT DO NOTHING;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error)
         SELECT 'big', '__shared__', id, 1, 'receiver was down' FROM highwater.events",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let marked = "SELECT count(*) FROM highwater.dead_letters WHERE redrive_requested_at IS NOT NULL";

    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "big", "--all"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("redrive 101 dead letters of consumer big") && err.contains("--yes"), "{err}");
    assert_eq!(scalar_i64(&db.pool, marked).await, 0, "nothing marked");

    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "big", "--all", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("would redrive 101 dead letter(s)"), "{out}");
    assert_eq!(out.lines().count(), 102, "one line per dead letter");
    assert_eq!(scalar_i64(&db.pool, marked).await, 0, "nothing marked");

    let (code, out, err) =
        cli(&db.url, &["consumer", "redrive", "big", "--all", "--yes", "--rate", "10/s", "--wait", "0s"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 redriven, 0 failed again, 101 pending"), "{out}");
    assert_eq!(scalar_i64(&db.pool, marked).await, 101);
    // Spaced 100 ms apart in event order: the last is due 10 s after the first.
    let spread: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(redrive_at) - min(redrive_at))::float8 FROM highwater.dead_letters",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!((spread - 10.0).abs() < 0.01, "{spread}");
    let in_order: bool = sqlx::query_scalar(
        "SELECT bool_and(ok) FROM (SELECT redrive_at >= lag(redrive_at) OVER (ORDER BY event_id) IS NOT FALSE AS ok
                                    FROM highwater.dead_letters) x",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(in_order, "due in event order");
}

/// A redriven event that is parked again (a rewind over it, and the bug is back) is a dead letter
/// again with the new error, and can be redriven again: once more each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_event_parked_again_is_a_dead_letter_again() {
    let p = parked_on(setup(&["Tick"]).await).await;
    let (db, ids) = (&p.db, &p.ids);
    let poison = ids[1];
    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--all"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(seen(&db.pool, poison).await, 1);

    sqlx::query("INSERT INTO verdict VALUES ('a third bug (v3)')").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "rewind", "a", "--to", &poison.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    eventually("parked again", Duration::from_secs(30), || async {
        let l = letters(&db.pool, "a").await;
        l[0].2.contains("(v3)") && !l[0].7
    })
    .await;
    let l = letters(&db.pool, "a").await;
    assert_eq!(l.len(), 1, "{l:?}");
    let (code, out, _) = cli(&db.url, &["consumer", "dead-letters", "a"]);
    assert_eq!(code, 0);
    assert!(out.contains(" dead ") && out.contains("(v3)"), "{out}");

    sqlx::query("DELETE FROM verdict").execute(&db.pool).await.unwrap();
    let (code, out, err) = cli(&db.url, &["consumer", "redrive", "a", "--event", &poison.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(seen(&db.pool, poison).await, 2, "once more per redrive, never by the failed live attempt");
}
