//! Rebuilds and bootstraps of read models (docs/read-your-writes.md): a rebuild under load ends
//! with the projection a fresh run builds; a bootstrap under concurrent writers (transactions
//! open across its snapshot, stream-order raised tx_ids) misses and duplicates nothing; a rebuild
//! whose events were pruned is refused unless a bootstrap can refill the read model.
mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use common::*;
use highwater::{NewEvent, Position, Waited, Xid8, append, ops, wait_applied};
use serde_json::json;
use sqlx::PgPool;

/// Waits until `consumer` applied everything committed so far.
async fn caught_up(pool: &PgPool, consumer: &str) {
    let mut conn = pool.acquire().await.unwrap();
    let token = highwater::token(&mut conn).await.unwrap();
    drop(conn);
    let r = wait_applied(pool, consumer, token, Duration::from_secs(60)).await.unwrap();
    assert_eq!(r, Waited::Applied, "{consumer} caught up");
}

const TOTALS: &str = "CREATE TABLE totals (stream_id text PRIMARY KEY, n bigint NOT NULL, amount bigint NOT NULL)";
/// Not idempotent: an event applied twice or missed shows in the totals.
const TOTALS_STATEMENT: &str = "INSERT INTO totals VALUES ($4, 1, ($1->>'amount')::bigint) ON CONFLICT (stream_id) DO UPDATE SET n = totals.n + 1, amount = totals.amount + EXCLUDED.amount";

async fn totals(pool: &PgPool, table: &str) -> Vec<(String, i64, i64)> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT stream_id, n, amount FROM {table} ORDER BY stream_id")))
        .fetch_all(pool)
        .await
        .unwrap()
}

