//! The upgrade a user does, under load: a database installed and running with the oldest release
//! of the compatibility window (e2e/upgrade/releases; its binary built from this repository's
//! history and cached), two of its dispatchers delivering a SQL projection and a log sink, four
//! application writers appending through `highwater.append` in business transactions all along;
//! then this release's `highwater migrate` (the chart's pre-upgrade hook) while the old
//! dispatchers keep delivering, and the dispatchers replaced one by one, some by SIGKILL.
//! Afterwards: no application transaction failed, nothing lost, the projection applied every
//! event exactly once, and every append's wait was bounded. The figures it prints are the ones
//! docs/operations.md ("Upgrading") states.
//!
//! Needs `highwater` built in the target directory (`cargo test --workspace` builds it) and the
//! old release's build (`e2e/upgrade/build-release.sh --oldest`; `.ci/run` runs it first, the
//! test builds it itself when it is not cached).
use std::{
    collections::BTreeSet,
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use highwater::{db, embedded::EmbeddedPostgres};
use highwater_e2e::{
    chaos::{audit, fleet::highwater_bin},
    process::Process,
    upgrade::{self, writers},
};
use tokio_util::sync::CancellationToken;

fn run(bin: &std::path::Path, url: &str, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).env("DATABASE_URL", url).env("HIGHWATER_LOG", "info").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} {args:?} failed:\n{text}", bin.display());
    text
}

fn dispatcher(
    bin: &std::path::Path,
    url: &str,
    name: &str,
    consumers: &std::path::Path,
    logs: &std::path::Path,
) -> Process {
    let port = highwater::embedded::free_port().unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["dispatch", "--instance-id", name, "--poll-interval", "50ms", "--shutdown-grace", "5s"])
        .arg("--consumers")
        .arg(consumers)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", url)
        .env("HIGHWATER_LOG", "info,sqlx=warn");
    Process::spawn(name, cmd, &logs.join(format!("{name}.log"))).unwrap()
}

