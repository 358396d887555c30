//! The compatibility window and `migrate`'s lock discipline, against a real PostgreSQL with real
//! `highwater` processes: a binary refuses a schema outside its window (too new for it, or too
//! old), a running dispatcher that sees the schema move past it exits 0, a breaking step is
//! refused while older dispatchers are alive (unless forced), and a migration that cannot take its
//! locks gives way to an open application transaction — the transaction goes on and commits, the
//! migration retries and applies.
mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use highwater::{
    NewEvent, append,
    migrate::{
        self, Options, Plan, Step,
        window::{RELEASE, SCHEMA_VERSION},
    },
};
use serde_json::json;

fn cli(url: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

async fn set_window(db: &TestDb, version: i32, oldest: i32, release: &str) {
    sqlx::query("UPDATE highwater.schema_version SET version = $1, oldest_binary = $2, release = $3")
        .bind(version)
        .bind(oldest)
        .bind(release)
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_refuses_a_schema_outside_its_window() {
    let db = setup(&[]).await;
    let (code, out) = cli(&db.url, &["consumer", "list"]);
    assert_eq!(code, 0, "inside the window: {out}");

    // A newer release migrated with a breaking step: this binary is older than the window.
    set_window(&db, SCHEMA_VERSION + 2, SCHEMA_VERSION + 1, "9.1.0").await;
    for args in [&["consumer", "list"][..], &["event-types", "list"], &["dispatch", "--connect-timeout", "5s"]] {
        let started = Instant::now();
        let (code, out) = cli(&db.url, args);
        assert_eq!(code, 1, "{args:?}: {out}");
        let this = format!("no longer supports this binary (release {RELEASE}, schema version {SCHEMA_VERSION})");
        assert!(out.contains(&this), "{args:?}: {out}");
        assert!(out.contains("fix: run the image of release 9.1.0 or newer"), "{args:?}: {out}");
        assert!(started.elapsed() < Duration::from_secs(4), "{args:?} refused at once, not after retries");
    }
    let (code, out) = cli(&db.url, &["migrate"]);
    assert_eq!(code, 1, "{out}");
    let newer = format!("migrated by release 9.1.0 (schema version {}), newer than this binary", SCHEMA_VERSION + 2);
    assert!(out.contains(&newer), "{out}");

    // A schema older than this binary: migrate first.
    set_window(&db, 2, 1, "0.2.0").await;
    let (code, out) = cli(&db.url, &["consumer", "list"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("older than this binary") && out.contains("fix: run `highwater migrate`"), "{out}");
    let (code, out) = cli(&db.url, &["migrate"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = cli(&db.url, &["consumer", "list"]);
    assert_eq!(code, 0, "after migrate: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_dispatcher_exits_0_when_the_schema_moves_past_it() {
    let db = setup(&["Tick"]).await;
    apply(&db.pool, &consumer("c", "delivery: Shared\nsink: {log: {}}")).await;
    let logs = tempfile::tempdir().unwrap();
    let mut d = Dispatcher::start(&db.url, "d0", logs.path());
    wait_registered(&db.pool, "c", 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(d.child.try_wait().unwrap().is_none(), "runs inside the window");

    set_window(&db, SCHEMA_VERSION + 1, SCHEMA_VERSION + 1, "9.0.0").await;
    sqlx::query("SELECT pg_notify('highwater_control', 'schema')").execute(&db.pool).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the dispatcher still runs against a schema past its window");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = std::fs::read_to_string(logs.path().join("d0.log")).unwrap();
    assert_eq!(status.code(), Some(0), "exits 0 so that Kubernetes restarts it on the new image:\n{log}");
    assert!(log.contains("the schema no longer accepts this binary"), "{log}");
    assert!(log.contains("shutting down: finishing passes in flight"), "it stops like on SIGTERM:\n{log}");
}

fn with_breaking_step(floor: i32) -> Plan {
    let mut plan = Plan::this_release();
    plan.schema_version += 1;
    plan.steps.push(Step::new(
        29991231000000,
        "contract",
        &format!(
            "-- Drops what binaries before schema {floor} call.\n-- breaking: oldest_binary = {floor}\nSELECT 1;\n"
        ),
    ));
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaking_step_is_refused_while_older_dispatchers_live_unless_forced() {
    let db = setup(&["Tick"]).await;
    let logs = tempfile::tempdir().unwrap();
    let _d = Dispatcher::start(&db.url, "current-0", logs.path());
    eventually("the dispatcher registers as live", Duration::from_secs(15), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM highwater.dispatchers WHERE binary_schema = $1")
            .bind(SCHEMA_VERSION)
            .fetch_one(&db.pool)
            .await
            .unwrap()
            == 1
    })
    .await;
    // A dispatcher of a release before the window writes no binary version.
    sqlx::query("INSERT INTO highwater.dispatchers (instance_id, consumer_group) VALUES ('old-0', 'default')")
        .execute(&db.pool)
        .await
        .unwrap();

    // A step that only binaries newer than this one survive: the live ones are this one and older.
    let err = migrate::run_plan(&db.pool, &with_breaking_step(SCHEMA_VERSION + 1), &Options::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("migration 29991231000000 (contract) is breaking"), "{err}");
    assert!(
        err.contains(&format!("current-0 (schema {SCHEMA_VERSION})")) && err.contains("old-0 (before 0.3.0)"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM highwater._sqlx_migrations WHERE version = 29991231000000")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(applied, 0, "nothing applied");

    // A step binaries of this schema survive is not refused by them, only by the older one.
    sqlx::query("DELETE FROM highwater.dispatchers WHERE instance_id = 'old-0'").execute(&db.pool).await.unwrap();
    let r = migrate::run_plan(
        &db.pool,
        &with_breaking_step(SCHEMA_VERSION),
        &Options { force: false, ..Default::default() },
    )
    .await;
    assert!(r.is_ok(), "{r:?}");
    let window: (i32, i32) = sqlx::query_as("SELECT version, oldest_binary FROM highwater.schema_version")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(window, (SCHEMA_VERSION + 1, SCHEMA_VERSION));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forcing_a_breaking_step_applies_it_and_raises_the_window() {
    let db = setup(&["Tick"]).await;
    sqlx::query("INSERT INTO highwater.dispatchers (instance_id, consumer_group) VALUES ('old-0', 'default')")
        .execute(&db.pool)
        .await
        .unwrap();
    let r = migrate::run_plan(
        &db.pool,
        &with_breaking_step(SCHEMA_VERSION + 1),
        &Options { force: true, ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(r.applied, vec![29991231000000]);
    let window: (i32, i32) = sqlx::query_as("SELECT version, oldest_binary FROM highwater.schema_version")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(window, (SCHEMA_VERSION + 1, SCHEMA_VERSION + 1), "the schema now refuses this binary");
    let (code, out) = cli(&db.url, &["consumer", "list"]);
    assert_eq!(code, 1, "this binary (schema {SCHEMA_VERSION}) is now outside: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_gives_way_to_an_open_application_transaction_and_retries() {
    let db = setup(&["Tick"]).await;
    // The application's business transaction: an append, then more work before the commit.
    let mut tx = db.pool.begin().await.unwrap();
    append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({}))).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *tx).await.unwrap();

    let mut plan = Plan::this_release();
    plan.steps.push(Step::new(29991231000001, "probe", "ALTER TABLE highwater.events ADD COLUMN probe integer;\n"));
    let pool = db.pool.clone();
    let opts = Options { lock_timeout: Duration::from_millis(200), ..Default::default() };
    let migration = tokio::spawn(async move { migrate::run_plan(&pool, &plan, &opts).await });

    // While the migration tries, the transaction keeps appending without waiting for it...
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in 0..3 {
        let started = Instant::now();
        append(&mut tx, &NewEvent::new("s", "1", "Tick", json!({"i": i}))).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(500), "append {i} waited {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!migration.is_finished(), "the migration waits for the transaction");
    // ...and commits: nothing failed.
    tx.commit().await.unwrap();

    let report = tokio::time::timeout(Duration::from_secs(30), migration).await.unwrap().unwrap().unwrap();
    assert_eq!(report.applied, vec![29991231000001]);
    assert!(report.retries >= 2, "it gave way and retried: {report:?}");
    // Each time it names who it gave way to: the application's transaction, on events.
    let named = format!("highwater.events held by pid {pid} ");
    assert!(report.gave_way_to.iter().any(|h| h.contains(&named)), "{named:?} in {:?}", report.gave_way_to);
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.events").fetch_one(&db.pool).await.unwrap();
    assert_eq!(events, 4, "the application's events are all there");
}
