//! Behind a connection pooler (docs/operations.md): through PgBouncer in transaction mode
//! applications append, take tokens and wait, while `migrate`, `dispatch` and the CLI refuse at
//! start naming the fix and write nothing; through PgBouncer in session mode dispatchers work,
//! SIGKILLs included. A direct server is never taken for a pooler.
mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use highwater_testkit::pgbouncer::{PgBouncer, PoolMode};
use sqlx::{PgPool, postgres::PgPoolOptions};

const REFUSAL: &str = "the database URL goes through a transaction-mode connection pooler";

/// A pool through the pooler that never names a statement.
async fn pooled(url: &str, max: u32) -> PgPool {
    let opts: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    PgPoolOptions::new().max_connections(max).connect_with(opts.statement_cache_capacity(0)).await.unwrap()
}

fn run_highwater(url: &str, args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let mut cmd = Command::new(bin());
    cmd.args(args).env("DATABASE_URL", url).env("HIGHWATER_LOG", "warn");
    let out = cmd.output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), started.elapsed())
}

/// The state every command would change: the schema's tables, shards, events, types.
async fn snapshot(pool: &PgPool) -> String {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'highwater' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut out = tables.join(",");
    if tables.iter().any(|t| t == "consumer_shards") {
        for sql in [
            "SELECT count(*) FROM highwater.consumer_shards",
            "SELECT count(*) FROM highwater.events",
            "SELECT count(*) FROM highwater.event_types",
        ] {
            out.push_str(&format!("|{}", scalar_i64(pool, sql).await));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_server_and_a_session_pool_are_not_refused() {
    let db = setup(&[]).await;
    let bouncer = PgBouncer::start(db.pg.port(), PoolMode::Session, 10).expect("pgbouncer");
    let via = highwater::db::connect(&bouncer.url_for("postgres"), 2).await.unwrap();
    for round in 0..20 {
        for (name, pool) in [("direct", &db.pool), ("session pool", &via)] {
            let t = Instant::now();
            highwater::pooler::check(pool).await.unwrap_or_else(|e| panic!("{name} round {round}: {e}"));
            if round == 0 {
                println!("check on a {name}: {:?}", t.elapsed());
            }
        }
    }
    highwater::db::check_migrated(&via, &bouncer.url_for("postgres")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_dispatch_and_the_cli_refuse_a_transaction_pool_and_write_nothing() {
    let db = setup(&["Tick"]).await;
    let fresh_url = db.pg.create_database("fresh").await.unwrap();
    let bouncer = PgBouncer::start(db.pg.port(), PoolMode::Transaction, 2).expect("pgbouncer");
    let fresh = highwater::db::connect(&fresh_url, 2).await.unwrap();
    let (before_fresh, before) = (snapshot(&fresh).await, snapshot(&db.pool).await);

    let cases: [(&str, &[&str]); 4] = [
        ("fresh", &["migrate"]),
        ("postgres", &["migrate"]),
        ("postgres", &["dispatch", "--instance-id", "pooled", "--listen", "off", "--connect-timeout", "10s"]),
        ("postgres", &["event-types", "list"]),
    ];
    for (database, args) in cases {
        let (code, stderr, took) = run_highwater(&bouncer.url_for(database), args);
        println!("{args:?} on {database}: exit {code:?} in {took:?}: {stderr}");
        assert!(code.is_some_and(|c| c != 0), "{args:?}: non-zero exit, got {code:?}\n{stderr}");
        let first = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
        assert!(first.contains(REFUSAL), "{args:?}: the problem in one line: {stderr}");
        assert!(
            stderr.contains("fix: point DATABASE_URL at PostgreSQL directly or at a session-mode pool"),
            "{stderr}"
        );
        assert!(!stderr.contains("sqlx_s_"), "{stderr}");
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
    }
    assert_eq!(snapshot(&fresh).await, before_fresh, "migrate created nothing in the fresh database");
    assert_eq!(snapshot(&db.pool).await, before, "nothing written to the migrated one");
    assert!(!snapshot(&fresh).await.contains("consumer_shards"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_append_take_tokens_and_wait_through_a_transaction_pool() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    apply(
        &db.pool,
        &consumer("projection", "delivery: Shared\nsink: {sql: {statement: 'INSERT INTO applied VALUES ($2)'}}"),
    )
    .await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "direct", logs.path());
    // Two server connections for eight clients: transactions change backends all the time.
    let bouncer = PgBouncer::start(db.pg.port(), PoolMode::Transaction, 2).expect("pgbouncer");
    let app = pooled(&bouncer.url_for("postgres"), 8).await;

    let (writers, each) = (4, 25);
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let app = app.clone();
            tokio::spawn(async move {
                let mut waited = Vec::new();
                for i in 0..each {
                    let mut tx = app.begin().await.unwrap();
                    sqlx::query("SELECT highwater.append('s', $1, 'Tick', jsonb_build_object('i', $2::int))")
                        .persistent(false)
                        .bind(format!("{w}"))
                        .bind(i)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    let token: String = sqlx::query_scalar("SELECT highwater.token()::text")
                        .persistent(false)
                        .fetch_one(&mut *tx)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                    let t = Instant::now();
                    loop {
                        // In a transaction: outside one, a transaction pool may run the Bind of an
                        // unnamed statement on another backend than its Parse.
                        let mut tx = app.begin().await.unwrap();
                        let done: bool = sqlx::query_scalar("SELECT highwater.applied('projection', $1::xid8)")
                            .persistent(false)
                            .bind(&token)
                            .fetch_one(&mut *tx)
                            .await
                            .unwrap();
                        tx.commit().await.unwrap();
                        if done {
                            break;
                        }
                        assert!(t.elapsed() < Duration::from_secs(30), "token {token} not applied");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    waited.push(t.elapsed());
                }
                waited
            })
        })
        .collect();
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    waits.sort();
    let total = (writers * each) as i64;
    assert_eq!(scalar_i64(&db.pool, "SELECT count(DISTINCT event_id) FROM applied").await, total);
    assert_eq!(scalar_i64(&db.pool, "SELECT count(*) FROM applied").await, total);
    println!(
        "{total} appends through a transaction pool in {:?}, every wait returned (median {:?}, max {:?})",
        started.elapsed(),
        waits[waits.len() / 2],
        waits.last().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatchers_through_a_session_pool_survive_a_sigkill_exactly_once() {
    let db = setup(&["Tick"]).await;
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    apply(
        &db.pool,
        &consumer(
            "exactly-once",
            "delivery: Shared\nbatchSize: 40\nsink: {sql: {statement: 'INSERT INTO applied SELECT $2 FROM pg_sleep(0.002)'}}",
        ),
    )
    .await;
    let bouncer = PgBouncer::start(db.pg.port(), PoolMode::Session, 60).expect("pgbouncer");
    let url = bouncer.url_for("postgres");
    let logs = tempfile::tempdir().unwrap();
    let mut procs = vec![Dispatcher::start(&url, "s0", logs.path()), Dispatcher::start(&url, "s1", logs.path())];

    let (writers, each) = (4, 150);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let url = url.clone();
            tokio::spawn(async move {
                let pool = highwater::db::connect(&url, 2).await.unwrap();
                for i in 0..each {
                    let mut tx = pool.begin().await.unwrap();
                    highwater::append(
                        &mut tx,
                        &highwater::NewEvent::new("s", &format!("{w}"), "Tick", serde_json::json!({"i": i})),
                    )
                    .await
                    .unwrap();
                    tx.commit().await.unwrap();
                    if i % 10 == 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            })
        })
        .collect();
    wait_count(&db.pool, "SELECT count(*) FROM applied", 100, Duration::from_secs(60)).await;
    procs.remove(0).sigkill();
    procs.push(Dispatcher::start(&url, "s2", logs.path()));
    for t in tasks {
        t.await.unwrap();
    }
    let total = (writers * each) as i64;
    wait_count(&db.pool, "SELECT count(DISTINCT event_id) FROM applied", total, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(procs);
    let distinct = scalar_i64(&db.pool, "SELECT count(DISTINCT event_id) FROM applied").await;
    let dup = scalar_i64(&db.pool, "SELECT count(*) - count(DISTINCT event_id) FROM applied").await;
    println!("through a session pool, two dispatchers, 1 SIGKILL: {distinct}/{total} delivered, {dup} duplicates");
    assert_eq!(distinct, total, "0 lost");
    assert_eq!(dup, 0, "the SQL sink applied each event once");
}
