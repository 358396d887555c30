//! Scenario 2, latency: pgbench clients append at a steady rate (each append its own transaction,
//! through `highwater.append`) while one shared consumer with a SQL projection sink stamps each
//! event with `clock_timestamp()` as it applies it. Commit-to-sink latency is that stamp minus
//! the event's `created_at` (`clock_timestamp()` inside the append, microseconds before its
//! commit); both clocks are the server's, so no clock skew enters. Run four times: with NOTIFY
//! wake-ups at the base rate, the high rate and half the high rate, and with the NOTIFY trigger
//! disabled so that only the dispatcher's 100 ms polling finds new events.
use std::time::Duration;

use anyhow::{Context, Result};
use sqlx::Row;

use super::{
    BenchDb, Report, Sizes, bound,
    db::{PROJECTION_SINK, PROJECTION_TABLE, consumer_yaml},
    dispatcher::{DispatcherOpts, DispatcherProc},
};

const S: &str = "2 latency";

pub async fn run(bench: &BenchDb, sizes: &Sizes, report: &mut Report) -> Result<()> {
    let runs = [
        (true, sizes.latency_rate, sizes.latency_writers, "latency_notify", "goal p99 ≤ 25 ms"),
        (true, sizes.latency_high_rate, sizes.latency_high_writers, "latency_high", "goal p99 ≤ 50 ms"),
        // Half the high rate: where the high rate saturates a small machine (the writers alone
        // then take most of it), what latency is below saturation.
        (true, sizes.latency_high_rate / 2, sizes.latency_high_writers, "latency_half", ""),
        (false, sizes.latency_rate, sizes.latency_writers, "latency_poll", ""),
    ];
    for (notify, target, writers, name, goal) in runs {
        let mode = if notify { "NOTIFY while asleep, polling while busy" } else { "polling every 100 ms, no NOTIFY" };
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
            opts.busy_poll_interval = opts.poll_interval;
        }
        let _d = DispatcherProc::start(&db.url, "latency-0", &opts).await?;
        let (appended, took) = write_steadily(bench, name, target, writers, sizes.latency_duration).await?;
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

/// Appends at `rate` events/s from `writers` pgbench clients for `duration` (`pgbench --rate`:
/// a Poisson schedule, each append its own transaction); returns how many were appended and how
/// long that took. pgbench rather than a tokio task per writer: at 10,000/s a Rust client spent
/// about a third of a core of this 2-core machine on its own work, so the writers did not reach
/// the rate and the load generator's cost was counted as highwater's latency.
async fn write_steadily(
    bench: &BenchDb,
    db: &str,
    rate: u32,
    writers: u32,
    duration: Duration,
) -> Result<(u64, Duration)> {
    let script = "SELECT highwater.append('order', 'o-' || :client_id, 'OrderPlaced', '{\"order_id\": 1, \"amount\": 42}'::jsonb);\n";
    write_script_steadily(bench, db, rate, writers, duration, script).await
}

/// [`write_steadily`] with a pgbench script of its own (one transaction per run of it).
pub(super) async fn write_script_steadily(
    bench: &BenchDb,
    db: &str,
    rate: u32,
    writers: u32,
    duration: Duration,
    script_text: &str,
) -> Result<(u64, Duration)> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("append.sql");
    std::fs::write(&script, script_text)?;
    let port = bench.pg.port();
    let db = db.to_owned();
    let args: Vec<String> = [
        "-n",
        "-M",
        "prepared",
        "-c",
        &writers.to_string(),
        "-j",
        "2",
        "-R",
        &rate.to_string(),
        "-T",
        &duration.as_secs().max(1).to_string(),
        "-f",
        &script.to_string_lossy(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bound::pgbench(port, &db, &args)
    })
    .await??;
    let took = started.elapsed();
    let appended = out
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no transaction count in the pgbench report:\n{out}"))?;
    Ok((appended, took))
}