async fn count(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_release_upgrades_under_load_and_no_application_transaction_fails() {
    // The oldest release of the window by default; HIGHWATER_UPGRADE_FROM=0.2.0 measures another.
    let oldest = upgrade::release_from_env(|r| r.into_iter().next()).unwrap();
    let old_bin = upgrade::release_binary(&oldest).unwrap();
    let new_bin = highwater_bin().unwrap();
    let pg = EmbeddedPostgres::start(Default::default()).await.unwrap();
    let url = pg.url();
    let work = tempfile::tempdir().unwrap();

    // Installed with the old release, as its README said.
    run(&old_bin, &url, &["migrate"]);
    run(&old_bin, &url, &["event-types", "register", writers::EVENT_TYPE]);
    let pool = db::connect(&url, 12).await.unwrap();
    writers::prepare(&pool).await.unwrap();
    sqlx::raw_sql("CREATE TABLE projected (event_id bigint NOT NULL)").execute(&pool).await.unwrap();
    let log_file = work.path().join("audit.jsonl");
    let consumers = work.path().join("consumers.yaml");
    std::fs::write(
        &consumers,
        format!(
            "apiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: projection}}\n\
             spec:\n  delivery: Shared\n  batchSize: 50\n  sink: {{sql: {{statement: 'INSERT INTO projected (event_id) VALUES ($2)'}}}}\n\
             ---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {{name: audit-log}}\n\
             spec:\n  delivery: Shared\n  batchSize: 50\n  sink: {{log: {{target: '{}'}}}}\n",
            log_file.display()
        ),
    )
    .unwrap();

    let mut old = vec![
        dispatcher(&old_bin, &url, "old-0", &consumers, work.path()),
        dispatcher(&old_bin, &url, "old-1", &consumers, work.path()),
    ];
    let stop = CancellationToken::new();
    let record = Arc::new(Mutex::new(writers::Record::default()));
    let load = writers::start(pool.clone(), 4, stop.clone(), record.clone());
    let began = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before_migrate = count(&pool, "SELECT count(*) FROM projected").await;
    assert!(before_migrate > 0, "the old dispatchers deliver before the upgrade");

    let installed_before: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM highwater._sqlx_migrations").fetch_all(&pool).await.unwrap();
    // The chart's pre-upgrade hook: this release's migrate, while everything runs.
    let migrate_from = Instant::now();
    let out = run(&new_bin, &url, &["migrate"]);
    let migrate_to = Instant::now();
    assert!(out.contains(&format!("schema version {}", highwater::migrate::window::SCHEMA_VERSION)), "{out}");
    let retries = out.matches("migration gave way to running transactions").count();
    // What the migration gave way to, as its log names it (the first few).
    for line in out.lines().filter(|l| l.contains("held by running transactions")).take(3) {
        println!("migrate: {line}");
    }

    // The old dispatchers keep delivering against the new schema.
    let at_migrate = count(&pool, "SELECT count(*) FROM projected").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_old = count(&pool, "SELECT count(*) FROM projected").await;
    for p in &mut old {
        p.check_running().unwrap();
    }
    assert!(
        after_old > at_migrate,
        "old dispatchers stopped delivering after the migration ({at_migrate} → {after_old})"
    );

    // The rolling replacement, one pod at a time; one old pod dies by SIGKILL mid-batch, one new pod too.
    let mut new = Vec::new();
    old.remove(0).kill();
    new.push(dispatcher(&new_bin, &url, "new-0", &consumers, work.path()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut last_old = old.remove(0);
    last_old.terminate();
    new.push(dispatcher(&new_bin, &url, "new-1", &consumers, work.path()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    new.remove(0).kill();
    new.push(dispatcher(&new_bin, &url, "new-2", &consumers, work.path()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    last_old.stop();

    stop.cancel();
    load.join_all().await;
    let ended = Instant::now();
    for p in &mut new {
        p.check_running().unwrap();
    }

    // Drained: the projection holds as many rows as there are events.
    let events = count(&pool, "SELECT count(*) FROM highwater.events").await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while count(&pool, "SELECT count(DISTINCT event_id) FROM projected").await < events {
        assert!(Instant::now() < deadline, "the new dispatchers did not drain the backlog");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for p in &mut new {
        p.stop();
    }

    // Nothing is pruned in this run: the events table holds every committed event.
    let committed: BTreeSet<i64> =
        sqlx::query_scalar("SELECT id FROM highwater.events").fetch_all(&pool).await.unwrap().into_iter().collect();
    let sql = audit::sql_sink(&pool, "projection", "projected", &committed).await.unwrap();
    let log = audit::log_sink("audit-log", &log_file, &committed).unwrap();
    let steps: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT version, execution_time / 1000000 FROM highwater._sqlx_migrations WHERE NOT version = ANY ($1)
          ORDER BY version",
    )
    .bind(&installed_before)
    .fetch_all(&pool)
    .await
    .unwrap();
    println!("steps applied by this migrate (version, ms): {steps:?}");
    let r = std::mem::take(&mut *record.lock().unwrap());
    let wait_before = r.longest_append(began, migrate_from);
    let wait_during = r.longest_append(migrate_from, migrate_to);
    let wait_after = r.longest_append(migrate_to, ended);
    println!(
        "upgrade {} → this release under load: {} transactions committed ({} events), {} failed; migrate took {:?} \
         with {retries} retries; longest append before {wait_before:?}, during migrate {wait_during:?}, after \
         {wait_after:?}; projection lost {} duplicates {}; log lost {} redelivered {} torn {}",
        oldest.name,
        r.committed,
        committed.len(),
        r.failures.len(),
        migrate_to - migrate_from,
        sql.lost,
        sql.duplicates,
        log.lost,
        log.duplicates,
        log.torn
    );
    assert!(
        r.failures.is_empty(),
        "application transactions failed: {:?}",
        r.failures.iter().map(|f| &f.1).collect::<Vec<_>>()
    );
    assert!(r.committed > 100, "the writers kept writing: {}", r.committed);
    assert_eq!((sql.lost, sql.duplicates, sql.phantom), (0, 0, 0), "the projection: exactly once");
    assert_eq!((log.lost, log.phantom), (0, 0), "the log sink: every event at least once");
    // A writer waits at most the migration's lock timeout (500 ms) for the migration to take its
    // locks, then for as long as the migration holds them: bounded by the whole migrate.
    assert!(
        wait_during <= (migrate_to - migrate_from) + Duration::from_millis(500),
        "an append waited {wait_during:?}, longer than the migrate ({:?}) plus its lock timeout",
        migrate_to - migrate_from
    );
    let window: (i32, i32, String) =
        sqlx::query_as("SELECT version, oldest_binary, release FROM highwater.schema_version")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        window,
        (
            highwater::migrate::window::SCHEMA_VERSION,
            highwater::migrate::window::OLDEST_BINARY,
            highwater::migrate::window::RELEASE.to_owned()
        ),
        "the schema records its window"
    );
    assert!(window.1 <= oldest.schema_version, "the release upgraded from is inside the window");
}
