//! Replicas and failover (docs/operations.md, "Replicas and failover"). Pointed at a hot standby,
//! every command refuses at once, naming the fix, and writes nothing. A failover (the primary
//! crashes; its synchronous standby is promoted and takes over the primary's address, as a DNS
//! name or a Kubernetes Service moves) is survived by running dispatchers and writers: every
//! acknowledged append is delivered, and the SQL sink applied each committed event exactly once.
mod common;

use std::{
    collections::BTreeSet,
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::*;
use highwater::embedded::{EmbeddedOptions, EmbeddedPostgres};
use highwater_testkit::TestCluster;
use serde_json::json;
use sqlx::{Connection, PgPool};

fn run(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin()).args(args).env("DATABASE_URL", url).output().unwrap();
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

async fn wait_for_sync_standby(pool: &PgPool) {
    let pool = pool.clone();
    eventually("the standby to stream synchronously", Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
                .fetch_one(&pool)
                .await
                .unwrap_or(0)
                == 1
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_refuses_a_hot_standby_and_writes_nothing() {
    let db = setup(&["Tick"]).await;
    let standby = db.pg.start_standby().await.unwrap();
    let url = standby.url();
    let logs = tempfile::tempdir().unwrap();
    for args in [
        &["migrate"][..],
        &["consumer", "list"],
        &["events", "append", "--stream-type", "s", "--stream-id", "1", "--type", "Tick", "--payload", "{}"],
        &["dispatch", "--instance-id", "on-standby", "--connect-timeout", "2s", "--listen", "off"],
    ] {
        let started = Instant::now();
        let (code, text) = run(&url, args);
        assert_eq!(code, Some(1), "{args:?} exits 1: {text}");
        assert!(text.contains("the database is a hot standby"), "{args:?} names the problem: {text}");
        assert!(text.contains("fix: point DATABASE_URL at the primary"), "{args:?} names the fix: {text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?} refused at once: {:?}", started.elapsed());
    }
    drop(logs);
    let events: i64 = scalar_i64(&db.pool, "SELECT count(*) FROM highwater.events").await;
    assert_eq!(events, 0, "nothing was written on the primary either");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_the_promoted_standby_loses_no_acknowledged_event() {
    // The test clusters run with synchronous_commit off, for speed; a failover test needs it on
    // (set on the command line, it cannot be changed by ALTER SYSTEM).
    let mut options = EmbeddedOptions::default();
    options.settings.retain(|(k, _)| k != "synchronous_commit");
    let pg = EmbeddedPostgres::start(options).await.unwrap();
    let url = pg.url();
    let pool = highwater::db::connect(&url, 10).await.unwrap();
    highwater::db::migrate(&pool).await.unwrap();
    highwater::event_types::register(&pool, "Tick", None, None).await.unwrap();
    let mut db = TestDb { pool, url, pg: pg.into() };
    sqlx::raw_sql("CREATE TABLE applied (event_id bigint NOT NULL)").execute(&db.pool).await.unwrap();
    apply(
        &db.pool,
        &consumer(
            "projection",
            "delivery: Shared\nbatchSize: 20\nsink: {sql: {statement: 'INSERT INTO applied VALUES ($2)'}}",
        ),
    )
    .await;
    let mut standby = db.pg.start_standby().await.unwrap();
    // Synchronous: a commit is acknowledged once the standby has it, so a failover keeps every
    // acknowledged transaction (asynchronous replication may lose the last ones: PostgreSQL's
    // promise, not highwater's to keep).
    for sql in ["ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"] {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
    wait_for_sync_standby(&db.pool).await;

    let logs = tempfile::tempdir().unwrap();
    let url = db.url.clone();
    let mut dispatchers: Vec<Dispatcher> =
        (0..2).map(|i| Dispatcher::start(&url, &format!("d{i}"), logs.path())).collect();

    // Writers through their own connections, reconnecting after the failover like an
    // application's pool: an append counts once its commit was acknowledged.
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let failed = Arc::new(Mutex::new(0u64));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut writers = Vec::new();
    for w in 0..3 {
        let (url, acknowledged, failed, stop) = (url.clone(), acknowledged.clone(), failed.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.is_cancelled() {
                n += 1;
                let one = async {
                    let mut conn = sqlx::PgConnection::connect(&url).await?;
                    let id: i64 = sqlx::query_scalar("SELECT highwater.append('s', $1, 'Tick', $2)")
                        .bind(format!("w{w}"))
                        .bind(json!({"n": n}))
                        .fetch_one(&mut conn)
                        .await?;
                    Ok::<_, sqlx::Error>(id)
                };
                match one.await {
                    Ok(id) => {
                        acknowledged.lock().unwrap().insert(id);
                    }
                    Err(_) => {
                        *failed.lock().unwrap() += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = acknowledged.lock().unwrap().len();
    assert!(before > 20, "the writers write before the failover: {before}");

    // The failover: the primary crashes, the standby is promoted and takes over its address.
    let address = db.pg.port();
    db.pg.crash();
    db.pool.close().await;
    standby.promote().await.unwrap();
    standby.restart_on(address).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.cancel();
    for w in writers {
        w.await.unwrap();
    }
    let stopped = Instant::now();
    let acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    assert!(acknowledged.len() > before, "the writers write after the failover");

    let pool = highwater::db::connect(&standby.url(), 4).await.unwrap();
    let committed: BTreeSet<i64> =
        sqlx::query_scalar("SELECT id FROM highwater.events").fetch_all(&pool).await.unwrap().into_iter().collect();
    let lost: Vec<&i64> = acknowledged.difference(&committed).collect();
    assert!(lost.is_empty(), "acknowledged appends missing after the failover: {lost:?}");
    let total = committed.len() as i64;
    let p = pool.clone();
    eventually("the dispatchers to reconnect and apply every event", Duration::from_secs(60), || {
        let p = p.clone();
        async move { scalar_i64(&p, "SELECT count(*) FROM applied").await >= total }
    })
    .await;
    println!("the projection caught up {:?} after the writers stopped", stopped.elapsed());
    for d in &mut dispatchers {
        assert!(d.child.try_wait().unwrap().is_none(), "{} kept running through the failover", d.instance);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT event_id FROM applied").fetch_all(&pool).await.unwrap();
    let distinct: BTreeSet<i64> = applied.iter().copied().collect();
    assert_eq!(distinct, committed, "the projection holds every committed event");
    assert_eq!(applied.len(), distinct.len(), "and each once");
    let failed = *failed.lock().unwrap();
    println!(
        "{} acknowledged appends ({before} before the failover), {failed} failed while the primary was down, \
         {total} committed",
        acknowledged.len()
    );
}