/// What a fresh run over every event builds.
async fn from_events(pool: &PgPool) -> Vec<(String, i64, i64)> {
    sqlx::query_as(
        "SELECT stream_id, count(*), sum((payload->>'amount')::bigint)::bigint FROM highwater.events
          WHERE event_type = 'Added' GROUP BY stream_id ORDER BY stream_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

fn writers(
    pool: &PgPool,
    n: usize,
    stop: &Arc<AtomicBool>,
    written: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|w| {
            let (pool, stop, written) = (pool.clone(), stop.clone(), written.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut tx = pool.begin().await.unwrap();
                    for _ in 0..3 {
                        i += 1;
                        let ev = NewEvent::new(
                            "t",
                            &format!("s{}", i % 17),
                            "Added",
                            json!({"amount": (w as u64 * 1000 + i) % 97}),
                        );
                        append(&mut tx, &ev).await.unwrap();
                    }
                    tx.commit().await.unwrap();
                    written.fetch_add(3, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// A rebuild while writers keep appending and the dispatcher keeps delivering: `reset` empties
/// the projection in the cursor's transaction, the replay refills it, and it ends equal to what a
/// fresh run over every event builds. Progress shows in `consumer status` (CLI) meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_under_load_ends_equal_to_a_fresh_run() {
    rebuild_under_load("TRUNCATE totals").await;
}

/// The same with a reset that does not block the dispatcher's writes (`DELETE`): a batch that
/// commits after the reset's snapshot makes the rebuild start again instead of surviving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_with_a_delete_reset_under_load_ends_equal_to_a_fresh_run() {
    rebuild_under_load("DELETE FROM totals").await;
}

async fn rebuild_under_load(reset: &str) {
    let db = setup(&["Added"]).await;
    sqlx::raw_sql(TOTALS).execute(&db.pool).await.unwrap();
    let spec = format!(
        "delivery: Shared\nbatchSize: 50\nsink:\n  sql:\n    statement: \"{TOTALS_STATEMENT}\"\n    reset: {reset}"
    );
    apply(&db.pool, &consumer("totals", &spec)).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "rb-0", logs.path());
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let tasks = writers(&db.pool, 4, &stop, &written);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let out = std::process::Command::new(bin())
        .args(["consumer", "rebuild", "totals"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("rebuild started"), "{said}");
    let status = std::process::Command::new(bin())
        .args(["consumer", "status", "totals"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(table.contains("totals/__shared__: rebuild ") && table.contains(" events"), "{table}");

    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    caught_up(&db.pool, "totals").await;
    let expected = from_events(&db.pool).await;
    assert_eq!(expected.iter().map(|r| r.1).sum::<i64>() as u64, written.load(Ordering::Relaxed));
    assert_eq!(totals(&db.pool, "totals").await, expected, "rebuilt projection = fresh run");
    let rows = ops::status(&db.pool, Some("totals")).await.unwrap();
    let p = rows[0].rebuild.as_ref().expect("rebuild progress");
    assert!(p.complete && p.done == p.total && p.total > 0, "{p:?}");
}

/// Events of the consumer's types pruned: a rebuild from the log is refused, naming what is gone
/// and how to bootstrap instead, and nothing changes; with a bootstrap declared, the rebuild
/// resets and refills from the application's tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_refused_when_events_were_pruned_unless_bootstrapped() {
    let db = setup(&["Added", "Other"]).await;
    sqlx::raw_sql(TOTALS).execute(&db.pool).await.unwrap();
    let spec =
        format!("delivery: Shared\nsink:\n  sql:\n    statement: \"{TOTALS_STATEMENT}\"\n    reset: TRUNCATE totals");
    apply(&db.pool, &consumer("totals", &spec)).await;
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..10 {
        append(&mut tx, &NewEvent::new("t", &format!("s{i}"), "Added", json!({"amount": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "rb-p", logs.path());
    caught_up(&db.pool, "totals").await;
    // What `events prune` does: delete old events (every delete is recorded).
    sqlx::query("DELETE FROM highwater.events WHERE stream_id IN ('s0', 's1', 's2')").execute(&db.pool).await.unwrap();
    let before = totals(&db.pool, "totals").await;
    let e = ops::rebuild(&db.pool, "totals", &ops::Audit::by("test")).await.unwrap_err().to_string();
    assert!(e.contains("were pruned (3 Added event(s) up to id 3)") && e.contains("spec.sink.sql.bootstrap"), "{e}");
    assert!(e.contains("fix:"), "{e}");
    assert_eq!(totals(&db.pool, "totals").await, before, "nothing changed");

    // With a bootstrap (the pruned streams' totals kept in an application table):
    sqlx::raw_sql("CREATE TABLE app_totals AS SELECT * FROM totals; UPDATE app_totals SET n = n + 100;")
        .execute(&db.pool)
        .await
        .unwrap();
    let spec = format!("{spec}\n    bootstrap: INSERT INTO totals SELECT * FROM app_totals");
    apply(&db.pool, &consumer("totals", &spec)).await;
    let by = ops::Audit { by: "carol".into(), reason: Some("lost rows".into()) };
    let r = ops::rebuild(&db.pool, "totals", &by).await.unwrap();
    assert!(matches!(r, ops::Rebuilt::Bootstrapped(_)), "{r:?}");
    let got = totals(&db.pool, "totals").await;
    assert!(got.iter().all(|(_, n, _)| *n == 101), "refilled from the tables: {got:?}");
    // Audited in the bootstrap's transaction (the refused rebuild above left no row).
    let changes = ops::shard_changes(&db.pool, "totals", 10).await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!((c.action.as_str(), c.detail.as_deref()), ("rebuilt", Some("bootstrapped (events were pruned)")));
    assert_eq!((c.changed_by.as_str(), c.reason.as_deref()), ("carol", Some("lost rows")));
    let cursor: (Xid8, i64) =
        sqlx::query_as("SELECT cursor_tx, cursor_id FROM highwater.consumer_shards WHERE consumer = 'totals'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(c.cursor_after, Position::from(cursor), "{c:?}");
}

/// A consumer created with a bootstrap while writers keep committing (some transactions open
/// across the bootstrap's snapshot, versioned appends whose tx_id stream order raises): its read
/// model equals the application's table at the end: no event missed, none applied twice (a
/// second application of an event id violates the ledger's key and stops the consumer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_under_concurrent_writers_misses_and_duplicates_nothing() {
    let db = setup(&["Deposited"]).await;
    sqlx::raw_sql(
        "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL);
         INSERT INTO accounts SELECT 'a' || i, 0, 0 FROM generate_series(0, 9) i;
         CREATE TABLE balances (id text PRIMARY KEY, balance bigint NOT NULL);
         CREATE TABLE ledger (event_id bigint PRIMARY KEY);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "bs-0", logs.path());
    let stop = Arc::new(AtomicBool::new(false));
    let raised = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..6u64 {
        let (pool, stop, raised) = (db.pool.clone(), stop.clone(), raised.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let account = format!("a{}", (w * 7 + i) % 10);
                let amount = ((w * 31 + i * 17) % 89 + 1) as i64;
                let mut tx = pool.begin().await.unwrap();
                // The transaction id first, then a pause: transactions overlap the bootstrap.
                let own: highwater::Xid8 =
                    sqlx::query_scalar("SELECT pg_current_xact_id()").fetch_one(&mut *tx).await.unwrap();
                tokio::time::sleep(Duration::from_millis(i % 7)).await;
                let version: i64 = sqlx::query_scalar(
                    "UPDATE accounts SET balance = balance + $2, version = version + 1 WHERE id = $1 RETURNING version",
                )
                .bind(&account)
                .bind(amount)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
                let mut ev =
                    NewEvent::new("account", &account, "Deposited", json!({"account": account, "amount": amount}));
                ev.expected_version = Some(version - 1);
                let a = highwater::append_position(&mut tx, &ev).await.unwrap();
                if a.position.tx > own.0 {
                    raised.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(i % 5)).await;
                tx.commit().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spec = "delivery: Shared\nsink:\n  sql:\n    statement: \"WITH l AS (INSERT INTO ledger VALUES ($2)) INSERT INTO balances VALUES ($1->>'account', ($1->>'amount')::bigint) ON CONFLICT (id) DO UPDATE SET balance = balances.balance + EXCLUDED.balance\"\n    bootstrap: INSERT INTO balances SELECT id, balance FROM accounts";
    apply(&db.pool, &consumer("balances", spec)).await;
    let shard = &ops::status(&db.pool, Some("balances")).await.unwrap()[0];
    assert!(!shard.bootstrap_pending && shard.status.delivers(), "bootstrapped at creation: {shard:?}");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    caught_up(&db.pool, "balances").await;
    let shard = &ops::status(&db.pool, Some("balances")).await.unwrap()[0];
    assert!(shard.last_error.is_none(), "no event applied twice: {:?}", shard.last_error);
    let app: Vec<(String, i64)> =
        sqlx::query_as("SELECT id, balance FROM accounts ORDER BY id").fetch_all(&db.pool).await.unwrap();
    let model: Vec<(String, i64)> =
        sqlx::query_as("SELECT id, balance FROM balances ORDER BY id").fetch_all(&db.pool).await.unwrap();
    let (delivered, total): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM highwater.events)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    println!(
        "{total} events, {delivered} delivered after the bootstrap, {} with a raised tx_id",
        raised.load(Ordering::Relaxed)
    );
    assert!(delivered > 0 && delivered < total, "the bootstrap covered some events, delivery the rest");
    assert_eq!(model, app, "read model = application table: 0 missing, 0 duplicated");
}

/// While a rebuild runs, its progress shows in `consumer status -o json` (done, total, rate, ETA)
/// and in the dispatcher's `/metrics` (`highwater_rebuild_events_done` / `_total`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_progress_shows_in_status_and_metrics() {
    let db = setup(&["Added"]).await;
    apply(
        &db.pool,
        &consumer("slow", "delivery: Shared\nbatchSize: 1\nsink: {sql: {statement: 'SELECT pg_sleep(0.05)'}}"),
    )
    .await;
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..120 {
        append(&mut tx, &NewEvent::new("t", &format!("s{i}"), "Added", json!({"amount": i}))).await.unwrap();
    }
    tx.commit().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let d = Dispatcher::start_with_env(&db.url, "rb-m", logs.path(), &[("HIGHWATER_METRICS_INTERVAL", "200ms")]);
    wait_registered(&db.pool, "slow", 1).await;
    let r = ops::rebuild(&db.pool, "slow", &ops::Audit::by("dave")).await.unwrap();
    assert!(matches!(r, ops::Rebuilt::Replaying { total: 120, .. }), "{r:?}");
    let changes = ops::shard_changes(&db.pool, "slow", 10).await.unwrap();
    let c = changes.first().expect("the rebuild's audit row");
    assert_eq!(
        (c.action.as_str(), c.detail.as_deref(), c.changed_by.as_str()),
        ("rebuilt", Some("replaying 120 events"), "dave")
    );
    assert_eq!(c.cursor_after, Position::ZERO, "{c:?}");
    let url = format!("http://127.0.0.1:{}/metrics", d.http_port);
    eventually("rebuild gauges in /metrics", Duration::from_secs(20), || {
        let url = url.clone();
        async move {
            let text = match reqwest::get(url).await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            text.contains("highwater_rebuild_events_expected{consumer=\"slow\",instance_id=\"__shared__\"} 120")
                && text.contains("highwater_rebuild_events_done{")
        }
    })
    .await;
    let out = std::process::Command::new(bin())
        .args(["consumer", "status", "slow", "-o", "json"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v[0]["rebuild"];
    assert_eq!(p["total"], 120, "{v}");
    assert!(p["done"].as_i64().unwrap() < 120 && p["complete"] == false, "{v}");
    assert!(p["rate"].as_f64().unwrap() >= 0.0, "{v}");
}
