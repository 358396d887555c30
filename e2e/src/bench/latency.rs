//! Scenario 2, latency: writers append at a steady rate (each append its own transaction,
//! through `highwater.append`) while one shared consumer with a SQL projection sink stamps each
//! event with `clock_timestamp()` as it applies it. Commit-to-sink latency is that stamp minus
//! the event's `created_at` (`clock_timestamp()` inside the append, microseconds before its
//! commit); both clocks are the server's, so no clock skew enters. Run three times: with NOTIFY
//! wake-ups at the base rate and at the high rate, and with the NOTIFY trigger disabled so that
//! only the dispatcher's 100 ms polling finds new events.
use std::time::Duration;

use anyhow::Result;
use sqlx::Row;

use super::{
    BenchDb, Report, Sizes,
    db::{PROJECTION_SINK, PROJECTION_TABLE, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
};

const S: &str = "2 latency";

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let runs = [
        (true, sizes.latency_rate, sizes.latency_writers, "latency_notify", "goal p99 ≤ 25 ms"),
        (true, sizes.latency_high_rate, sizes.latency_high_writers, "latency_high", "goal p99 ≤ 50 ms"),
        (false, sizes.latency_rate, sizes.latency_writers, "latency_poll", ""),
    ];
    for (notify, target, writers, name, goal) in runs {
        let mode = if notify { "NOTIFY + 1 s safety poll" } else { "polling every 100 ms, no NOTIFY" };
        let mode = format!("{mode}, {target}/s");
        let db = bench.scenario(name).await?;
        sqlx::query(PROJECTION_TABLE).execute(&db.pool).await?;
        if !notify {
            sqlx::query("ALTER TABLE highwater.events DISABLE TRIGGER events_notify").execute(&db.pool).await?;
        }
        db.apply(&consumer_yaml("latency", "latency", sizes.batch, PROJECTION_SINK)).await?;
        let mut opts = DispatcherOpts::group("latency");
        if !notify {
            opts.idle_poll_interval = opts.poll_interval;
        }
        let _d = DispatcherProc::start(&db.url, "latency-0", &opts).await?;
        let (appended, took) = write_steadily(&db.url, target, writers, sizes.latency_duration).await?;
        let last: i64 = sqlx::query_scalar("SELECT max(id) FROM highwater.events").fetch_one(&db.pool).await?;
        db.wait_caught_up(&["latency".to_owned()], last, Duration::from_secs(60)).await?;
        let row = sqlx::query(
            "SELECT count(*) AS n,
                    percentile_disc(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY l) AS p,
                    max(l) AS max
               FROM (SELECT (extract(epoch FROM delivered_at - created_at) * 1000)::float8 AS l FROM bench_projection) x",
        )
        .fetch_one(&db.pool)
        .await?;
        let n: i64 = row.try_get("n")?;
        let ps: Vec<f64> = row.try_get("p")?;
        let max: f64 = row.try_get("max")?;
        // The rate the writers reached, not the one asked for: writers that fall behind catch up
        // in bursts and take longer than the run's duration.
        let rate = appended as f64 / took.as_secs_f64();
        let note = format!("{n} events at {rate:.0}/s from {writers} writers");
        for (label, v) in ["p50", "p95", "p99"].iter().zip(ps.iter()) {
            let note = if *label == "p99" && !goal.is_empty() { format!("{note}; {goal}") } else { note.clone() };
            report.add(
                S,
                &format!("highwater, {mode}"),
                &format!("commit-to-sink {label}"),
                format!("{v:.1} ms"),
                note,
            );
        }
        report.add(S, &format!("highwater, {mode}"), "commit-to-sink max", format!("{max:.1} ms"), &note);
    }
    Ok(())
}

/// Appends at `rate` events/s from `writers` tasks for `duration`; returns how many were appended
/// and how long that took.
async fn write_steadily(url: &str, rate: u32, writers: u32, duration: Duration) -> Result<(u64, Duration)> {
    let pool = highwater::db::connect(url, writers).await?;
    let per_writer = rate / writers;
    let period = Duration::from_secs_f64(1.0 / per_writer as f64);
    let ticks = (duration.as_secs_f64() * per_writer as f64) as u64;
    let mut tasks = Vec::new();
    let started = std::time::Instant::now();
    for w in 0..writers {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..ticks {
                tick.tick().await;
                sqlx::query("SELECT highwater.append('order', $1, 'OrderPlaced', $2)")
                    .bind(format!("o-{w}-{i}"))
                    .bind(serde_json::json!({"order_id": i, "amount": 42}))
                    .execute(&pool)
                    .await?;
            }
            anyhow::Ok(ticks)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let took = started.elapsed();
    pool.close().await;
    Ok((total, took))
}
