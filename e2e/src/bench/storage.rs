//! Scenario 8, partitioned storage (issue 18):
//! - drain rate of one consumer (no-op sink) when the backlog lies in 30 partitions of
//!   `highwater.events`, against the same backlog in an unpartitioned table (the partitioned table
//!   swapped for a plain one with the same columns, indexes and triggers, so the same binary reads
//!   both);
//! - retention of the backlog: row DELETE (`events prune --all-stream-types`) against dropping
//!   partitions (`events drop-partitions`): time, WAL bytes (`pg_current_wal_lsn` before and
//!   after), and commit-to-sink p99 of the events a steady writer appends while it runs.
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use highwater::{partitions, retention};
use sqlx::{PgPool, Row};

use super::{
    BenchDb, Report, Sizes,
    db::{NOOP_SINK, PROJECTION_SINK, PROJECTION_TABLE, ScenarioDb, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
    report::{per_s, ratio},
};

const S: &str = "9 storage";
const TIMEOUT: Duration = Duration::from_secs(1800);
/// Transaction ids per partition here: the fill burns this many between its chunks, so each
/// chunk lands in a partition of its own.
const WIDTH: i64 = 100;
/// Appends per second while retention runs.
const LIVE_RATE: u64 = 200;

/// Replaces the (still empty) partitions above the legacy one with `WIDTH`-wide ones, `ahead` of
/// them.
async fn narrow(pool: &PgPool, ahead: i32) -> Result<()> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$
         DECLARE r record;
         BEGIN
             FOR r IN SELECT name FROM highwater.event_partitions WHERE name <> 'events_legacy' LOOP
                 EXECUTE format('DROP TABLE highwater.%I', r.name);
                 DELETE FROM highwater.event_partitions WHERE name = r.name;
             END LOOP;
             UPDATE highwater.event_partitioning SET width = {WIDTH}, ahead = {ahead};
             PERFORM highwater.create_event_partitions();
         END $$"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

/// The baseline: `highwater.events` as a plain table again (same columns, identity, indexes and
/// triggers), the partitioned one set aside.
async fn unpartition(pool: &PgPool) -> Result<()> {
    sqlx::raw_sql(
        "ALTER TABLE highwater.events RENAME TO events_partitioned;
         CREATE TABLE highwater.events (LIKE highwater.events_partitioned INCLUDING ALL);
         CREATE TRIGGER events_notify AFTER INSERT ON highwater.events
             FOR EACH STATEMENT EXECUTE FUNCTION highwater.notify_events();",
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn burn_xids(pool: &PgPool, n: i64) -> Result<()> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

/// Fills `n` events in `chunks` chunks, `WIDTH` transaction ids apart (one partition each when
/// the table is partitioned that narrowly); returns the highest id.
async fn fill_in_chunks(db: &ScenarioDb, n: i64, chunks: i64) -> Result<i64> {
    let per = n / chunks;
    let mut last = 0;
    for _ in 0..chunks {
        last = db.fill_more(per).await?;
        burn_xids(&db.pool, WIDTH).await?;
        partitions::create_ahead(&db.pool).await.ok();
    }
    sqlx::query("VACUUM ANALYZE highwater.events").execute(&db.pool).await?;
    Ok(last)
}

async fn drain_rate(db: &ScenarioDb, n: i64, last_id: i64, sizes: &Sizes) -> Result<f64> {
    let d = DispatcherProc::start(&db.url, "storage-0", &DispatcherOpts::group("storage")).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    db.apply(&consumer_yaml("noop", "storage", sizes.batch, NOOP_SINK)).await?;
    let took = db.wait_caught_up(&["noop".to_owned()], last_id, TIMEOUT).await?;
    drop(d);
    Ok(n as f64 / took.as_secs_f64())
}

async fn partitions_holding_events(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(DISTINCT tableoid) FROM highwater.events").fetch_one(pool).await?)
}

async fn wal_lsn(pool: &PgPool) -> Result<String> {
    Ok(sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(pool).await?)
}

async fn wal_bytes_since(pool: &PgPool, from: &str) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint")
        .bind(from)
        .fetch_one(pool)
        .await?)
}

#[derive(Clone, Copy)]
enum Method {
    Delete,
    DropPartitions,
}

/// Fills `n` events in 10 partitions, lets a projection consumer catch up, then runs retention of
/// all of them while a writer appends `LIVE_RATE` events/s; returns (seconds, WAL bytes, p99 ms,
/// events appended meanwhile).
async fn retention_run(bench: &BenchDb, n: i64, method: Method, sizes: &Sizes) -> Result<(f64, i64, f64, i64)> {
    let name = match method {
        Method::Delete => "storage_delete",
        Method::DropPartitions => "storage_drop",
    };
    let db = bench.scenario(name).await?;
    narrow(&db.pool, 2).await?;
    sqlx::query(PROJECTION_TABLE).execute(&db.pool).await?;
    let last_fill = fill_in_chunks(&db, n, 10).await?;
    // The live appends go to partitions of the default width from here on.
    sqlx::raw_sql(
        "UPDATE highwater.event_partitioning SET width = 10000000, ahead = 2;
         SELECT highwater.create_event_partitions();",
    )
    .execute(&db.pool)
    .await?;
    let d = DispatcherProc::start(&db.url, "storage-0", &DispatcherOpts::group("storage")).await?;
    // From the newest event: the projection's cursor starts past the fill (which retention may
    // then remove) without spending minutes projecting it.
    let yaml = consumer_yaml("proj", "storage", sizes.batch, PROJECTION_SINK)
        .replace("  delivery: Shared\n", "  delivery: Shared\n  startFrom: latest\n");
    db.apply(&yaml).await?;
    db.wait_caught_up(&["proj".to_owned()], last_fill, TIMEOUT).await?;
    // The fill's rows are older than the cutoff of a 0-day retention that starts from here.
    tokio::time::sleep(Duration::from_millis(50)).await;

    let stop = tokio_util::sync::CancellationToken::new();
    let writer = tokio::spawn(write_until(db.url.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lsn = wal_lsn(&db.pool).await?;
    let started = Instant::now();
    match method {
        Method::Delete => {
            let o = retention::PruneOptions {
                older_than_days: 0,
                stream_types: Some(vec!["order".into()]),
                batch_size: 10_000,
                dry_run: false,
            };
            retention::prune(&db.pool, &o).await?;
        }
        Method::DropPartitions => {
            partitions::drop_old(&db.pool, &partitions::DropOptions { older_than_days: 0, dry_run: false }).await?;
        }
    }
    let took = started.elapsed().as_secs_f64();
    let wal = wal_bytes_since(&db.pool, &lsn).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    let appended = writer.await??;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM highwater.events WHERE id <= $1")
        .bind(last_fill)
        .fetch_one(&db.pool)
        .await?;
    ensure!(left == 0, "{name}: {left} of the filled events left after retention");
    let last: i64 = sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(&db.pool).await?;
    db.wait_caught_up(&["proj".to_owned()], last, Duration::from_secs(60)).await?;
    drop(d);
    let row = sqlx::query(
        "SELECT percentile_disc(0.99) WITHIN GROUP (ORDER BY l) AS p99
           FROM (SELECT (extract(epoch FROM delivered_at - created_at) * 1000)::float8 AS l
                   FROM bench_projection WHERE event_id > $1) x",
    )
    .bind(last_fill)
    .fetch_one(&db.pool)
    .await?;
    Ok((took, wal, row.try_get::<Option<f64>, _>("p99")?.unwrap_or(0.0), appended))
}

/// Appends `LIVE_RATE` events/s, each its own transaction, until `stop`; returns how many.
async fn write_until(url: String, stop: tokio_util::sync::CancellationToken) -> Result<i64> {
    let pool = highwater::db::connect(&url, 2).await?;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / LIVE_RATE));
    let mut n = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        sqlx::query("SELECT highwater.append('live', $1, 'OrderPlaced', '{}')")
            .bind(format!("l-{n}"))
            .execute(&pool)
            .await?;
        n += 1;
    }
    pool.close().await;
    Ok(n)
}

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let n = sizes.drain_events;
    let note = format!("{} events, batch {}, 1 consumer, no-op sink", per_s(n as f64), sizes.batch);

    let plain = bench.scenario("storage_plain").await?;
    unpartition(&plain.pool).await?;
    let last = fill_in_chunks(&plain, n, 30).await?;
    let plain_rate = drain_rate(&plain, n, last, sizes).await?;
    report.add(S, "unpartitioned events table", "drain events/s", per_s(plain_rate), &note);

    let parted = bench.scenario("storage_30").await?;
    // Two ranges ahead, as the default `ahead`: the fill creates the next ones as it goes.
    narrow(&parted.pool, 2).await?;
    let last = fill_in_chunks(&parted, n, 30).await?;
    let holding = partitions_holding_events(&parted.pool).await?;
    let parted_rate = drain_rate(&parted, n, last, sizes).await?;
    report.add(S, format!("{holding} partitions").as_str(), "drain events/s", per_s(parted_rate), &note);
    report.add(S, "partitioned / unpartitioned", "drain", ratio(parted_rate, plain_rate), "goal ≥ 0.90×");

    for (method, label) in [(Method::Delete, "row DELETE (events prune)"), (Method::DropPartitions, "drop partitions")]
    {
        let (took, wal, p99, appended) = retention_run(bench, n, method, sizes).await?;
        let note =
            format!("{} events in 10 partitions; {appended} live appends at {LIVE_RATE}/s meanwhile", per_s(n as f64));
        report.add(S, label, "retention time", format!("{took:.2} s"), &note);
        report.add(S, label, "WAL bytes", format!("{:.1} MB", wal as f64 / 1e6), "includes the live appends' WAL");
        report.add(S, label, "commit-to-sink p99 while it runs", format!("{p99:.1} ms"), "projection sink");
    }
    Ok(())
}
